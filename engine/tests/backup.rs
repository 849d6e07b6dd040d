//! Backups taken while writers write, appended incrementally, and restored: the restored
//! document's digest is the source's at the backup's seq (issue 29).

mod common;

use std::path::Path;

use common::*;
use elfiee_engine::backup::restore;
use elfiee_engine::{EngineError, FileHandle};
use serde_json::json;
use tempfile::TempDir;

fn folds() -> elfiee_projections::Folds {
    elfiee_capabilities::Registry::builtin().folds().clone()
}

/// Creates `n` markdown blocks `b0..` and returns their ids.
async fn blocks(f: &FileHandle, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let ev = f.submit(create("alice", &format!("b{i}"))).await.unwrap();
        ids.push(ev[0].entity.clone());
    }
    ids
}

/// Writer `tag` writes `n` times, in turn on each of `blocks`.
async fn writes(f: &FileHandle, blocks: &[String], tag: usize, n: usize) {
    for i in 0..n {
        let p = json!({"markdown": text(tag, i)});
        alice(f, "markdown.write", Some(&blocks[i % blocks.len()]), p).await;
    }
}

/// Text for write `i`: every third one is long enough for the content store.
fn text(w: usize, i: usize) -> String {
    if i.is_multiple_of(3) {
        format!("writer {w} write {i} {}", "long body ".repeat(40))
    } else {
        format!("writer {w} write {i}")
    }
}

/// Restores `backup` into `dir/name` and returns its digest and seq.
fn restored(backup: &Path, dir: &TempDir, name: &str) -> (String, u64) {
    let r = restore(backup, &dir.path().join(name), &folds(), |_, _| {}).unwrap();
    let verified = verify_ok(&r.path);
    assert_eq!(verified.events, r.seq);
    (r.state_digest, r.seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_while_four_writers_write_restores_to_the_state_at_its_seq() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let ids = blocks(&f, 4).await;
    let backup = dir.path().join("x.backup");
    // The writers write until the three backups are taken (and at least 100 writes each).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(w, id)| {
            let (f, id, stop) = (f.clone(), id.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while i < 100 || !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let p = json!({"markdown": text(w, i)});
                    f.submit(elfiee_model::Command::new(
                        "alice",
                        "markdown.write",
                        Some(&id),
                        p,
                    ))
                    .await
                    .unwrap();
                    if i == 50 && w == 0 {
                        // A bulk command too: its events are stored as a group.
                        f.submit(import(40, "mid")).await.unwrap();
                    }
                    i += 1;
                }
                i
            })
        })
        .collect();
    // Three backups into the same file while they write; a copy of the file after each.
    let mut taken = Vec::new();
    for k in 0..3 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let r = f.backup(&backup).await.unwrap();
        let copy = dir.path().join(format!("x.backup.{k}"));
        std::fs::copy(&backup, &copy).unwrap();
        taken.push((r, copy));
    }
    // Some more writes after the last backup, then stop.
    let seen = f.last_seq();
    while f.last_seq() < seen + 20 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    for w in writers {
        assert!(w.await.unwrap() >= 100);
    }
    let last = f.last_seq();
    assert!(
        taken[2].0.seq < last,
        "the backups ran while the writers wrote (last backup at {}, writers ended at {last})",
        taken[2].0.seq
    );
    assert!(!taken[0].0.incremental && taken[1].0.incremental && taken[2].0.incremental);
    for pair in taken.windows(2) {
        assert_eq!(
            pair[1].0.from_seq,
            pair[0].0.seq + 1,
            "appends only what is new"
        );
    }
    for (k, (r, copy)) in taken.iter().enumerate() {
        let (digest, seq) = restored(copy, &dir, &format!("r{k}.elf"));
        assert_eq!(seq, r.seq);
        let expected = f.state_at(r.seq).await.unwrap().digest();
        assert_eq!(
            digest, expected,
            "backup {k} restores the state at seq {seq}"
        );
    }
    // And once more after the writers: the whole document.
    let r = f.backup(&backup).await.unwrap();
    assert_eq!(r.seq, last);
    let (digest, _) = restored(&backup, &dir, "final.elf");
    assert_eq!(digest, f.state_digest());
    f.close().await;
    // The restored document opens, and takes writes.
    let g = engine.open(dir.path().join("final.elf")).await.unwrap();
    assert_eq!(g.state_digest(), digest);
    g.submit(create("alice", "after")).await.unwrap();
    g.close().await;
}

#[tokio::test]
async fn a_backup_cut_off_midway_keeps_its_last_point_and_the_next_run_mends_it() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let ids = blocks(&f, 1).await;
    let backup = dir.path().join("x.backup");
    let first = f.backup(&backup).await.unwrap();
    let at_first = f.state_digest();
    writes(&f, &ids[..1], 0, 50).await;
    let second = f.backup(&backup).await.unwrap();
    let len = std::fs::metadata(&backup).unwrap().len();
    assert_eq!(second.file_bytes, len);
    // A run stopped half way through its frames: only the first point is whole.
    let cut = first.file_bytes + (len - first.file_bytes) / 2;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&backup)
        .unwrap();
    file.set_len(cut).unwrap();
    drop(file);
    let (digest, seq) = restored(&backup, &dir, "half.elf");
    assert_eq!((digest, seq), (at_first, first.seq));
    // The next run cuts the torn frames off and appends everything after the first point.
    let third = f.backup(&backup).await.unwrap();
    assert_eq!(third.from_seq, first.seq + 1);
    assert_eq!(third.seq, f.last_seq());
    let (digest, _) = restored(&backup, &dir, "mended.elf");
    assert_eq!(digest, f.state_digest());
    // Nothing new: nothing written.
    let again = f.backup(&backup).await.unwrap();
    assert_eq!((again.events, again.bytes_written), (0, 0));
    assert_eq!(std::fs::metadata(&backup).unwrap().len(), third.file_bytes);
    f.close().await;
}

#[tokio::test]
async fn a_backup_file_of_another_document_or_no_backup_at_all_is_left_alone() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let a = engine
        .init(dir.path().join("a.elf"), "Alice")
        .await
        .unwrap();
    let b = engine.init(dir.path().join("b.elf"), "Bob").await.unwrap();
    let backup = dir.path().join("a.backup");
    a.backup(&backup).await.unwrap();
    let before = std::fs::read(&backup).unwrap();
    let err = b.backup(&backup).await.unwrap_err();
    assert!(err.to_string().contains("another document"), "{err}");
    assert_eq!(std::fs::read(&backup).unwrap(), before, "left as it was");
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "my notes, not a backup").unwrap();
    let err = b.backup(&notes).await.unwrap_err();
    assert!(err.to_string().contains("not an elfiee backup"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "my notes, not a backup"
    );
    let err = b.backup(dir.path()).await.unwrap_err();
    assert!(err.to_string().contains("is a folder"), "{err}");
    let nowhere = dir.path().join("not-made").join("x.backup");
    let err = b.backup(&nowhere).await.unwrap_err();
    assert!(
        err.to_string().contains("does not exist; create it first"),
        "{err}"
    );
    assert!(!nowhere.parent().unwrap().exists());
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_damaged_backup_is_refused_naming_where_and_leaves_no_half_document() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let ids = blocks(&f, 2).await;
    writes(&f, &ids, 1, 30).await;
    let backup = dir.path().join("x.backup");
    let r = f.backup(&backup).await.unwrap();
    f.close().await;
    // A flipped byte in the middle of the events.
    flip_byte(&backup, |len| len / 2);
    let target = dir.path().join("r.elf");
    let err = restore(&backup, &target, &folds(), |_, _| {}).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("damaged") && msg.contains("x.backup"), "{msg}");
    assert!(!target.exists(), "no half document is left behind");
    assert!(r.seq > 30);
    // Restoring over an existing document is refused.
    let err = restore(&backup, &dir.path().join("x.elf"), &folds(), |_, _| {}).unwrap_err();
    assert!(matches!(err, EngineError::AlreadyExists(_)), "{err}");
}

#[tokio::test]
async fn a_document_of_a_newer_format_is_refused_naming_both_versions() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let path = f.path().to_owned();
    f.close().await;
    let marker = path.join("ELFIEE");
    let text = std::fs::read_to_string(&marker).unwrap();
    let newer = elfiee_model::FORMAT_VERSION + 1;
    std::fs::write(
        &marker,
        text.replace(
            &format!("format_version = {}", elfiee_model::FORMAT_VERSION),
            &format!("format_version = {newer}"),
        ),
    )
    .unwrap();
    let err = engine.open(&path).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, EngineError::NewerFormat { .. }), "{err:?}");
    assert!(
        msg.contains(&format!("format version {newer}"))
            && msg.contains(&format!("up to {}", elfiee_model::FORMAT_VERSION)),
        "{msg}"
    );
    let err = elfiee_engine::verify(&path, |_, _| {}).unwrap_err();
    assert!(matches!(err, EngineError::NewerFormat { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_backup_follows_the_writes_and_takes_the_last_ones_at_close() {
    let dir = TempDir::new().unwrap();
    let backups = dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let engine = elfiee_engine::Engine::new(elfiee_engine::EngineConfig {
        node_id: "test-node".into(),
        auto_backup: Some(elfiee_engine::AutoBackup {
            every_events: 50,
            dir: Some(backups.clone()),
        }),
        ..elfiee_engine::EngineConfig::default()
    });
    let f = init(&engine, &dir).await;
    let ids = blocks(&f, 2).await;
    let backup = backups.join("x.elf.backup");
    writes(&f, &ids, 2, 120).await;
    // Taken on its own while the file is open, at least 50 events behind at most.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let at_least = f.last_seq() - 50;
    loop {
        let point = elfiee_engine::backup::newest_point(&backup).map_or(0, |p| p.seq);
        if point >= at_least {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no automatic backup (at {point})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    alice(
        &f,
        "markdown.write",
        Some(&ids[0]),
        json!({"markdown": "the last one"}),
    )
    .await;
    let (last, digest) = (f.last_seq(), f.state_digest());
    f.close().await;
    let point = elfiee_engine::backup::newest_point(&backup).unwrap();
    assert_eq!(
        point.seq, last,
        "the close took the last events into the backup"
    );
    let (restored, seq) = restored(&backup, &dir, "r.elf");
    assert_eq!((restored, seq), (digest, last));
    assert!(
        !dir.path().join("x.elf.backup").exists(),
        "it went where it was told"
    );
}

#[tokio::test]
async fn opening_a_damaged_document_names_salvage_its_newest_backup_and_for_a_synced_one_rejoining()
{
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let ids = blocks(&f, 1).await;
    writes(&f, &ids[..1], 3, 20).await;
    let path = f.path().to_owned();
    let backup = elfiee_engine::backup::default_path(&path);
    let r = f.backup(&backup).await.unwrap();
    f.close().await;
    // sled's file cut short: the log does not open.
    let db = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("log/db"))
        .unwrap();
    db.set_len(300).unwrap();
    drop(db);
    let err = engine.open(&path).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("elfiee salvage {}", path.display()))
            && err.contains(&backup.display().to_string())
            && err.contains(&format!("seq {}", r.seq)),
        "{err}"
    );
    assert!(!err.contains("check the disk"), "{err}");
    assert!(
        !err.contains("join the document afresh"),
        "not synced: {err}"
    );
    std::fs::write(path.join("sync-status.json"), "{}").unwrap();
    let err = engine.open(&path).await.unwrap_err().to_string();
    assert!(err.contains("join the document afresh"), "{err}");
    // And salvage, with that backup found beside it, gives back every event it holds.
    let out = dir.path().join("saved.elf");
    let report = elfiee_engine::salvage::salvage(&path, &out, None, &folds(), |_| {}).unwrap();
    assert_eq!(report.seq, r.seq, "{report:#?}");
    assert!(report.lost.is_empty(), "{report:?}");
    assert_eq!(report.backup.as_deref(), Some(backup.as_path()));
    verify_ok(&report.path);
}

#[tokio::test]
async fn a_backup_of_a_document_with_a_damaged_body_or_group_is_refused_and_writes_no_point() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let ids = blocks(&f, 2).await;
    writes(&f, &ids, 1, 12).await;
    let backup = dir.path().join("x.backup");
    let first = f.backup(&backup).await.unwrap();
    // After the first backup: a group in events.pack and bodies in the content store (the
    // group not last: an open checks the last event against HEAD, and would refuse first).
    f.submit(import(40, "later")).await.unwrap();
    writes(&f, &ids, 2, 12).await;
    f.close().await;
    let elf = dir.path().join("x.elf");
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    for (k, (damaged, says)) in [
        (elf.join("content/pack"), "does not match its hash"),
        (elf.join("events.pack"), "does not match its blake3"),
    ]
    .into_iter()
    .enumerate()
    {
        // The last byte of the last body; a byte in the middle of the group.
        let at = |len: usize| {
            if says.contains("blake3") {
                len / 2
            } else {
                len - 1
            }
        };
        flip_byte(&damaged, at);
        let before = size(&backup);
        let f = engine.open(&elf).await.unwrap();
        let err = f.backup(&backup).await.unwrap_err().to_string();
        assert!(err.contains(says), "{err}");
        let again = f.backup(&dir.path().join("new.backup")).await.unwrap_err();
        assert!(again.to_string().contains(says), "{again}");
        f.close().await;
        let point = elfiee_engine::backup::newest_point(&backup).unwrap();
        assert_eq!(point.seq, first.seq, "the refused run wrote no point");
        assert_eq!(size(&backup), before, "what the refused run wrote is gone");
        let (_, seq) = restored(&backup, &dir, &format!("r-{k}.elf"));
        assert_eq!(seq, first.seq);
        // Mended, the next run appends from the first point.
        flip_byte(&damaged, at);
        let f = engine.open(&elf).await.unwrap();
        let r = f.backup(&backup).await.unwrap();
        assert_eq!(r.from_seq, first.seq + 1);
        let whole = f.last_seq();
        f.close().await;
        let (_, seq) = restored(&backup, &dir, &format!("whole-{k}.elf"));
        assert_eq!(seq, whole);
        // Back to the first point for the next damage.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&backup)
            .unwrap()
            .set_len(first.file_bytes)
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backups_run_at_once_into_one_file_take_turns_and_it_restores_to_the_newest() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let ids = blocks(&f, 2).await;
    writes(&f, &ids, 0, 30).await;
    let backup = dir.path().join("x.backup");
    // Six runs at once into the same file while a writer writes (as the automatic backup and
    // `elfiee backup` both use NAME.elf.backup).
    let writer = {
        let (f, ids) = (f.clone(), ids.clone());
        tokio::spawn(async move { writes(&f, &ids, 1, 60).await })
    };
    let runs: Vec<_> = (0..6)
        .map(|_| {
            let (f, backup) = (f.clone(), backup.clone());
            tokio::spawn(async move { f.backup(&backup).await.unwrap() })
        })
        .collect();
    let mut reports = Vec::new();
    for r in runs {
        reports.push(r.await.unwrap());
    }
    writer.await.unwrap();
    // Each run appended from where the one before it ended: together they cover 1..=newest
    // once, with nothing written twice.
    reports.sort_by_key(|r| r.from_seq);
    let newest = reports.iter().map(|r| r.seq).max().unwrap();
    let mut next = 1;
    for r in reports.iter().filter(|r| r.events > 0) {
        assert_eq!(r.from_seq, next, "{reports:?}");
        next = r.seq + 1;
    }
    assert_eq!(next, newest + 1);
    let point = elfiee_engine::backup::newest_point(&backup).unwrap();
    assert_eq!(point.seq, newest);
    let digest = f.state_at(newest).await.unwrap().digest();
    let (restored_digest, seq) = restored(&backup, &dir, "r.elf");
    assert_eq!((restored_digest, seq), (digest, newest));
    f.close().await;
}
