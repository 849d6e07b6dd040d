//! sled's own files beside its data (`log/snap.*`, `log/conf`): what a cut short write leaves
//! of them, mended before sled reads them (issue 39, F1).
//!
//! - sled writes a page-table snapshot as `snap.<lsn>.generating`, syncs it, then renames it
//!   to `snap.<lsn>`; the rename is what makes it a snapshot. But sled's reader takes every
//!   file whose name starts with `snap.` and trusts the greatest name, and
//!   `snap.<lsn>.generating` sorts after `snap.<lsn>`: a write cut short (a full disk, a kill,
//!   a power cut) leaves an empty or partial `.generating` file that makes every later open
//!   fail with "corrupt snapshot", though every event is intact. Such a file is never a
//!   finished snapshot, so it is removed — only while no process has the log open (under
//!   sled's own lock), as a live sled may be writing it.
//! - sled writes `conf` when it is missing or short and never syncs it; after a power cut it
//!   may be empty, or torn (a cut kept its first write, not its checksum). The engine syncs
//!   it (and its folder) right after an open that wrote it, and removes a torn one before
//!   the open (sled writes it anew: the engine always opens with sled's defaults).
//! - sled writes a snapshot only as it opens, of its log as it reads it then, and never syncs
//!   the log's folder (P1, issue 39, found by the power-cut harness). Two ways a power cut
//!   then leaves a log sled cannot open, though every acknowledged event was synced:
//!   (a) the new snapshot's rename (and the old one's removal) is lost while later writes,
//!   which reuse segments only the new snapshot has accounted for, were synced: sled starts
//!   from the old snapshot and finds those segments overwritten; (b) the snapshot covers log
//!   data a killed process wrote and never synced (sled "syncs" with `sync_file_range`,
//!   which makes nothing durable by itself), and the cut loses that data under it. So the
//!   engine syncs sled's files (database, blobs) before an open of a log that was not
//!   closed cleanly, and the log's folder after an open that changed the snapshot files,
//!   before anything is written. On ext4 both windows are narrow (a journal commit makes
//!   the rename durable within seconds, and an `fsync` of the snapshot commits the journal
//!   with the data `sync_file_range` wrote), but neither POSIX nor other filesystems
//!   promise it: the harness's lazy filesystem, which keeps only what was synced, shows
//!   both.
//! - sled mends what it opens: it takes the first damaged message of its log for the end and
//!   rewrites every segment past it, so handing a damaged log to sled destroys events
//!   salvage could have read (F6). When the log closed cleanly the engine writes the
//!   `log/closed` manifest (name, size, inode, modification and change times of each of
//!   sled's files); an open that finds the files as the manifest describes them opens them
//!   at once, any other (after a kill, a power cut, or a change by anything else) first
//!   opens a scratch copy and reads its every event through the hash chain, and refuses the
//!   document, untouched, if that fails.

use std::os::unix::io::AsRawFd;

use crate::error::EngineError;
use std::path::Path;

/// A check of a scratch copy of sled's files (`log/`), before sled may open the real ones.
pub(crate) type Trial<'a> = &'a dyn Fn(&Path) -> Result<(), EngineError>;

/// What [`before_open`] found: whether sled will write `conf` as it opens.
#[derive(Debug, Clone)]
pub(crate) struct BeforeOpen {
    writes_conf: bool,
    /// The names of sled's snapshot files before the open (see the module docs, P1).
    snapshots: Vec<std::ffi::OsString>,
}

/// The manifest of a cleanly closed log (see the module docs).
const MANIFEST: &str = "closed";

/// Before sled opens the log in `dir`, if no process holds it: removes the unfinished
/// snapshot files (see the module docs) and, with `trial`, makes sure sled may open it: when
/// the files are not as the manifest of the last clean close describes them, `trial` must
/// accept a scratch copy of them (`Err`: the document is refused and left as it is). A
/// copy that cannot be made (no space where scratch files go) is skipped with a warning.
pub(crate) fn before_open(dir: &Path, trial: Option<Trial<'_>>) -> Result<BeforeOpen, EngineError> {
    let conf = dir.join("conf");
    let mut writes_conf = std::fs::metadata(&conf).map_or(true, |m| m.len() <= 8);
    let db = dir.join("db");
    if let Ok(file) = std::fs::File::open(&db) {
        // The lock sled takes (`flock`, exclusive): held by us, nobody has the log open, and
        // nobody can open it until the file is closed at the end of this block.
        // SAFETY: flock on a file descriptor this function owns.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if locked {
            let removed = unfinished_snapshots(dir)
                .into_iter()
                .filter(|p| {
                    tracing::info!(file = %p.display(), "removing an unfinished sled snapshot");
                    std::fs::remove_file(p).is_ok()
                })
                .count();
            if removed > 0 {
                let _ = crate::layout::sync_dir(dir);
            }
            if damaged_conf(&conf) {
                // sled would only warn, then read the damaged parameters (or refuse them); the
                // engine always opens with sled's defaults, which sled writes anew.
                tracing::warn!(file = %conf.display(), "sled's conf is damaged (a power cut before it was synced); writing it anew");
                writes_conf = std::fs::remove_file(&conf).is_ok();
            }
            let now = manifest(dir);
            let closed = std::fs::read_to_string(dir.join(MANIFEST)).ok();
            if now.is_none() || closed != now {
                if let Some(trial) = trial {
                    on_a_copy(dir, trial)?;
                }
                // What a killed process wrote and never synced must be durable before the
                // snapshot sled writes as it opens covers it (P1 (b), module docs).
                sync_sled_files(dir).map_err(|e| EngineError::io(dir, e))?;
            }
        }
        drop(file);
    }
    Ok(BeforeOpen {
        writes_conf,
        snapshots: snapshot_names(dir),
    })
}

/// Whether sled's `conf` holds more than sled calls empty (8 bytes) but fails its checksum
/// (`crc32` of the bytes before the last four, little-endian, as sled writes it).
fn damaged_conf(conf: &Path) -> bool {
    std::fs::read(conf).is_ok_and(|b| {
        b.len() > 8 && crc32fast::hash(&b[..b.len() - 4]).to_le_bytes() != b[b.len() - 4..]
    })
}

/// `fdatasync` of sled's database file and every blob file, then of the blob folder.
fn sync_sled_files(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir.join("db"))?.sync_data()?;
    let blobs = dir.join("blobs");
    match std::fs::read_dir(&blobs) {
        Ok(entries) => {
            for e in entries {
                std::fs::File::open(e?.path())?.sync_data()?;
            }
            crate::layout::sync_dir(&blobs)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The names of the `snap.*` files in `dir`, sorted.
fn snapshot_names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("snap."))
        .collect();
    names.sort();
    names
}

/// Runs `trial` on a scratch copy of sled's files in `dir`.
fn on_a_copy(dir: &Path, trial: Trial<'_>) -> Result<(), EngineError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let scratch =
        Scratch(std::env::temp_dir().join(format!("elfiee-trial-{}-{nanos}", std::process::id())));
    let copy = scratch.0.join("log");
    let copied = crate::layout::copy_tree(dir, &copy, |_, e| Err(e)).and_then(|()| {
        std::fs::remove_file(copy.join(MANIFEST)).or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        })
    });
    if let Err(e) = copied {
        tracing::warn!(error = %e, "cannot copy the log to try it; opening it directly");
        return Ok(());
    }
    tracing::debug!(log = %dir.display(), "the log was not closed cleanly: trying a copy first");
    let tried = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| trial(&copy)))
        .unwrap_or_else(|_| {
            Err(EngineError::Storage(
                "the log is unreadable (sled panicked while reading it)".into(),
            ))
        });
    // Its messages name the document's log, not the copy.
    let (from, to) = (copy.display().to_string(), dir.display().to_string());
    let tried = tried.map_err(|e| match e {
        EngineError::Storage(m) => EngineError::Storage(m.replace(&from, &to)),
        EngineError::Corrupt { seq, reason } => EngineError::Corrupt {
            seq,
            reason: reason.replace(&from, &to),
        },
        EngineError::Io { path, message } => EngineError::Io {
            path: dir.join(path.strip_prefix(&copy).unwrap_or(&path)),
            message: message.replace(&from, &to),
        },
        other => other,
    });
    // A full disk where the copy went says nothing about the document.
    match tried {
        Err(e) if e.blames_the_disk() => {
            tracing::warn!(error = %e, "cannot try the log on a copy; opening it directly");
            Ok(())
        }
        other => other,
    }
}

/// A scratch folder, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The manifest of the files in `dir` as they are now (`None`: they cannot be read).
fn manifest(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mut lines = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()? {
            let e = e.ok()?;
            let m = e.metadata().ok()?;
            let path = e.path();
            if m.is_dir() {
                stack.push(path);
                continue;
            }
            let name = path.strip_prefix(dir).ok()?.to_string_lossy().into_owned();
            if name == MANIFEST {
                continue;
            }
            lines.push(format!(
                "{name} {} {} {}.{} {}.{}",
                m.len(),
                m.ino(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec()
            ));
        }
    }
    lines.sort();
    Some(lines.join("\n") + "\n")
}

/// After sled closed the log in `dir` cleanly: writes the manifest of its files.
pub(crate) fn closed_cleanly(dir: &Path) {
    let Some(now) = manifest(dir) else {
        return;
    };
    // Not synced: a manifest a power cut loses or empties only makes the next open try a
    // copy first (it never matches files it does not describe).
    let tmp = dir.join(".closed.tmp");
    let written =
        std::fs::write(&tmp, now).and_then(|()| std::fs::rename(&tmp, dir.join(MANIFEST)));
    if let Err(e) = written {
        // The next open tries a copy first: slower, never wrong.
        tracing::debug!(error = %e, "the log's manifest was not written at close");
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Forgets the manifest (the log is about to change).
pub(crate) fn opened(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(MANIFEST));
}

/// After sled opened the log in `dir`: makes the `conf` it wrote durable, and the snapshot
/// it wrote (its rename, the old one's removal: P1 (a) in the module docs).
pub(crate) fn after_open(dir: &Path, before: BeforeOpen) -> std::io::Result<()> {
    if before.writes_conf {
        std::fs::File::open(dir.join("conf"))?.sync_all()?;
    }
    if before.writes_conf || snapshot_names(dir) != before.snapshots {
        crate::layout::sync_dir(dir)?;
    }
    Ok(())
}

/// The `snap.*.generating` files in `dir`.
pub(crate) fn unfinished_snapshots(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("snap.") && name.ends_with(".generating")
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfinished_snapshot_is_removed_only_when_the_log_is_free() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("db"), b"").unwrap();
        std::fs::write(dir.path().join("snap.00000000000005FF"), b"x").unwrap();
        let gen = dir.path().join("snap.0000000000000FFF.generating");
        std::fs::write(&gen, b"").unwrap();
        // Held by another open file description: left alone.
        let held = std::fs::File::open(dir.path().join("db")).unwrap();
        assert_eq!(
            unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        before_open(dir.path(), None).unwrap();
        assert!(gen.exists(), "removed while the log was held");
        drop(held);
        before_open(dir.path(), None).unwrap();
        assert!(!gen.exists());
        assert!(dir.path().join("snap.00000000000005FF").exists());
    }

    /// A `conf` a power cut tore (longer than sled calls empty, its checksum wrong) is written
    /// anew, not read (issue 39: it was removed by hand before).
    #[test]
    fn a_torn_conf_is_written_anew_as_the_log_opens() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        drop(crate::log::SledEventLog::open_scratch(&log, dir.path()).unwrap());
        let conf = log.join("conf");
        let whole = std::fs::read(&conf).unwrap();
        assert!(!damaged_conf(&conf));
        std::fs::write(&conf, &whole[..whole.len() - 3]).unwrap();
        assert!(damaged_conf(&conf));
        drop(crate::log::SledEventLog::open_scratch(&log, dir.path()).unwrap());
        assert_eq!(std::fs::read(&conf).unwrap(), whole);
    }
}
