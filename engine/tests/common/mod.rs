//! Setup shared by the engine's tests: an engine, a fresh document, Alice's commands and a
//! child run of the test binary itself.

#![allow(dead_code)]

use std::path::Path;

use elfiee_engine::{Engine, EngineConfig, FileHandle, VerifyReport};
use elfiee_model::{Command, Event};
use serde_json::{json, Value};
use tempfile::TempDir;

/// An engine with node id `test-node` and otherwise default settings.
pub fn engine() -> Engine {
    Engine::new(EngineConfig {
        node_id: "test-node".into(),
        ..EngineConfig::default()
    })
}

/// A new document `x.elf` in `dir` on `engine`, owned by Alice (editor `alice`).
pub async fn init(engine: &Engine, dir: &TempDir) -> FileHandle {
    engine
        .init(dir.path().join("x.elf"), "Alice")
        .await
        .unwrap()
}

/// `owner` creates a markdown block `name`.
pub fn create(owner: &str, name: &str) -> Command {
    Command::new(
        owner,
        "core.create",
        None,
        json!({"name": name, "block_type": "markdown"}),
    )
}

/// Alice runs `cap` on `block`; the events it committed.
pub async fn alice(f: &FileHandle, cap: &str, block: Option<&str>, payload: Value) -> Vec<Event> {
    f.submit(Command::new("alice", cap, block, payload))
        .await
        .unwrap()
}

/// Alice adds the editor Bob (`bob`), who holds no grant.
pub async fn add_bob(f: &FileHandle) {
    let bob = json!({"name": "Bob", "editor_id": "bob"});
    alice(f, "editor.create", None, bob).await;
}

/// Runs the ignored test `name` of this test binary alone in a child process, with `env` set;
/// whether it succeeded, and its stdout and stderr together.
pub fn run_child(name: &str, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// Runs `verify` on the document at `path` and checks it found nothing wrong; the report.
pub fn verify_ok(path: &Path) -> VerifyReport {
    let report = elfiee_engine::verify(path, |_, _| {}).unwrap();
    assert!(report.ok, "{:?}", report.problems);
    report
}

/// Runs `verify` on the document at `path` and checks one of its problems mentions `needle`;
/// the report.
pub fn verify_names(path: &Path, needle: &str) -> VerifyReport {
    let report = elfiee_engine::verify(path, |_, _| {}).unwrap();
    assert!(
        report.problems.iter().any(|p| p.contains(needle)),
        "verify names {needle:?}: {:?}",
        report.problems
    );
    report
}

/// Flips one bit (0x20) of the file at `path`, in the byte at `at(file length)`.
pub fn flip_byte(path: &Path, at: impl FnOnce(usize) -> usize) {
    let mut bytes = std::fs::read(path).unwrap();
    let i = at(bytes.len());
    bytes[i] ^= 0x20;
    std::fs::write(path, &bytes).unwrap();
}

/// Opens the document at `path` on `engine`, checks its state digest is `digest` (`why`
/// otherwise), and closes it.
pub async fn assert_reopens_to(engine: &Engine, path: &Path, digest: &str, why: &str) {
    let f = engine.open(path).await.unwrap();
    assert_eq!(f.state_digest(), digest, "{why}");
    f.close().await;
}

/// Copies a closed `.elf` (or any folder) recursively.
pub fn copy_dir(from: &Path, to: &Path) {
    elfiee_engine::layout::copy_tree(from, to, |_, e| Err(e)).unwrap();
}

/// `verify` must flag the damage at `seq`: either a report with `ok == false` naming the event,
/// or (when even the tail cannot be read) a `Corrupt` error naming it.
pub fn assert_verify_flags(path: &Path, seq: u64) {
    match elfiee_engine::verify(path, |_, _| {}) {
        Ok(report) => {
            assert!(!report.ok, "verify must flag the damage at {seq}");
            assert!(
                report
                    .problems
                    .iter()
                    .any(|p| p.contains(&format!("event {seq} "))),
                "{:?}",
                report.problems
            );
        }
        Err(err) => assert_corrupt_at(&err, seq),
    }
}

pub fn assert_corrupt_at(err: &elfiee_engine::EngineError, seq: u64) {
    match err {
        elfiee_engine::EngineError::Corrupt { seq: s, reason } => {
            assert_eq!(*s, seq, "the error names the damaged event: {err}");
            assert!(!reason.trim().is_empty());
        }
        other => panic!("expected Corrupt at {seq}, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&format!("event {seq}")), "{msg}");
    assert!(
        msg.contains("elfiee verify"),
        "the message suggests `elfiee verify`: {msg}"
    );
}

/// One `directory.import` command with `n` files (more than `n` events).
pub fn import(n: usize, tag: &str) -> Command {
    let files: Vec<_> = (0..n)
        .map(|i| json!({"path": format!("{tag}/f{i}.md"), "content": format!("# {tag} {i}\n")}))
        .collect();
    Command::new(
        "alice",
        "directory.import",
        None,
        json!({"root": format!("/proj-{tag}"), "files": files}),
    )
}

/// Every event of `f`, checked to come in seq order without gaps up to its last seq.
pub fn events_without_gaps(f: &FileHandle) -> Vec<Event> {
    let events = f.events(1).unwrap();
    assert_eq!(events.len() as u64, f.last_seq());
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "events come in seq order without gaps");
    }
    events
}
