//! Commands committed together (concurrent writers sharing one flush) are stored as **runs**:
//! one sled value `r‖first_seq` for several whole commands (see `engine/src/log.rs`). Replay,
//! reopen, verify, `events` and the command index read them like single events and groups,
//! and a changed or cut byte inside a run is reported with its seq, never served.

mod common;
use common::{create, engine, import};

use std::path::Path;

use elfiee_engine::log::{run_key, split_run, GROUP_MIN_EVENTS};
use elfiee_engine::FileHandle;

/// Runs stored in the log at `path` (closed), as `(key, value)`.
fn runs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = sled::open(path.join("log")).unwrap();
    let tree = db.open_tree("events").unwrap();
    tree.range(run_key(0)..=run_key(u64::MAX))
        .map(|r| {
            let (k, v) = r.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect()
}

fn put(path: &Path, key: &[u8], value: Vec<u8>) {
    let db = sled::open(path.join("log")).unwrap();
    db.open_tree("events").unwrap().insert(key, value).unwrap();
    db.flush().unwrap();
}

/// 16 writers committing at once, one of them also an import (a group) half-way.
async fn concurrent(path: &Path) -> FileHandle {
    let f = engine().init(path, "Alice").await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let f = f.clone();
            tokio::spawn(async move {
                for i in 0..25 {
                    f.submit(create("alice", &format!("t{t}-{i}")))
                        .await
                        .unwrap();
                    if t == 0 && i == 12 {
                        f.submit(import(GROUP_MIN_EVENTS + 4, "a")).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_committed_together_are_stored_as_runs_and_read_back_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.elf");
    let f = concurrent(&path).await;
    let live = common::events_without_gaps(&f);
    let last = f.last_seq();
    let digest = f.state_digest();
    f.close().await;

    let stored = runs(&path);
    assert!(!stored.is_empty(), "concurrent commits went into runs");
    let in_runs: usize = stored
        .iter()
        .map(|(k, v)| split_run(k, v).unwrap().len())
        .sum();
    assert!(in_runs >= 2 * stored.len(), "each run holds several events");

    let again = engine().open(&path).await.unwrap();
    assert_eq!(
        again.last_seq(),
        last,
        "the tail is found through run keys too"
    );
    assert_eq!(again.state_digest(), digest);
    assert_eq!(again.events(1).unwrap(), live);
    // Windows that start inside runs.
    let (k, v) = &stored[stored.len() / 2];
    let inside = split_run(k, v).unwrap()[1].0;
    for from in [inside, last - 1, last] {
        let seqs: Vec<u64> = again.events(from).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (from..=last).collect::<Vec<_>>());
    }
    // The command index finds a command stored in a run.
    let e = &live[inside as usize - 1];
    assert_eq!(
        again.command_events(e.cmd_id).unwrap().unwrap(),
        vec![e.clone()]
    );
    let (report, replayed) = again.replay().await.unwrap();
    assert_eq!(report.events, last);
    assert_eq!(replayed.digest(), digest);
    // New commands chain on the last run's last hash.
    again.submit(create("alice", "later")).await.unwrap();
    again.close().await;
    assert_eq!(common::verify_ok(&path).events, last + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_or_cut_byte_in_a_run_is_reported_with_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("x.elf");
    concurrent(&base).await.close().await;
    let stored = runs(&base);
    let (key, value) = stored[stored.len() / 2].clone();
    let records = split_run(&key, &value).unwrap();
    let second = records[1].0;
    // count (4) ‖ len (4) ‖ first record ‖ len (4) ‖ second record: a byte of the second's hash.
    let at = 4 + 4 + records[0].1.len() + 4 + 3;
    let cut = value.len() - 2;
    for (what, damaged) in [
        ("changed", {
            let mut v = value.clone();
            v[at] ^= 0x20;
            v
        }),
        ("cut", value[..cut].to_vec()),
        ("count", {
            // A count of four billion events in a run of a few: an error, not an allocation.
            let mut v = value.clone();
            v[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            v
        }),
    ] {
        let work = tempfile::tempdir().unwrap();
        let path = work.path().join("x.elf");
        common::copy_dir(&base, &path);
        put(&path, &key, damaged);
        let seq = if what == "changed" {
            second
        } else {
            records[0].0
        };
        common::assert_verify_flags(&path, seq);
        let err =
            elfiee_engine::replay(&path, |_, _| {}).expect_err("replay refuses a damaged run");
        common::assert_corrupt_at(&err, seq);
    }
}
