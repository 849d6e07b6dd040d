//! The command pipeline end to end on a real sled log: durability, idempotency, rejection,
//! snapshots, subscriptions, group commit, handler panics, bad input.

mod common;
use common::{create, engine};

use std::sync::Arc;

use elfiee_capabilities::{Capability, Registry, Target};
use elfiee_engine::{Engine, EngineConfig, EngineError};
use elfiee_model::{CapError, Command, Ctx, EventDraft};
use elfiee_projections::State;
use serde_json::json;

#[tokio::test]
async fn opening_the_same_path_twice_returns_the_same_actor() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine();
    let a = common::init(&e, &dir).await;
    let b = e.open(dir.path().join("x.elf")).await.unwrap();
    let c = e.open(dir.path().join("./x.elf")).await.unwrap();
    let ev = b.submit(create("alice", "n")).await.unwrap();
    assert_eq!(a.block(&ev[0].entity).unwrap().name, "n");
    assert_eq!(c.last_seq(), a.last_seq());
    assert_eq!(e.open_files().len(), 1);
    a.close().await;
    assert_eq!(e.open_files().len(), 0);
    assert!(matches!(
        b.submit(create("alice", "late")).await,
        Err(EngineError::Closed)
    ));
}

#[tokio::test]
async fn committed_events_survive_reopen_and_resubmission_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let e = engine();
    let f = e.init(&path, "Alice").await.unwrap();
    let cmd = create("alice", "n");
    let first = f.submit(cmd.clone()).await.unwrap();
    let seq = f.last_seq();
    let again = f.submit(cmd.clone()).await.unwrap();
    assert_eq!(
        first, again,
        "a repeated cmd_id returns the original events"
    );
    assert_eq!(f.last_seq(), seq, "and writes nothing");
    let digest = f.state_digest();
    f.close().await;

    let f = e.open(&path).await.unwrap();
    assert_eq!(f.state_digest(), digest);
    assert_eq!(
        f.submit(cmd).await.unwrap(),
        first,
        "idempotent across reopen too"
    );
    assert_eq!(f.last_seq(), seq);
    f.close().await;
}

#[tokio::test]
async fn a_rejected_command_writes_nothing_and_leaves_state_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let f = common::init(&engine(), &dir).await;
    let (seq, digest) = (f.last_seq(), f.state_digest());
    let bad = [
        Command::new("alice", "core.nope", None, json!({})),
        Command::new("alice", "core.create", None, json!({"name": 1})),
        Command::new(
            "alice",
            "markdown.write",
            Some("missing"),
            json!({"markdown": "x"}),
        ),
        Command::new(
            "mallory",
            "core.create",
            None,
            json!({"name": "x", "block_type": "code"}),
        ),
        Command::new("alice", "core.create", None, json!("not an object")),
    ];
    for cmd in bad {
        let err = f.submit(cmd.clone()).await.unwrap_err();
        assert!(err.is_rejection(), "{err}");
        assert!(!err.to_string().is_empty());
    }
    assert_eq!(f.last_seq(), seq);
    assert_eq!(f.state_digest(), digest);
    assert_eq!(f.events(1).unwrap().len() as u64, seq);
    f.close().await;
}

#[tokio::test]
async fn oversize_payloads_are_refused_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::new(EngineConfig {
        node_id: "n".into(),
        max_payload_bytes: 1000,
        ..EngineConfig::default()
    });
    let f = common::init(&e, &dir).await;
    let ev = f.submit(create("alice", "n")).await.unwrap();
    let seq = f.last_seq();
    let big = "x".repeat(2000);
    let err = f
        .submit(Command::new(
            "alice",
            "markdown.write",
            Some(&ev[0].entity),
            json!({"markdown": big}),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::PayloadTooLarge { limit: 1000, .. }),
        "{err}"
    );
    assert_eq!(f.last_seq(), seq);
    f.close().await;
}

#[tokio::test]
async fn expected_seq_detects_a_concurrent_change() {
    let dir = tempfile::tempdir().unwrap();
    let f = common::init(&engine(), &dir).await;
    let id = f.submit(create("alice", "n")).await.unwrap()[0]
        .entity
        .clone();
    let seen = f.last_seq();
    f.submit(
        Command::new(
            "alice",
            "markdown.write",
            Some(&id),
            json!({"markdown": "a"}),
        )
        .expecting(seen),
    )
    .await
    .unwrap();
    let err = f
        .submit(
            Command::new(
                "alice",
                "markdown.write",
                Some(&id),
                json!({"markdown": "b"}),
            )
            .expecting(seen),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Rejected(CapError::Conflict { .. })),
        "{err}"
    );
    assert_eq!(f.block(&id).unwrap().contents["markdown"], "a");
    f.close().await;
}

struct Panics;
impl Capability for Panics {
    fn id(&self) -> &'static str {
        "test.panic"
    }
    fn target(&self) -> Target {
        Target::File
    }
    fn handle(&self, _: &Command, _: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        panic!("boom")
    }
}

#[tokio::test]
async fn a_handler_panic_becomes_an_error_and_the_actor_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = Registry::builtin();
    registry.register(Arc::new(Panics));
    let e = Engine::new(EngineConfig {
        node_id: "n".into(),
        registry,
        ..EngineConfig::default()
    });
    let f = common::init(&e, &dir).await;
    let err = f
        .submit(Command::new("alice", "test.panic", None, json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Rejected(CapError::HandlerPanic { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("boom"));
    f.submit(create("alice", "still works")).await.unwrap();
    f.close().await;
}

#[tokio::test]
async fn submit_all_commits_everything_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let f = common::init(&engine(), &dir).await;
    let seq = f.last_seq();
    let ok = Command::new(
        "alice",
        "core.create",
        None,
        json!({"name": "a", "block_type": "markdown", "block_id": "a"}),
    );
    let write = Command::new(
        "alice",
        "markdown.write",
        Some("a"),
        json!({"markdown": "hi"}),
    );
    let bad = Command::new(
        "alice",
        "markdown.write",
        Some("nope"),
        json!({"markdown": "x"}),
    );
    let err = f
        .submit_all(vec![ok.clone(), write.clone(), bad])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("command 3 of 3"), "{err}");
    assert_eq!(f.last_seq(), seq);
    assert!(f.block("a").is_none());
    let ev = f.submit_all(vec![ok, write]).await.unwrap();
    assert_eq!(
        ev.len(),
        2,
        "the write sees the block created earlier in the batch"
    );
    assert!(ev.iter().all(|e| e.cmd_id == ev[0].cmd_id));
    assert_eq!(f.block("a").unwrap().contents["markdown"], "hi");
    f.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_submitters_all_commit_without_gaps() {
    // Four worker threads: submitters race for the sequencer, some commit inline, the others
    // share the flusher's group commits; batches and resubmissions are mixed in.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let f = engine().init(&path, "Alice").await.unwrap();
    let start = f.last_seq();
    let mut tasks = Vec::new();
    for t in 0..16 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in 0..20 {
                let cmd = create("alice", &format!("{t}-{i}"));
                let events = if i % 5 == 4 {
                    // A two-command batch: both commit in one group or neither does.
                    let second = create("alice", &format!("{t}-{i}-b"));
                    f.submit_all(vec![cmd.clone(), second]).await.unwrap()
                } else {
                    f.submit(cmd.clone()).await.unwrap()
                };
                if i % 7 == 3 {
                    let again = f.submit(cmd.clone()).await.unwrap();
                    assert_eq!(again, events, "a resubmission returns the original events");
                }
                sent.push((cmd.cmd_id, events));
            }
            sent
        }));
    }
    let mut sent = Vec::new();
    for t in tasks {
        sent.extend(t.await.unwrap());
    }
    // 16 tasks × (16 single creates + 4 batches of 2).
    assert_eq!(f.last_seq(), start + 16 * 24);
    let events = f.events(1).unwrap();
    assert!(events
        .iter()
        .enumerate()
        .all(|(i, e)| e.seq == i as u64 + 1));
    assert_eq!(f.with_state(|s| s.blocks.len()), 16 * 24);
    for (cmd_id, events) in &sent {
        assert_eq!(f.command_events(*cmd_id).unwrap().as_ref(), Some(events));
    }
    let digest = f.state_digest();
    f.close().await;
    let (replayed, _) = elfiee_engine::replay(&path, |_, _| {}).unwrap();
    assert_eq!(
        replayed.state_digest, digest,
        "live state == replay of the log"
    );
    common::verify_ok(&path);
}

/// A closed file (snapshots every 10 events) with 25 created blocks: the engine, each command
/// with the events it committed, and the live state digest before closing.
async fn file_with_25_blocks(
    path: &std::path::Path,
) -> (Engine, Vec<(Command, Vec<elfiee_model::Event>)>, String) {
    let e = Engine::new(EngineConfig {
        node_id: "n".into(),
        snapshot_every: 10,
        ..EngineConfig::default()
    });
    let f = e.init(path, "Alice").await.unwrap();
    let mut sent = Vec::new();
    for i in 0..25 {
        let cmd = create("alice", &format!("b{i}"));
        let events = f.submit(cmd.clone()).await.unwrap();
        sent.push((cmd, events));
    }
    let digest = f.state_digest();
    f.close().await;
    (e, sent, digest)
}

#[tokio::test]
async fn snapshots_are_written_and_used_and_a_bad_one_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let (e, _, digest) = file_with_25_blocks(&path).await;
    common::assert_reopens_to(&e, &path, &digest, "reopened from the newest snapshot").await;
    // At most three snapshots stay on disk (written every 10 events: 26 events → 2 here).
    let snaps =
        elfiee_engine::stored_snapshots(&elfiee_engine::layout::ElfPaths::existing(&path).unwrap());
    assert!(
        (1..=elfiee_engine::replay::KEEP_SNAPSHOTS).contains(&snaps.len()),
        "{snaps:?}"
    );
    // Damage the newest one: open falls back to an older one (or the log) with the same state.
    std::fs::write(&snaps[0].1, b"garbage").unwrap();
    common::assert_reopens_to(
        &e,
        &path,
        &digest,
        "an older snapshot or the log stands in for the damaged newest one",
    )
    .await;
    // Damage every snapshot: open must ignore them all and replay the full log.
    let paths = elfiee_engine::layout::ElfPaths::existing(&path).unwrap();
    for (_, file) in &elfiee_engine::stored_snapshots(&paths) {
        std::fs::write(file, b"garbage").unwrap();
    }
    let report = common::verify_names(&path, "snapshot");
    assert!(!report.ok, "verify flags the bad snapshot");
    common::assert_reopens_to(
        &e,
        &path,
        &digest,
        "the full log stands in for the damaged snapshots",
    )
    .await;
    // The full replay made a snapshot due: closing wrote a good one (and the index) again.
    common::verify_ok(&path);
}

/// Opening from a snapshot decodes only the blocks something reads (issue 11: a CLI call on a
/// large document costs what it touches); a flipped byte inside a block record is caught by
/// the snapshot's checksum and the file opens from an older snapshot or the log instead.
#[tokio::test]
async fn an_open_decodes_only_the_blocks_it_reads_and_a_flipped_snapshot_byte_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let (e, sent, digest) = file_with_25_blocks(&path).await;
    let f = e.open(&path).await.unwrap();
    let (in_snapshot, encoded) = f.with_state(|s| (s.blocks.len(), s.blocks.encoded()));
    assert!(in_snapshot >= 20, "{in_snapshot} blocks");
    // The blocks the tail touched were decoded to replay it; the rest stayed in the file.
    assert!(
        encoded >= 15,
        "{encoded} of {in_snapshot} blocks still encoded after open"
    );
    let target = sent[0].1[0].entity.clone();
    common::alice(
        &f,
        "markdown.write",
        Some(&target),
        serde_json::json!({"markdown": "# one block"}),
    )
    .await;
    let after = f.with_state(|s| s.blocks.encoded());
    assert!(
        after + 2 >= encoded,
        "a write decoded {} blocks",
        encoded - after
    );
    // Every block still reads the same as in the live state before closing.
    let written = f.state_digest();
    assert_ne!(written, digest);
    f.close().await;
    let paths = elfiee_engine::layout::ElfPaths::existing(&path).unwrap();
    let newest = elfiee_engine::stored_snapshots(&paths)[0].1.clone();
    common::flip_byte(&newest, |len| len / 2);
    common::assert_reopens_to(&e, &path, &written, "the damaged snapshot was not used").await;
}

#[tokio::test]
async fn a_short_lived_open_costs_what_it_changed_not_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let (e, _, _) = file_with_25_blocks(&path).await;
    let paths = elfiee_engine::layout::ElfPaths::existing(&path).unwrap();
    let before = elfiee_engine::stored_snapshots(&paths);
    // Three short sessions of one write each: below the 10-event tail, no snapshot at close.
    for i in 0..3 {
        let f = e.open(&path).await.unwrap();
        f.submit(create("alice", &format!("late{i}")))
            .await
            .unwrap();
        let digest = f.state_digest();
        f.close().await;
        assert_eq!(
            elfiee_engine::stored_snapshots(&paths),
            before,
            "session {i}"
        );
        common::assert_reopens_to(
            &e,
            &path,
            &digest,
            &format!("snapshot + tail after session {i}"),
        )
        .await;
    }
    common::verify_ok(&path);
}

#[tokio::test]
async fn a_slow_subscriber_catches_up_from_the_log_and_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::new(EngineConfig {
        node_id: "n".into(),
        channel_capacity: 4,
        ..EngineConfig::default()
    });
    let f = common::init(&e, &dir).await;
    let mut sub = f.subscribe();
    let from = sub.next_seq();
    for i in 0..100 {
        f.submit(create("alice", &format!("b{i}"))).await.unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 100 {
        got.push(sub.recv().await.unwrap().seq);
    }
    assert_eq!(got, (from..from + 100).collect::<Vec<_>>());
    assert!(sub.catch_ups > 0, "the channel of 4 must have lagged");
    let mut old = f.subscribe_from(1);
    assert_eq!(old.recv().await.unwrap().seq, 1);
    f.close().await;
    let mut rest = 1;
    while old.recv().await.is_some() {
        rest += 1;
    }
    assert_eq!(
        rest,
        f.last_seq(),
        "a subscription drains the log after close, then ends"
    );
}

#[tokio::test]
async fn a_subscription_left_behind_when_the_file_closes_ends_instead_of_spinning() {
    // Its channel is empty and closed, events it has not read are committed, and the log is
    // gone: `recv` used to ask the log again and again without ever waiting (CI hung on it).
    let dir = tempfile::tempdir().unwrap();
    let f = common::init(&engine(), &dir).await;
    for i in 0..3 {
        f.submit(create("alice", &format!("b{i}"))).await.unwrap();
    }
    let mut behind = f.subscribe_from(1);
    f.close().await;
    // On a thread of its own, so a `recv` that never yields cannot hang the test itself.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(behind.recv()).map(|e| e.seq));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("recv on a closed file must return, not spin");
    assert_eq!(got, None, "the log is closed: the stream ends");
}

#[tokio::test]
async fn opening_a_non_elf_or_reinitializing_gives_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine();
    let err = e.open(dir.path().join("missing.elf")).await.unwrap_err();
    assert!(err.to_string().contains("elfiee init"), "{err}");
    std::fs::write(dir.path().join("file.txt"), "x").unwrap();
    assert!(matches!(
        e.init(dir.path().join("file.txt"), "A").await,
        Err(EngineError::AlreadyExists(_))
    ));
    let f = e.init(dir.path().join("x.elf"), "A").await.unwrap();
    f.close().await;
    assert!(matches!(
        e.init(dir.path().join("x.elf"), "A").await,
        Err(EngineError::AlreadyExists(_))
    ));
}

#[tokio::test]
async fn read_block_checks_the_read_capability() {
    let dir = tempfile::tempdir().unwrap();
    let f = common::init(&engine(), &dir).await;
    common::add_bob(&f).await;
    let id = f.submit(create("alice", "n")).await.unwrap()[0]
        .entity
        .clone();
    assert!(f.read_block("alice", &id).is_ok());
    assert!(matches!(
        f.read_block("bob", &id),
        Err(EngineError::Rejected(CapError::Unauthorized { .. }))
    ));
    common::alice(
        &f,
        "core.grant",
        Some(&id),
        json!({"editor_id": "bob", "cap_id": "markdown.read"}),
    )
    .await;
    assert!(f.read_block("bob", &id).is_ok());
    f.close().await;
}

#[tokio::test]
async fn a_lost_or_damaged_command_index_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let (e, sent, _) = file_with_25_blocks(&path).await;
    let index = path.join("commands.idx");
    assert!(index.exists(), "closing stores the command index");
    common::verify_ok(&path);

    // Resubmitting must stay idempotent whatever happened to the file.
    let resubmit_all = |sent: Vec<(Command, Vec<elfiee_model::Event>)>| {
        let e = &e;
        let path = &path;
        async move {
            let f = e.open(path).await.unwrap();
            let seq = f.last_seq();
            for (cmd, events) in &sent {
                let again = f.submit(cmd.clone()).await.unwrap();
                assert_eq!(&again, events, "a resubmitted cmd_id returns its events");
            }
            assert_eq!(f.last_seq(), seq, "resubmissions write nothing");
            f.close().await;
        }
    };

    std::fs::remove_file(&index).unwrap();
    common::verify_names(&path, "no index entry");
    resubmit_all(sent.clone()).await;
    common::verify_ok(&path);

    std::fs::write(&index, b"garbage, not an index").unwrap();
    common::verify_names(&path, "command index");
    resubmit_all(sent).await;
    common::verify_ok(&path);
}
