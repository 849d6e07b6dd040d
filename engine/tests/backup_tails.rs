//! What follows a backup's newest whole point: what a run stopped by a crash or a power cut
//! leaves (skipped, and said), or damage (refused, naming the byte). The power-cut harness
//! (`tests/power_cuts.rs`) found a cut run's frames with a hole in them refused as damage, so
//! a backup acknowledged before the cut could not be restored without a manual step.

mod common;

use std::path::Path;

use common::*;
use elfiee_engine::backup::format::{self, outline, Outline};
use elfiee_engine::backup::restore;
use elfiee_model::EventHash;
use serde_json::json;
use tempfile::TempDir;

/// A backup file: a header, then one run (an `E` frame and its point) per seq in `points`.
fn backup_with_points(points: &[u64]) -> Vec<u8> {
    let mut b = format::header(elfiee_model::FORMAT_VERSION).to_vec();
    let mut first = 1;
    for &seq in points {
        events_frame(&mut b, first, seq - first + 1, 64);
        point(&mut b, seq);
        first = seq + 1;
    }
    b
}

/// An `E` frame head naming `count` events from `first`, with `body` filler bytes (the walk
/// reads heads only).
fn events_frame(b: &mut Vec<u8>, first: u64, count: u64, body: usize) {
    let mut payload = first.to_be_bytes().to_vec();
    payload.extend_from_slice(&(count as u32).to_be_bytes());
    payload.extend(std::iter::repeat_n(0x5a, body));
    format::write_frame(b, format::EVENTS, &[&payload]).unwrap();
}

fn point(b: &mut Vec<u8>, seq: u64) {
    let payload = format::point_payload(seq, &EventHash([seq as u8; 32]), 1_700_000_000_000);
    format::write_frame(b, format::POINT, &[&payload]).unwrap();
}

fn walk(dir: &Path, name: &str, bytes: &[u8]) -> Outline {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    outline(&std::fs::File::open(&path).unwrap(), &path).unwrap()
}

/// `(newest whole point's seq, damaged at, unfinished bytes)`.
fn judged(o: &Outline) -> (Option<u64>, Option<u64>, u64) {
    (o.last.map(|p| p.seq), o.damaged_at, o.unfinished)
}

#[test]
fn what_a_stopped_run_leaves_is_skipped_and_counted() {
    let dir = TempDir::new().unwrap();
    let whole = backup_with_points(&[10]);
    let end = whole.len() as u64;
    let tail = |extra: &[u8]| [whole.as_slice(), extra].concat();
    // Its frames with a hole where a write never reached the disk (zeros), and one kept after.
    let mut run = Vec::new();
    events_frame(&mut run, 11, 5, 700);
    let frame = run.len();
    events_frame(&mut run, 16, 5, 700);
    run[frame..frame + 300].fill(0);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("hole", tail(&run)),
        ("zeros", tail(&[0u8; 4096])),
        ("torn-frame", tail(&run[..frame + 100])),
        ("few-bytes", tail(b"E\0\0")),
        ("point-cut-short", {
            let mut t = run.clone();
            point(&mut t, 20);
            t.truncate(t.len() - 20);
            tail(&t)
        }),
    ];
    for (name, bytes) in cases {
        let o = walk(dir.path(), name, &bytes);
        assert_eq!(
            judged(&o),
            (Some(10), None, bytes.len() as u64 - end),
            "{name}"
        );
    }
    // A point torn at a sector boundary: its bytes from the boundary on are zero.
    let mut t = tail(&run);
    let pad = (512 - (t.len() + 30) % 512) % 512;
    events_frame(&mut t, 11, 1, pad);
    let at = t.len();
    point(&mut t, 20);
    let boundary = at.div_ceil(512) * 512;
    assert!(
        boundary > at && boundary < t.len(),
        "the boundary is inside the point"
    );
    t[boundary..].fill(0);
    let o = walk(dir.path(), "torn-point", &t);
    assert_eq!(judged(&o), (Some(10), None, t.len() as u64 - end));
    // A file that ends at its point has nothing unfinished.
    let o = walk(dir.path(), "whole", &whole);
    assert_eq!(judged(&o), (Some(10), None, 0));
}

#[test]
fn damage_before_a_newer_point_or_in_a_whole_point_is_refused() {
    let dir = TempDir::new().unwrap();
    let two = backup_with_points(&[10, 20]);
    let second_run = backup_with_points(&[10]).len();
    // The second run's frame tag flipped: the point at 20 lies after it.
    let mut tag = two.clone();
    tag[second_run] = 0;
    assert_eq!(
        judged(&walk(dir.path(), "tag", &tag)),
        (Some(10), Some(second_run as u64), 0)
    );
    // Its length flipped (4 GiB more) so it runs past the end: once read as a run cut short.
    let mut length = two.clone();
    length[second_run + 5] ^= 0x01;
    assert_eq!(
        judged(&walk(dir.path(), "length", &length)),
        (Some(10), Some(second_run as u64), 0)
    );
    // A byte of the newest point flipped: nothing after it, not torn.
    let mut flipped = two.clone();
    let n = flipped.len();
    flipped[n - 6] ^= 0x40;
    let newest = (n - 61) as u64;
    assert_eq!(
        judged(&walk(dir.path(), "flipped", &flipped)),
        (Some(10), Some(newest), 0)
    );
    // A newer point found across the reader's 1 MiB chunks.
    let mut far = backup_with_points(&[10]);
    let at = far.len() as u64;
    // The search reads from the stop (`at`) 1 MiB at a time: the point starts 30 bytes before
    // the first chunk's end.
    far.push(0);
    far.extend(std::iter::repeat_n(0x11, (1 << 20) - 31));
    assert_eq!(far.len() as u64, at + (1 << 20) - 30);
    point(&mut far, 30);
    assert_eq!(
        judged(&walk(dir.path(), "far", &far)),
        (Some(10), Some(at), 0)
    );
    // A whole point of an older seq after the damage is not newer: a stopped run.
    let mut older = backup_with_points(&[10]);
    older.extend([0u8; 100]);
    point(&mut older, 7);
    let skipped = older.len() as u64 - at;
    assert_eq!(
        judged(&walk(dir.path(), "older", &older)),
        (Some(10), None, skipped)
    );
}

/// Through the engine and the CLI's words: a stopped run after a real backup restores to its
/// point and says what it skipped; damage before a newer point is refused by restore and by
/// the next backup, which leaves the file as it was.
#[tokio::test]
async fn a_real_backup_with_a_stopped_run_restores_and_one_damaged_before_a_newer_point_does_not() {
    let dir = TempDir::new().unwrap();
    let engine = engine();
    let f = init(&engine, &dir).await;
    let id = f.submit(create("alice", "b")).await.unwrap()[0]
        .entity
        .clone();
    let backup = dir.path().join("x.backup");
    let first = f.backup(&backup).await.unwrap();
    // A stopped run: frames (here a copy of the first run's) whose first write was lost (a
    // hole of zeros), and its point cut short.
    let mut bytes = std::fs::read(&backup).unwrap();
    let run = bytes[format::HEADER_LEN as usize..].to_vec();
    let mut frames = run[..run.len() - 61].to_vec();
    frames[..64].fill(0);
    bytes.extend_from_slice(&frames);
    bytes.extend_from_slice(&run[run.len() - 61..run.len() - 20]);
    std::fs::write(&backup, &bytes).unwrap();
    let r = restore(&backup, &dir.path().join("r.elf"), &folds(), |_, _| {}).unwrap();
    assert_eq!(r.seq, first.seq);
    assert_eq!(r.unfinished_bytes, bytes.len() as u64 - first.file_bytes);
    assert_eq!(verify_ok(&r.path).events, first.seq);
    // The next run cuts them off and appends.
    alice(
        &f,
        "markdown.write",
        Some(&id),
        json!({"markdown": "later"}),
    )
    .await;
    let second = f.backup(&backup).await.unwrap();
    assert_eq!((second.from_seq, second.seq), (first.seq + 1, f.last_seq()));
    // The first run's frame tag damaged: the second point lies after it.
    let mut damaged = std::fs::read(&backup).unwrap();
    damaged[format::HEADER_LEN as usize] = b'Z';
    std::fs::write(&backup, &damaged).unwrap();
    let err = restore(&backup, &dir.path().join("d.elf"), &folds(), |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("damaged at byte 16"), "{err}");
    assert!(!dir.path().join("d.elf").exists());
    alice(&f, "markdown.write", Some(&id), json!({"markdown": "more"})).await;
    let err = f.backup(&backup).await.unwrap_err().to_string();
    assert!(
        err.contains("damaged at byte 16") && err.contains("would cut them off"),
        "{err}"
    );
    assert_eq!(std::fs::read(&backup).unwrap(), damaged, "left as it was");
    f.close().await;
}

fn folds() -> elfiee_projections::Folds {
    elfiee_capabilities::Registry::builtin().folds().clone()
}
