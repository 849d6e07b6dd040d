//! The append-only event log. [`EventLog`] is the small storage interface the engine needs;
//! [`SledEventLog`] implements it on one sled database inside the `.elf`.
//!
//! The `events` tree holds the events (`e‖seq`, so it only ever grows at its end). Snapshots
//! and effect checkpoints live in their own trees; the command index is kept outside sled (see
//! [`crate::cmd_index`]). Nothing is ever overwritten or deleted in the event keyspace.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use elfiee_model::{Event, EventHash};

use crate::codec::{self, event_key};
use crate::EngineError;

/// Stored records `(seq, hash ‖ body)` in seq order.
pub type Records<'a> = Box<dyn Iterator<Item = Result<(u64, Vec<u8>), EngineError>> + 'a>;

/// Storage behind a file actor.
pub trait EventLog: Send + Sync + 'static {
    /// Seq and hash of the last stored event (`(0, ZERO)` when empty).
    fn tail(&self) -> Result<(u64, EventHash), EngineError>;
    /// Writes the sealed events of a group of commands in seq order (not yet durable; see
    /// [`EventLog::flush`]). No command is ever half written: single-event commands are one
    /// record each; a group with a multi-event command is one atomic batch.
    fn write_group(&self, commands: &[&[(u64, Vec<u8>)]]) -> Result<(), EngineError>;
    /// Makes everything appended so far durable.
    fn flush(&self) -> Result<(), EngineError>;
    /// Raw stored records with `from <= seq <= to`, in order.
    fn records(&self, from: u64, to: u64) -> Records<'_>;
    /// Stores the snapshot under a name (overwriting the previous one).
    fn put_aux(&self, tree: &str, key: &str, bytes: &[u8]) -> Result<(), EngineError>;
    fn get_aux(&self, tree: &str, key: &str) -> Result<Option<Vec<u8>>, EngineError>;
}

/// Reads decoded events `from..=to`, checking the hash chain. `prev` is the hash of `from - 1`;
/// when `None`, the hash stored with record `from - 1` is used, so damaged history is never
/// served silently.
pub fn read_events(
    log: &dyn EventLog,
    from: u64,
    to: u64,
    prev: Option<EventHash>,
) -> impl Iterator<Item = Result<Event, EngineError>> + '_ {
    let from = from.max(1);
    let mut prev = Some(prev.unwrap_or_else(|| stored_hash(log, from - 1)));
    let mut expect = from;
    log.records(from, to).map(move |r| {
        let (seq, bytes) = r?;
        if seq != expect {
            return Err(EngineError::Corrupt {
                seq: expect,
                reason: format!("missing; the next stored event is {seq}"),
            });
        }
        expect += 1;
        let e = codec::open(seq, &bytes, prev.as_ref())
            .map_err(|reason| EngineError::Corrupt { seq, reason })?;
        prev = Some(e.hash);
        Ok(e)
    })
}

/// The hash stored with record `seq` (ZERO for 0 or a missing record, which then fails the
/// chain check of the next one).
pub fn stored_hash<L: EventLog + ?Sized>(log: &L, seq: u64) -> EventHash {
    if seq == 0 {
        return EventHash::ZERO;
    }
    match log.records(seq, seq).next() {
        Some(Ok((_, bytes))) => bytes
            .get(..32)
            .and_then(|h| h.try_into().ok())
            .map(EventHash)
            .unwrap_or(EventHash::ZERO),
        _ => EventHash::ZERO,
    }
}

pub struct SledEventLog {
    db: sled::Db,
    events: sled::Tree,
    sync: SledSync,
    /// Highest seq handed to [`EventLog::write_group`].
    written_seq: AtomicU64,
}

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
    syncs: AtomicU64,
    /// Highest seq written before the last completed sync (see [`Durability`]).
    synced_seq: AtomicU64,
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
        self.db_file.sync_data()?;
        let mut synced = self.blobs_synced.lock().unwrap_or_else(|p| p.into_inner());
        let mut added = false;
        for name in blob_names(&self.blobs)? {
            if !synced.contains(&name) {
                std::fs::File::open(self.blobs.join(&name))?.sync_data()?;
                synced.insert(name);
                added = true;
            }
        }
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

impl SledEventLog {
    /// Opens (or creates) the database in `dir`. A lock held by another process is reported as
    /// [`EngineError::Locked`]; sled panics on unreadable files are turned into errors.
    pub fn open(dir: &Path, elf: &Path) -> Result<SledEventLog, EngineError> {
        let cfg = sled::Config::new()
            .path(dir)
            .flush_every_ms(None)
            .mode(sled::Mode::HighThroughput);
        let fresh = !dir.join("db").exists();
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cfg.open()));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(sled::Error::Io(e)))
                if e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(11) =>
            {
                return Err(EngineError::Locked(elf.to_owned()))
            }
            Ok(Err(e)) if e.to_string().contains("lock") => {
                return Err(EngineError::Locked(elf.to_owned()))
            }
            Ok(Err(e)) => {
                return Err(EngineError::Storage(format!(
                    "cannot open the log in {}: {e}",
                    dir.display()
                )))
            }
            Err(_) => {
                return Err(EngineError::Storage(format!(
                    "the log in {} is unreadable (sled panicked while opening it)",
                    dir.display()
                )))
            }
        };
        let events = db.open_tree("events")?;
        let sync = SledSync::new(dir).map_err(|e| EngineError::io(dir, e))?;
        if fresh {
            // sled just made its files: their folder entries must outlive a power loss too.
            crate::layout::sync_dir(dir)
                .and_then(|()| dir.parent().map_or(Ok(()), crate::layout::sync_dir))
                .map_err(|e| EngineError::io(dir, e))?;
        }
        Ok(SledEventLog {
            db,
            events,
            sync,
            written_seq: AtomicU64::new(0),
        })
    }

    /// The underlying database (for benchmarks and tools).
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// How far the log is known durable.
    pub fn durability(&self) -> Durability {
        Durability {
            syncs: self.sync.syncs.load(Ordering::Acquire),
            synced_seq: self.sync.synced_seq.load(Ordering::Acquire),
        }
    }
}

impl EventLog for SledEventLog {
    fn tail(&self) -> Result<(u64, EventHash), EngineError> {
        let last = self
            .events
            .range(event_key(0)..=event_key(u64::MAX))
            .next_back()
            .transpose()?;
        match last {
            None => Ok((0, EventHash::ZERO)),
            Some((k, v)) => {
                let seq = u64::from_be_bytes(
                    k[1..9]
                        .try_into()
                        .map_err(|_| EngineError::Storage("bad key".into()))?,
                );
                let hash: [u8; 32] =
                    v.get(..32)
                        .and_then(|h| h.try_into().ok())
                        .ok_or(EngineError::Corrupt {
                            seq,
                            reason: "record too short".into(),
                        })?;
                Ok((seq, EventHash(hash)))
            }
        }
    }

    fn write_group(&self, commands: &[&[(u64, Vec<u8>)]]) -> Result<(), EngineError> {
        if let Some((seq, _)) = commands.iter().rev().find_map(|c| c.last()) {
            self.written_seq.fetch_max(*seq, Ordering::AcqRel);
        }
        // sled seals and writes its buffer on every `apply_batch`, so a group of single-event
        // commands (the common case) is written with plain inserts, in seq order. A group with
        // a multi-event command goes into one atomic batch, still in seq order, so a crash
        // never leaves a gap or half a command.
        if commands.iter().all(|ev| ev.len() <= 1) {
            for (seq, bytes) in commands.iter().flat_map(|ev| ev.iter()) {
                self.events.insert(event_key(*seq), bytes.as_slice())?;
            }
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for (seq, bytes) in commands.iter().flat_map(|ev| ev.iter()) {
            batch.insert(&event_key(*seq), bytes.as_slice());
        }
        self.events.apply_batch(batch)?;
        Ok(())
    }

    fn flush(&self) -> Result<(), EngineError> {
        let written = self.written_seq.load(Ordering::Acquire);
        self.db.flush()?;
        self.sync.sync().map_err(|e| {
            EngineError::Storage(format!(
                "cannot make the log durable (fdatasync failed: {e}); nothing in this flush was acknowledged"
            ))
        })?;
        self.sync.synced_seq.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }

    fn records(&self, from: u64, to: u64) -> Records<'_> {
        if from > to {
            return Box::new(std::iter::empty());
        }
        Box::new(self.events.range(event_key(from)..=event_key(to)).map(|r| {
            let (k, v) = r?;
            let seq = u64::from_be_bytes(
                k[1..9]
                    .try_into()
                    .map_err(|_| EngineError::Storage("bad event key".into()))?,
            );
            Ok((seq, v.to_vec()))
        }))
    }

    fn put_aux(&self, tree: &str, key: &str, bytes: &[u8]) -> Result<(), EngineError> {
        self.db.open_tree(tree)?.insert(key, bytes)?;
        Ok(())
    }

    fn get_aux(&self, tree: &str, key: &str) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.db.open_tree(tree)?.get(key)?.map(|v| v.to_vec()))
    }
}
