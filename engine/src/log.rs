//! The append-only event log. [`EventLog`] is the small storage interface the engine needs;
//! [`SledEventLog`] implements it on one sled database inside the `.elf`.
//!
//! The `events` tree holds the events (`e‖seq`, so it only ever grows at its end). Snapshots
//! and effect checkpoints live in their own trees; the command index is kept outside sled (see
//! [`crate::cmd_index`]). Nothing is ever overwritten or deleted in the event keyspace.
//!
//! A command with [`GROUP_MIN_EVENTS`] or more events (an import chunk) is stored as one
//! **group**: its records go, one after the other, into `events.pack` beside the log, and the
//! `events` tree gets one small key `g‖first_seq` (count, where in the pack, its blake3, the
//! last event's hash). Thousands of events in sled's own file made every later open of the
//! document pay for them (sled reads every segment header at open and rewrites the free
//! segments its garbage collection leaves behind); a group costs sled one key. [`records`]
//! yields grouped and single events alike, in seq order, so nothing above this module knows
//! the difference.
//!
//! Commands committed together in one group commit (concurrent writers) are stored as
//! **runs**: one sled value `r‖first_seq` holding the records of several whole commands
//! ([`RUN_MAX_BYTES`] at most), instead of one sled key per event. sled copies a leaf on every
//! insert, so one key per event made the writer's CPU, not the disk, the limit of concurrent
//! commits. A lone command keeps its own `e` key(s), as before.
//!
//! [`records`]: EventLog::records

mod blocks;
pub(crate) mod sled_files;

use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use elfiee_model::{Event, EventHash};

pub use crate::durable::{Durability, SledSync};
pub use blocks::{Block, Blocks, GroupEntry};

use blocks::{run_count, seq_of_key, split_spans, RunIter};

use crate::codec::{self, event_key};
use crate::error::{sled_write_error, write_error, EngineError};

/// Side records live in the `events` tree beside the events, under their own first byte, so
/// they are written in the same atomic batch as the events they belong to and never met by
/// the event ranges (`e‖seq`, `g‖seq`). Which first bytes exist and what they hold is the
/// foreign seam's business (`file::foreign`, behind [`crate::foreign`]).
pub fn side_key(prefix: u8, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + rest.len());
    k.push(prefix);
    k.extend_from_slice(rest);
    k
}

/// A side record: `(key, value)`.
pub type SideRecord = (Vec<u8>, Vec<u8>);

/// Stored records `(seq, hash ‖ body)` in seq order.
pub type Records<'a> = Box<dyn Iterator<Item = Result<(u64, Vec<u8>), EngineError>> + 'a>;

/// Storage behind a file actor.
pub trait EventLog: Send + Sync + 'static {
    /// Seq and hash of the last stored event (`(0, ZERO)` when empty).
    fn tail(&self) -> Result<(u64, EventHash), EngineError>;
    /// Writes the sealed events of a group of commands in seq order (not yet durable; see
    /// [`EventLog::flush`]). No command is ever half written: single-event commands are one
    /// record each; a group with a multi-event command is one atomic batch.
    ///
    /// `side` holds records kept beside the events (see [`side_key`]), written in the same
    /// atomic batch as them.
    fn write_group(
        &self,
        commands: &[&[(u64, Vec<u8>)]],
        side: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), EngineError>;
    /// Makes everything appended so far durable.
    fn flush(&self) -> Result<(), EngineError>;
    /// Raw stored records with `from <= seq <= to`, in order.
    fn records(&self, from: u64, to: u64) -> Records<'_>;
    /// Stores `bytes` under `key` in the auxiliary tree `tree` (overwriting what was there):
    /// records kept beside the events that are not events (named checkpoints of effects).
    fn put_aux(&self, tree: &str, key: &str, bytes: &[u8]) -> Result<(), EngineError>;
    /// What [`EventLog::put_aux`] stored under `key` in `tree`, if anything.
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

/// The [`EventLog`] of a document: its sled database in `log/`.
pub struct SledEventLog {
    /// Dropped by hand (see `Drop`), so the close of sled's files can be recorded after it.
    db: std::mem::ManuallyDrop<sled::Db>,
    events: std::mem::ManuallyDrop<sled::Tree>,
    /// `log/` when this log records its clean close ([`sled_files`]).
    records_close: Option<PathBuf>,
    sync: SledSync,
    /// Highest seq handed to [`EventLog::write_group`].
    written_seq: AtomicU64,
    /// Reads of side records since the log was opened ([`SledEventLog::side_reads`]).
    side_reads: AtomicU64,
    /// `events.pack`, opened when a group is first written or read.
    pack: GroupPack,
}

/// A command with at least this many events is stored as a group (see the module docs).
pub const GROUP_MIN_EVENTS: usize = 16;

/// Prefix of group keys in the `events` tree (after `e`, so event ranges never see them).
pub const GROUP_PREFIX: u8 = b'g';

/// The sled key of the group whose first event is `first_seq`.
pub fn group_key(first_seq: u64) -> [u8; 9] {
    codec::seq_key(GROUP_PREFIX, first_seq)
}

/// Prefix of run keys in the `events` tree (after `e` and `g`).
pub const RUN_PREFIX: u8 = b'r';

/// A run's records take at most this many bytes (its value 4 more, the count), so sled keeps
/// it in its own file (it writes a page larger than a quarter of a segment to a blob file of
/// its own).
pub const RUN_MAX_BYTES: usize = 32 * 1024;

/// The sled key of the run whose first event is `first_seq`.
pub fn run_key(first_seq: u64) -> [u8; 9] {
    codec::seq_key(RUN_PREFIX, first_seq)
}

/// Appends `len (u32 LE) ‖ record` for each record (a group's bytes, a run's after its count).
fn encode_records<'a>(
    out: &mut Vec<u8>,
    records: impl Iterator<Item = &'a [u8]>,
) -> Result<(), EngineError> {
    for r in records {
        let len = u32::try_from(r.len()).map_err(|_| {
            EngineError::Storage(format!("an event of {} bytes is too large", r.len()))
        })?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(r);
    }
    Ok(())
}

/// The `(seq, record)`s of a run, from its key and value (public for the benchmark's raw
/// floor, which reads the storage without the engine).
pub fn split_run(key: &[u8], v: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, EngineError> {
    Ok(run_records(key, v)?
        .into_iter()
        .map(|(seq, r)| (seq, r.to_vec()))
        .collect())
}

/// Byte strings as a run holds its records: `count (u32 LE) ‖ (len (u32 LE) ‖ bytes)*` (what
/// side records that list one item per event use).
pub(crate) fn encode_list(items: &[Vec<u8>]) -> Result<Vec<u8>, EngineError> {
    let count = u32::try_from(items.len())
        .map_err(|_| EngineError::Storage("too many items in one record".into()))?;
    let mut out = Vec::with_capacity(4 + items.iter().map(|i| i.len() + 4).sum::<usize>());
    out.extend_from_slice(&count.to_le_bytes());
    encode_records(&mut out, items.iter().map(Vec::as_slice))?;
    Ok(out)
}

/// The items of an [`encode_list`] value, numbered from `first`.
pub(crate) fn decode_list(first: u64, v: &[u8]) -> Result<Vec<(u64, &[u8])>, EngineError> {
    let count = run_count(v).ok_or_else(|| EngineError::Corrupt {
        seq: first,
        reason: format!("a list record of {} bytes has no count", v.len()),
    })?;
    split_records(first, count, &v[4..], "list")
}

/// [`split_run`] without copying the records.
fn run_records<'v>(key: &[u8], v: &'v [u8]) -> Result<Vec<(u64, &'v [u8])>, EngineError> {
    let first = seq_of_key(key)?;
    let count = run_count(v).ok_or_else(|| EngineError::Corrupt {
        seq: first,
        reason: format!("a run record of {} bytes has no event count", v.len()),
    })?;
    split_records(first, count, &v[4..], "run")
}

/// `events.pack`: the records of every group, `len (u32 LE) ‖ record` each, groups one after
/// the other, only ever appended. A group is synced before its key reaches sled, so a key
/// never points at bytes a crash could lose; bytes after the last key (a crash between the
/// two) are never read and are overwritten by the next group.
struct GroupPack {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl GroupPack {
    /// Runs `f` on the pack, opening it first; only a writer (`create`) may create it (and
    /// its errors name a full or failing disk as such).
    fn with<R>(
        &self,
        create: bool,
        f: impl FnOnce(&std::fs::File) -> std::io::Result<R>,
    ) -> Result<R, EngineError> {
        let failed = |e: std::io::Error| match (create, self.path.parent()) {
            (true, Some(doc)) => write_error(doc, e, |e| EngineError::io(&self.path, e)),
            _ => EngineError::io(&self.path, e),
        };
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if file.is_none() {
            let existed = self.path.exists();
            if !existed && !create {
                return Err(EngineError::Storage(format!(
                    "{} is missing, but the log refers to events stored in it; restore it from a backup",
                    self.path.display()
                )));
            }
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)
                .map_err(failed)?;
            if !existed {
                if let Some(dir) = self.path.parent() {
                    crate::layout::sync_dir(dir)
                        .map_err(|e| write_error(dir, e, |e| EngineError::io(dir, e)))?;
                }
            }
            *file = Some(opened);
        }
        f(file.as_ref().expect("opened above")).map_err(failed)
    }

    /// Appends the records of one command at `offset` and makes them durable.
    fn write(
        &self,
        offset: u64,
        first: u64,
        events: &[(u64, Vec<u8>)],
    ) -> Result<GroupEntry, EngineError> {
        let mut buf = Vec::with_capacity(events.iter().map(|(_, b)| b.len() + 4).sum());
        encode_records(&mut buf, events.iter().map(|(_, b)| b.as_slice()))?;
        let last_hash = events
            .last()
            .and_then(|(_, b)| b.get(..32))
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| EngineError::Storage("a group needs whole records".into()))?;
        self.with(true, |f| {
            f.write_all_at(&buf, offset)?;
            f.sync_data()
        })?;
        Ok(GroupEntry {
            first,
            count: u32::try_from(events.len())
                .map_err(|_| EngineError::Storage("too many events in one command".into()))?,
            offset,
            len: buf.len() as u64,
            blake3: *blake3::hash(&buf).as_bytes(),
            last_hash,
        })
    }
}

impl blocks::GroupBytes for GroupPack {
    fn group_bytes(&self, g: &GroupEntry) -> Result<Vec<u8>, EngineError> {
        let pack_len = self
            .with(false, |f| f.metadata().map(|m| m.len()))
            .map_err(|e| EngineError::Corrupt {
                seq: g.first,
                reason: e.to_string(),
            })?;
        if g.offset.checked_add(g.len).is_none_or(|end| end > pack_len) {
            return Err(EngineError::Corrupt {
                seq: g.first,
                reason: format!(
                    "the group of {} events lies past the end of events.pack ({} bytes)",
                    g.count, pack_len
                ),
            });
        }
        let mut buf = vec![0u8; g.len as usize];
        self.with(false, |f| f.read_exact_at(&mut buf, g.offset))
            .map_err(|e| EngineError::Corrupt {
                seq: g.first,
                reason: format!(
                    "the group of {} events is unreadable in events.pack: {e}",
                    g.count
                ),
            })?;
        if blake3::hash(&buf).as_bytes() != &g.blake3 {
            return Err(EngineError::Corrupt {
                seq: g.first,
                reason: format!(
                    "the group of {} events (seq {}..={}) in events.pack does not match its blake3",
                    g.count,
                    g.first,
                    g.last()
                ),
            });
        }
        Ok(buf)
    }
}

/// Splits a group's bytes (read from `events.pack`) into its `(seq, record)`s; no hash check.
pub fn split_group(g: &GroupEntry, buf: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, EngineError> {
    Ok(split_records(g.first, g.count, buf, "group")?
        .into_iter()
        .map(|(seq, r)| (seq, r.to_vec()))
        .collect())
}

/// `len (u32 LE) ‖ record` for events `first..first + count`, nothing after them.
fn split_records<'b>(
    first: u64,
    count: u32,
    buf: &'b [u8],
    what: &str,
) -> Result<Vec<(u64, &'b [u8])>, EngineError> {
    Ok((first..)
        .zip(split_spans(first, count, buf, what)?)
        .map(|(seq, span)| (seq, &buf[span]))
        .collect())
}

impl SledEventLog {
    /// Opens (or creates) the database in `dir`. A lock held by another process is reported as
    /// [`EngineError::Locked`]; sled panics on unreadable files are turned into errors. A log
    /// that was not closed cleanly is first tried on a scratch copy: sled mends what it opens,
    /// so a damaged log is refused before sled can rewrite it (see the module `sled_files`).
    pub fn open(dir: &Path, elf: &Path) -> Result<SledEventLog, EngineError> {
        // What sled makes of the copy: refused when sled cannot open it, fails reading it,
        // or mends it shorter than `HEAD` (written at every close) says it is — what sled
        // would then rewrite is lost. A record sled reads whole but that does not decode or
        // chain is the engine's to report, at the real open (sled rewrites nothing for it).
        let trial = |copy: &Path| -> Result<(), EngineError> {
            let log = SledEventLog::open_scratch(copy, elf)?;
            let tail = match log.tail() {
                Ok((tail, _)) => tail,
                Err(EngineError::Corrupt { .. }) => return Ok(()),
                Err(e) => return Err(e),
            };
            for r in log.records(1, tail) {
                match r {
                    Ok(_) | Err(EngineError::Corrupt { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            match crate::layout::ElfPaths::new(elf).read_head() {
                Some((seq, _)) if seq > tail => Err(EngineError::Corrupt {
                    seq: tail + 1,
                    reason: format!(
                        "sled reads its log only up to event {tail}, but HEAD records event {seq}: its file is damaged"
                    ),
                }),
                _ => Ok(()),
            }
        };
        Self::open_as(dir, elf, Some(&trial))
    }

    /// Opens the database in `dir` as [`SledEventLog::open`] does, but without trying it on
    /// a copy first and without recording its close: for a scratch copy sled may mend as it
    /// likes (salvage), or a log made anew.
    pub fn open_scratch(dir: &Path, elf: &Path) -> Result<SledEventLog, EngineError> {
        Self::open_as(dir, elf, None)
    }

    fn open_as(
        dir: &Path,
        elf: &Path,
        trial: Option<sled_files::Trial<'_>>,
    ) -> Result<SledEventLog, EngineError> {
        let cfg = sled::Config::new()
            .path(dir)
            .flush_every_ms(None)
            .mode(sled::Mode::HighThroughput);
        let fresh = !dir.join("db").exists();
        let before = sled_files::before_open(dir, trial)?;
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
                // sled writes as it opens: a full disk is named as such.
                return Err(sled_write_error(elf, e, |e| {
                    EngineError::Storage(format!(
                        "cannot open the log in {}: {}",
                        dir.display(),
                        crate::error::sled_text(&e)
                    ))
                }));
            }
            Err(_) => {
                return Err(EngineError::Storage(format!(
                    "the log in {} is unreadable (sled panicked while opening it)",
                    dir.display()
                )))
            }
        };
        sled_files::after_open(dir, before)
            .map_err(|e| write_error(elf, e, |e| EngineError::io(dir.join("conf"), e)))?;
        let events = db.open_tree("events")?;
        let sync = SledSync::new(dir).map_err(|e| EngineError::io(dir, e))?;
        if fresh {
            // sled just made its files: their folder entries must outlive a power loss too.
            crate::layout::sync_dir(dir)
                .and_then(|()| dir.parent().map_or(Ok(()), crate::layout::sync_dir))
                .map_err(|e| EngineError::io(dir, e))?;
        }
        let pack = GroupPack {
            path: elf.join("events.pack"),
            file: Mutex::new(None),
        };
        if trial.is_some() {
            sled_files::opened(dir);
        }
        Ok(SledEventLog {
            db: std::mem::ManuallyDrop::new(db),
            events: std::mem::ManuallyDrop::new(events),
            records_close: trial.is_some().then(|| dir.to_owned()),
            sync,
            written_seq: AtomicU64::new(0),
            side_reads: AtomicU64::new(0),
            pack,
        })
    }

    /// A record kept beside the events ([`side_key`]).
    pub fn side(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.side_reads.fetch_add(1, Ordering::Relaxed);
        Ok(self.events.get(key)?.map(|v| v.to_vec()))
    }

    /// The side record with the greatest key in `from..=to`.
    pub fn side_before(&self, from: &[u8], to: &[u8]) -> Result<Option<SideRecord>, EngineError> {
        self.side_reads.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .events
            .range(from..=to)
            .next_back()
            .transpose()?
            .map(|(k, v)| (k.to_vec(), v.to_vec())))
    }

    /// The side records in `from..=to`, with their values (one range scan).
    pub fn side_records(&self, from: &[u8], to: &[u8]) -> Result<Vec<SideRecord>, EngineError> {
        self.side_reads.fetch_add(1, Ordering::Relaxed);
        self.events
            .range(from..=to)
            .map(|r| {
                let (k, v) = r?;
                Ok((k.to_vec(), v.to_vec()))
            })
            .collect()
    }

    /// Every side record whose key starts with `prefix`.
    pub fn side_prefix(&self, prefix: &[u8]) -> Result<Vec<SideRecord>, EngineError> {
        self.events
            .scan_prefix(prefix)
            .map(|r| {
                let (k, v) = r?;
                Ok((k.to_vec(), v.to_vec()))
            })
            .collect()
    }

    /// The keys of the side records in `from..=to` (one range scan; values are not read).
    pub fn side_keys(&self, from: &[u8], to: &[u8]) -> Result<Vec<Vec<u8>>, EngineError> {
        self.side_reads.fetch_add(1, Ordering::Relaxed);
        self.events
            .range(from..=to)
            .keys()
            .map(|k| Ok(k?.to_vec()))
            .collect()
    }

    /// Side-record reads ([`SledEventLog::side`], `side_before`, `side_keys`) since the log was
    /// opened: the test hook that shows a reader of committed events (an effect) costs no
    /// storage read per event to learn where an event came from.
    pub fn side_reads(&self) -> u64 {
        self.side_reads.load(Ordering::Relaxed)
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

    /// Flushes if events were written since the last flush (`ForeignLog::append_deferred`).
    pub fn flush_written(&self) -> Result<(), EngineError> {
        if self.written_seq.load(Ordering::Acquire) > self.sync.synced_seq.load(Ordering::Acquire) {
            self.flush()?;
        }
        Ok(())
    }
}

impl Drop for SledEventLog {
    fn drop(&mut self) {
        // SAFETY: neither is used again; the other fields hold no sled handle.
        unsafe {
            std::mem::ManuallyDrop::drop(&mut self.events);
            std::mem::ManuallyDrop::drop(&mut self.db);
        }
        if let Some(dir) = &self.records_close {
            sled_files::closed_cleanly(dir);
        }
    }
}

impl SledEventLog {
    /// The stored records of `from..=to` (`from <= to`) in the buffers they were read in (see
    /// [`Block`]).
    pub fn blocks(&self, from: u64, to: u64) -> Blocks<'_> {
        Blocks::new(
            self.events.range(event_key(from)..=event_key(to)),
            self.groups_overlapping(from, to),
            self.runs_overlapping(from, to),
            &self.pack,
            (from, to),
        )
    }

    /// The group with the highest seqs.
    fn last_group(&self) -> Result<Option<GroupEntry>, EngineError> {
        match self
            .events
            .range(group_key(0)..=group_key(u64::MAX))
            .next_back()
            .transpose()?
        {
            Some((k, v)) => Ok(Some(GroupEntry::decode(&k, &v)?)),
            None => Ok(None),
        }
    }

    /// Groups holding any seq in `from..=to`, in order.
    fn groups_overlapping(&self, from: u64, to: u64) -> Result<VecDeque<GroupEntry>, EngineError> {
        let mut out = VecDeque::new();
        if let Some(r) = self
            .events
            .range(group_key(0)..=group_key(from))
            .next_back()
        {
            let (k, v) = r?;
            let g = GroupEntry::decode(&k, &v)?;
            if g.last() >= from {
                out.push_back(g);
            }
        }
        if from < to {
            for r in self.events.range(group_key(from + 1)..=group_key(to)) {
                let (k, v) = r?;
                out.push_back(GroupEntry::decode(&k, &v)?);
            }
        }
        Ok(out)
    }

    /// The runs holding any seq in `from..=to`, in order, read one at a time: the run that
    /// starts at or before `from` (it may reach into the range), then those starting inside.
    fn runs_overlapping(&self, from: u64, to: u64) -> RunIter {
        // The run starting at or before `from`, unless it ends before it (a damaged one whose
        // end cannot be told is kept, so the damage is reported).
        let before = self
            .events
            .range(run_key(0)..=run_key(from))
            .next_back()
            .filter(|r| match r {
                Ok((k, v)) => seq_of_key(k)
                    .ok()
                    .zip(run_count(v))
                    .is_none_or(|(first, n)| first + u64::from(n) > from),
                Err(_) => true,
            });
        let inside = (from < to).then(|| self.events.range(run_key(from + 1)..=run_key(to)));
        let runs: Box<dyn Iterator<Item = _>> =
            Box::new(before.into_iter().chain(inside.into_iter().flatten()));
        runs.peekable()
    }

    /// The last run's last seq and hash.
    fn last_run(&self) -> Result<Option<(u64, EventHash)>, EngineError> {
        let Some((k, v)) = self
            .events
            .range(run_key(0)..=run_key(u64::MAX))
            .next_back()
            .transpose()?
        else {
            return Ok(None);
        };
        let records = run_records(&k, &v)?;
        let (seq, rec) = records.last().expect("a run has events");
        let hash = rec
            .get(..32)
            .and_then(|h| h.try_into().ok())
            .ok_or(EngineError::Corrupt {
                seq: *seq,
                reason: "record too short".into(),
            })?;
        Ok(Some((*seq, EventHash(hash))))
    }

    /// Puts commands that each have fewer than [`GROUP_MIN_EVENTS`] events, and no side
    /// records, into runs ([`run_values`]), one sled insert per run, in seq order, so a crash
    /// leaves a prefix of whole commands. A multi-event command that ends up alone keeps its
    /// `e` keys, in one atomic batch.
    fn write_runs(&self, commands: &[&[(u64, Vec<u8>)]]) -> Result<(), EngineError> {
        for mut values in run_values(commands, false)? {
            if values.len() == 1 {
                let (k, v) = values.remove(0);
                self.events.insert(k, v).map_err(|e| self.failed(e))?;
            } else {
                let mut batch = sled::Batch::default();
                for (k, v) in values {
                    batch.insert(&k[..], v);
                }
                self.events.apply_batch(batch).map_err(|e| self.failed(e))?;
            }
        }
        Ok(())
    }

    /// A write or flush of sled's failed with `e`: a full or failing disk named as such.
    fn failed(&self, e: sled::Error) -> EngineError {
        sled_write_error(self.doc(), e, EngineError::from)
    }

    /// The document's folder.
    pub(crate) fn doc(&self) -> &Path {
        self.pack.path.parent().unwrap_or(&self.pack.path)
    }
}

/// The sled values of commands that each have fewer than [`GROUP_MIN_EVENTS`] events: whole
/// commands in runs of at most [`RUN_MAX_BYTES`] of records (one `r` value each), in seq
/// order; a command that ends up alone (the only one, or one larger than a run) keeps its `e`
/// keys, unless `lone_as_run` (a write that is one atomic batch anyway: a lone command of
/// several events is then one run, one value instead of one per event). Each inner list is
/// what must be written atomically.
fn run_values(
    commands: &[&[(u64, Vec<u8>)]],
    lone_as_run: bool,
) -> Result<Vec<Vec<KeyValue>>, EngineError> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < commands.len() {
        let mut end = start + 1;
        let mut run_bytes = size(commands[start]);
        while end < commands.len() && run_bytes + size(commands[end]) <= RUN_MAX_BYTES {
            run_bytes += size(commands[end]);
            end += 1;
        }
        let chunk = &commands[start..end];
        start = end;
        match chunk {
            [] | [[]] => {}
            [one] if !lone_as_run || one.len() == 1 => out.push(
                one.iter()
                    .map(|(seq, bytes)| (event_key(*seq), bytes.clone()))
                    .collect(),
            ),
            run => {
                let records = run.iter().flat_map(|c| c.iter());
                let Some(&(first, _)) = records.clone().next() else {
                    continue;
                };
                let count: usize = run.iter().map(|c| c.len()).sum();
                let mut value = Vec::with_capacity(4 + run_bytes);
                value.extend_from_slice(&(count as u32).to_le_bytes());
                encode_records(&mut value, records.map(|(_, b)| b.as_slice()))?;
                out.push(vec![(run_key(first), value)]);
            }
        }
    }
    Ok(out)
}

/// An event, run or group key and its value.
type KeyValue = ([u8; 9], Vec<u8>);

/// Bytes a command takes in a run.
fn size(command: &[(u64, Vec<u8>)]) -> usize {
    command.iter().map(|(_, b)| b.len() + 4).sum()
}

impl EventLog for SledEventLog {
    fn tail(&self) -> Result<(u64, EventHash), EngineError> {
        let last = self
            .events
            .range(event_key(0)..=event_key(u64::MAX))
            .next_back()
            .transpose()?;
        let single = match last {
            None => (0, EventHash::ZERO),
            Some((k, v)) => {
                let seq = seq_of_key(&k)?;
                let hash: [u8; 32] =
                    v.get(..32)
                        .and_then(|h| h.try_into().ok())
                        .ok_or(EngineError::Corrupt {
                            seq,
                            reason: "record too short".into(),
                        })?;
                (seq, EventHash(hash))
            }
        };
        let grouped = self
            .last_group()?
            .map(|g| (g.last(), EventHash(g.last_hash)));
        Ok([grouped, self.last_run()?]
            .into_iter()
            .flatten()
            .fold(single, |a, b| if b.0 > a.0 { b } else { a }))
    }

    fn write_group(
        &self,
        commands: &[&[(u64, Vec<u8>)]],
        side: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), EngineError> {
        if let Some((seq, _)) = commands.iter().rev().find_map(|c| c.last()) {
            self.written_seq.fetch_max(*seq, Ordering::AcqRel);
        }
        // sled seals and writes its buffer on every `apply_batch`, so commands without side
        // records or a group's worth of events (the common case) go into runs, one plain insert
        // each, in seq order. Otherwise everything goes into one atomic batch (side records,
        // runs of the small commands, groups in `events.pack` for the large ones), so a crash
        // never leaves a gap, half a command or an event without its side records.
        if side.is_empty() && commands.iter().all(|ev| ev.len() < GROUP_MIN_EVENTS) {
            return self.write_runs(commands);
        }
        let mut pack_end = None;
        let mut batch = sled::Batch::default();
        for (k, v) in side {
            batch.insert(k.as_slice(), v.as_slice());
        }
        let mut small: Vec<&[(u64, Vec<u8>)]> = Vec::new();
        let put_small = |small: &mut Vec<&[(u64, Vec<u8>)]>, batch: &mut sled::Batch| {
            for (k, v) in run_values(small, true)?.into_iter().flatten() {
                batch.insert(&k[..], v);
            }
            small.clear();
            Ok::<(), EngineError>(())
        };
        for ev in commands {
            match ev.first() {
                Some(&(first, _)) if ev.len() >= GROUP_MIN_EVENTS => {
                    put_small(&mut small, &mut batch)?;
                    let end = match pack_end {
                        Some(end) => end,
                        None => self.last_group()?.map_or(0, |g| g.offset + g.len),
                    };
                    let g = self.pack.write(end, first, ev)?;
                    pack_end = Some(end + g.len);
                    batch.insert(&group_key(first), &g.encode()[..]);
                }
                _ => small.push(ev),
            }
        }
        put_small(&mut small, &mut batch)?;
        self.events.apply_batch(batch).map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn flush(&self) -> Result<(), EngineError> {
        let written = self.written_seq.load(Ordering::Acquire);
        self.db.flush().map_err(|e| self.failed(e))?;
        self.sync.sync().map_err(|e| {
            write_error(self.doc(), e, |e| EngineError::Storage(format!(
                "cannot make the log durable (fdatasync failed: {e}); nothing in this flush was acknowledged"
            )))
        })?;
        self.sync.synced_seq.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }

    fn records(&self, from: u64, to: u64) -> Records<'_> {
        if from > to {
            return Box::new(std::iter::empty());
        }
        Box::new(blocks::Owned {
            blocks: self.blocks(from, to),
            current: None,
        })
    }

    fn put_aux(&self, tree: &str, key: &str, bytes: &[u8]) -> Result<(), EngineError> {
        self.db
            .open_tree(tree)?
            .insert(key, bytes)
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn get_aux(&self, tree: &str, key: &str) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.db.open_tree(tree)?.get(key)?.map(|v| v.to_vec()))
    }
}
