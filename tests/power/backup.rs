//! The backup scenario: writers on the document while `elfiee backup` appends to one backup
//! file beside it, again and again, until the cut. After it the backup file restores (to its
//! last whole point), the restored document verifies, and it reaches at least the seq of the
//! last backup acknowledged before the cut; then a new backup run appends to the same file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{elfiee, first_lines, run};

/// The backup file beside the document.
pub fn backup_file(elf: &Path) -> PathBuf {
    elf.with_file_name("d.elf.backup")
}

/// Runs `elfiee backup --to FILE` in a loop until the cut; the seqs of the runs acknowledged.
pub fn backer(elf: &Path, stop: &AtomicBool) -> Vec<u64> {
    let mut seqs = Vec::new();
    let to = backup_file(elf);
    while !stop.load(Ordering::SeqCst) {
        let child = elfiee(elf)
            .args(["--json", "backup", "--to", to.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn a backup");
        let out = match super::wait_for_output(child, stop) {
            Some(out) => out,
            None => break,
        };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) {
            if let Some(seq) = v["seq"].as_u64() {
                seqs.push(seq);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    seqs
}

/// Waits (at most `within`) until the backup file grows: a run is writing its frames.
pub fn wait_for_a_run(elf: &Path, within: std::time::Duration) {
    let to = backup_file(elf);
    let size = || std::fs::metadata(&to).map_or(0, |m| m.len());
    let (before, deadline) = (size(), std::time::Instant::now() + within);
    while size() == before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// After the cut: the backup restores to a document that verifies and reaches `at_least`;
/// `Ok(true)` when the restore skipped what a stopped run left after the point. `Err` says
/// what went wrong.
pub fn check(elf: &Path, at_least: u64, round: u32) -> Result<bool, String> {
    let backup = backup_file(elf);
    if !backup.exists() {
        return if at_least == 0 {
            Ok(false)
        } else {
            Err(format!(
                "the backup file is gone, a run to seq {at_least} was acknowledged"
            ))
        };
    }
    let restored = elf.with_file_name(format!("restored{round}.elf"));
    let (ok, out, err) = run(
        elf,
        &[
            "--json",
            "restore",
            backup.to_str().unwrap(),
            restored.to_str().unwrap(),
        ],
    );
    let result = if !ok {
        Err(format!("restore failed: {}", first_lines(&err)))
    } else {
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let seq = v["seq"].as_u64().unwrap_or(0);
        let (verified, _, verr) = run(&restored, &["verify"]);
        if seq < at_least {
            Err(format!(
                "restored to seq {seq}, a backup to seq {at_least} was acknowledged"
            ))
        } else if !verified {
            Err(format!(
                "the restored document fails verify: {}",
                first_lines(&verr)
            ))
        } else {
            Ok(v["unfinished_bytes"].as_u64().unwrap_or(0) > 0)
        }
    };
    let _ = std::fs::remove_dir_all(&restored);
    result
}
