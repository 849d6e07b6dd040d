//! The two roles of an open file inside one test process: a second engine that opens a file
//! another engine owns becomes its client (a replica fed by the owner socket), writes through
//! the owner's one door, and takes the file over when the owner closes. The process tests in
//! the root crate (`tests/multi_process.rs`) do the same across real processes.

use std::time::Duration;

use elfiee_engine::{Engine, EngineConfig, Origin};
use elfiee_model::Command;
use serde_json::json;

fn engine() -> Engine {
    Engine::new(EngineConfig {
        node_id: "test-node".into(),
        handover_wait: Duration::from_secs(5),
        ..EngineConfig::default()
    })
}

fn create(name: &str) -> Command {
    Command::new(
        "alice",
        "core.create",
        None,
        json!({"name": name, "block_type": "markdown"}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_writes_through_the_owner_and_takes_over_when_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.elf");
    let owner = engine().init(&path, "Alice").await.unwrap();
    let client = engine().open(&path).await.unwrap();
    assert!(client.is_remote(), "the file is locked by the first engine");
    assert!(!owner.is_remote());
    assert_eq!(client.last_seq(), owner.last_seq());

    // Live events reach the client's subscribers, marked local (decided by a pipeline).
    let mut sub = client.subscribe();
    let ev = client.submit(create("from-client")).await.unwrap();
    let seq = ev[0].seq;
    assert_eq!(owner.last_seq(), seq, "the owner committed it");
    assert!(client.with_state(|s| s.block(&ev[0].entity).is_some()));
    let got = sub.recv_committed().await.unwrap();
    assert_eq!((got.event.seq, got.origin), (seq, Origin::Local));
    owner.submit(create("from-owner")).await.unwrap();
    let got = sub.recv_committed().await.unwrap();
    assert_eq!((got.event.seq, got.origin), (seq + 1, Origin::Local));
    // Catch-up from the owner's log carries origins too.
    let mut from_start = client.subscribe_from(1);
    let first = from_start.recv_committed().await.unwrap();
    assert_eq!((first.event.seq, first.origin), (1, Origin::Local));

    // Requests that only the owner can answer.
    client.set_checkpoint("e", 2).unwrap();
    assert_eq!(owner.checkpoint("e").unwrap(), 2);
    assert_eq!(client.events(1).unwrap().len() as u64, owner.last_seq());
    let earlier = client.state_at(1).await.unwrap();
    assert_eq!(earlier.last_seq, 1);
    assert!(client.verify().await.unwrap().ok);
    assert!(
        client.foreign_log().is_err(),
        "only the owner takes foreign events"
    );

    // The owner goes away: the client becomes the owner and keeps its history.
    owner.close().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client.is_remote() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!client.is_remote(), "the client took the file over");
    let ev = client.submit(create("after")).await.unwrap();
    assert_eq!(ev[0].seq, seq + 2);
    assert!(client.durability().is_some());
    client.close().await;
}

/// An event appended through the foreign seam reaches subscribers marked foreign, live and
/// from the log, and the seam keeps its origin bytes and side records beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_events_carry_their_origin_live_and_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let file = engine()
        .init(dir.path().join("f.elf"), "Alice")
        .await
        .unwrap();
    let local = file.submit(create("mine")).await.unwrap().remove(0);
    let mut live = file.subscribe();
    let mut theirs = local.clone();
    theirs.value = json!({"name": "theirs", "block_type": "markdown", "block_id": "theirs"});
    let seam = file.foreign_log().unwrap();
    let appended = seam
        .append(
            vec![(theirs, b"their-origin".to_vec())],
            vec![(b"k".to_vec(), b"v".to_vec())],
        )
        .await
        .unwrap();
    let seq = appended[0].seq;
    let got = live.recv_committed().await.unwrap();
    assert_eq!((got.event.seq, got.origin), (seq, Origin::Foreign));
    let mut from_log = file.subscribe_from(local.seq);
    let a = from_log.recv_committed().await.unwrap();
    let b = from_log.recv_committed().await.unwrap();
    assert_eq!((a.event.seq, a.origin), (local.seq, Origin::Local));
    assert_eq!((b.event.seq, b.origin), (seq, Origin::Foreign));
    assert_eq!(
        seam.origin(seq).unwrap().as_deref(),
        Some(&b"their-origin"[..])
    );
    assert_eq!(seam.origin(local.seq).unwrap(), None);
    assert_eq!(seam.side(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    file.close().await;
}
