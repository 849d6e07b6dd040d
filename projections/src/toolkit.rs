//! The generic pieces folds are made of: the shapes that recur in the folds of many kinds
//! (built-in and an embedder's alike), each total and pure.
//!
//! A kind's fold itself lives beside its capability (the built-ins' in
//! `elfiee_capabilities::builtin`, an embedder's in its own crate) and is registered through
//! `Capability::fold`; this module knows no kind by name.
//!
//! - [`update_block`]: run a change on the event's block and stamp its `updated_at`;
//! - [`fold_patch`] / [`patch_block`]: the block patch (`contents` keys merged, content
//!   references into `content_refs`, `custom` keys into the metadata);
//! - [`merge_custom`]: merge `custom` keys into a block's metadata (a null removes);
//! - [`link`] / [`unlink`]: a relation added or removed, with the reverse index;
//! - [`set_block`] / [`delete_block`]: a whole block set or removed, relations kept in step;
//! - [`crate::content::take_refs`]: content references of a new block into `content_refs`.
//!
//! ```
//! use elfiee_model::Event;
//! use elfiee_projections::toolkit::update_block;
//! use elfiee_projections::{Folded, Folds, State};
//!
//! // A kind that renames the block its event names.
//! fn retitle(state: &mut State, event: &Event) -> Folded {
//!     update_block(state, event, |block, value| {
//!         if let Some(t) = value.get("title").and_then(|t| t.as_str()) {
//!             block.name = t.to_owned();
//!         }
//!     })
//! }
//! let mut folds = Folds::default();
//! folds.register("note.retitle", retitle);
//! assert!(folds.knows("note.retitle"));
//! ```

use elfiee_model::{Block, Event, Relation};
use serde_json::Value;

use crate::content::ref_of;
use crate::fold::Folded;
use crate::state::State;

/// Runs `f` on the event's block (its `entity`) with the event's value and stamps the block's
/// `updated_at`; nothing when the block does not exist. The shape of most block folds.
pub fn update_block(
    state: &mut State,
    event: &Event,
    f: impl FnOnce(&mut Block, &Value),
) -> Folded {
    match state.blocks.get_mut(&event.entity) {
        Some(b) => {
            f(b, &event.value);
            b.metadata.updated_at = event.created_at;
            Folded::Block
        }
        None => Folded::Done,
    }
}

/// The block patch fold (`markdown.write`, `code.write`, agent settings): `contents` keys
/// merge into the block's contents (content references into `content_refs`), `custom` keys
/// into its metadata. Custom kinds whose events have that shape can register it as it is.
pub fn fold_patch(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, patch_block)
}

/// Applies a patch value to a block: `v.contents` keys merge into its contents (a content
/// reference goes to `content_refs`, an inline value takes the key back from there), and
/// `v.custom` into its metadata ([`merge_custom`]).
pub fn patch_block(b: &mut Block, v: &Value) {
    if let Some(Value::Object(patch)) = v.get("contents") {
        if !b.contents.is_object() {
            b.contents = Value::Object(Default::default());
        }
        if let Value::Object(obj) = &mut b.contents {
            for (k, val) in patch {
                match ref_of(val) {
                    Some(r) => {
                        obj.remove(k);
                        b.content_refs.insert(k.clone(), r);
                    }
                    None => {
                        obj.insert(k.clone(), val.clone());
                        b.content_refs.remove(k);
                    }
                }
            }
        }
    }
    merge_custom(b, v);
}

/// Merges `v.custom` into the block's metadata; a null value removes the key.
pub fn merge_custom(b: &mut Block, v: &Value) {
    if let Some(Value::Object(custom)) = v.get("custom") {
        for (k, val) in custom {
            if val.is_null() {
                b.metadata.custom.remove(k);
            } else {
                b.metadata.custom.insert(k.clone(), val.clone());
            }
        }
    }
}

/// Adds the relation `rel` from the event's block to `to` (once), in the block's `children`
/// and the reverse index, and stamps the block's `updated_at`; nothing when the block is gone.
pub fn link(state: &mut State, event: &Event, to: &str, rel: Relation) -> Folded {
    relate(state, event, to, rel, true)
}

/// Removes the relation `rel` from the event's block to `to` (an empty relation list goes
/// too), in the block's `children` and the reverse index, and stamps its `updated_at`.
pub fn unlink(state: &mut State, event: &Event, to: &str, rel: Relation) -> Folded {
    relate(state, event, to, rel, false)
}

fn relate(state: &mut State, event: &Event, to: &str, rel: Relation, linking: bool) -> Folded {
    let entity = event.entity.as_str();
    let Some(block) = state.blocks.get_mut(entity) else {
        return Folded::Done;
    };
    let list = block.children.entry(rel.as_str().to_owned()).or_default();
    if linking {
        if !list.iter().any(|c| c == to) {
            list.push(to.to_owned());
        }
        state.graph.add(entity, to, rel);
    } else {
        list.retain(|c| c != to);
        if list.is_empty() {
            block.children.remove(rel.as_str());
        }
        state.graph.remove(entity, to, rel);
    }
    block.metadata.updated_at = event.created_at;
    Folded::Block
}

/// Sets block `id` to `image`, or removes it (and every relation that mentions it) when
/// `image` is `None`, keeping the reverse relation index in step: how `core.restore` folds.
pub fn set_block(state: &mut State, id: &str, image: Option<Block>) {
    let Some(mut block) = image else {
        delete_block(state, id);
        return;
    };
    if let Some(old) = state.blocks.get(id) {
        let edges: Vec<(Relation, String)> = edges_of(old).collect();
        for (rel, to) in edges {
            state.graph.remove(id, &to, rel);
        }
    }
    let edges: Vec<(Relation, String)> = edges_of(&block).collect();
    for (rel, to) in edges {
        state.graph.add(id, &to, rel);
    }
    block.block_id = id.to_owned();
    state.blocks.insert(id.to_owned(), block);
}

fn edges_of(b: &Block) -> impl Iterator<Item = (Relation, String)> + '_ {
    b.children
        .iter()
        .filter_map(|(r, t)| Relation::parse(r).map(|r| (r, t)))
        .flat_map(|(r, targets)| targets.iter().map(move |t| (r, t.clone())))
}

/// Removes a block, its seq and every relation that mentions it, in both directions.
pub fn delete_block(state: &mut State, id: &str) {
    let Some(block) = state.blocks.remove(id) else {
        return;
    };
    for (rel, targets) in &block.children {
        if let Some(rel) = Relation::parse(rel) {
            for t in targets {
                state.graph.remove(id, t, rel);
            }
        }
    }
    let parents: Vec<(Relation, String)> = state
        .graph
        .parents_of(id)
        .map(|(r, p)| (r, p.to_owned()))
        .collect();
    for (rel, parent) in parents {
        if let Some(p) = state.blocks.get_mut(&parent) {
            if let Some(list) = p.children.get_mut(rel.as_str()) {
                list.retain(|c| c != id);
                if list.is_empty() {
                    p.children.remove(rel.as_str());
                }
            }
        }
    }
    state.graph.forget(id);
    state.block_seq.remove(id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{Applied, Folds};
    use chrono::DateTime;
    use elfiee_model::EventHash;
    use serde_json::json;

    fn ev(seq: u64, entity: &str, attr: &str, value: Value) -> Event {
        Event {
            seq,
            event_id: uuid::Uuid::nil(),
            cmd_id: uuid::Uuid::nil(),
            entity: entity.into(),
            attribute: attr.into(),
            value,
            clock: [("n:alice".to_string(), seq)].into(),
            created_at: DateTime::from_timestamp_millis(seq as i64 * 1000).unwrap(),
            hash: EventHash::ZERO,
        }
    }

    fn block(id: &str) -> Block {
        serde_json::from_value(json!({"block_id": id, "name": id, "block_type": "markdown",
            "contents": {}, "children": {}, "owner": "alice",
            "metadata": {"created_at": 0, "updated_at": 0, "custom": {}}}))
        .unwrap()
    }

    /// A local fold set made of the toolkit alone (no built-in kind is known here).
    fn folds() -> Folds {
        let mut f = Folds::default();
        f.register("t.put", |s: &mut State, e: &Event| {
            set_block(s, &e.entity, Some(block(&e.entity)));
            Folded::Block
        });
        f.register("t.patch", fold_patch);
        f.register("t.link", |s: &mut State, e: &Event| {
            link(
                s,
                e,
                e.value["to"].as_str().unwrap_or(""),
                Relation::Reference,
            )
        });
        f.register("t.unlink", |s: &mut State, e: &Event| {
            unlink(
                s,
                e,
                e.value["to"].as_str().unwrap_or(""),
                Relation::Reference,
            )
        });
        f.register("t.delete", |s: &mut State, e: &Event| {
            delete_block(s, &e.entity);
            Folded::Done
        });
        f
    }

    #[test]
    fn a_panicking_fold_is_caught_and_reported() {
        let mut folds = folds();
        folds.register("bad.kind", |_: &mut State, e: &Event| -> Folded {
            panic!("cannot fold {}", e.seq)
        });
        let mut s = State::default();
        let applied = folds.apply(&mut s, &ev(1, "x", "alice/bad.kind", json!({})));
        assert_eq!(applied, Applied::Panicked("cannot fold 1".into()));
        assert_eq!(s.last_seq, 1);
    }

    #[test]
    fn patch_merges_contents_and_custom_and_stamps_updated_at() {
        let f = folds();
        let mut s = State::default();
        f.apply(&mut s, &ev(1, "a", "alice/t.put", json!({})));
        let r = crate::content::ref_value(&crate::content::content_ref(b"big body"));
        f.apply(
            &mut s,
            &ev(
                2,
                "a",
                "alice/t.patch",
                json!({"contents": {"x": 1, "body": r}, "custom": {"k": "v"}}),
            ),
        );
        let b = &s.blocks["a"];
        assert_eq!(b.contents, json!({"x": 1}));
        assert_eq!(b.content_refs.get("body").map(|r| r.len), Some(8));
        assert_eq!(b.metadata.custom["k"], "v");
        assert_eq!(b.metadata.updated_at.timestamp_millis(), 2000);
        assert_eq!(s.block_seq["a"], 2);
        f.apply(
            &mut s,
            &ev(
                3,
                "a",
                "alice/t.patch",
                json!({"contents": {"body": "small"}, "custom": {"k": null}}),
            ),
        );
        let b = &s.blocks["a"];
        assert!(b.content_refs.is_empty() && b.metadata.custom.is_empty());
        assert_eq!(b.contents["body"], "small");
    }

    #[test]
    fn link_unlink_and_delete_keep_the_reverse_index_in_step() {
        let f = folds();
        let mut s = State::default();
        for (i, id) in ["a", "b"].iter().enumerate() {
            f.apply(&mut s, &ev(i as u64 + 1, id, "alice/t.put", json!({})));
        }
        f.apply(&mut s, &ev(3, "a", "alice/t.link", json!({"to": "b"})));
        f.apply(&mut s, &ev(4, "a", "alice/t.link", json!({"to": "b"})));
        assert_eq!(s.blocks["a"].children["reference"], ["b"]);
        assert_eq!(s.parents_of("b").count(), 1);
        f.apply(&mut s, &ev(5, "a", "alice/t.unlink", json!({"to": "b"})));
        assert!(s.blocks["a"].children.is_empty());
        assert_eq!(s.graph, crate::graph::RelationGraph::default());
        f.apply(&mut s, &ev(6, "a", "alice/t.link", json!({"to": "b"})));
        f.apply(&mut s, &ev(7, "b", "alice/t.delete", json!({})));
        assert!(s.blocks["a"].children.is_empty());
        assert_eq!(s.graph, crate::graph::RelationGraph::default());
        // A block that is gone: nothing, and no block seq.
        assert_eq!(
            f.apply(
                &mut s,
                &ev(8, "b", "alice/t.patch", json!({"contents": {}}))
            ),
            Applied::Folded(Folded::Done)
        );
    }
}
