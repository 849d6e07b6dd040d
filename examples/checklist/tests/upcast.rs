//! `checklist.add` changed shape: version 1 was `{text}`, version 2 is `{text, due}`. Documents
//! written by the program before the change (its registry is rebuilt here, [`v1`]) open, fold,
//! snapshot and replay in the new program as if written with `due: null`; the log keeps what
//! was written. A version newer than the program knows is named, not misread.

use std::path::Path;
use std::sync::Arc;

use elfiee::capabilities::{Capability, Registry, Target};
use elfiee::model::{CapError, Command, Ctx, Event, EventDraft};
use elfiee::projections::{update_block, Fold, State};
use elfiee::testkit::{check_upcasters, default_fixed_ctx, Check, Op, OpCmd};
use elfiee::{Engine, EngineConfig, FileHandle};
use elfiee_checklist::{items, registry, Item};
use proptest::prelude::*;
use serde_json::{json, Value};

/// The checklist as it was before due dates: `checklist.add {text}` at payload version 1, no
/// upcaster; the other capabilities as they are.
mod v1 {
    use super::*;

    pub struct Add;

    impl Capability for Add {
        fn id(&self) -> &'static str {
            "checklist.add"
        }

        fn target(&self) -> Target {
            Target::Block(Some("checklist"))
        }

        fn handle(
            &self,
            cmd: &Command,
            state: &State,
            _: &Ctx,
        ) -> Result<Vec<EventDraft>, CapError> {
            let text = cmd.payload["text"].as_str().unwrap_or_default().trim();
            if text.is_empty() {
                return Err(CapError::payload(self.id(), "the item's text is empty"));
            }
            let block = state
                .block(cmd.block_id.as_deref().unwrap_or_default())
                .unwrap();
            Ok(vec![EventDraft::new(
                &block.block_id,
                self.id(),
                json!({"text": text}),
            )])
        }

        fn fold(&self) -> Option<Arc<dyn Fold>> {
            Some(Arc::new(|state: &mut State, event: &Event| {
                update_block(state, event, |b, v| {
                    let Some(text) = v.get("text").and_then(Value::as_str) else {
                        return;
                    };
                    let item = json!({"text": text, "done": false});
                    if !b.contents.is_object() {
                        b.contents = json!({});
                    }
                    match b.contents.get_mut("items").and_then(Value::as_array_mut) {
                        Some(list) => list.push(item),
                        None => b.contents["items"] = json!([item]),
                    }
                })
            }))
        }
    }

    /// `elfiee_checklist::registry()` as it was.
    pub fn registry() -> Registry {
        let mut r = Registry::builtin();
        r.register(Arc::new(Add));
        r.register(Arc::new(elfiee_checklist::Tick));
        r.register(Arc::new(elfiee_checklist::Notes));
        r.register(Arc::new(elfiee_checklist::Export));
        r.register(Arc::new(elfiee_checklist::Exported));
        r.declare_body("checklist.notes", &["notes"]);
        r.declare_block_body("checklist", &["notes"]);
        elfiee::sync::membership::register(&mut r);
        r
    }
}

/// An engine over `registry` whose commits are reproducible (fixed time, ids and node), so two
/// documents given the same commands hold the same events but for their values.
fn engine(registry: Registry) -> Engine {
    Engine::new(EngineConfig {
        registry,
        fixed_ctx: Some(default_fixed_ctx()),
        node_id: "n1".into(),
        snapshot_every: 4,
        snapshot_at_close_after: 1,
        ..EngineConfig::default()
    })
}

async fn run(file: &FileHandle, cap: &str, block: Option<&str>, payload: Value) -> Vec<Event> {
    file.submit(Command::new("alice", cap, block, payload))
        .await
        .unwrap_or_else(|e| panic!("{cap}: {e}"))
}

/// A new document at `elf` with a checklist `groceries` holding milk, eggs (ticked) and
/// bread, written by `engine`'s program; closed. `due` is given to the adds when `Some`.
async fn groceries(engine: &Engine, elf: &Path, due: Option<Value>) -> String {
    let file = engine.init_with_owner(elf, "Alice", "alice").await.unwrap();
    let list = run(
        &file,
        "core.create",
        None,
        json!({"name": "groceries", "block_type": "checklist"}),
    )
    .await[0]
        .entity
        .clone();
    for text in ["milk", "eggs", "bread"] {
        let mut payload = json!({"text": text});
        if let Some(due) = &due {
            payload["due"] = due.clone();
        }
        run(&file, "checklist.add", Some(&list), payload).await;
    }
    run(&file, "checklist.tick", Some(&list), json!({"index": 1})).await;
    file.close().await;
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_with_old_payloads_folds_as_one_written_with_due_null() {
    let dir = tempfile::tempdir().unwrap();
    let (old_elf, new_elf) = (dir.path().join("old.elf"), dir.path().join("new.elf"));
    let list = groceries(&engine(v1::registry()), &old_elf, None).await;
    let same_list = groceries(&engine(registry()), &new_elf, Some(Value::Null)).await;
    assert_eq!(list, same_list);

    let new = engine(registry());
    // The new program's document: version 2 events.
    let file = new.open(&new_elf).await.unwrap();
    let expected = file.state_digest();
    let added = adds(&file);
    assert_eq!(added[0], json!({"text": "milk", "due": null, "$v": 2}));
    file.close().await;

    // The old program's document, opened by the new program: the snapshot the old program
    // wrote at close was made by other folds and is not used; the log is replayed through
    // the upcaster. The log itself still holds version 1.
    let file = new.open(&old_elf).await.unwrap();
    let added = adds(&file);
    assert_eq!(
        added,
        [
            json!({"text": "milk"}),
            json!({"text": "eggs"}),
            json!({"text": "bread"})
        ]
    );
    let item = |text: &str, done| Item {
        text: text.into(),
        done,
        due: None,
    };
    assert_eq!(
        items(&file.block(&list).unwrap()),
        [
            item("milk", false),
            item("eggs", true),
            item("bread", false)
        ]
    );
    assert!(file.unknown_kinds().is_empty());
    assert_eq!(
        file.state_digest(),
        expected,
        "old payloads fold as due: null"
    );
    // The new program's own snapshot plus the tail, after more of its own events.
    run(
        &file,
        "checklist.add",
        Some(&list),
        json!({"text": "jam", "due": "2026-12-01"}),
    )
    .await;
    let live = file.state_digest();
    file.close().await;
    let file = new.open(&old_elf).await.unwrap();
    assert_eq!(file.state_digest(), live, "snapshot + tail");
    let verified = file.verify().await.unwrap();
    assert!(verified.ok, "{:?}", verified.problems);
    file.close().await;
    let (report, state) =
        elfiee::engine::replay_with(&old_elf, registry().folds(), |_, _| {}).unwrap();
    assert_eq!(report.state_digest, live, "replay of the mixed log");
    assert_eq!(
        items(state.block(&list).unwrap())[3].due.as_deref(),
        Some("2026-12-01")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_payload_version_is_named_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("newer.elf");
    // A later program at version 3 (here an upcaster that changes nothing: the shape does not
    // matter, only that this program does not know it).
    let mut v3 = registry();
    v3.register_upcast("checklist.add", 2, |v: Value| v);
    let list = groceries(&engine(v3), &elf, None).await;

    let file = engine(registry()).open(&elf).await.unwrap();
    assert_eq!(
        file.events(1)
            .unwrap()
            .iter()
            .filter(|e| e.value["$v"] == 3)
            .count(),
        3
    );
    assert_eq!(
        file.unknown_kinds(),
        [("checklist.add@v3".to_string(), 3)].into()
    );
    // None of them is read as version 2; the tick of an item this program cannot see has
    // nothing to tick.
    assert!(items(&file.block(&list).unwrap()).is_empty());
    let verified = file.verify().await.unwrap();
    assert!(verified.ok, "{:?}", verified.problems);
    assert_eq!(
        verified.unknown_kinds,
        [("checklist.add@v3".to_string(), 3)].into()
    );
    file.close().await;
    let (report, _) = elfiee::engine::replay_with(&elf, registry().folds(), |_, _| {}).unwrap();
    assert_eq!(
        report.unknown_kinds,
        [("checklist.add@v3".to_string(), 3)].into()
    );
    // The command line names it too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_elfiee-checklist"))
        .arg("--elf")
        .arg(&elf)
        .args(["block", "show", "groceries"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown kinds: checklist.add@v3 (3 events)"),
        "{err}"
    );
}

#[test]
fn the_checklists_upcaster_passes_the_kits_check() {
    assert_eq!(check_upcasters(&registry(), 2048), Ok(2048));
}

/// Checklists made, adds by the program before due dates (version 1) and by this one (version
/// 2), ticks, and close-and-reopen steps, on checklist blocks by placeholder.
fn mixed_steps() -> BoxedStrategy<Op> {
    let list = (0usize..3).prop_map(|n| format!("$block:checklist:{n}"));
    let due = proptest::option::of(
        (2020u32..2030, 1u32..13, 1u32..29).prop_map(|(y, m, d)| format!("{y}-{m:02}-{d:02}")),
    );
    prop_oneof![
        1 => "[a-z]{1,6}".prop_map(|name| {
            OpCmd::new("core.create", json!({"name": name, "block_type": "checklist"})).into()
        }),
        3 => (list.clone(), "[a-z]{1,8}").prop_map(|(b, t)| {
            Op::Older(OpCmd::new("checklist.add", json!({"text": t})).on(b))
        }),
        3 => (list.clone(), "[a-z]{1,8}", due).prop_map(|(b, t, due)| {
            OpCmd::new("checklist.add", json!({"text": t, "due": due})).on(b).into()
        }),
        3 => (list, 0u32..8, any::<bool>()).prop_map(|(b, i, d)| {
            OpCmd::new("checklist.tick", json!({"index": i, "done": d})).on(b).into()
        }),
        1 => Just(Op::Reopen),
    ]
    .boxed()
}

/// Logs that mix both versions hold every invariant of the kit: the live state equals the
/// replay of the log and each snapshot plus the events after it (old ones among them), in the
/// pure pipeline and in the engine, which the older program opens and writes to in turn.
#[test]
fn mixed_old_and_new_adds_hold_live_replay_and_snapshot_plus_tail() {
    let report = Check::new(registry())
        .older(v1::registry())
        .block_types(&["checklist"], &["checklist.add", "checklist.tick"])
        .builtin_weight(2)
        .ops(12, mixed_steps())
        .cases(32)
        .steps(1..40)
        .assert();
    assert!(
        report.older > 20 && report.reopens > 0 && report.upcast_values > 0,
        "{report:?}"
    );
}

/// The values of the `checklist.add` events in `file`'s log, as stored.
fn adds(file: &FileHandle) -> Vec<Value> {
    file.events(1)
        .unwrap()
        .into_iter()
        .filter(|e| e.cap_id() == "checklist.add")
        .map(|e| e.value)
        .collect()
}
