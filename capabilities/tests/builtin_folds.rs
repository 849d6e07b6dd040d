//! The built-in folds, as `Registry::builtin()` registers them from the capabilities (each
//! kind's fold beside its handler in `src/builtin/`), folded event by event.

use chrono::DateTime;
use elfiee_capabilities::Registry;
use elfiee_model::{Event, EventHash};
use elfiee_projections::{update_block, Applied, Folded, Folds, State};
use serde_json::{json, Value};

fn builtin() -> Folds {
    Registry::builtin().folds().clone()
}

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
fn the_builtin_fold_table_keeps_the_fingerprint_existing_snapshots_record() {
    // Snapshots store the fingerprint of the folds that made them (kinds and fold versions):
    // a change here makes every stored snapshot unusable (the log is replayed instead), so
    // it must come with a bumped `Fold::version` and a note, never by accident.
    assert_eq!(builtin().fingerprint(), "ad11d758fb2aa6a1");
}

#[test]
fn unknown_and_malformed_events_are_skipped_not_panics() {
    let folds = builtin();
    let mut s = State::default();
    folds.apply(&mut s, &ev(1, "x", "alice/made.up", json!(null)));
    folds.apply(
        &mut s,
        &ev(2, "x", "alice/core.create", json!({"nonsense": true})),
    );
    folds.apply(&mut s, &ev(3, "x", "no-slash", json!([1, 2])));
    folds.apply(
        &mut s,
        &ev(
            4,
            "ghost",
            "alice/core.link",
            json!({"to": "y", "relation": "reference"}),
        ),
    );
    folds.apply(&mut s, &ev(5, "ghost", "alice/core.delete", json!({})));
    folds.apply(&mut s, &ev(6, "x", "alice/made.up", json!({})));
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
    let mut folds = builtin();
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
    assert_eq!(applied, Applied::Folded(Folded::Block));
    assert_eq!(s.blocks["a"].contents["items"], json!(["milk"]));
    assert_eq!(s.block_seq["a"], 2);
    assert!(s.unknown_kinds.is_empty());
    // The built-in folds alone skip it, and say so.
    let plain_folds = builtin();
    let mut plain = State::default();
    plain_folds.apply(&mut plain, &ev(1, "a", "alice/core.create", block("a")));
    plain_folds.apply(
        &mut plain,
        &ev(2, "a", "alice/checklist.add", json!({"text": "milk"})),
    );
    assert_eq!(plain.unknown_kinds["checklist.add"], 1);
    assert_eq!(plain.blocks["a"].contents, json!({}));
}

#[test]
fn no_builtin_kind_is_unknown_to_the_builtin_folds() {
    let folds = builtin();
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
    let folds = builtin();
    let mut s = State::default();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        folds.apply(
            &mut s,
            &ev(i as u64 + 1, id, "alice/core.create", block(id)),
        );
    }
    folds.apply(
        &mut s,
        &ev(
            4,
            "a",
            "alice/core.link",
            json!({"to": "b", "relation": "reference"}),
        ),
    );
    folds.apply(
        &mut s,
        &ev(
            5,
            "b",
            "alice/core.link",
            json!({"to": "c", "relation": "implement"}),
        ),
    );
    assert_eq!(s.parents_of("b").count(), 1);
    folds.apply(&mut s, &ev(6, "b", "alice/core.delete", json!({})));
    assert!(s.blocks["a"].children.is_empty());
    assert_eq!(s.parents_of("c").count(), 0);
    assert_eq!(s.graph, elfiee_projections::RelationGraph::default());
}

#[test]
fn content_write_merges_and_stamps_updated_at() {
    let folds = builtin();
    let mut s = State::default();
    folds.apply(&mut s, &ev(1, "a", "alice/core.create", block("a")));
    folds.apply(
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

#[test]
fn body_keys_follow_the_event_kind() {
    let folds = builtin();
    assert_eq!(
        folds.body_keys("core.create", &json!({"block_type": "code"})),
        &["text"]
    );
    assert_eq!(folds.body_keys("markdown.write", &json!({})), &["markdown"]);
    assert_eq!(folds.body_keys("code.write", &json!({})), &["text"]);
    assert!(folds.body_keys("core.rename", &json!({})).is_empty());
}

#[test]
fn every_builtin_registry_shares_the_same_folds() {
    // `elfiee::testkit` tells a built-in fold from an embedder's by pointer.
    let (a, b) = (Registry::builtin(), Registry::builtin());
    for kind in a.folds().kinds() {
        let same =
            std::sync::Arc::ptr_eq(a.folds().get(kind).unwrap(), b.folds().get(kind).unwrap());
        assert!(same, "{kind}");
    }
}
