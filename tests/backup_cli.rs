//! Backup, damage and salvage through the `elfiee` binary, as a user meets them: texts of
//! every shape (CRLF, tabs, empty, one byte, no final newline, a 300 KB body kept in the
//! content store), `backup` twice into the default file, writes after it, then a damaged log
//! or a damaged body; `open` must name `salvage` and the backup without noise, and `salvage`
//! must bring back every event and every byte, into a document `verify` accepts.

mod common;

use std::path::Path;

use serde_json::Value;

fn run(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee(elf, args, &[])
}

fn ok(elf: &Path, args: &[&str]) -> Value {
    common::elfiee_json(elf, args)
}

/// The texts a user writes, by block name.
fn texts() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "crlf",
            b"first line\r\nsecond\tline with a tab\r\n".to_vec(),
        ),
        ("empty", Vec::new()),
        ("one-byte", b"x".to_vec()),
        ("no-final-newline", b"# Title\n\nlast line".to_vec()),
        (
            "large",
            (0..300_000u32)
                .map(|i| b"abcdefghij\n"[(i % 11) as usize])
                .collect(),
        ),
    ]
}

/// A document with the blocks of [`texts`], two backups into its default backup file (the
/// second appends), and one more write after them. Returns the blocks `(name, id, text)`, the
/// digest at the second backup's seq and at the end, and the end's seq.
struct Made {
    blocks: Vec<(&'static str, String, Vec<u8>)>,
    backup_seq: u64,
    backup_digest: String,
    last_seq: u64,
    digest: String,
}

fn make(dir: &Path, elf: &Path) -> Made {
    ok(elf, &["init", elf.to_str().unwrap()]);
    let mut blocks = Vec::new();
    for (i, (name, text)) in texts().into_iter().enumerate() {
        let id = common::new_block(ok, elf, "markdown", name);
        let file = dir.join(format!("text-{i}.md"));
        std::fs::write(&file, &text).unwrap();
        ok(
            elf,
            &["markdown", "write", &id, "--file", file.to_str().unwrap()],
        );
        blocks.push((name, id, text));
        if i == 2 {
            let first = ok(elf, &["backup"]);
            assert_eq!(first["incremental"], false, "{first}");
        }
    }
    let second = ok(elf, &["backup"]);
    assert_eq!(second["incremental"], true, "{second}");
    let backup_seq = second["seq"].as_u64().unwrap();
    let at_backup = ok(elf, &["state-digest"]);
    assert_eq!(at_backup["seq"].as_u64(), Some(backup_seq));
    // A write past the newest backup: salvage must bring it back from the log.
    let (_, id, _) = &blocks[0];
    ok(
        elf,
        &["markdown", "write", id, "--text", "after the backup\r\n"],
    );
    blocks[0].2 = b"after the backup\r\n".to_vec();
    let end = ok(elf, &["state-digest"]);
    Made {
        blocks,
        backup_seq,
        backup_digest: at_backup["state_digest"].as_str().unwrap().to_owned(),
        last_seq: end["seq"].as_u64().unwrap(),
        digest: end["state_digest"].as_str().unwrap().to_owned(),
    }
}

/// Flips `n` bytes of `file` from `at` on.
fn flip(file: &Path, at: usize, n: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    assert!(
        bytes.len() > at + n,
        "{} is {} bytes",
        file.display(),
        bytes.len()
    );
    for b in &mut bytes[at..at + n] {
        *b ^= 0x5a;
    }
    std::fs::write(file, bytes).unwrap();
}

/// Salvages `elf` into `new`, checks it recovered every event and every text, and returns
/// the report.
fn salvage_whole(elf: &Path, new: &Path, made: &Made) -> Value {
    let report = ok(
        elf,
        &["salvage", elf.to_str().unwrap(), new.to_str().unwrap()],
    );
    assert_eq!(report["lost"], serde_json::json!([]), "{report}");
    assert_eq!(report["seq"].as_u64(), Some(made.last_seq), "{report}");
    assert_eq!(
        report["backup_seq"].as_u64(),
        Some(made.backup_seq),
        "{report}"
    );
    assert_eq!(report["state_digest"].as_str(), Some(made.digest.as_str()));
    let verified = ok(new, &["verify"]);
    assert_eq!(verified["ok"], true, "{verified}");
    for (name, id, text) in &made.blocks {
        let read = ok(new, &["markdown", "read", id]);
        assert_eq!(
            read["markdown"].as_str().map(str::as_bytes),
            Some(text.as_slice()),
            "block {name}"
        );
    }
    // The salvaged document takes a write.
    ok(
        new,
        &["markdown", "write", &made.blocks[1].1, "--text", "again"],
    );
    report
}

#[test]
fn a_damaged_log_is_refused_naming_salvage_and_the_backup_and_salvage_brings_back_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("notes.elf");
    let made = make(dir.path(), &elf);
    let backup = dir.path().join("notes.elf.backup");
    assert!(backup.is_file());

    // The first group of events (those of `init`) is stored in events.pack.
    let pack = elf.join("events.pack");
    let len = std::fs::metadata(&pack).unwrap().len() as usize;
    flip(&pack, len / 2, 4);
    let refused = run(&elf, &["block", "list"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("elfiee salvage"), "{err}");
    assert!(err.contains(backup.to_str().unwrap()), "{err}");
    assert!(
        err.contains(&format!("seq {}", made.backup_seq)),
        "the newest backup's seq: {err}"
    );
    // One message, no log lines around it (RUST_LOG is unset).
    assert!(!err.contains("WARN"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let new = dir.path().join("saved.elf");
    let report = salvage_whole(&elf, &new, &made);
    let sources: Vec<&str> = report["recovered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["source"].as_str().unwrap())
        .collect();
    assert!(sources.contains(&"backup"), "{report}");

    // A second salvage into the same place is refused; the first one's document stays.
    let again = run(
        &elf,
        &["salvage", elf.to_str().unwrap(), new.to_str().unwrap()],
    );
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("exists"), "{err}");
    assert_eq!(ok(&new, &["verify"])["ok"], true);

    // The backup restores to the digest at its seq.
    let restored = dir.path().join("restored.elf");
    let r = ok(
        &elf,
        &[
            "restore",
            backup.to_str().unwrap(),
            restored.to_str().unwrap(),
        ],
    );
    assert_eq!(r["seq"].as_u64(), Some(made.backup_seq));
    assert_eq!(
        r["state_digest"].as_str(),
        Some(made.backup_digest.as_str())
    );
}

#[test]
fn a_damaged_body_is_named_on_read_and_salvage_takes_it_from_the_backup() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("notes.elf");
    let made = make(dir.path(), &elf);
    let (_, large_id, _) = &made.blocks[4];

    // The 300 KB body is the store's largest record: a byte in its middle.
    let pack = elf.join("content").join("pack");
    let len = std::fs::metadata(&pack).unwrap().len() as usize;
    flip(&pack, len - 100_000, 1);
    let read = run(&elf, &["markdown", "read", large_id]);
    assert!(!read.status.success(), "a changed body is never shown");
    let err = String::from_utf8_lossy(&read.stderr);
    assert!(err.contains("does not match its hash"), "{err}");
    assert!(err.contains("elfiee salvage"), "{err}");
    // The other blocks still read.
    let small = ok(&elf, &["markdown", "read", &made.blocks[2].1]);
    assert_eq!(small["markdown"], "x");

    let new = dir.path().join("saved.elf");
    let report = salvage_whole(&elf, &new, &made);
    assert!(report["bodies"].as_u64().unwrap() >= 1, "{report}");

    // Without a backup the body cannot be proven: salvage puts a placeholder in place of the
    // one event that refers to it, keeps every event after it, reports the one lost in plain
    // words (no advice to run salvage inside salvage's own report), and its document passes
    // `verify`.
    std::fs::remove_file(dir.path().join("notes.elf.backup")).unwrap();
    let bare = dir.path().join("bare.elf");
    let report = ok(
        &elf,
        &["salvage", elf.to_str().unwrap(), bare.to_str().unwrap()],
    );
    let lost = report["lost"].as_array().unwrap();
    assert_eq!(lost.len(), 1, "{report}");
    let first_lost = lost[0]["from"].as_u64().unwrap();
    assert_eq!(lost[0]["to"].as_u64(), Some(first_lost), "{report}");
    assert!(first_lost < made.last_seq, "{report}");
    assert_eq!(report["seq"].as_u64(), Some(made.last_seq), "{report}");
    assert_eq!(
        report["rechained_from"].as_u64(),
        Some(first_lost),
        "{report}"
    );
    let why = lost[0]["why"].as_str().unwrap();
    assert!(why.contains("does not match its hash"), "{why}");
    assert!(why.contains("no backup"), "{why}");
    assert!(!why.contains("elfiee salvage"), "{why}");
    assert_eq!(ok(&bare, &["verify"])["ok"], true);
    // The block reads as it was before the lost write: the text from before the large one.
    let read = ok(&bare, &["markdown", "read", large_id]);
    assert_eq!(read["markdown"], "");
}
