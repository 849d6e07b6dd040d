//! Helpers the built-in capabilities share: events several handlers write, and the handlers
//! of effect records and block reads. A shared handler names its kind by `cmd.cap_id`, which
//! is the id of the capability the registry dispatched the command to.

use elfiee_model::{CapError, Command, Ctx, EventDraft, Grant};
use elfiee_projections::State;
use serde_json::{json, Value};

use crate::Handled;

/// The events that delete `block`: its detachment ([`detach_block`]), then the `core.delete`.
/// Used by `core.delete` and by the directory capabilities that delete a file's block.
pub(crate) fn delete_events(state: &State, block: &str) -> Vec<EventDraft> {
    let mut out = detach_block(state, block);
    out.push(EventDraft::new(block, "core.delete", json!({})));
    out
}

/// Events that remove every relation touching `block` (both directions) and every grant on it,
/// in a deterministic order, so the log states each removal explicitly.
fn detach_block(state: &State, block: &str) -> Vec<EventDraft> {
    let mut out = Vec::new();
    for (rel, child) in state.children_of(block) {
        out.push(EventDraft::new(
            block,
            "core.unlink",
            json!({"to": child, "relation": rel}),
        ));
    }
    for (rel, parent) in state.parents_of(block) {
        out.push(EventDraft::new(
            parent,
            "core.unlink",
            json!({"to": block, "relation": rel}),
        ));
    }
    for g in state.grants.iter().filter(|g| g.block_id == block) {
        out.push(grant_draft("core.revoke", g));
    }
    out
}

/// The event of `kind` (`core.grant` or `core.revoke`) about grant `g`: on the grantee editor,
/// with the grant as its value.
pub(crate) fn grant_draft(kind: &str, g: &Grant) -> EventDraft {
    EventDraft::new(
        &g.editor_id,
        kind,
        serde_json::to_value(g).unwrap_or_default(),
    )
}

/// The handler of a record an effect writes about one run on a block (`terminal.output`,
/// `directory.export_outcome`, `agent.effect_outcome`; `agent.proposal` checks its
/// `proposal_id` first): the payload, with the `trigger_seq` of the event that asked for the
/// run, becomes the event value as it is. Such a capability is authorized by the one that
/// asked for the run (`Builtin::authorized_by`), not by its own id.
pub(crate) fn record(cmd: &Command, _: &State, _: &Ctx) -> Handled {
    effect_record(&cmd.cap_id, cmd)
}

/// The handler of a read of one block (`markdown.read`, `code.read`): checked like any
/// command (the block exists, is of the capability's type, the editor may read it), commits
/// no events. The engine's read API runs this check and then returns the block.
pub(crate) fn read(cmd: &Command, _: &State, _: &Ctx) -> Handled {
    crate::payload::expect_empty(&cmd.cap_id, &cmd.payload)?;
    Ok(Vec::new())
}

/// The one event of a command on its own block (`cmd.block_id`): of kind `kind`, with `value`.
pub(crate) fn on_block(cmd: &Command, kind: &str, value: Value) -> Handled {
    Ok(vec![EventDraft::new(
        cmd.block_id.clone().unwrap_or_default(),
        kind,
        value,
    )])
}

/// Records of effect outcomes: the payload (an object with `trigger_seq`, the seq of the event
/// that asked for the effect) becomes the event value as it is.
fn effect_record(cap: &str, cmd: &Command) -> Handled {
    let ok = cmd.payload.is_object()
        && cmd
            .payload
            .get("trigger_seq")
            .and_then(Value::as_u64)
            .is_some();
    if !ok {
        return Err(CapError::payload(
            cap,
            "expected an object with a numeric 'trigger_seq'",
        ));
    }
    on_block(cmd, cap, cmd.payload.clone())
}
