//! The checklist through the engine, its command line, replay and the test kit.

use std::path::Path;
use std::process::Output;

use elfiee::testkit::{Check, Kit, Op, OpCmd};
use elfiee::{Command, Engine, EngineConfig, FileHandle};
use elfiee_checklist::{items, registry, Item};
use proptest::prelude::*;
use serde_json::{json, Value};

fn engine() -> Engine {
    Engine::new(EngineConfig {
        registry: registry(),
        // Snapshots often, so reopening loads one plus a tail.
        snapshot_every: 10,
        snapshot_at_close_after: 1,
        ..EngineConfig::default()
    })
}

async fn submit(
    file: &FileHandle,
    cap: &str,
    block: Option<&str>,
    payload: Value,
) -> Vec<elfiee::Event> {
    file.submit(Command::new("alice", cap, block, payload))
        .await
        .unwrap_or_else(|e| panic!("{cap}: {e}"))
}

/// A new document owned by alice, with one checklist block named `name`.
async fn new_list(engine: &Engine, elf: &Path, name: &str) -> (FileHandle, String) {
    let file = engine.init(elf, "Alice").await.unwrap();
    let list = submit(
        &file,
        "core.create",
        None,
        json!({"name": name, "block_type": "checklist"}),
    )
    .await[0]
        .entity
        .clone();
    (file, list)
}

fn cli(elf: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_elfiee-checklist"))
        .arg("--elf")
        .arg(elf)
        .args(args)
        .output()
        .expect("run elfiee-checklist")
}

fn cli_json(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = cli(elf, &all);
    assert!(
        out.status.success(),
        "elfiee-checklist {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checklist_is_the_same_live_after_reopen_and_after_replay() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("groceries.elf");
    let engine = engine();
    let (file, list) = new_list(&engine, &elf, "groceries").await;
    for i in 0..25 {
        submit(
            &file,
            "checklist.add",
            Some(&list),
            json!({"text": format!("item {i}")}),
        )
        .await;
    }
    for i in (0..25).step_by(3) {
        submit(&file, "checklist.tick", Some(&list), json!({"index": i})).await;
    }
    submit(
        &file,
        "checklist.tick",
        Some(&list),
        json!({"index": 3, "done": false}),
    )
    .await;
    // Ticking a ticked item commits nothing.
    assert!(
        submit(&file, "checklist.tick", Some(&list), json!({"index": 6}))
            .await
            .is_empty()
    );
    let live_items = items(&file.block(&list).unwrap());
    assert_eq!(live_items.len(), 25);
    assert_eq!(live_items.iter().filter(|i| i.done).count(), 8);
    assert_eq!(
        live_items[0],
        Item {
            text: "item 0".into(),
            done: true,
            due: None
        }
    );
    let live = file.state_digest();
    file.close().await;
    drop(file);

    // Reopened: the newest snapshot plus the events after it.
    let file = engine.open(&elf).await.unwrap();
    assert_eq!(file.state_digest(), live);
    assert_eq!(items(&file.block(&list).unwrap()), live_items);
    assert!(file.unknown_kinds().is_empty());
    file.close().await;
    drop(file);

    // Replayed from the log alone, in this process and by the checklist's command line.
    let (report, state) = elfiee::engine::replay_with(&elf, registry().folds(), |_, _| {}).unwrap();
    assert_eq!(report.state_digest, live);
    assert_eq!(items(state.block(&list).unwrap()), live_items);
    assert_eq!(cli_json(&elf, &["replay"])["state_digest"], json!(live));
    let verified = cli_json(&elf, &["verify"]);
    assert_eq!(verified["ok"], true, "{verified}");
    assert!(verified.get("unknown_kinds").is_none(), "{verified}");
    assert!(
        verified["snapshot"].as_str().unwrap().starts_with("valid"),
        "the snapshot (made with the checklist's folds) is checked: {verified}"
    );
}

#[test]
fn the_command_line_drives_a_checklist() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("todo.elf");
    let made = cli(
        dir.path(),
        &["init", elf.to_str().unwrap(), "--owner", "Alice"],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let created = cli_json(
        &elf,
        &["block", "create", "--type", "checklist", "--name", "todo"],
    );
    let id = created["block_id"]
        .as_str()
        .or(created["entity"].as_str())
        .map(str::to_owned);
    let id = id.unwrap_or_else(|| panic!("no block id in {created}"));
    let added = cli_json(
        &elf,
        &[
            "exec",
            "checklist.add",
            "--block",
            "todo",
            "--payload",
            r#"{"text": "write the docs"}"#,
        ],
    );
    // The event says which shape of the payload it carries (`$v`: version 2, with `due`).
    assert_eq!(
        added["events"][0]["value"],
        json!({"text": "write the docs", "due": null, "$v": 2})
    );
    cli_json(
        &elf,
        &[
            "exec",
            "checklist.add",
            "--block",
            &id,
            "--payload",
            r#"{"text": "ship", "due": "2026-12-01"}"#,
        ],
    );
    cli_json(
        &elf,
        &[
            "exec",
            "checklist.tick",
            "--block",
            "todo",
            "--payload",
            r#"{"index": 1}"#,
        ],
    );
    let shown = cli_json(&elf, &["block", "show", "todo"]);
    let block = shown.get("block").unwrap_or(&shown);
    assert_eq!(
        block["contents"]["items"],
        json!([
            {"text": "write the docs", "done": false, "due": null},
            {"text": "ship", "done": true, "due": "2026-12-01"}
        ]),
        "{shown}"
    );
    // A bad tick is refused with the handler's message, and nothing is written.
    let before = cli_json(&elf, &["state-digest"]);
    let out = cli(
        &elf,
        &[
            "exec",
            "checklist.tick",
            "--block",
            "todo",
            "--payload",
            r#"{"index": 7}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("item 7 does not exist; the list 'todo' has 2 items"),
        "{err}"
    );
    assert_eq!(cli_json(&elf, &["state-digest"]), before);
    let out = cli(
        &elf,
        &[
            "exec",
            "checklist.add",
            "--block",
            "todo",
            "--payload",
            r#"{"text": "x", "due": "1 December"}"#,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(
                "due '1 December' is not a date: it is not YYYY-MM-DD; write it as YYYY-MM-DD"
            ),
        "{err}"
    );
    assert_eq!(cli_json(&elf, &["state-digest"]), before);
    // The program lists its capabilities with the built-ins.
    let caps = String::from_utf8_lossy(&cli(&elf, &["caps"]).stdout).to_string();
    for cap in [
        "checklist.add",
        "checklist.tick",
        "checklist.notes",
        "core.create",
        // Sync's own capability comes with the command line that carries sync.
        "node.add",
    ] {
        assert!(caps.contains(cap), "{caps}");
    }
    // So the program's owner can let another device write (this failed with "unknown
    // capability 'node.add'" when only the built-in program registered it).
    let key = elf.with_extension("node.key");
    let node = cli_json(&elf, &["sync", "node-id", "--key", key.to_str().unwrap()]);
    let node_id = node["node_id"].as_str().unwrap_or_else(|| panic!("{node}"));
    let added = cli_json(&elf, &["sync", "add-node", node_id, "--name", "laptop"]);
    assert!(added.to_string().contains(node_id), "{added}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_notes_go_to_the_content_store() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("notes.elf");
    let engine = engine();
    let (file, list) = new_list(&engine, &elf, "trip").await;
    let notes = "Pack light. ".repeat(100);
    let ev = submit(
        &file,
        "checklist.notes",
        Some(&list),
        json!({"notes": notes}),
    )
    .await;
    // The event carries a reference, the state keeps it out of the block's contents, and a
    // read resolves it.
    assert!(
        ev[0].value["contents"]["notes"].get("$content").is_some(),
        "{}",
        ev[0].value
    );
    let meta = file.block_meta(&list).unwrap();
    assert!(meta.content_refs.get("notes").is_some());
    assert!(meta.contents.get("notes").is_none());
    let read = file.read_block("alice", &list).unwrap();
    assert_eq!(read.contents["notes"], json!(notes));
    // Short notes stay inline.
    submit(
        &file,
        "checklist.notes",
        Some(&list),
        json!({"notes": "short"}),
    )
    .await;
    assert_eq!(file.block(&list).unwrap().contents["notes"], "short");
    file.close().await;
}

/// A command by alice (or bob).
fn alice(cap: &str, block: Option<&str>, payload: Value) -> Command {
    Command::new("alice", cap, block, payload)
}

fn bob(cap: &str, block: Option<&str>, payload: Value) -> Command {
    Command::new("bob", cap, block, payload)
}

#[test]
fn given_when_then() {
    let mut kit = Kit::new(registry());
    kit.given_owner("Alice");
    kit.given(alice(
        "editor.create",
        None,
        json!({"name": "Bob", "editor_id": "bob"}),
    ));
    let list = kit.given(alice(
        "core.create",
        None,
        json!({"name": "l", "block_type": "checklist"}),
    ))[0]
        .entity
        .clone();
    let note = kit.given(alice(
        "core.create",
        None,
        json!({"name": "n", "block_type": "markdown"}),
    ))[0]
        .entity
        .clone();
    kit.when(alice(
        "checklist.add",
        Some(&list),
        json!({"text": "  milk "}),
    ))
    .kinds(&["checklist.add"])
    .values(&[json!({"text": "milk", "due": null, "$v": 2})])
    .state(|s| {
        items(s.block(&list).unwrap())
            == [Item {
                text: "milk".into(),
                done: false,
                due: None,
            }]
    });
    kit.when(alice(
        "checklist.add",
        Some(&list),
        json!({"text": "eggs", "due": "2028-02-29"}),
    ))
    .values(&[json!({"text": "eggs", "due": "2028-02-29", "$v": 2})])
    .state(|s| items(s.block(&list).unwrap())[1].due.as_deref() == Some("2028-02-29"));
    for (due, why) in [
        ("2026-02-29", "2026-02 has no day 29"),
        ("2026-13-01", "there is no month 13"),
        ("2026-12-00", "2026-12 has no day 0"),
        ("26-12-01", "it is not YYYY-MM-DD"),
        ("2026/12/01", "it is not YYYY-MM-DD"),
        ("２０２６-12-01", "it is not YYYY-MM-DD"),
        ("", "it is not YYYY-MM-DD"),
    ] {
        kit.when(alice(
            "checklist.add",
            Some(&list),
            json!({"text": "x", "due": due}),
        ))
        .rejected(
            "invalid_payload",
            &format!("due '{due}' is not a date: {why}"),
        );
    }
    kit.when(alice("checklist.add", Some(&list), json!({"text": " "})))
        .rejected("invalid_payload", "empty");
    kit.when(alice("checklist.add", Some(&list), json!({"txt": "x"})))
        .rejected("invalid_payload", "unknown field");
    kit.when(alice("checklist.add", Some(&note), json!({"text": "x"})))
        .rejected("rejected", "works on checklist blocks");
    kit.when(alice("checklist.tick", Some(&list), json!({"index": 4})))
        .rejected("rejected", "item 4 does not exist");
    // CBAC covers the new capabilities like the built-ins.
    kit.when(bob("checklist.tick", Some(&list), json!({"index": 0})))
        .rejected("unauthorized", "checklist.tick");
    kit.given(alice(
        "core.grant",
        Some(&list),
        json!({"editor_id": "bob", "cap_id": "checklist.tick"}),
    ));
    kit.when(bob("checklist.tick", Some(&list), json!({"index": 0})))
        .kinds(&["checklist.tick"])
        .state(|s| items(s.block(&list).unwrap())[0].done);
    // Relations and deletion work on checklist blocks as on any block.
    kit.when(alice(
        "core.link",
        Some(&list),
        json!({"to": note, "relation": "reference"}),
    ))
    .kinds(&["core.link"]);
    kit.when(alice("core.delete", Some(&list), json!({})))
        .state(|s| s.block(&list).is_none() && s.parents_of(&note).count() == 0);
}

/// A due date, sometimes not one.
fn due() -> BoxedStrategy<String> {
    prop_oneof![
        6 => (2020u32..2030, 1u32..13, 1u32..29).prop_map(|(y, m, d)| format!("{y}-{m:02}-{d:02}")),
        1 => "[0-9-]{0,11}",
    ]
    .boxed()
}

/// The checklist's own steps for the property run, on checklist blocks by placeholder.
fn checklist_steps() -> BoxedStrategy<Op> {
    let list = (0usize..4).prop_map(|n| format!("$block:checklist:{n}"));
    prop_oneof![
        3 => (list.clone(), "[a-z ]{0,12}", proptest::option::of(due())).prop_map(|(b, t, due)| {
            OpCmd::new("checklist.add", json!({"text": t, "due": due})).on(b).into()
        }),
        3 => (list.clone(), 0u32..12, any::<bool>()).prop_map(|(b, i, d)| {
            OpCmd::new("checklist.tick", json!({"index": i, "done": d})).on(b).into()
        }),
        1 => (list.clone(), prop_oneof!["[a-z]{0,8}", "[a-z ]{256,300}"]).prop_map(|(b, n)| {
            OpCmd::new("checklist.notes", json!({"notes": n})).on(b).into()
        }),
        1 => (list, 0usize..4).prop_map(|(b, e)| {
            OpCmd::new("checklist.tick", json!({"index": 0})).on(b).by(format!("$editor:{e}")).into()
        }),
    ]
    .boxed()
}

/// The one line an embedder puts in their suite: every invariant of the kit, on generated
/// sequences of built-in and checklist commands, through the pure pipeline and the real
/// engine side by side, with close-and-reopen steps.
#[test]
fn the_checklist_passes_the_kits_property_run() {
    let report = Check::new(registry())
        .block_types(
            &["checklist"],
            &["checklist.add", "checklist.tick", "checklist.notes"],
        )
        .ops(8, checklist_steps())
        .cases(48)
        .steps(1..80)
        .assert();
    assert!(
        report.accepted > 0 && report.rejected > 0 && report.reopens > 0,
        "{report:?}"
    );
}

/// TypeScript types for the payloads, derived with ts-rs like the engine's own
/// (`bindings/checklist.ts`; regenerate with `ELFIEE_BLESS=1 cargo test -p elfiee-checklist`).
#[test]
fn typescript_types_of_the_payloads_are_current() {
    use ts_rs::{Config, TS};
    let cfg = Config::default().with_large_int("number");
    let mut out =
        String::from("// Generated by examples/checklist/tests/checklist.rs — do not edit.\n\n");
    for decl in [
        elfiee_checklist::AddPayload::decl(&cfg),
        elfiee_checklist::TickPayload::decl(&cfg),
        elfiee_checklist::NotesPayload::decl(&cfg),
        elfiee_checklist::ExportPayload::decl(&cfg),
        Item::decl(&cfg),
    ] {
        out.push_str(&format!("export {decl}\n\n"));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("bindings/checklist.ts");
    if std::env::var_os("ELFIEE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &out).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        committed, out,
        "stale: run ELFIEE_BLESS=1 cargo test -p elfiee-checklist"
    );
    assert!(
        out.contains("index: number")
            && out.contains("done?: boolean")
            && out.contains("due?: string | null"),
        "{out}"
    );
}

/// What the built-in block types get, a checklist gets: the MCP server's generic command tool
/// runs its capabilities, and time travel shows it as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_exec_and_time_travel_serve_checklists() {
    use elfiee::adapters::mcp::tools;
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("mcp.elf");
    let engine = engine();
    let (file, list) = new_list(&engine, &elf, "list").await;
    let added = tools::call(
        &file,
        "alice",
        "elfiee_exec",
        json!({"capability": "checklist.add", "block_id": "list", "payload": {"text": "from an agent"}}),
    )
    .await
    .unwrap();
    let after_add = added["seq"].as_u64().unwrap();
    tools::call(
        &file,
        "alice",
        "elfiee_exec",
        json!({"capability": "checklist.tick", "block_id": list, "payload": {"index": 0}}),
    )
    .await
    .unwrap();
    let refused = tools::call(
        &file,
        "alice",
        "elfiee_exec",
        json!({"capability": "checklist.tick", "block_id": list, "payload": {"index": 9}}),
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("item 9 does not exist"),
        "{refused}"
    );
    assert!(items(&file.block(&list).unwrap())[0].done);
    let then = file.state_at(after_add).await.unwrap();
    assert_eq!(
        items(then.block(&list).unwrap()),
        [Item {
            text: "from an agent".into(),
            done: false,
            due: None
        }]
    );
    file.close().await;
}

/// A custom effect registers as the built-in ones do: the export request is committed, the
/// effect writes the file and records its outcome; a replay of the log writes nothing; the
/// checklist's command line runs the effect too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_effect_writes_the_list_once() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("export.elf");
    let out = dir.path().join("list.md");
    let engine = engine();
    let (file, list) = new_list(&engine, &elf, "errands").await;
    let effects = elfiee::adapters::attach(
        &file,
        elfiee::adapters::EffectsConfig {
            extra: elfiee_checklist::effects(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    submit(
        &file,
        "checklist.add",
        Some(&list),
        json!({"text": "post office"}),
    )
    .await;
    submit(
        &file,
        "checklist.add",
        Some(&list),
        json!({"text": "bank", "due": "2026-12-01"}),
    )
    .await;
    submit(&file, "checklist.tick", Some(&list), json!({"index": 1})).await;
    let bad = file
        .submit(Command::new(
            "alice",
            "checklist.export",
            Some(&list),
            json!({"path": "list.md"}),
        ))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("not an absolute path"), "{bad}");
    submit(
        &file,
        "checklist.export",
        Some(&list),
        json!({"path": out.to_str().unwrap()}),
    )
    .await;
    effects
        .settle(&file, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let expected = "# errands\n\n- [ ] post office\n- [x] bank (due 2026-12-01)\n";
    assert_eq!(std::fs::read_to_string(&out).unwrap(), expected);
    let last = file.block(&list).unwrap().metadata.custom["last_export"].clone();
    assert_eq!(last["bytes"], json!(expected.len()), "{last}");
    assert_eq!(last["path"], json!(out.to_str().unwrap()));
    file.close().await;
    effects.join().await;
    drop(file);

    // Replaying the log rebuilds the outcome without running the effect again.
    std::fs::remove_file(&out).unwrap();
    let (_, state) = elfiee::engine::replay_with(&elf, registry().folds(), |_, _| {}).unwrap();
    assert_eq!(
        state.block(&list).unwrap().metadata.custom["last_export"],
        last
    );
    assert!(!out.exists());

    // The checklist's command line attaches the effect: the request is carried out before
    // the command returns.
    let again = dir.path().join("again.md");
    cli_json(
        &elf,
        &[
            "exec",
            "checklist.export",
            "--block",
            "errands",
            "--payload",
            &json!({"path": again.to_str().unwrap()}).to_string(),
        ],
    );
    assert!(std::fs::read_to_string(&again)
        .unwrap()
        .contains("- [x] bank (due 2026-12-01)"));
}
