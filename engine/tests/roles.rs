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

/// How the seam stores what sync keeps (issue 28): a commit group of several submissions
/// writes one command record and still names each event's command; one foreign append writes
/// one origin record; origins and commands read by range match the point reads; and a
/// document whose foreign events carry the older one-record-per-event layout reads the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_and_origins_read_by_range_from_both_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.elf");
    let file = engine().init(&path, "Alice").await.unwrap();
    let seam = file.foreign_log().unwrap();
    seam.record_commands(true);
    // Concurrent submissions: they share commit groups.
    let made: Vec<_> =
        futures_util::future::join_all((0..24).map(|i| file.submit(create(&format!("b{i}")))))
            .await
            .into_iter()
            .map(|r| r.unwrap().remove(0))
            .collect();
    let template = made[0].clone();
    let theirs = |n: usize| {
        (0..n)
            .map(|i| {
                let mut e = template.clone();
                e.value["block_id"] = json!(format!("t{n}-{i}"));
                // Another device's command.
                e.cmd_id = uuid::Uuid::new_v4();
                e.event_id = uuid::Uuid::new_v4();
                (e, format!("origin {n}-{i}").into_bytes())
            })
            .collect::<Vec<_>>()
    };
    let first = seam.append(theirs(3), Vec::new()).await.unwrap();
    let one = file.submit(create("after")).await.unwrap().remove(0);
    let second = seam.append(theirs(1), Vec::new()).await.unwrap();
    let last = file.last_seq();
    let expect: Vec<(u64, Vec<u8>)> = first
        .iter()
        .enumerate()
        .map(|(i, e)| (e.seq, format!("origin 3-{i}").into_bytes()))
        .chain([(second[0].seq, b"origin 1-0".to_vec())])
        .collect();
    assert_eq!(seam.origins(1, last).unwrap(), expect);
    // A range that starts inside an append.
    assert_eq!(
        seam.origins(first[1].seq, first[1].seq).unwrap(),
        expect[1..2]
    );
    let commands = seam.commands(1, last).unwrap();
    for e in made.iter().chain([&one]) {
        assert_eq!(
            commands.get(&e.seq),
            Some(&("core.create".to_owned(), None)),
            "seq {}",
            e.seq
        );
        assert_eq!(
            seam.command_of(e.seq).unwrap(),
            Some(("core.create".to_owned(), None))
        );
    }
    for (seq, _) in &expect {
        assert!(
            !commands.contains_key(seq),
            "a foreign event has no command"
        );
    }
    let report = file.verify().await.unwrap();
    assert!(report.ok, "{report:?}");
    file.close().await;

    // The same document as an older build kept it: one `f‖seq` record per foreign event.
    {
        let log = elfiee_engine::log::SledEventLog::open(&path.join("log"), &path).unwrap();
        let events = log.db().open_tree("events").unwrap();
        for (key, _) in events.scan_prefix(b"o").map(Result::unwrap) {
            events.remove(key).unwrap();
        }
        for (seq, bytes) in &expect {
            let mut key = vec![b'f'];
            key.extend_from_slice(&seq.to_be_bytes());
            events.insert(key, bytes.as_slice()).unwrap();
        }
        log.db().flush().unwrap();
    }
    let file = engine().open(&path).await.unwrap();
    let seam = file.foreign_log().unwrap();
    assert_eq!(seam.origins(1, last).unwrap(), expect);
    assert_eq!(
        seam.origin(second[0].seq).unwrap(),
        Some(b"origin 1-0".to_vec())
    );
    let report = file.verify().await.unwrap();
    assert!(report.ok, "{report:?}");
    let mut from_log = file.subscribe_from(first[0].seq);
    let c = from_log.recv_committed().await.unwrap();
    assert_eq!((c.event.seq, c.origin), (first[0].seq, Origin::Foreign));
    file.close().await;
}

/// A view that notes every event with its seq doubled, and shows the committed state.
struct Doubling;

impl elfiee_engine::StateView for Doubling {
    fn view(&self, _: &mut dyn FnMut(&elfiee_projections::State)) {}

    fn notes(&self, events: &[elfiee_model::Event]) -> Vec<Option<serde_json::Value>> {
        events
            .iter()
            .map(|e| (e.seq % 2 == 0).then(|| json!({"twice": e.seq * 2})))
            .collect()
    }
}

/// What the owner's view adds to events (sync's places) reaches the owner's readers and its
/// clients through the socket alike; without a view there is nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_views_notes_reach_owner_and_clients() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.elf");
    let owner = engine().init(&path, "Alice").await.unwrap();
    let client = engine().open(&path).await.unwrap();
    assert!(client.is_remote());
    owner.submit(create("x")).await.unwrap();
    let last = owner.last_seq();
    let events = owner.events(1).unwrap();
    assert!(owner.notes(&events).unwrap().is_empty());
    assert!(client.notes(&events).unwrap().is_empty());
    owner
        .foreign_log()
        .unwrap()
        .set_view(Some(std::sync::Arc::new(Doubling)));
    let expect: Vec<(u64, serde_json::Value)> = (1..=last)
        .filter(|s| s % 2 == 0)
        .map(|s| (s, json!({"twice": s * 2})))
        .collect();
    assert_eq!(owner.notes(&events).unwrap(), expect);
    assert_eq!(client.notes(&events).unwrap(), expect);
    client.close().await;
    owner.close().await;
}
