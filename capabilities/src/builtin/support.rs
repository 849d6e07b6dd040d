//! Helpers the built-in capabilities share: events several handlers write, and the way a
//! capability hands its fold to the registry.

use std::sync::Arc;

use elfiee_model::{CapError, Command, EventDraft};
use elfiee_projections::{Fold, State};
use serde_json::{json, Value};

/// What [`crate::Capability::fold`] returns for a fold function.
pub(crate) fn fold(f: impl Fold) -> Option<Arc<dyn Fold>> {
    Some(Arc::new(f))
}

/// The block patch fold ([`elfiee_projections::fold_patch`]), shared by every kind whose
/// events patch a block (`markdown.write`, `code.write`, `agent.enable`, `agent.disable`,
/// `agent.configure`).
pub(crate) fn patch_fold() -> Option<Arc<dyn Fold>> {
    fold(elfiee_projections::fold_patch)
}

/// Events that remove every relation touching `block` (both directions) and every grant on it,
/// in a deterministic order. Used by `core.delete` so the log states each removal explicitly.
pub(crate) fn detach_block(state: &State, block: &str) -> Vec<EventDraft> {
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
        out.push(EventDraft::new(
            &g.editor_id,
            "core.revoke",
            serde_json::to_value(g).unwrap_or_default(),
        ));
    }
    out
}

/// Records of effect outcomes: the payload (an object with `trigger_seq`, the seq of the event
/// that asked for the effect) becomes the event value as it is.
pub(crate) fn effect_record(cap: &str, cmd: &Command) -> Result<Vec<EventDraft>, CapError> {
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
    Ok(vec![EventDraft::new(
        cmd.block_id.clone().unwrap_or_default(),
        cap,
        cmd.payload.clone(),
    )])
}
