//! `elfiee_proposal_list` and `elfiee_propose`: the LLM proposal layer (DESIGN.md §8) for MCP
//! clients. A proposal made here is the same as one the LLM effect records: pending until a
//! human runs `elfiee agent approve` (its commands then run as the agent, all or nothing) or
//! `elfiee agent reject`.

use elfiee_engine::FileHandle;
use elfiee_model::Command;
use serde_json::{json, Value};

use super::catalogue::{engine_error, ProposalListArgs, ProposeArgs, ToolError};

/// The agent block whose editor is `editor`.
pub(super) fn agent_of(file: &FileHandle, editor: &str) -> Option<String> {
    file.with_state(|s| {
        elfiee_capabilities::builtin::agent_block_of(s, editor).map(|b| b.block_id.clone())
    })
}

/// `elfiee_proposal_list {}`: this agent's proposals (all proposals for a non-agent editor).
pub async fn list(
    file: &FileHandle,
    editor: &str,
    _args: ProposalListArgs,
) -> Result<Value, ToolError> {
    let agent = agent_of(file, editor);
    Ok(json!({"proposals": crate::service::list_proposals(file, agent.as_deref())}))
}

/// `elfiee_propose {commands, description}`: records a pending proposal of this agent.
pub async fn propose(
    file: &FileHandle,
    editor: &str,
    args: ProposeArgs,
) -> Result<Value, ToolError> {
    let agent = agent_of(file, editor).ok_or_else(|| {
        ToolError::new(
            "not_an_agent",
            format!("editor '{editor}' is not an agent, and proposals belong to agents; start the server with `--editor <agent editor id>` (see `elfiee agent list`)"),
        )
    })?;
    if args.commands.is_empty() {
        return Err(ToolError::new(
            "invalid_arguments",
            "'commands' is empty; propose at least one {cap_id, block_id?, payload}",
        ));
    }
    let mut commands = Vec::new();
    for (i, c) in args.commands.iter().enumerate() {
        let cap = c.get("cap_id").and_then(Value::as_str);
        let payload = c.get("payload").cloned().unwrap_or(json!({}));
        let block_ok = c
            .get("block_id")
            .is_none_or(|b| b.is_string() || b.is_null());
        match cap {
            Some(cap) if payload.is_object() && block_ok => commands.push(json!({
                "cap_id": cap, "block_id": c.get("block_id"), "payload": payload, "description": c.get("description"),
            })),
            _ => {
                return Err(ToolError::new(
                    "invalid_arguments",
                    format!("command {} must be {{\"cap_id\": string, \"block_id\"?: string, \"payload\": object}}", i + 1),
                ))
            }
        }
    }
    let proposal_id = uuid::Uuid::new_v4().to_string();
    let record = json!({
        "trigger_seq": 0, "proposal_id": proposal_id, "status": "pending", "source": "mcp",
        "prompt": args.description, "proposed_commands": commands, "parse_errors": [],
    });
    file.submit(Command::new(editor, "agent.proposal", Some(&agent), record))
        .await
        .map_err(engine_error)?;
    Ok(
        json!({"proposal_id": proposal_id, "status": "pending", "agent_block_id": agent, "commands": commands.len(),
              "next": "a human approves it with `elfiee agent approve <proposal_id>`"}),
    )
}
