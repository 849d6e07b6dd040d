//! Issue 39's storage findings through the `elfiee` binary, one process per call as a user
//! or a script meets them:
//! - F1: what a cut short sled snapshot write leaves (an empty `log/snap.<lsn>.generating`)
//!   must not keep the document from opening; a CLI writing until a small tmpfs is full,
//!   one process per write, leaves a document that opens with every acknowledged write, the
//!   error names the disk, and writing resumes once space is freed.
//! - F6: a read of a damaged document never writes to it (every file hashed before and
//!   after), and says `error: …` first.
//! - F7: salvage brings back every event whose bytes are intact from a `log/db` that sled
//!   cannot open, counted against the original.
//!
//! The full-disk test mounts a tmpfs (root or CAP_SYS_ADMIN); where it cannot, it says so on
//! stderr and passes without checking anything.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn run(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee(elf, args, &[])
}

fn ok(elf: &Path, args: &[&str]) -> Value {
    common::elfiee_json(elf, args)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The names of the document's blocks.
fn block_names(elf: &Path) -> Vec<String> {
    let v = ok(elf, &["block", "list"]);
    let mut names: Vec<String> = v
        .as_array()
        .or_else(|| v["blocks"].as_array())
        .unwrap_or_else(|| panic!("no blocks in {v}"))
        .iter()
        .map(|b| b["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}

fn verify_ok(elf: &Path) {
    let out = run(elf, &["verify"]);
    assert!(out.status.success(), "verify: {}", stderr(&out));
}

#[test]
fn an_unfinished_sled_snapshot_does_not_keep_the_document_closed() {
    let dir = tempfile::tempdir().unwrap();
    let elf = common::markdown_document(dir.path(), 5);
    let before = block_names(&elf);
    // What sled leaves when its snapshot write is cut short (a full disk, a kill, a power
    // cut): the file it writes before the rename, empty, with a greater lsn than any other.
    let log = elf.join("log");
    let lsn = std::fs::read_dir(&log)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            u64::from_str_radix(name.strip_prefix("snap.")?, 16).ok()
        })
        .max()
        .unwrap_or(0);
    let unfinished = log.join(format!("snap.{:016X}.generating", lsn + 0x1000));
    std::fs::write(&unfinished, b"").unwrap();
    let out = run(&elf, &["block", "list"]);
    assert!(
        out.status.success(),
        "the document must open: {}",
        stderr(&out)
    );
    assert_eq!(block_names(&elf), before);
    verify_ok(&elf);
    assert!(
        !unfinished.exists(),
        "the unfinished snapshot is left behind"
    );
    // A partial one (some bytes, no checksum) alike.
    std::fs::write(&unfinished, b"partial snapshot bytes").unwrap();
    let id = common::new_block(ok, &elf, "markdown", "after");
    assert!(!id.is_empty());
    verify_ok(&elf);
}

/// A tmpfs of `mib` MiB on a fresh folder, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// The disk, or `None` after saying loudly why the test is skipped.
    fn mount(mib: u64) -> Option<SmallDisk> {
        let dir = tempfile::TempDir::new().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk { dir }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: this test needs a small tmpfs of its own and `mount -t tmpfs` failed ({}: {}); run it as root or with CAP_SYS_ADMIN",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: this test needs `mount` to make a small tmpfs ({e})");
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        for lazy in [false, true] {
            let mut c = std::process::Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            if c.arg(self.dir.path()).status().is_ok_and(|s| s.success()) {
                return;
            }
        }
        eprintln!("could not unmount {}", self.dir.path().display());
    }
}

#[test]
fn a_cli_writing_until_the_disk_is_full_loses_nothing_it_acknowledged() {
    let Some(disk) = SmallDisk::mount(8) else {
        return;
    };
    let elf = common::markdown_document(disk.dir.path(), 1);
    // Most of the disk taken by another program's file, so the document fills the rest.
    let ballast = disk.dir.path().join("ballast");
    std::fs::write(&ballast, vec![0x5a_u8; 6 << 20]).unwrap();
    let mut acknowledged = vec!["b0".to_string()];
    let mut refusal = None;
    for i in 0..5_000 {
        let name = format!("w{i}");
        let text = format!("write {i}: {}", "lorem ipsum ".repeat(10 + i % 40));
        let out = run(
            &elf,
            &[
                "--json", "block", "create", "--type", "markdown", "--name", &name,
            ],
        );
        if !out.status.success() {
            refusal = Some(stderr(&out));
            break;
        }
        let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["block_id"]
            .as_str()
            .unwrap()
            .to_owned();
        acknowledged.push(name);
        let out = run(&elf, &["markdown", "write", &id, "--text", &text]);
        if !out.status.success() {
            refusal = Some(stderr(&out));
            break;
        }
    }
    let refusal = refusal.expect("the disk never filled up");
    assert!(
        refusal.starts_with("error:") && refusal.contains("is full"),
        "the refusal must name the full disk first: {refusal}"
    );
    assert!(
        refusal.contains("the disk holding") && refusal.contains("d.elf"),
        "the refusal must name which disk (the one holding the document): {refusal}"
    );
    assert!(
        refusal.contains("free some space"),
        "and say what to do: {refusal}"
    );
    // At full disk a read either opens the document with every acknowledged write or is
    // refused for the disk alone (sled writes as it opens), never for damage.
    let out = run(&elf, &["--json", "block", "list"]);
    if out.status.success() {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let listed: Vec<&str> = v
            .as_array()
            .or_else(|| v["blocks"].as_array())
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap_or_default())
            .collect();
        for name in &acknowledged {
            assert!(
                listed.contains(&name.as_str()),
                "acknowledged {name} is lost"
            );
        }
    } else {
        let err = stderr(&out);
        assert!(
            err.starts_with("error:") && err.contains("is full") && !err.contains("damaged"),
            "a read at full disk must be refused for the disk alone: {err}"
        );
    }
    // Space freed: writing resumes, nothing was lost, the document verifies.
    std::fs::remove_file(&ballast).unwrap();
    let id = common::new_block(ok, &elf, "markdown", "after-full");
    ok(&elf, &["markdown", "write", &id, "--text", "resumed"]);
    let listed = block_names(&elf);
    for name in acknowledged.iter().chain(["after-full".to_string()].iter()) {
        assert!(
            listed.contains(name),
            "{name} is lost after space was freed"
        );
    }
    verify_ok(&elf);
}

/// blake3 of every file under `root`, by path.
fn hashes(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(p, blake3::hash(&bytes).to_hex().to_string());
            }
        }
    }
    out
}

/// Where the record of the block named `name`'s creation is in `log/db` (its name as the
/// event's MessagePack holds it), the last place of several.
fn places_of(db: &[u8], needle: &[u8]) -> Vec<usize> {
    db.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// A document of `n` blocks with every copy of one event's bytes in `log/db` flipped: the
/// text written to the block `b{k}`.
fn damaged(dir: &Path, n: usize, k: usize) -> PathBuf {
    let elf = common::markdown_document(dir, n);
    let db = elf.join("log").join("db");
    let mut bytes = std::fs::read(&db).unwrap();
    let needle = format!("text {k}");
    let at = places_of(&bytes, needle.as_bytes());
    assert!(!at.is_empty(), "the text of b{k} is not in log/db");
    for i in at {
        bytes[i + 1] ^= 0x20;
    }
    std::fs::write(&db, &bytes).unwrap();
    elf
}

#[test]
fn a_failed_read_of_a_damaged_document_leaves_its_bytes_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let elf = damaged(dir.path(), 30, 12);
    let before = hashes(&elf);
    for args in [
        &["block", "list"][..],
        &["log"][..],
        &["markdown", "read", "b3"][..],
    ] {
        let out = run(&elf, args);
        assert!(!out.status.success(), "{args:?} read a damaged document");
        let err = stderr(&out);
        assert!(
            err.starts_with("error:"),
            "{args:?}: the first line must be the error: {err}"
        );
        assert!(
            err.contains("salvage"),
            "{args:?} must say what to do: {err}"
        );
        assert_eq!(
            hashes(&elf),
            before,
            "{args:?} changed the damaged document"
        );
    }
}

/// The stored records (`hash ‖ body`) of the document at `elf`, read through the engine.
fn records_of(elf: &Path) -> Vec<Vec<u8>> {
    use elfiee::engine::log::{EventLog, SledEventLog};
    let log = SledEventLog::open(&elf.join("log"), elf).unwrap();
    log.records(1, u64::MAX).map(|r| r.unwrap().1).collect()
}

#[test]
fn salvage_recovers_every_event_outside_a_flipped_byte_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let elf = common::markdown_document(dir.path(), 40);
    let records = records_of(&elf);
    let total = records.len() as u64;
    let db = std::fs::read(elf.join("log").join("db")).unwrap();
    let pack = std::fs::read(elf.join("events.pack")).unwrap_or_default();
    let blobs: Vec<Vec<u8>> = std::fs::read_dir(elf.join("log").join("blobs"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| std::fs::read(e.path()).unwrap())
                .collect()
        })
        .unwrap_or_default();
    let trials = 16;
    let mut sled_refused = 0;
    // sled's file is a whole segment or more, mostly unused: the flips go where it is not.
    let used = db.iter().rposition(|&b| b != 0).map_or(db.len(), |i| i + 1);
    for t in 0..trials {
        let at = used * (2 * t + 1) / (2 * trials);
        // The first event no intact copy of which is left anywhere: salvage must reach the
        // event before it (or the end).
        let intact_elsewhere = |r: &[u8]| {
            places_of(&db, r)
                .iter()
                .any(|&p| !(p..p + r.len()).contains(&at))
                || !places_of(&pack, r).is_empty()
                || blobs.iter().any(|b| !places_of(b, r).is_empty())
        };
        let reachable = records
            .iter()
            .position(|r| !intact_elsewhere(r))
            .map_or(total, |i| i as u64);
        let damaged = dir.path().join(format!("damaged-{t}.elf"));
        common::copy_dir(&elf, &damaged);
        let path = damaged.join("log").join("db");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        let read = run(&damaged, &["block", "list"]);
        if !read.status.success() {
            sled_refused += 1;
            let err = stderr(&read);
            assert!(
                err.starts_with("error:") && err.contains("salvage"),
                "trial {t}: the first line must be the error, naming salvage: {err}"
            );
            assert!(
                !err.contains("elfiee-trial-"),
                "trial {t}: names the copy: {err}"
            );
        }
        let saved = dir.path().join(format!("saved-{t}.elf"));
        let out = run(
            &damaged,
            &[
                "--json",
                "salvage",
                damaged.to_str().unwrap(),
                saved.to_str().unwrap(),
            ],
        );
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "trial {t} (byte {at}): {err}");
        assert!(out.status.success(), "trial {t} (byte {at}): {err}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let seq = report["seq"].as_u64().unwrap();
        assert!(
            seq >= reachable,
            "trial {t} (byte {at} of {}): salvage recovered {seq} events of {total}, {reachable} are intact: {report}",
            db.len()
        );
        verify_ok(&saved);
        // The same events as the original, byte for byte.
        let got = records_of(&saved);
        assert_eq!(&got[..], &records[..got.len()], "trial {t}");
    }
    eprintln!("sled refused the damaged document in {sled_refused} of {trials} trials");
}
