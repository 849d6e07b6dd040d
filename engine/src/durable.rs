//! Durable flushes of a sled database ([`SledSync`]): what sled's own flush leaves out.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What a flush must add to sled's own to be durable on power loss. sled's `flush` writes its
/// buffers with `sync_file_range`, which flushes neither the disk's write cache nor the file's
/// metadata (sled issue #1452), and it writes a page too large for a quarter of a segment to a
/// blob file of its own without syncing it or its folder. [`SledSync::sync`] adds an
/// `fdatasync` of the database file, then one of every blob file not synced yet and of the
/// blob folder. The benchmark's raw baseline calls the same code.
pub struct SledSync {
    db_file: std::fs::File,
    blobs: std::path::PathBuf,
    /// Blob files known to be durable.
    blobs_synced: Mutex<HashSet<std::ffi::OsString>>,
    pub(crate) syncs: AtomicU64,
    /// Highest seq written before the last completed sync (see [`Durability`]).
    pub(crate) synced_seq: AtomicU64,
}

/// How far the log is known durable: for hosts' diagnostics and the tests that check that
/// no commit is answered before it is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// Completed syncs ([`SledSync::sync`]) since the file was opened.
    pub syncs: u64,
    /// Every event up to this seq was written before a completed sync.
    pub synced_seq: u64,
}

impl SledSync {
    /// For the sled database in `dir` (opened already: its file exists). Blob files present
    /// now count as durable (they were synced by the process that wrote them, or long ago
    /// written back).
    pub fn new(dir: &Path) -> std::io::Result<SledSync> {
        let blobs = dir.join("blobs");
        let known = blob_names(&blobs)?;
        Ok(SledSync {
            db_file: std::fs::File::open(dir.join("db"))?,
            blobs,
            blobs_synced: Mutex::new(known),
            syncs: AtomicU64::new(0),
            synced_seq: AtomicU64::new(0),
        })
    }

    /// Makes everything sled has written so far durable; call it after `Db::flush`.
    pub fn sync(&self) -> std::io::Result<()> {
        self.sync_listed(blob_names(&self.blobs)?)
    }

    /// [`SledSync::sync`] with the blob folder's file names as listed (`names`).
    fn sync_listed(&self, names: HashSet<std::ffi::OsString>) -> std::io::Result<()> {
        self.db_file.sync_data()?;
        let mut synced = self.blobs_synced.lock().unwrap_or_else(|p| p.into_inner());
        let mut added = false;
        for name in &names {
            if !synced.contains(name) {
                match std::fs::File::open(self.blobs.join(name)) {
                    Ok(file) => file.sync_data()?,
                    // sled removed it since the listing (the page it held was written again
                    // elsewhere): nothing the log needs is in it. Failing the flush for it
                    // poisoned the file for every later command.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                synced.insert(name.clone());
                added = true;
            }
        }
        // Names of blob files sled has removed are not kept.
        synced.retain(|n| names.contains(n));
        if added {
            crate::layout::sync_dir(&self.blobs)?;
        }
        self.syncs.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// Names of the files in sled's blob folder (none when it does not exist).
fn blob_names(dir: &Path) -> std::io::Result<HashSet<std::ffi::OsString>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.map(|e| e.file_name())).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashSet::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob file sled removes between the listing and the open is skipped, not an error
    /// (the flush that met it used to fail, poisoning the file).
    #[test]
    fn a_blob_file_removed_while_syncing_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("db"), b"").unwrap();
        std::fs::create_dir(dir.path().join("blobs")).unwrap();
        let sync = SledSync::new(dir.path()).unwrap();
        std::fs::write(dir.path().join("blobs").join("7"), b"page").unwrap();
        sync.sync().unwrap();
        std::fs::remove_file(dir.path().join("blobs").join("7")).unwrap();
        std::fs::write(dir.path().join("blobs").join("8"), b"page").unwrap();
        sync.sync_listed(vec!["8".into(), "9".into()].into_iter().collect())
            .expect("a blob gone since the listing is skipped");
        let synced = sync.blobs_synced.lock().unwrap();
        assert!(synced.contains(std::ffi::OsStr::new("8")));
        assert!(!synced.contains(std::ffi::OsStr::new("9")));
        assert!(
            !synced.contains(std::ffi::OsStr::new("7")),
            "removed names are not kept"
        );
    }
}
