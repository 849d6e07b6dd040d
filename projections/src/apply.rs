use std::sync::OnceLock;

use elfiee_model::{Block, Editor, Event, Grant, Relation};
use serde::Deserialize;
use serde_json::Value;

use crate::fold::{Folded, Folds};
use crate::State;

/// Folds one committed event into `state` with the built-in folds ([`Folds::builtin`]). Total:
/// kinds without a fold are counted in [`State::unknown_kinds`], malformed values are skipped,
/// never a panic. An engine with custom kinds folds with its registry's [`Folds`] instead.
pub fn apply(state: &mut State, event: &Event) {
    builtin().apply(state, event);
}

pub(crate) fn builtin() -> &'static Folds {
    static BUILTIN: OnceLock<Folds> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        let mut folds = Folds::default();
        register_builtin(&mut folds);
        folds
    })
}

/// The built-in kinds, each with its fold: the same registration an embedder's kinds get.
pub(crate) fn register_builtin(folds: &mut Folds) {
    folds.register("elf.init", fold_init);
    folds.register("editor.create", fold_editor_create);
    folds.register("editor.delete", |s: &mut State, e: &Event| {
        s.editors.remove(e.entity.as_str());
        Folded::Done
    });
    folds.register("core.grant", fold_grant);
    folds.register("core.revoke", fold_grant);
    folds.register("core.create", fold_create);
    folds.register("core.delete", |s: &mut State, e: &Event| {
        delete_block(s, &e.entity);
        Folded::Done
    });
    folds.register("core.rename", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            if let Some(name) = v.get("name").and_then(Value::as_str) {
                b.name = name.to_owned();
            }
        })
    });
    folds.register("core.update_metadata", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            if let Some(d) = v.get("description") {
                b.metadata.description = d.as_str().map(str::to_owned);
            }
            merge_custom(b, v);
        })
    });
    folds.register("core.link", fold_link);
    folds.register("core.unlink", fold_link);
    // Block patches: `contents` keys are merged into the block's contents (a content
    // reference goes to `content_refs`), `custom` keys into its metadata (a null value
    // removes the key).
    folds.declare_body("markdown.write", crate::content::body_keys("markdown"));
    folds.declare_body("code.write", crate::content::body_keys("code"));
    for ty in ["markdown", "code"] {
        folds.declare_block_body(ty, crate::content::body_keys(ty));
    }
    for kind in [
        "markdown.write",
        "code.write",
        "agent.enable",
        "agent.disable",
        "agent.configure",
    ] {
        folds.register(kind, fold_patch);
    }
    // A directory's entries change: `added` entries join (replacing one at the same path),
    // `removed` paths leave; the last chunk of an import (`done`) completes it.
    folds.register("directory.sync", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            sync_entries(b, v);
            set_disk_hashes(b, v);
            if v.get("done").and_then(Value::as_bool) == Some(true) {
                b.metadata.custom.remove(IMPORT_INCOMPLETE);
            }
        })
    });
    // Files made, moved and removed inside the document (see `directory_status`).
    folds.register("directory.add", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            if let (Some(path), Some(id)) = (
                v.get("path").and_then(Value::as_str),
                v.get("block_id").and_then(Value::as_str),
            ) {
                put_entry(b, path, id);
            }
        })
    });
    folds.register("directory.move", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            if let (Some(from), Some(to)) = (
                v.get("from").and_then(Value::as_str),
                v.get("to").and_then(Value::as_str),
            ) {
                if let Some(id) = take_entry(b, from) {
                    put_entry(b, to, &id);
                }
            }
        })
    });
    folds.register("directory.remove", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            if let Some(path) = v.get("path").and_then(Value::as_str) {
                take_entry(b, path);
            }
        })
    });
    // Effect records: the whole value is kept under one key of the block.
    folds.register("terminal.output", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            if let Value::Object(obj) = &mut b.contents {
                obj.insert("last_output".into(), v.clone());
            }
        })
    });
    folds.register("directory.export_outcome", |s: &mut State, e: &Event| {
        update_block(s, e, |b, v| {
            set_disk_hashes(b, v);
            for p in strings(v, "removed") {
                if let Some(list) = list_mut(b, "pending_removals") {
                    list.retain(|e| entry_path(e) != p);
                }
            }
            b.metadata.custom.insert("last_export".into(), v.clone());
        })
    });
    folds.register("agent.proposal", fold_proposal);
    folds.register("agent.approve", fold_decision);
    folds.register("agent.effect_plan", fold_effect_record);
    folds.register("agent.effect_outcome", fold_effect_record);
    // Kinds recorded for the log and for effects (requests an effect answers, reads, markers
    // of a command whose changes come as other kinds): known, with no change to the state.
    for kind in [
        "markdown.read",
        "code.read",
        "directory.import",
        "directory.export",
        "terminal.create",
        "terminal.execute",
        "agent.create",
        "agent.invoke",
        "agent.session",
    ] {
        folds.register_noop(kind);
    }
}

fn fold_init(state: &mut State, event: &Event) -> Folded {
    if let Some(owner) = event.value.get("owner").and_then(Value::as_str) {
        state.file_owner = Some(owner.to_owned());
    }
    Folded::Done
}

fn fold_editor_create(state: &mut State, event: &Event) -> Folded {
    if let Ok(editor) = Editor::deserialize(&event.value) {
        state.editors.insert(editor.editor_id.clone(), editor);
    }
    Folded::Done
}

fn fold_grant(state: &mut State, event: &Event) -> Folded {
    if let Ok(g) = Grant::deserialize(&event.value) {
        if event.cap_id() == "core.grant" {
            state.grants.insert(g);
        } else {
            state.grants.remove(&g);
        }
    }
    Folded::Done
}

fn fold_create(state: &mut State, event: &Event) -> Folded {
    match Block::deserialize(&event.value) {
        Ok(mut block) => {
            block.content_refs.clear();
            crate::content::take_refs(&mut block);
            state.blocks.insert(block.block_id.clone(), block);
            Folded::Block
        }
        Err(_) => Folded::Done,
    }
}

fn fold_link(state: &mut State, event: &Event) -> Folded {
    let link = event.value.get("to").and_then(Value::as_str).zip(
        event
            .value
            .get("relation")
            .and_then(Value::as_str)
            .and_then(Relation::parse),
    );
    let Some((to, rel)) = link else {
        return Folded::Done;
    };
    let linking = event.cap_id() == "core.link";
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

/// The built-in block patch (`markdown.write`, `code.write`, agent settings): `contents` keys
/// merge into the block's contents (content references into `content_refs`), `custom` keys
/// into its metadata. Custom kinds whose events have that shape can register it as it is.
pub fn fold_patch(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, patch_block)
}

/// Proposals live in `extensions["proposals"][proposal_id]`.
fn fold_proposal(state: &mut State, event: &Event) -> Folded {
    if let Some(id) = event.value.get("proposal_id").and_then(Value::as_str) {
        let mut p = event.value.clone();
        if let Value::Object(obj) = &mut p {
            obj.insert("agent_block_id".into(), Value::String(event.entity.clone()));
            obj.insert("created_seq".into(), Value::from(event.seq));
            obj.insert(
                "editor_id".into(),
                Value::String(event.editor_id().to_owned()),
            );
            obj.entry("status")
                .or_insert_with(|| Value::String("pending".into()));
        }
        proposals(state).insert(id.to_owned(), p);
    }
    Folded::Done
}

fn fold_decision(state: &mut State, event: &Event) -> Folded {
    let id = event
        .value
        .get("proposal_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(Value::Object(p)) = proposals(state).get_mut(&id) {
        p.insert(
            "status".into(),
            event.value.get("status").cloned().unwrap_or(Value::Null),
        );
        p.insert(
            "decided_by".into(),
            Value::String(event.editor_id().to_owned()),
        );
        p.insert("decided_seq".into(), Value::from(event.seq));
        if let Some(f) = event.value.get("feedback").filter(|f| !f.is_null()) {
            p.insert("feedback".into(), f.clone());
        }
    }
    Folded::Done
}

fn fold_effect_record(state: &mut State, event: &Event) -> Folded {
    let outcome = event.cap_id() == "agent.effect_outcome";
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

fn proposals(state: &mut State) -> &mut serde_json::Map<String, Value> {
    state.extension_mut("proposals")
}

fn patch_block(b: &mut Block, v: &Value) {
    if let Some(Value::Object(patch)) = v.get("contents") {
        if !b.contents.is_object() {
            b.contents = Value::Object(Default::default());
        }
        if let Value::Object(obj) = &mut b.contents {
            for (k, val) in patch {
                match crate::content::ref_of(val) {
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

/// Metadata key of a directory block whose streaming import has not finished yet.
pub const IMPORT_INCOMPLETE: &str = "import_incomplete";

/// Applies a `directory.sync` value's `added` and `removed` to `contents.entries`, kept in
/// path order (binary search: a chunk of k entries costs O(k log n), not a rebuild).
fn sync_entries(b: &mut Block, v: &Value) {
    if !b.contents.is_object() {
        b.contents = Value::Object(Default::default());
    }
    let Value::Object(obj) = &mut b.contents else {
        return;
    };
    let entries = obj
        .entry("entries")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !entries.is_array() {
        *entries = Value::Array(Vec::new());
    }
    let Value::Array(list) = entries else {
        return;
    };
    if !list.is_sorted_by(|a, b| entry_path(a) <= entry_path(b)) {
        list.sort_by(|a, b| entry_path(a).cmp(entry_path(b)));
    }
    let path_of = |e: &Value| {
        e.get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    for p in strings(v, "removed") {
        if let Ok(i) = list.binary_search_by(|e| entry_path(e).cmp(p)) {
            list.remove(i);
        }
    }
    for e in v
        .get("added")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let p = path_of(e);
        match list.binary_search_by(|x| entry_path(x).cmp(p.as_str())) {
            Ok(i) => list[i] = e.clone(),
            Err(i) => list.insert(i, e.clone()),
        }
    }
}

/// `contents[key]` of a directory block as a list (made if missing).
fn list_mut<'a>(b: &'a mut Block, key: &str) -> Option<&'a mut Vec<Value>> {
    if !b.contents.is_object() {
        b.contents = Value::Object(Default::default());
    }
    let obj = b.contents.as_object_mut()?;
    let v = obj
        .entry(key.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !v.is_array() {
        *v = Value::Array(Vec::new());
    }
    v.as_array_mut()
}

/// Sets the recorded disk hash (`v.disk`: path → blake3) of the entries it names.
fn set_disk_hashes(b: &mut Block, v: &Value) {
    let Some(Value::Object(disk)) = v.get("disk") else {
        return;
    };
    let Some(list) = list_mut(b, "entries") else {
        return;
    };
    for (path, hash) in disk {
        if let Ok(i) = list.binary_search_by(|e| entry_path(e).cmp(path)) {
            if let Some(e) = list[i].as_object_mut() {
                e.insert("disk".into(), hash.clone());
            }
        }
    }
}

/// Removes the entry at `path`; a file the disk still holds (it has a disk hash) becomes a
/// pending removal for the next export. Returns the entry's block id.
fn take_entry(b: &mut Block, path: &str) -> Option<String> {
    let list = list_mut(b, "entries")?;
    let i = list.binary_search_by(|e| entry_path(e).cmp(path)).ok()?;
    let e = list.remove(i);
    let id = e.get("block_id").and_then(Value::as_str)?.to_owned();
    if let Some(disk) = e.get("disk").cloned() {
        if let Some(pending) = list_mut(b, "pending_removals") {
            pending.retain(|p| entry_path(p) != path);
            pending.push(serde_json::json!({"path": path, "disk": disk}));
        }
    }
    Some(id)
}

/// Puts an entry at `path` for block `id` (replacing one there). A pending removal at that
/// path is taken back: the file on disk becomes this entry's, with its disk hash.
fn put_entry(b: &mut Block, path: &str, id: &str) {
    let mut disk = None;
    if let Some(pending) = list_mut(b, "pending_removals") {
        if let Some(i) = pending.iter().position(|p| entry_path(p) == path) {
            disk = pending.remove(i).get("disk").cloned();
        }
    }
    let mut e = serde_json::json!({"path": path, "block_id": id});
    if let Some(d) = disk {
        e["disk"] = d;
    }
    let Some(list) = list_mut(b, "entries") else {
        return;
    };
    match list.binary_search_by(|x| entry_path(x).cmp(path)) {
        Ok(i) => list[i] = e,
        Err(i) => list.insert(i, e),
    }
}

/// The `path` of a directory entry (empty when it has none).
pub fn entry_path(e: &Value) -> &str {
    e.get("path").and_then(Value::as_str).unwrap_or("")
}

/// Merges `v.custom` into the block's metadata; a null value removes the key.
fn merge_custom(b: &mut Block, v: &Value) {
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

/// Removes a block and every relation that mentions it, in both directions.
fn delete_block(state: &mut State, id: &str) {
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

/// The strings in the array at `v[key]` (none if it is missing or not an array).
fn strings<'v>(v: &'v Value, key: &str) -> impl Iterator<Item = &'v str> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Folded, Folds};
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

    fn block(id: &str) -> Value {
        json!({"block_id": id, "name": id, "block_type": "markdown", "contents": {}, "children": {},
               "owner": "alice", "metadata": {"created_at": 0, "updated_at": 0, "custom": {}}})
    }

    #[test]
    fn unknown_and_malformed_events_are_skipped_not_panics() {
        let mut s = State::default();
        apply(&mut s, &ev(1, "x", "alice/made.up", json!(null)));
        apply(
            &mut s,
            &ev(2, "x", "alice/core.create", json!({"nonsense": true})),
        );
        apply(&mut s, &ev(3, "x", "no-slash", json!([1, 2])));
        apply(
            &mut s,
            &ev(
                4,
                "ghost",
                "alice/core.link",
                json!({"to": "y", "relation": "reference"}),
            ),
        );
        apply(&mut s, &ev(5, "ghost", "alice/core.delete", json!({})));
        apply(&mut s, &ev(6, "x", "alice/made.up", json!({})));
        assert!(s.blocks.is_empty());
        assert_eq!(s.last_seq, 6);
        let unknown: Vec<_> = s
            .unknown_kinds
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        assert_eq!(unknown, [("made.up", 2), ("no-slash", 1)]);
    }

    #[test]
    fn a_registered_fold_gives_a_custom_kind_its_meaning_and_its_block_seq() {
        let mut folds = Folds::builtin();
        let before = folds.fingerprint().to_owned();
        folds.register("checklist.add", |s: &mut State, e: &Event| {
            update_block(s, e, |b, v| {
                let item = v.get("text").cloned().unwrap_or(Value::Null);
                match b.contents.get_mut("items").and_then(Value::as_array_mut) {
                    Some(items) => items.push(item),
                    None => b.contents = json!({"items": [item]}),
                }
            })
        });
        assert_ne!(
            folds.fingerprint(),
            before,
            "snapshots must tell the two apart"
        );
        let mut s = State::default();
        folds.apply(&mut s, &ev(1, "a", "alice/core.create", block("a")));
        let applied = folds.apply(
            &mut s,
            &ev(2, "a", "alice/checklist.add", json!({"text": "milk"})),
        );
        assert_eq!(applied, crate::Applied::Folded(Folded::Block));
        assert_eq!(s.blocks["a"].contents["items"], json!(["milk"]));
        assert_eq!(s.block_seq["a"], 2);
        assert!(s.unknown_kinds.is_empty());
        // The built-in folds alone skip it, and say so.
        let mut plain = State::default();
        apply(&mut plain, &ev(1, "a", "alice/core.create", block("a")));
        apply(
            &mut plain,
            &ev(2, "a", "alice/checklist.add", json!({"text": "milk"})),
        );
        assert_eq!(plain.unknown_kinds["checklist.add"], 1);
        assert_eq!(plain.blocks["a"].contents, json!({}));
    }

    #[test]
    fn a_panicking_fold_is_caught_and_reported() {
        let mut folds = Folds::builtin();
        folds.register("bad.kind", |_: &mut State, e: &Event| -> Folded {
            panic!("cannot fold {}", e.seq)
        });
        let mut s = State::default();
        let applied = folds.apply(&mut s, &ev(1, "x", "alice/bad.kind", json!({})));
        assert_eq!(applied, crate::Applied::Panicked("cannot fold 1".into()));
        assert_eq!(s.last_seq, 1);
    }

    #[test]
    fn no_builtin_kind_is_unknown_to_the_builtin_folds() {
        let folds = Folds::builtin();
        for kind in [
            "terminal.execute",
            "directory.export",
            "agent.invoke",
            "markdown.read",
        ] {
            assert!(folds.knows(kind), "{kind}");
        }
    }

    #[test]
    fn delete_cleans_relations_in_both_directions() {
        let mut s = State::default();
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            apply(
                &mut s,
                &ev(i as u64 + 1, id, "alice/core.create", block(id)),
            );
        }
        apply(
            &mut s,
            &ev(
                4,
                "a",
                "alice/core.link",
                json!({"to": "b", "relation": "reference"}),
            ),
        );
        apply(
            &mut s,
            &ev(
                5,
                "b",
                "alice/core.link",
                json!({"to": "c", "relation": "implement"}),
            ),
        );
        assert_eq!(s.parents_of("b").count(), 1);
        apply(&mut s, &ev(6, "b", "alice/core.delete", json!({})));
        assert!(s.blocks["a"].children.is_empty());
        assert_eq!(s.parents_of("c").count(), 0);
        assert_eq!(s.graph, crate::RelationGraph::default());
    }

    #[test]
    fn content_write_merges_and_stamps_updated_at() {
        let mut s = State::default();
        apply(&mut s, &ev(1, "a", "alice/core.create", block("a")));
        apply(
            &mut s,
            &ev(
                2,
                "a",
                "alice/markdown.write",
                json!({"contents": {"markdown": "# hi"}}),
            ),
        );
        assert_eq!(s.blocks["a"].contents["markdown"], "# hi");
        assert_eq!(s.blocks["a"].metadata.updated_at.timestamp_millis(), 2000);
        assert_eq!(s.block_seq["a"], 2);
    }
}
