//! Agents: `agent.create`, `agent.enable`, `agent.disable` and the records of the Claude Code
//! integration effect (`agent.effect_plan`, `agent.effect_outcome`). Seed 001 §5–§11, corrected
//! by DESIGN.md §7. All checks that need state (target exists, is a directory with a path,
//! no agent yet for it) happen here; the filesystem work is the effect's.

use std::collections::BTreeMap;

use elfiee_model::{
    AgentContents, AgentStatus, CapError, Command, Ctx, Editor, EditorType, Event, EventDraft,
    Grant, EXTERNAL_ROOT_PATH,
};
use elfiee_projections::{update_block, Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::directory_import::new_block;
use super::spec::Builtin;
use super::support::{grant_draft, on_block, record};
use crate::payload::{check_name, parse};
use crate::{Handled, Target};
use elfiee_projections::fold_patch;

/// Capabilities an agent editor receives on `*` when created.
pub const AGENT_GRANTS: &[&str] = &[
    "core.create",
    "core.link",
    "core.unlink",
    "core.rename",
    "markdown.read",
    "markdown.write",
    "code.read",
    "code.write",
];

/// The editor an agent block acts as (`contents.editor_id`); `None` for any other block.
pub fn agent_editor(b: &elfiee_model::Block) -> Option<&str> {
    if b.block_type != "agent" {
        return None;
    }
    b.contents.get("editor_id").and_then(Value::as_str)
}

/// The agent block that acts as `editor` (the first in block order).
pub fn agent_block_of<'a>(s: &'a State, editor: &str) -> Option<&'a elfiee_model::Block> {
    s.blocks.values().find(|b| agent_editor(b) == Some(editor))
}

/// Capabilities an agent editor receives on each directory it works in (its target project,
/// a directory its agent block references): what it makes lands in the project (seed 002
/// §2.1B), written out by an export (Claude Code's shell runs outside Elfiee, so its MCP
/// server exports after each change). Revocable like any grant.
pub const AGENT_DIRECTORY_GRANTS: &[&str] = &[
    "directory.add",
    "directory.move",
    "directory.remove",
    "directory.export",
    // Claude Code's own tools change the folder; its hooks record what they changed as the
    // agent's (`adapters/src/hooks`).
    "directory.sync",
];

/// Grants of [`AGENT_DIRECTORY_GRANTS`] on `dir` for `editor` that it does not hold yet.
pub(crate) fn directory_grants(
    state: &State,
    ctx: &Ctx,
    editor: &str,
    dir: &str,
) -> Vec<EventDraft> {
    AGENT_DIRECTORY_GRANTS
        .iter()
        .filter(|c| ctx.known_caps.iter().any(|k| k == *c))
        .filter(|c| !state.grants.contains(&Grant::new(editor, **c, dir)))
        .map(|cap| grant_draft("core.grant", &Grant::new(editor, *cap, dir)))
        .collect()
}

/// Payload of `agent.create` (seed 001 `AgentCreateV2Payload`).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentCreatePayload {
    /// Directory block of the project to integrate with; absent for an LLM-only agent.
    pub target_project_id: Option<String>,
    /// Default `elfiee`.
    pub name: Option<String>,
}

const CREATE: &str = "agent.create";
const ENABLE: &str = "agent.enable";
const DISABLE: &str = "agent.disable";
const EFFECT_PLAN: &str = "agent.effect_plan";

pub(crate) const CAPABILITIES: &[Builtin] = &[
    Builtin::new(CREATE, Target::File, handle_create),
    Builtin::new(ENABLE, Target::Block(Some("agent")), handle_enable).fold(fold_patch),
    Builtin::new(DISABLE, Target::Block(Some("agent")), handle_disable).fold(fold_patch),
    Builtin::new(
        EFFECT_PLAN,
        Target::Block(Some("agent")),
        handle_effect_plan,
    )
    .authorized_by(action_cap)
    .fold(fold_effect_plan),
    // The result of one enable/disable effect run (ok, warnings, needs_restart, message, and
    // what is still installed).
    Builtin::new("agent.effect_outcome", Target::Block(Some("agent")), record)
        .authorized_by(action_cap)
        .fold(fold_effect_outcome),
];

fn handle_create(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let p: AgentCreatePayload = parse(CREATE, &cmd.payload)
        .map_err(|e| CapError::rejected(format!("Invalid payload for agent.create: {e}")))?;
    let name = p.name.unwrap_or_else(|| "elfiee".into());
    check_name(CREATE, "name", &name)?;
    if let Some(target) = &p.target_project_id {
        if target.is_empty() {
            return Err(CapError::rejected("target_project_id cannot be empty"));
        }
        let dir = state.block(target).ok_or_else(|| {
            CapError::rejected(format!("Target project block not found: {target}"))
        })?;
        if dir.block_type != "directory" {
            return Err(CapError::rejected(format!(
                "Expected block_type 'directory', got '{}'",
                dir.block_type
            )));
        }
        if !dir
            .metadata
            .custom
            .get(EXTERNAL_ROOT_PATH)
            .is_some_and(Value::is_string)
        {
            return Err(CapError::rejected("Target project has no external path"));
        }
        let existing = state.blocks.values().find(|b| {
            b.block_type == "agent"
                && b.contents.get("target_project_id").and_then(Value::as_str) == Some(target)
        });
        if let Some(a) = existing {
            return Err(CapError::rejected(format!(
                "Agent already exists for project: {} (block_id: {})",
                dir.name, a.block_id
            )));
        }
    }
    let agent_id = ctx.new_id(0).to_string();
    let editor_id = format!("agent-{}", ctx.new_id(1));
    let editor = Editor {
        editor_id: editor_id.clone(),
        name: name.clone(),
        editor_type: EditorType::Agent,
    };
    let contents = AgentContents {
        name: name.clone(),
        target_project_id: p.target_project_id.clone(),
        status: AgentStatus::Enabled,
        editor_id: editor_id.clone(),
    };
    let mut block = new_block(
        &agent_id,
        &name,
        "agent",
        serde_json::to_value(&contents).unwrap_or_default(),
        &cmd.editor_id,
        ctx,
        BTreeMap::new(),
    );
    if let Some(target) = &p.target_project_id {
        let project = state
            .block(target)
            .map(|b| b.name.clone())
            .unwrap_or_default();
        block.metadata.description = Some(format!("Agent for project: {project}"));
    }
    let mut out = vec![
        EventDraft::new(
            &editor_id,
            "editor.create",
            serde_json::to_value(&editor).unwrap_or_default(),
        ),
        EventDraft::new(
            &agent_id,
            "core.create",
            serde_json::to_value(&block).unwrap_or_default(),
        ),
    ];
    for cap in AGENT_GRANTS
        .iter()
        .filter(|c| ctx.known_caps.iter().any(|k| k == *c))
    {
        out.push(grant_draft(
            "core.grant",
            &Grant::new(&editor_id, *cap, "*"),
        ));
    }
    // The agent may invoke itself and record proposals (e.g. through MCP).
    let own = Grant::new(&editor_id, "agent.invoke", &agent_id);
    out.push(grant_draft("core.grant", &own));
    if let Some(dir) = &p.target_project_id {
        out.extend(directory_grants(state, ctx, &editor_id, dir));
    }
    if p.target_project_id.is_some() {
        // Creating an agent for a project enables it (seed 001 §7): the effect integrates.
        out.push(EventDraft::new(
            &agent_id,
            "agent.enable",
            status_patch(AgentStatus::Enabled, ctx),
        ));
    }
    Ok(out)
}

fn status_patch(status: AgentStatus, ctx: &Ctx) -> Value {
    let key = match status {
        AgentStatus::Enabled => "last_enabled_at",
        AgentStatus::Disabled => "last_disabled_at",
    };
    json!({"contents": {"status": status}, "custom": {key: ctx.now.timestamp_millis()}})
}

/// Payload of `agent.enable` / `agent.disable` (seed 001 §5.3 `AgentEnablePayload` /
/// `AgentDisablePayload`). The command targets the agent block already, so the field is
/// optional here; when given it must name that block.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentStatusPayload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_block_id: Option<String>,
}

/// `agent.enable` / `agent.disable`: flip the status; the integration effect does the I/O.
/// Both are idempotent (seed 001 §11): enabling an enabled agent re-applies the integration,
/// disabling a disabled one succeeds and changes nothing on disk.
fn handle_enable(cmd: &Command, _state: &State, ctx: &Ctx) -> Handled {
    set_status(ENABLE, AgentStatus::Enabled, cmd, ctx)
}

fn handle_disable(cmd: &Command, _state: &State, ctx: &Ctx) -> Handled {
    set_status(DISABLE, AgentStatus::Disabled, cmd, ctx)
}

fn set_status(cap: &str, status: AgentStatus, cmd: &Command, ctx: &Ctx) -> Handled {
    let p: AgentStatusPayload = if cmd.payload.is_null() {
        AgentStatusPayload::default()
    } else {
        serde_json::from_value(cmd.payload.clone()).map_err(|e| {
            CapError::rejected(format!(
                "Invalid payload for {cap}: {e}; expected {{}} or {{\"agent_block_id\": the agent block}}"
            ))
        })?
    };
    let target = cmd.block_id.as_deref().unwrap_or_default();
    if let Some(named) = p.agent_block_id.as_deref().filter(|n| *n != target) {
        return Err(CapError::rejected(format!(
            "Invalid payload for {cap}: agent_block_id '{named}' is not the command's block '{target}'"
        )));
    }
    on_block(cmd, cap, status_patch(status, ctx))
}

fn action_cap(cmd: &Command) -> &'static str {
    match cmd.payload.get("action").and_then(Value::as_str) {
        Some("disable") => "agent.disable",
        _ => "agent.enable",
    }
}

/// `agent.effect_plan`: before touching the project, the enable effect records what it found
/// (which files and entries existed). Merged with the record of earlier enables, this is how
/// disable knows exactly what enable created — even if the effect crashed and ran again.
fn handle_effect_plan(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Plan {
        action: String,
        trigger_seq: u64,
        artifacts: Vec<Value>,
    }
    let p: Plan = parse(EFFECT_PLAN, &cmd.payload)?;
    let id = cmd.block_id.clone().unwrap_or_default();
    let previous = state
        .block(&id)
        .and_then(|b| b.metadata.custom.get("integration"))
        .and_then(|i| i.get("artifacts"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let artifacts = merge_artifacts(previous, p.artifacts);
    on_block(
        cmd,
        EFFECT_PLAN,
        json!({"action": p.action, "trigger_seq": p.trigger_seq, "integration": {"artifacts": artifacts}}),
    )
}

/// Union by `kind` and `path` (the settings file holds two: the server's approval and the
/// hooks): an artifact stays `created` if any enable created it; `added` entries are
/// united; the `edit` (the text edit enable made, which disable can reverse exactly) is the
/// newest plan's that has one, as only the latest edit can still match the file.
fn merge_artifacts(previous: Vec<Value>, new: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = previous;
    for n in new {
        let (path, kind) = (n.get("path").cloned(), n.get("kind").cloned());
        match out
            .iter_mut()
            .find(|o| o.get("path") == path.as_ref() && o.get("kind") == kind.as_ref())
        {
            Some(o) => {
                let created = o.get("created").and_then(Value::as_bool).unwrap_or(false)
                    || n.get("created").and_then(Value::as_bool).unwrap_or(false);
                o["created"] = json!(created);
                let mut added: Vec<Value> = o
                    .get("added")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for a in n
                    .get("added")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                {
                    if !added.contains(&a) {
                        added.push(a);
                    }
                }
                o["added"] = json!(added);
                // `edits`: the hook entries' edits (several in one file), newest plan's.
                for key in ["edit", "edits", "command"] {
                    if let Some(v) = n.get(key) {
                        o[key] = v.clone();
                    }
                }
            }
            None => out.push(n),
        }
    }
    out
}

/// The fold of `agent.effect_plan`: the integration it records ([`fold_effect_record`]).
fn fold_effect_plan(state: &mut State, event: &Event) -> Folded {
    fold_effect_record(state, event, false)
}

/// The fold of `agent.effect_outcome`: the integration it records, and the outcome kept whole
/// in `metadata.custom.last_effect`.
fn fold_effect_outcome(state: &mut State, event: &Event) -> Folded {
    fold_effect_record(state, event, true)
}

/// The integration an effect plan or outcome records (null removes it); with `outcome`, the
/// value is also kept whole in `metadata.custom.last_effect`.
fn fold_effect_record(state: &mut State, event: &Event, outcome: bool) -> Folded {
    update_block(state, event, |b, v| {
        if let Some(integration) = v.get("integration") {
            if integration.is_null() {
                b.metadata.custom.remove("integration");
            } else {
                b.metadata
                    .custom
                    .insert("integration".into(), integration.clone());
            }
        }
        if outcome {
            b.metadata.custom.insert("last_effect".into(), v.clone());
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn create_makes_block_editor_grants_and_enables() {
        let mut k = Kit::new();
        let dir = k.project(json!([]));
        let ev = k.ok("agent.create", None, json!({"target_project_id": dir}));
        let kinds: Vec<&str> = ev.iter().map(|e| e.cap_id()).collect();
        assert_eq!(kinds.first(), Some(&"editor.create"));
        assert_eq!(kinds.last(), Some(&"agent.enable"));
        let agent = &k.state.blocks[&ev[1].entity];
        assert_eq!(agent.name, "elfiee", "default name");
        assert_eq!(agent.contents["status"], "enabled");
        let editor = agent.contents["editor_id"].as_str().unwrap();
        assert!(editor.starts_with("agent-"));
        assert!(k.state.has_grant(editor, "markdown.write", "any-block"));
        assert!(!k.state.has_grant(editor, "core.delete", "any-block"));
        for cap in super::AGENT_DIRECTORY_GRANTS {
            assert!(k.state.has_grant(editor, cap, &dir), "{cap} on its project");
            assert!(
                !k.state.has_grant(editor, cap, "another-dir"),
                "{cap} elsewhere"
            );
        }
    }

    #[test]
    fn an_agent_pointed_at_a_directory_may_add_files_there_but_cannot_point_itself() {
        let mut k = Kit::new();
        let dir = k.project(json!([]));
        let ev = k.ok("agent.create", None, json!({"name": "llm"}));
        let agent = ev[1].entity.clone();
        let editor = k.state.blocks[&agent].contents["editor_id"]
            .as_str()
            .unwrap()
            .to_owned();
        // The agent links itself to the directory: a link, no rights.
        k.ok_by(
            &editor,
            "core.link",
            Some(&agent),
            json!({"to": dir, "relation": "reference"}),
        );
        assert!(!k.state.has_grant(&editor, "directory.add", &dir));
        k.ok_by(
            &editor,
            "core.unlink",
            Some(&agent),
            json!({"to": dir, "relation": "reference"}),
        );
        // Its owner points it at the directory: it may add, move and remove files there.
        k.link(&agent, &dir, "reference");
        k.ok_by(
            &editor,
            "directory.add",
            Some(&dir),
            json!({"path": "src/agent_made.rs", "content": "pub fn f() {}"}),
        );
        k.ok_by(
            &editor,
            "directory.move",
            Some(&dir),
            json!({"from": "src/agent_made.rs", "to": "src/moved.rs"}),
        );
        // Revocable like any grant.
        k.ok(
            "core.revoke",
            Some(&dir),
            json!({"editor_id": editor, "cap_id": "directory.remove"}),
        );
        k.err_by(
            &editor,
            "directory.remove",
            Some(&dir),
            json!({"path": "src/moved.rs"}),
        );
    }

    #[test]
    fn create_checks_target_and_uniqueness_with_the_seed_messages() {
        let mut k = Kit::new();
        let dir = k.project(json!([]));
        let md = k.block("markdown", "m");
        k.err_contains(
            "agent.create",
            None,
            json!({"target_project_id": ""}),
            "target_project_id cannot be empty",
        );
        k.err_contains(
            "agent.create",
            None,
            json!({"target_project_id": "nope"}),
            "Target project block not found: nope",
        );
        k.err_contains(
            "agent.create",
            None,
            json!({"target_project_id": md}),
            "Expected block_type 'directory'",
        );
        let first = k.agent(json!({"target_project_id": dir, "name": "helper"}));
        let e = k.err("agent.create", None, json!({"target_project_id": dir}));
        assert_eq!(
            e.to_string(),
            format!("Agent already exists for project: proj (block_id: {first})")
        );
        k.err("agent.create", None, json!({"target_project_id": 5}));
    }

    /// Seed 001 §15.1 F1-01: the data types' JSON forms.
    #[test]
    fn agent_types_serialize_as_the_seed_says() {
        use elfiee_model::{AgentContents, AgentStatus};
        let c = AgentContents {
            name: "elfiee".into(),
            target_project_id: Some("dir-1".into()),
            status: AgentStatus::Enabled,
            editor_id: "agent-1".into(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            json!({"name": "elfiee", "target_project_id": "dir-1", "status": "enabled", "editor_id": "agent-1"})
        );
        assert_eq!(serde_json::from_value::<AgentContents>(v).unwrap(), c);
        assert_eq!(json!(AgentStatus::Disabled), json!("disabled"));
        assert!(serde_json::from_value::<AgentStatus>(json!("Enabled")).is_err());
        let p: super::AgentCreatePayload =
            serde_json::from_value(json!({"target_project_id": "dir-1"})).unwrap();
        assert_eq!(p.name, None, "the handler defaults it to elfiee");
        let p: super::AgentStatusPayload =
            serde_json::from_value(json!({"agent_block_id": "a-1"})).unwrap();
        assert_eq!(json!(p), json!({"agent_block_id": "a-1"}));
        assert_eq!(json!(super::AgentStatusPayload::default()), json!({}));
        assert!(
            serde_json::from_value::<super::AgentStatusPayload>(json!({"agent": "a"})).is_err()
        );
    }

    #[test]
    fn enable_and_disable_are_idempotent_and_stamp_metadata() {
        let mut k = Kit::new();
        let dir = k.project(json!([]));
        let a = k.agent(json!({"target_project_id": dir}));
        k.ok("agent.disable", Some(&a), json!({}));
        k.ok("agent.disable", Some(&a), json!({}));
        assert_eq!(k.state.blocks[&a].contents["status"], "disabled");
        assert!(k.state.blocks[&a]
            .metadata
            .custom
            .contains_key("last_disabled_at"));
        k.ok("agent.enable", Some(&a), json!({}));
        k.ok("agent.enable", Some(&a), json!({"agent_block_id": a}));
        k.err_contains(
            "agent.enable",
            Some(&a),
            json!({"agent_block_id": "another"}),
            "is not the command's block",
        );
        let e = k.err("agent.disable", Some(&a), json!({"force": true}));
        assert!(
            e.to_string()
                .starts_with("Invalid payload for agent.disable"),
            "{e}"
        );
        assert_eq!(k.state.blocks[&a].contents["status"], "enabled");
        let md = k.block("markdown", "m");
        k.err_contains("agent.enable", Some(&md), json!({}), "agent blocks");
        k.err_contains("agent.enable", Some("ghost"), json!({}), "not found");
        k.err_contains_by("bob", "agent.enable", Some(&a), json!({}), "may not run");
        k.grant("bob", "agent.enable", Some(&a));
        k.ok_by("bob", "agent.enable", Some(&a), json!({}));
    }

    #[test]
    fn plans_merge_so_disable_knows_what_any_enable_created() {
        let mut k = Kit::new();
        let dir = k.project(json!([]));
        let a = k.agent(json!({"target_project_id": dir}));
        k.ok(
            "agent.effect_plan",
            Some(&a),
            json!({"action": "enable", "trigger_seq": 1,
            "artifacts": [{"path": "/p/.mcp.json", "created": true, "added": ["mcpServers"]}]}),
        );
        k.ok("agent.effect_plan", Some(&a), json!({"action": "enable", "trigger_seq": 2,
            "artifacts": [{"path": "/p/.mcp.json", "created": false, "added": ["mcpServers.elfiee"], "edit": {"at": 1}}]}));
        k.ok(
            "agent.effect_plan",
            Some(&a),
            json!({"action": "enable", "trigger_seq": 3,
            "artifacts": [{"path": "/p/.mcp.json", "created": false, "added": []}]}),
        );
        let rec = &k.state.blocks[&a].metadata.custom["integration"]["artifacts"][0];
        assert_eq!(rec["created"], true);
        assert_eq!(rec["added"], json!(["mcpServers", "mcpServers.elfiee"]));
        assert_eq!(rec["edit"], json!({"at": 1}), "the newest edit stays");
        k.ok(
            "agent.effect_outcome",
            Some(&a),
            json!({"action": "disable", "trigger_seq": 4, "ok": true, "integration": null}),
        );
        assert!(!k.state.blocks[&a]
            .metadata
            .custom
            .contains_key("integration"));
        assert_eq!(
            k.state.blocks[&a].metadata.custom["last_effect"]["ok"],
            true
        );
    }
}
