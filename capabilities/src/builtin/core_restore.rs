//! `core.restore`: sets blocks back to images they had earlier (or removes them), as one
//! command. It is how an undo is written (an agent step undone, an undo redone): the log stays
//! append-only, and the undo is an event like any other, replayed like any other.
//!
//! The images come from the engine's own earlier states (time travel), never from a model:
//! the host computes them (see `elfiee_adapters::checkpoint`). Because an image can be any
//! block, the command is as strong as the right to grant anything, so CBAC checks
//! `core.grant` on `*` (held by the file owner from `elf.init`).

use elfiee_model::{Block, CapError, Command, Ctx, Event, EventDraft};
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::spec::Builtin;
use crate::payload::{check_id, parse};
use crate::{Handled, Target};

/// One block to restore.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreBlock {
    pub block_id: String,
    /// The image to set (bodies as content references, as the state keeps them); `null`
    /// removes the block and every relation to it.
    pub block: Option<Block>,
}

/// Payload of `core.restore`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestorePayload {
    pub blocks: Vec<RestoreBlock>,
    /// Why (e.g. `{"undo": {"session_id": …, "steps": [2, 3]}}`), kept in each event.
    #[serde(default)]
    pub reason: Option<Value>,
}

const ID: &str = "core.restore";

pub(crate) const CAPABILITIES: &[Builtin] = &[Builtin::new(ID, Target::File, handle)
    .authorized_by(|_| "core.grant")
    .fold(fold_restore)];

fn handle(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    let p: RestorePayload = parse(ID, &cmd.payload)?;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(p.blocks.len());
    for r in &p.blocks {
        check_id(ID, "block_id", &r.block_id)?;
        if !seen.insert(r.block_id.as_str()) {
            return Err(CapError::payload(
                ID,
                format!("block '{}' is listed twice", r.block_id),
            ));
        }
        if let Some(b) = &r.block {
            if b.block_id != r.block_id {
                return Err(CapError::payload(
                    ID,
                    format!(
                        "the image of '{}' names another block ('{}')",
                        r.block_id, b.block_id
                    ),
                ));
            }
            if state.editor(&b.owner).is_none() {
                return Err(CapError::rejected(format!(
                    "the image of '{}' is owned by '{}', who is not an editor of this document any more",
                    r.block_id, b.owner
                )));
            }
        } else if state.block(&r.block_id).is_none() {
            // Removing a block that is not there changes nothing: no event.
            continue;
        }
        let mut value = json!({"block": r.block});
        if let Some(reason) = &p.reason {
            value["reason"] = reason.clone();
        }
        out.push(EventDraft::new(&r.block_id, ID, value));
    }
    check_relations(state, &p.blocks)?;
    Ok(out)
}

/// The restored images must not link to a block that will not exist.
fn check_relations(state: &State, blocks: &[RestoreBlock]) -> Result<(), CapError> {
    let exists = |id: &str| match blocks.iter().find(|r| r.block_id == id) {
        Some(r) => r.block.is_some(),
        None => state.block(id).is_some(),
    };
    for r in blocks {
        let Some(b) = &r.block else { continue };
        for to in b.children.values().flatten() {
            if !exists(to) {
                return Err(CapError::rejected(format!(
                    "the image of '{}' links to '{to}', which would not exist after the restore",
                    r.block_id
                )));
            }
        }
    }
    Ok(())
}

fn fold_restore(state: &mut State, event: &Event) -> Folded {
    let image = match event.value.get("block") {
        Some(Value::Null) => None,
        Some(v) => match Block::deserialize(v) {
            Ok(b) if b.block_id == event.entity => Some(b),
            _ => return Folded::Done,
        },
        None => return Folded::Done,
    };
    let restored = image.is_some();
    elfiee_projections::set_block(state, &event.entity, image);
    if restored {
        Folded::Block
    } else {
        Folded::Done
    }
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn restore_sets_images_removes_blocks_and_keeps_the_relation_index() {
        let (mut k, a) = Kit::with_block("markdown", "a");
        let b = k.block("markdown", "b");
        k.ok("markdown.write", Some(&a), json!({"markdown": "v1"}));
        let before = k.state.clone();
        let a_before = k.state.blocks[&a].clone();
        k.ok("markdown.write", Some(&a), json!({"markdown": "v2"}));
        k.link(&a, &b, "implement");
        let c = k.block("code", "c");
        k.link(&b, &c, "reference");
        let b_before = before.blocks[&b].clone();
        k.ok(
            "core.restore",
            None,
            json!({"blocks": [
                {"block_id": a, "block": a_before},
                {"block_id": b, "block": b_before},
                {"block_id": c, "block": null},
            ]}),
        );
        assert_eq!(k.state.blocks[&a], before.blocks[&a]);
        assert_eq!(k.state.blocks[&b], before.blocks[&b]);
        assert!(!k.state.blocks.contains_key(&c));
        assert_eq!(k.state.graph, before.graph, "the reverse index follows");
        assert_eq!(k.state.parents_of(&b).count(), 0);
    }

    #[test]
    fn restore_refuses_what_it_cannot_do_and_needs_the_owners_rights() {
        let (mut k, a) = Kit::with_block("markdown", "a");
        let img = k.state.blocks[&a].clone();
        k.err_contains_by(
            "bob",
            "core.restore",
            None,
            json!({"blocks": [{"block_id": a, "block": img}]}),
            "core.grant",
        );
        k.err_contains(
            "core.restore",
            None,
            json!({"blocks": [{"block_id": "other", "block": img}]}),
            "names another block",
        );
        k.err_contains(
            "core.restore",
            None,
            json!({"blocks": [{"block_id": a, "block": null}, {"block_id": a, "block": null}]}),
            "twice",
        );
        let b = k.block("markdown", "b");
        k.link(&a, &b, "reference");
        let linked = k.state.blocks[&a].clone();
        k.err_contains(
            "core.restore",
            None,
            json!({"blocks": [{"block_id": a, "block": linked}, {"block_id": b, "block": null}]}),
            "would not exist",
        );
        // Removing what is not there is no event at all.
        assert!(k
            .ok(
                "core.restore",
                None,
                json!({"blocks": [{"block_id": "gone", "block": null}]})
            )
            .is_empty());
    }
}
