//! `elfiee exec` end to end (the real binary): any capability by id, its payload inline, from a
//! file or from stdin, human and `--json` output, and its refusals with their exit codes. Then
//! a document holding event kinds this binary has no fold for (written in-process by an
//! engine with an embedder's capability): every command warns once on stderr, `verify` and
//! `replay` name the kinds and `verify` still passes; and the CLI run in-process over the
//! embedder's registry (what `elfiee::cli::main_with` sets up) serves that capability.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use common::{run_elfiee, success_json};
use elfiee::capabilities::{Capability, Registry, Target};
use elfiee::model::{Ctx, EventDraft};
use elfiee::projections::Folded;
use elfiee::{CapError, Engine, EngineConfig, Event, State};
use serde_json::{json, Value};

fn elfiee(elf: &Path, args: &[&str]) -> Output {
    run_elfiee(elf, args, &[])
}

fn json_ok(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    success_json(&all, &elfiee(elf, &all))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `elfiee ARGS` with `input` on stdin.
fn with_stdin(elf: &Path, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(args)
        .env("ELFIEE_ELF", elf)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run elfiee");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A document owned by Alice.
fn doc() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("doc.elf");
    json_ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    (dir, elf)
}

#[test]
fn exec_runs_capabilities_by_id_with_human_and_json_output() {
    let (_d, elf) = doc();
    // Human output: one `seq kind entity` line per committed event.
    let out = elfiee(
        &elf,
        &[
            "exec",
            "core.create",
            "--payload",
            r#"{"name": "Spec", "block_type": "markdown"}"#,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line: Vec<&str> = text.trim().split(' ').collect();
    assert_eq!(line.len(), 3, "{text}");
    assert_eq!(line[1], "core.create", "{text}");
    let spec = line[2].to_owned();
    assert!(line[0].parse::<u64>().unwrap() > 0, "{text}");
    assert_eq!(
        json_ok(&elf, &["block", "show", &spec])["name"],
        "Spec",
        "the block exists"
    );

    // --json: {"events": [Event]}, as `log` prints events; the block by its name.
    let v = json_ok(
        &elf,
        &[
            "exec",
            "markdown.write",
            "--block",
            "Spec",
            "--payload",
            r##"{"markdown": "# Spec\n"}"##,
        ],
    );
    let events = v["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{v}");
    let e: Event = serde_json::from_value(events[0].clone()).expect("an Event");
    assert_eq!(
        (e.cap_id(), e.editor_id(), e.entity.as_str()),
        ("markdown.write", "alice", spec.as_str())
    );
    let log = json_ok(&elf, &["log"]);
    assert_eq!(log.as_array().unwrap().last().unwrap(), &events[0]);
    assert_eq!(
        json_ok(&elf, &["markdown", "read", "Spec"])["markdown"],
        "# Spec\n"
    );

    // No --payload: {}. A file-wide command with '*' as its block.
    let v = json_ok(
        &elf,
        &[
            "exec",
            "editor.create",
            "--payload",
            r#"{"name": "Bob", "editor_id": "bob"}"#,
        ],
    );
    assert_eq!(v["events"][0]["entity"], "bob", "{v}");
    let v = json_ok(
        &elf,
        &[
            "exec",
            "core.grant",
            "--block",
            "*",
            "--payload",
            r#"{"editor_id": "bob", "cap_id": "markdown.read"}"#,
        ],
    );
    assert_eq!(v["events"][0]["value"]["block_id"], "*", "{v}");
    assert_eq!(
        json_ok(&elf, &["--as", "bob", "markdown", "read", &spec])["markdown"],
        "# Spec\n"
    );
    // A command on a block, as another editor (--as), with the default payload.
    let out = elfiee(
        &elf,
        &["--as", "bob", "exec", "core.delete", "--block", &spec],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("may not run 'core.delete'"),
        "{}",
        stderr(&out)
    );
    let v = json_ok(&elf, &["exec", "core.delete", "--block", &spec]);
    assert_eq!(v["events"][0]["entity"], spec.as_str(), "{v}");
}

#[test]
fn exec_reads_the_payload_from_stdin_and_from_a_file() {
    let (d, elf) = doc();
    let out = with_stdin(
        &elf,
        &["--json", "exec", "core.create", "--payload", "-"],
        r#"{"name": "Notes", "block_type": "markdown"}"#,
    );
    let v = success_json(&["exec", "--payload", "-"], &out);
    let notes = v["events"][0]["entity"].as_str().unwrap().to_owned();
    let file = d.path().join("payload.json");
    std::fs::write(&file, "{\n  \"markdown\": \"from a file\"\n}\n").unwrap();
    let at = format!("@{}", file.display());
    let v = json_ok(
        &elf,
        &[
            "exec",
            "markdown.write",
            "--block",
            &notes,
            "--payload",
            &at,
        ],
    );
    assert_eq!(v["events"][0]["attribute"], "alice/markdown.write", "{v}");
    assert_eq!(
        json_ok(&elf, &["markdown", "read", &notes])["markdown"],
        "from a file"
    );
    // A payload file that is not there: a usage error naming it.
    let missing = format!("@{}", d.path().join("nope.json").display());
    let out = elfiee(&elf, &["exec", "core.create", "--payload", &missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nope.json"), "{}", stderr(&out));
}

#[test]
fn exec_refusals_say_why_with_the_exit_codes_of_the_other_commands() {
    let (d, elf) = doc();
    let seq = |elf: &Path| json_ok(elf, &["state-digest"])["seq"].as_u64().unwrap();
    let before = seq(&elf);

    // A missing block: exit 1, the block named.
    let out = elfiee(
        &elf,
        &[
            "exec",
            "markdown.write",
            "--block",
            "missing",
            "--payload",
            r#"{"markdown": "x"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: ") && err.contains("block 'missing' not found"),
        "{err}"
    );

    // Rejected by the handler: exit 1 with the engine's message; --json also on stdout.
    let block = json_ok(
        &elf,
        &[
            "exec",
            "core.create",
            "--payload",
            r#"{"name": "B", "block_type": "markdown"}"#,
        ],
    )["events"][0]["entity"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = before + 1;
    assert_eq!(seq(&elf), before);
    let out = elfiee(
        &elf,
        &[
            "--json",
            "exec",
            "markdown.write",
            "--block",
            &block,
            "--payload",
            r#"{"text": 1}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("invalid payload for 'markdown.write'"),
        "{}",
        stderr(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "invalid_payload", "{v}");

    // Unknown capability: exit 1, says how to list them.
    let out = elfiee(&elf, &["--json", "exec", "checklist.add"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("unknown capability 'checklist.add'") && err.contains("elfiee caps"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "unknown_capability", "{v}");

    // Not JSON: a usage error (exit 2) saying which payload and where it broke.
    let out = elfiee(&elf, &["exec", "core.create", "--payload", "{\"name\": "]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--payload is not valid JSON") && err.contains("line 1 column"),
        "{err}"
    );
    let out = with_stdin(
        &elf,
        &["exec", "core.create", "--payload", "-"],
        "{\n  nope\n}",
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("stdin is not valid JSON") && err.contains("line 2 column"),
        "{err}"
    );
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, "[1, 2").unwrap();
    let out = elfiee(
        &elf,
        &[
            "exec",
            "core.create",
            "--payload",
            &format!("@{}", bad.display()),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("bad.json is not valid JSON"),
        "{}",
        stderr(&out)
    );
    // No capability at all: clap's usage error.
    assert_eq!(elfiee(&elf, &["exec"]).status.code(), Some(2));

    assert_eq!(seq(&elf), before, "no refused command wrote anything");
}

/// An embedder's capability: `checklist.add {item}` on the whole file, folded into
/// `state.extensions["checklist"]`.
struct ChecklistAdd;

impl Capability for ChecklistAdd {
    fn id(&self) -> &'static str {
        "checklist.add"
    }
    fn target(&self) -> Target {
        Target::File
    }
    fn handle(
        &self,
        cmd: &elfiee::Command,
        _: &State,
        _: &Ctx,
    ) -> Result<Vec<EventDraft>, CapError> {
        let item = cmd
            .payload
            .get("item")
            .and_then(Value::as_str)
            .ok_or_else(|| CapError::payload("checklist.add", "expected {\"item\": string}"))?;
        Ok(vec![EventDraft::new(
            "checklist",
            "checklist.add",
            json!({"item": item}),
        )])
    }
    fn fold(&self) -> Option<Arc<dyn elfiee::projections::Fold>> {
        Some(Arc::new(|state: &mut State, e: &Event| {
            let list = state
                .extensions
                .entry("checklist".into())
                .or_insert_with(|| json!([]));
            if let (Some(items), Some(item)) = (list.as_array_mut(), e.value.get("item")) {
                items.push(item.clone());
            }
            Folded::Done
        }))
    }
}

fn checklist_registry() -> Registry {
    let mut r = Registry::builtin();
    r.register(Arc::new(ChecklistAdd));
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_this_binary_does_not_know_are_named_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("list.elf");
    let engine = Engine::new(EngineConfig {
        registry: checklist_registry(),
        // A snapshot at close: folded with the checklist's fold, which the plain binary lacks.
        snapshot_at_close_after: 1,
        ..EngineConfig::default()
    });
    let file = engine.init(&elf, "Alice").await.unwrap();
    for item in ["milk", "eggs", "bread"] {
        file.submit(elfiee::Command::new(
            "alice",
            "checklist.add",
            None,
            json!({"item": item}),
        ))
        .await
        .unwrap();
    }
    assert_eq!(
        file.with_state(|s| s.extensions["checklist"].clone()),
        json!(["milk", "eggs", "bread"])
    );
    let digest_with_fold = file.state_digest();
    file.close().await;
    drop(file);

    // The plain binary does not use that snapshot (other folds): it opens by replaying, and
    // its open, its replay and a second replay agree.
    let opened = json_ok(&elf, &["state-digest"])["state_digest"].clone();
    let replayed = json_ok(&elf, &["replay"])["state_digest"].clone();
    assert_eq!(opened, replayed);
    assert_eq!(json_ok(&elf, &["replay"])["state_digest"], replayed);
    assert_ne!(
        replayed,
        json!(digest_with_fold),
        "the kind's meaning is missing here"
    );
    let v = json_ok(&elf, &["verify"]);
    assert!(
        v["snapshot"]
            .as_str()
            .unwrap_or("")
            .contains("not compared: it was made by other folds"),
        "{v}"
    );

    let warning = "unknown kinds: checklist.add (3 events) — written by a program that \
                   registered them; their meaning is missing from this state";
    // Any command that opens the document: one warning line on stderr; stdout unchanged.
    for json in [false, true] {
        let mut args = vec!["block", "list"];
        if json {
            args.insert(0, "--json");
        }
        let out = elfiee(&elf, &args);
        assert!(out.status.success(), "{}", stderr(&out));
        let err = stderr(&out);
        // (The engine's own log line at `RUST_LOG=warn` is not the CLI's warning.)
        assert_eq!(
            err.lines()
                .filter(|l| l.starts_with("warning:") && l.contains("checklist.add"))
                .count(),
            1,
            "{err}"
        );
        assert!(err.contains(&format!("warning: {warning}")), "{err}");
        if json {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v, json!([]));
        } else {
            assert!(!stdout(&out).contains("checklist"), "{}", stdout(&out));
        }
    }
    // verify: named, still ok (exit 0); replay: named; both in --json.
    let out = elfiee(&elf, &["verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(warning) && text.trim_end().ends_with("ok"),
        "{text}"
    );
    let v = json_ok(&elf, &["verify"]);
    assert_eq!(v["ok"], true);
    assert_eq!(v["unknown_kinds"], json!({"checklist.add": 3}), "{v}");
    let out = elfiee(&elf, &["replay"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(warning), "{}", stdout(&out));
    let v = json_ok(&elf, &["replay"]);
    assert_eq!(v["unknown_kinds"], json!({"checklist.add": 3}), "{v}");
    // The binary does not know the capability either.
    let out = elfiee(
        &elf,
        &["exec", "checklist.add", "--payload", r#"{"item": "tea"}"#],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown capability 'checklist.add'"),
        "{}",
        stderr(&out)
    );

    // The CLI in this process over the embedder's registry (as `main_with` sets it up):
    // `exec` serves the custom capability, and verify / replay fold its kind.
    assert!(
        Engine::set_global(EngineConfig {
            registry: checklist_registry(),
            ..EngineConfig::default()
        }),
        "nothing in this test binary used Engine::global() before"
    );
    use clap::Parser;
    let run = |args: &[&str]| {
        let mut all = vec!["elfiee", "--elf", elf.to_str().unwrap()];
        all.extend_from_slice(args);
        elfiee::cli::run(elfiee::cli::Cli::try_parse_from(all).unwrap())
    };
    run(&["exec", "checklist.add", "--payload", r#"{"item": "tea"}"#])
        .await
        .unwrap();
    run(&["verify"]).await.unwrap();
    run(&["replay"]).await.unwrap();
    assert!(Engine::global()
        .config()
        .registry
        .get("checklist.add")
        .is_some());
    let file = engine.open(&elf).await.unwrap();
    assert!(file.unknown_kinds().is_empty());
    // With the fold, the replay gives the live state again.
    let (report, _) = file.replay().await.unwrap();
    assert_eq!(report.state_digest, file.state_digest());
    assert!(report.unknown_kinds.is_empty());
    assert_eq!(
        file.with_state(|s| s.extensions["checklist"].clone()),
        json!(["milk", "eggs", "bread", "tea"])
    );
    file.close().await;
    let v = json_ok(&elf, &["verify"]);
    assert_eq!(v["unknown_kinds"], json!({"checklist.add": 4}), "{v}");
}
