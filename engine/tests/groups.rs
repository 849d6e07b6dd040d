//! Commands with many events (import chunks) are stored as one group in `events.pack` with a
//! single sled key (see `engine/src/log.rs`). Everything that reads the log — replay, reopen,
//! verify, `events`, the command index — sees the same events as before, in seq order, and a
//! changed byte in the pack is reported, never served.

mod common;
use common::{create, engine, import};

use std::path::Path;

use elfiee_engine::log::GROUP_MIN_EVENTS;
use elfiee_engine::FileHandle;

/// Single events, a group, singles, a second group, singles.
async fn mixed(path: &Path) -> FileHandle {
    let f = engine().init(path, "Alice").await.unwrap();
    f.submit(create("alice", "before")).await.unwrap();
    let g1 = f.submit(import(GROUP_MIN_EVENTS + 36, "a")).await.unwrap();
    assert!(g1.len() > GROUP_MIN_EVENTS, "{} events", g1.len());
    for i in 0..3 {
        f.submit(create("alice", &format!("between{i}")))
            .await
            .unwrap();
    }
    f.submit(import(GROUP_MIN_EVENTS * 2, "b")).await.unwrap();
    f.submit(create("alice", "after")).await.unwrap();
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_and_single_events_read_back_in_order_after_reopen_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let f = mixed(&path).await;
    let live_events = common::events_without_gaps(&f);
    let last = f.last_seq();
    // A window that starts and ends inside groups.
    let inner: Vec<u64> = f.events(5).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(inner, (5..=last).collect::<Vec<_>>());
    let digest = f.state_digest();
    let (report, replayed) = f.replay().await.unwrap();
    assert_eq!(report.events, last);
    assert_eq!(replayed.digest(), digest);
    f.close().await;

    assert!(
        path.join("events.pack").metadata().unwrap().len() > 0,
        "the import chunks went to the pack"
    );
    let again = engine().open(&path).await.unwrap();
    assert_eq!(
        again.last_seq(),
        last,
        "the tail is found through the group key"
    );
    assert_eq!(again.state_digest(), digest);
    assert_eq!(again.events(1).unwrap(), live_events);
    // The command index still finds a grouped command's events.
    let g = live_events
        .iter()
        .find(|e| e.attribute.ends_with("directory.import"))
        .unwrap();
    let by_cmd = again.command_events(g.cmd_id).unwrap().unwrap();
    let expected: Vec<_> = live_events
        .iter()
        .filter(|e| e.cmd_id == g.cmd_id)
        .cloned()
        .collect();
    assert!(expected.len() > GROUP_MIN_EVENTS);
    assert_eq!(by_cmd, expected);
    // And new commands chain on the group's last hash.
    again.submit(create("alice", "later")).await.unwrap();
    let report = again.verify().await.unwrap();
    assert!(report.ok, "{:?}", report.problems);
    again.close().await;
    let report = common::verify_ok(&path);
    assert_eq!(report.events, last + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_byte_in_the_event_pack_is_reported_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    mixed(&path).await.close().await;
    let pack = path.join("events.pack");
    common::flip_byte(&pack, |len| len / 3);
    let report = common::verify_names(&path, "events.pack");
    assert!(!report.ok, "a flipped byte in events.pack must fail verify");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_short_or_missing_event_pack_is_reported_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    mixed(&path).await.close().await;
    let pack = path.join("events.pack");
    let len = std::fs::metadata(&pack).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&pack)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let report = common::verify_names(&path, "past the end of events.pack");
    assert!(!report.ok);
    std::fs::remove_file(&pack).unwrap();
    let report = common::verify_names(&path, "events.pack is missing");
    assert!(!report.ok, "a missing pack is reported");
    assert!(!pack.exists(), "verify does not make an empty pack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_a_crash_left_after_the_last_group_are_overwritten_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    mixed(&path).await.close().await;
    // A group written to the pack whose sled key never became durable.
    let pack = path.join("events.pack");
    let before = std::fs::metadata(&pack).unwrap().len();
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes.extend(std::iter::repeat_n(0xAB, 10_000));
    std::fs::write(&pack, &bytes).unwrap();

    let f = engine().open(&path).await.unwrap();
    let last = f.last_seq();
    let ev = f.submit(import(GROUP_MIN_EVENTS, "c")).await.unwrap();
    assert!(ev.len() >= GROUP_MIN_EVENTS);
    assert_eq!(f.last_seq(), last + ev.len() as u64);
    let digest = f.state_digest();
    f.close().await;
    common::verify_ok(&path);
    common::assert_reopens_to(&engine(), &path, &digest, "reopened past the crash bytes").await;
    assert!(std::fs::metadata(&pack).unwrap().len() >= before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_import_leaves_sleds_own_file_small() {
    // 20 chunks of 400 files: 8,000+ events. Stored one sled record each, they filled
    // ~12 MiB of sled segments, which every later open read and partly rewrote.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let f = engine().init(&path, "Alice").await.unwrap();
    for c in 0..20 {
        f.submit(import(400, &format!("c{c}"))).await.unwrap();
    }
    assert!(f.last_seq() > 8_000);
    f.close().await;
    let sled = std::fs::metadata(path.join("log").join("db"))
        .unwrap()
        .len();
    assert!(
        sled <= 2 * 512 * 1024,
        "sled's file holds {sled} bytes after the import; the events belong in events.pack"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_committed_a_bulk_command_snapshots_before_it_closes() {
    // Replaying an import chunk after a reopen rebuilds the directory's whole entry list, so
    // the process that imported pays for a snapshot instead of every later open.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let f = engine().init(&path, "Alice").await.unwrap();
    f.submit(create("alice", "small")).await.unwrap();
    f.close().await;
    let paths = elfiee_engine::layout::ElfPaths::existing(&path).unwrap();
    let before = elfiee_engine::stored_snapshots(&paths);

    let f = engine().open(&path).await.unwrap();
    f.submit(create("alice", "one more")).await.unwrap();
    f.close().await;
    assert_eq!(
        elfiee_engine::stored_snapshots(&paths),
        before,
        "a short-lived process with a small change writes no snapshot"
    );

    let f = engine().open(&path).await.unwrap();
    f.submit(import(GROUP_MIN_EVENTS, "bulk")).await.unwrap();
    let last = f.last_seq();
    f.close().await;
    let newest = elfiee_engine::stored_snapshots(&paths)
        .iter()
        .map(|(seq, _)| *seq)
        .max();
    assert_eq!(
        newest,
        Some(last),
        "the bulk command's process left a snapshot at its end"
    );
}
