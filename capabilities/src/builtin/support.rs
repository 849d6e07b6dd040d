//! Helpers the built-in capabilities share: events several handlers write, and the way a
//! capability hands its fold to the registry.

use std::sync::Arc;

use elfiee_model::{CapError, Command, Ctx, Event, EventDraft};
use elfiee_projections::{Fold, Folded, State};
use serde_json::{json, Value};

use crate::{Capability, Handled, Target};

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

/// A record an effect writes about one run on a block of `block_type` (`terminal.output`,
/// `directory.export_outcome`, `agent.effect_outcome`, `agent.proposal`): the payload, with
/// the `trigger_seq` of the event that asked for the run, becomes the event value as it is.
/// CBAC checks the capability that asked for the run (`authorized_by`), not the record's.
pub(crate) struct EffectRecord {
    pub id: &'static str,
    pub block_type: &'static str,
    pub authorized_by: fn(&Command) -> &'static str,
    /// A string the payload must hold besides `trigger_seq` (e.g. `proposal_id`).
    pub requires: Option<&'static str>,
    pub fold: fn(&mut State, &Event) -> Folded,
}

impl Capability for EffectRecord {
    fn id(&self) -> &'static str {
        self.id
    }
    fn target(&self) -> Target {
        Target::Block(Some(self.block_type))
    }
    fn authorized_by(&self, cmd: &Command) -> &'static str {
        (self.authorized_by)(cmd)
    }
    fn handle(&self, cmd: &Command, _: &State, _: &Ctx) -> Handled {
        if let Some(key) = self.requires {
            if cmd.payload.get(key).and_then(Value::as_str).is_none() {
                return Err(CapError::payload(self.id, format!("expected '{key}'")));
            }
        }
        effect_record(self.id, cmd)
    }
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        fold(self.fold)
    }
}

/// A read of one block of `block_type` (`markdown.read`, `code.read`): checked like any
/// command (the block exists, is of that type, the editor may read it), commits no events.
/// The engine's read API runs this check and then returns the block.
pub(crate) struct BlockRead {
    pub id: &'static str,
    pub block_type: &'static str,
}

impl Capability for BlockRead {
    fn id(&self) -> &'static str {
        self.id
    }
    fn target(&self) -> Target {
        Target::Block(Some(self.block_type))
    }
    fn handle(&self, cmd: &Command, _: &State, _: &Ctx) -> Handled {
        crate::payload::expect_empty(self.id, &cmd.payload)?;
        Ok(Vec::new())
    }
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
pub(crate) fn effect_record(cap: &str, cmd: &Command) -> Handled {
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
