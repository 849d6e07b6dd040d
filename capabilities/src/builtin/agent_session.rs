//! `agent.session`: one entry of an agent-loop session (adapters/src/agent_loop, docs/AGENT_LOOP.md).
//! Sessions are rebuilt from these events, so closing and reopening a `.elf` resumes them
//! exactly; applying them changes no state (the projection ignores them) and replay calls nothing.
//!
//! Payload: `{"session_id", "entry", "parent_session"?, …}` with `entry` one of
//! - `message` `{message}` — a conversation message (user text, assistant text + tool calls,
//!   tool results);
//! - `title` `{title}`; `memory` `{summary}` (recalled by later sessions);
//! - `approval` `{request: {call_id, tool, subject, input, reason}}` — a call waiting for the user;
//! - `approval_answer` `{call_id, answer: once|always|reject|reject_with_feedback, feedback?}`;
//! - `rule` `{rule: {permission, pattern, action}}` — a session rule from an "always" answer;
//! - `compaction` `{summary | null, kept}`; `stop` `{stop_reason}`;
//! - `step` `{step, doc_from, doc_to, directory, root, files}` — a checkpoint: what one step
//!   changed in the document (its seq range) and in the project folder;
//! - `undo` `{undo_id, steps, doc_from, doc_to, root, files}` / `redo` `{undo_id, …}` — steps
//!   taken back and brought back (`adapters/src/checkpoint`).
//!
//! Authorized by `agent.invoke` on the agent block (the human who talks to the agent, and the
//! agent's own editor, hold it). The loop records the user's input (messages, answers, rules,
//! title) as the user's editor and everything the agent produces as the agent's editor.

use elfiee_model::{CapError, Command, Ctx};
use elfiee_projections::State;
use serde_json::Value;

use super::spec::Builtin;
use crate::{Handled, Target};

/// The entries the agent loop records.
pub const ENTRIES: &[&str] = &[
    "message",
    "title",
    "memory",
    "approval",
    "approval_answer",
    "rule",
    "compaction",
    "stop",
    "step",
    "undo",
    "redo",
];

const ID: &str = "agent.session";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::Block(Some("agent")), handle).authorized_by(|_| "agent.invoke")];

fn handle(cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
    let ok = cmd
        .payload
        .get("session_id")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
        && cmd
            .payload
            .get("entry")
            .and_then(Value::as_str)
            .is_some_and(|e| ENTRIES.contains(&e));
    if !ok {
        return Err(CapError::payload(ID, "expected {\"session_id\": string, \"entry\": \"message\" | \"title\" | \"memory\" | \"approval\" | \"approval_answer\" | \"rule\" | \"compaction\" | \"stop\" | \"step\" | \"undo\" | \"redo\", …}"));
    }
    super::support::on_block(cmd, ID, cmd.payload.clone())
}
