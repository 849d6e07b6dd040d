//! The content store: block bodies kept out of the event log's values and out of the state
//! (DESIGN §3). Content-addressed by blake3, append-only, inside the `.elf`:
//!
//! - `content/pack` — records `len (u64 LE) ‖ blake3 (32 bytes) ‖ bytes`, only ever appended;
//! - `content/index` — records `blake3 (32) ‖ offset of the bytes (u64 LE) ‖ len (u64 LE)`,
//!   48 bytes each, appended after the pack record. A torn record at its end is cut off; pack
//!   records after the last indexed one (a crash between the two appends) are re-indexed
//!   from the pack at load, each checked against its hash.
//!
//! The event that sets a body carries `{"$content": hash, "len": n}`, so the hash chain covers
//! the hash and the hash covers every byte: a changed byte in the pack is found by every read
//! (which re-hashes what it returns) and by `verify`. The pack is synced (`fdatasync`)
//! before the events that refer to its new records are written, so a durable event never
//! points at bytes that are not. Equal bodies are stored once.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use elfiee_model::ContentRef;

use crate::error::EngineError;

const INDEX_RECORD: usize = 48;
const PACK_HEADER: u64 = 40;

/// A whole pack record: its hash and the length of its body.
type Whole = ([u8; 32], u64);

/// The content store of one `.elf`. Opened lazily: a process that reads no body never loads
/// its index, and one that only adds bodies (a CLI write) checks the index's last record
/// against the pack and appends, without reading the index (so it does not deduplicate
/// against bodies stored by earlier processes, only against its own).
pub struct ContentStore {
    dir: PathBuf,
    inner: Mutex<Option<Inner>>,
}

struct Inner {
    /// The document's folder (named when a write fails for lack of space).
    doc: PathBuf,
    index: HashMap<[u8; 32], (u64, u64)>,
    /// Whether `index` holds every record (else only those this process appended).
    complete: bool,
    pack: File,
    idx: File,
    /// Where the next pack record goes.
    pack_end: u64,
    /// Records appended since the last sync.
    dirty: bool,
    /// The pack was empty when this process opened it (maybe just created): the first sync
    /// also makes the folder entries durable.
    fresh: bool,
    /// The index was rebuilt from the pack by this process (see [`ContentStore::rebuild_once`]).
    rebuilt: bool,
}

fn corrupt(what: impl std::fmt::Display) -> EngineError {
    EngineError::Storage(format!(
        "the content store is damaged: {what}; run `elfiee verify`, then `elfiee salvage` (it takes bodies from a backup too)"
    ))
}

/// Why body `r` is not there.
fn missing(r: &ContentRef) -> String {
    format!("the body {} ({} bytes) is missing", r.hash, r.len)
}

/// Why body `r` could not be read.
fn unreadable(r: &ContentRef, e: std::io::Error) -> String {
    format!("the body {} cannot be read: {e}", r.hash)
}

/// Whether `bytes` are body `r`'s (its blake3; every read of a body checks it).
fn check_body(r: &ContentRef, bytes: &[u8]) -> Result<(), String> {
    if blake3::hash(bytes).as_bytes() == &r.hash.0 {
        Ok(())
    } else {
        Err(format!("the body {} does not match its hash", r.hash))
    }
}

impl ContentStore {
    /// The store of the document at `elf_root` (its `content/` folder); nothing is read
    /// until it is used.
    pub fn new(elf_root: &Path) -> ContentStore {
        ContentStore {
            dir: elf_root.join("content"),
            inner: Mutex::new(None),
        }
    }

    /// Runs `f` on the store, opened for appending at least (see [`ContentStore`]).
    fn with<R>(
        &self,
        f: impl FnOnce(&mut Inner) -> Result<R, EngineError>,
    ) -> Result<R, EngineError> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(match Inner::open_for_append(&self.dir)? {
                Some(inner) => inner,
                None => Inner::load(&self.dir)?,
            });
        }
        f(g.as_mut().expect("loaded above"))
    }

    /// Runs `f` with the record of `key` when there is one (loading the whole index if this
    /// process has not yet).
    fn lookup<R>(
        &self,
        key: &[u8; 32],
        f: impl FnOnce(&mut Inner, Option<(u64, u64)>) -> R,
    ) -> Result<R, EngineError> {
        self.lookup_all(std::slice::from_ref(key), |inner| {
            let found = inner.index.get(key).copied();
            f(inner, found)
        })
    }

    /// Runs `f` on the store once it has the records of all `keys` or its whole index.
    fn lookup_all<R>(
        &self,
        keys: &[[u8; 32]],
        f: impl FnOnce(&mut Inner) -> R,
    ) -> Result<R, EngineError> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let has_all = |i: &Inner| keys.iter().all(|k| i.index.contains_key(k));
        if !g.as_ref().is_some_and(|i| i.complete || has_all(i)) {
            let dirty = g.as_ref().is_some_and(|i| i.dirty);
            let mut full = Inner::load(&self.dir)?;
            full.dirty |= dirty;
            *g = Some(full);
        }
        Ok(f(g.as_mut().expect("loaded above")))
    }

    /// Rebuilds the whole index from the pack, once per process; whether it did. For a read
    /// that found a body missing from the index: the index is not synced, so a power cut can
    /// leave a hole or a record without its hash in its middle, which the load cannot tell
    /// from a whole record, and the body's record behind it (issue 39, P3). The pack, synced
    /// before any event names its bodies, is the truth.
    fn rebuild_once(&self) -> Result<bool, EngineError> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.as_ref().is_some_and(|i| i.rebuilt) {
            return Ok(false);
        }
        tracing::warn!(dir = %self.dir.display(), "a body is missing from the content index; rebuilding it from the pack");
        let dirty = g.as_ref().is_some_and(|i| i.dirty);
        let mut full = Inner::load_with(&self.dir, true)?;
        full.dirty |= dirty;
        *g = Some(full);
        Ok(true)
    }

    /// Stores `text` (once per distinct body among those this process has seen) and returns
    /// its reference. Not durable until [`ContentStore::sync`].
    pub fn put(&self, text: &str) -> Result<ContentRef, EngineError> {
        let r = elfiee_projections::content::ref_for(text);
        self.with(|inner| {
            let key = r.hash.0;
            if !inner.index.contains_key(&key) {
                inner.append(&key, text.as_bytes())?;
            }
            Ok(r)
        })
    }

    /// Stores the body `r` refers to from `reader` (exactly `r.len` bytes), copied into the
    /// pack piece by piece: a body of any size costs a 64 KiB buffer. The bytes are hashed on
    /// the way and a mismatch (or a short read) takes the record back out. Not durable until
    /// [`ContentStore::sync`].
    pub fn put_reader(
        &self,
        r: &ContentRef,
        reader: impl std::io::Read,
    ) -> Result<(), EngineError> {
        self.with(|inner| {
            if inner.index.contains_key(&r.hash.0) {
                return Ok(());
            }
            inner.append_from(r, reader)
        })
    }

    /// Makes every record stored so far durable (no-op when nothing was added).
    pub fn sync(&self) -> Result<(), EngineError> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(inner) = g.as_mut().filter(|i| i.dirty) {
            // Only the pack: the index is a cache of it, checked and completed at load.
            let synced = inner.pack.sync_data().and_then(|()| {
                if !inner.fresh {
                    return Ok(());
                }
                crate::layout::sync_dir(&self.dir)
                    .and_then(|()| self.dir.parent().map_or(Ok(()), crate::layout::sync_dir))
            });
            synced.map_err(|e| inner.write_error(e))?;
            inner.fresh = false;
            inner.dirty = false;
        }
        Ok(())
    }

    /// The body `r` refers to, checked against its hash.
    pub fn get(&self, r: &ContentRef) -> Result<String, EngineError> {
        self.read(r).map_err(|why| match why {
            Failure::Io(e) => e,
            Failure::Bad(why) => corrupt(why),
        })
    }

    fn read(&self, r: &ContentRef) -> Result<String, Failure> {
        String::from_utf8(self.read_bytes(r)?)
            .map_err(|_| Failure::Bad(format!("the body {} is not UTF-8", r.hash)))
    }

    /// Stores any bytes (a file of a project checkpoint: not always UTF-8) and returns their
    /// reference. Not durable until [`ContentStore::sync`].
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<ContentRef, EngineError> {
        let r = ContentRef {
            hash: elfiee_model::EventHash(*blake3::hash(bytes).as_bytes()),
            len: bytes.len() as u64,
        };
        self.with(|inner| {
            if !inner.index.contains_key(&r.hash.0) {
                inner.append(&r.hash.0, bytes)?;
            }
            Ok(r)
        })
    }

    /// Reads the bytes of `refs` into `buf` (grown when it is too small, and reused by the
    /// caller from one call to the next) and returns where each body lies in it; each is
    /// checked against its hash. Bodies stored one after the other are read in one read, and
    /// the store is not held while reading (for a bulk reader: a backup).
    pub fn get_many(
        &self,
        refs: &[ContentRef],
        buf: &mut Vec<u8>,
    ) -> Result<Vec<std::ops::Range<usize>>, EngineError> {
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let (pack, places) = self.places(refs)?;
        // The runs of bodies stored one after the other: (first, end) indices into `refs`.
        let mut runs = Vec::new();
        let mut first = 0;
        for i in 1..=refs.len() {
            if i == refs.len() || places[i].0 != places[i - 1].0 + places[i - 1].1 + PACK_HEADER {
                runs.push((first, i));
                first = i;
            }
        }
        let run_len =
            |&(a, b): &(usize, usize)| (places[b - 1].0 + places[b - 1].1 - places[a].0) as usize;
        let total: usize = runs.iter().map(run_len).sum();
        if buf.len() < total {
            buf.resize(total, 0);
        }
        let mut spans = Vec::with_capacity(refs.len());
        let mut at = 0;
        for run in &runs {
            let (start, len) = (places[run.0].0, run_len(run));
            pack.read_exact_at(&mut buf[at..at + len], start)
                .map_err(|e| corrupt(unreadable(&refs[run.0], e)))?;
            for j in run.0..run.1 {
                let from = at + (places[j].0 - start) as usize;
                let span = from..from + places[j].1 as usize;
                check_body(&refs[j], &buf[span.clone()]).map_err(corrupt)?;
                spans.push(span);
            }
            at += len;
        }
        Ok(spans)
    }

    /// The pack (a handle of its own) and where each of `refs` is in it, its length checked.
    fn places(&self, refs: &[ContentRef]) -> Result<(File, Vec<(u64, u64)>), EngineError> {
        let keys: Vec<[u8; 32]> = refs.iter().map(|r| r.hash.0).collect();
        let all_there = self.lookup_all(&keys, |inner| {
            keys.iter().all(|k| inner.index.contains_key(k))
        })?;
        if !all_there {
            self.rebuild_once()?;
        }
        self.lookup_all(&keys, |inner| {
            let places = refs
                .iter()
                .map(|r| match inner.index.get(&r.hash.0) {
                    Some(&(off, len)) if len == r.len => Ok((off, len)),
                    Some(&(_, len)) => Err(corrupt(format!(
                        "the body {} has {len} bytes, its event says {}",
                        r.hash, r.len
                    ))),
                    None => Err(corrupt(missing(r))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let pack = inner
                .pack
                .try_clone()
                .map_err(|e| EngineError::io(self.dir.join("pack"), e))?;
            Ok((pack, places))
        })?
    }

    /// The bytes `r` refers to, checked against its hash (any bytes, see
    /// [`ContentStore::put_bytes`]).
    pub fn get_bytes(&self, r: &ContentRef) -> Result<Vec<u8>, EngineError> {
        self.read_bytes(r).map_err(|why| match why {
            Failure::Io(e) => e,
            Failure::Bad(why) => corrupt(why),
        })
    }

    /// [`ContentStore::get_bytes`], with why a body cannot be had in plain words and no advice
    /// (for a report that says what to do itself: salvage's).
    pub fn get_bytes_or_why(&self, r: &ContentRef) -> Result<Vec<u8>, String> {
        self.read_bytes(r).map_err(|why| match why {
            Failure::Io(e) => e.to_string(),
            Failure::Bad(why) => why,
        })
    }

    fn read_bytes(&self, r: &ContentRef) -> Result<Vec<u8>, Failure> {
        let key = r.hash.0;
        let there = self
            .lookup(&key, |_, found| found.is_some())
            .map_err(Failure::Io)?;
        if !there {
            self.rebuild_once().map_err(Failure::Io)?;
        }
        let bytes = self
            .lookup(&key, |inner, found| {
                let Some((off, len)) = found else {
                    return Err(missing(r));
                };
                let mut buf = vec![0u8; len as usize];
                match inner.pack.read_exact_at(&mut buf, off) {
                    Ok(()) => Ok(buf),
                    Err(e) => Err(unreadable(r, e)),
                }
            })
            .map_err(Failure::Io)?
            .map_err(Failure::Bad)?;
        check_body(r, &bytes).map_err(Failure::Bad)?;
        Ok(bytes)
    }

    /// Whether the store has a record for `r` (without reading it).
    pub fn contains(&self, r: &ContentRef) -> Result<bool, EngineError> {
        self.lookup(&r.hash.0, |_, found| {
            found.is_some_and(|(_, len)| len == r.len)
        })
    }

    /// Whether the store holds the body `r` refers to, whole and matching its hash (for
    /// `verify`: the reason when it does not).
    pub fn check(&self, r: &ContentRef) -> Result<(), String> {
        match self.read(r) {
            Ok(text) if text.len() as u64 == r.len => Ok(()),
            Ok(text) => Err(format!(
                "the body {} has {} bytes, its event says {}",
                r.hash,
                text.len(),
                r.len
            )),
            Err(Failure::Bad(why)) => Err(format!("content store: {why}")),
            Err(Failure::Io(e)) => Err(e.to_string()),
        }
    }

    /// Bytes on disk (pack + index).
    pub fn disk_bytes(&self) -> u64 {
        ["pack", "index"]
            .iter()
            .filter_map(|f| std::fs::metadata(self.dir.join(f)).ok())
            .map(|m| m.len())
            .sum()
    }
}

enum Failure {
    /// The store could not be opened.
    Io(EngineError),
    /// A body is missing, unreadable or damaged.
    Bad(String),
}

fn io_err(e: std::io::Error) -> EngineError {
    EngineError::Storage(format!("content store: {e}"))
}

fn open_file(dir: &Path, name: &str) -> Result<File, EngineError> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(dir.join(name))
        .map_err(|e| EngineError::io(dir.join(name), e))
}

impl Inner {
    /// The store ready for appends without reading its index, if the index's last record is
    /// the pack's last record (the common case); `None` when the index needs the repair
    /// [`Inner::load`] does.
    fn open_for_append(dir: &Path) -> Result<Option<Inner>, EngineError> {
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        let mut pack = open_file(dir, "pack")?;
        let mut idx = open_file(dir, "index")?;
        let pack_len = pack.seek(SeekFrom::End(0)).map_err(io_err)?;
        let idx_len = idx.seek(SeekFrom::End(0)).map_err(io_err)?;
        let consistent = if idx_len == 0 {
            pack_len == 0
        } else if idx_len % INDEX_RECORD as u64 != 0 {
            false
        } else {
            let mut rec = [0u8; INDEX_RECORD];
            let mut header = [0u8; PACK_HEADER as usize];
            let off = idx
                .read_exact_at(&mut rec, idx_len - INDEX_RECORD as u64)
                .ok()
                .map(|()| u64::from_le_bytes(rec[32..40].try_into().expect("8 bytes")));
            let len = u64::from_le_bytes(rec[40..48].try_into().expect("8 bytes"));
            off.filter(|&o| o >= PACK_HEADER && o.checked_add(len) == Some(pack_len))
                .is_some_and(|o| {
                    pack.read_exact_at(&mut header, o - PACK_HEADER).is_ok()
                        && header[8..] == rec[..32]
                        && header[..8] == rec[40..48]
                })
        };
        Ok(consistent.then(|| Inner {
            doc: doc_of(dir),
            index: HashMap::new(),
            complete: false,
            pack,
            idx,
            pack_end: pack_len,
            dirty: false,
            fresh: pack_len == 0,
            rebuilt: false,
        }))
    }

    fn load(dir: &Path) -> Result<Inner, EngineError> {
        Self::load_with(dir, false)
    }

    /// [`Inner::load`], rebuilding the whole index from the pack when `rebuild` is set.
    fn load_with(dir: &Path, rebuild: bool) -> Result<Inner, EngineError> {
        let mut rebuilt = rebuild;
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        let mut pack = open_file(dir, "pack")?;
        let mut idx = open_file(dir, "index")?;
        let pack_len = pack.seek(SeekFrom::End(0)).map_err(io_err)?;
        let mut raw = Vec::new();
        idx.seek(SeekFrom::Start(0)).map_err(io_err)?;
        idx.read_to_end(&mut raw).map_err(io_err)?;
        let whole = raw.len() / INDEX_RECORD * INDEX_RECORD;
        let mut index = HashMap::with_capacity(whole / INDEX_RECORD);
        let mut end = 0u64;
        let mut valid = 0usize;
        for rec in raw[..whole].chunks_exact(INDEX_RECORD) {
            let key: [u8; 32] = rec[..32].try_into().expect("32 bytes");
            let off = u64::from_le_bytes(rec[32..40].try_into().expect("8 bytes"));
            let len = u64::from_le_bytes(rec[40..48].try_into().expect("8 bytes"));
            if off < PACK_HEADER || off + len > pack_len {
                // Not a record of this pack (torn, or the pack lost the tail it points
                // into): drop it and the rest; the pack scan below re-indexes what is there.
                break;
            }
            index.insert(key, (off, len));
            valid += INDEX_RECORD;
        }
        if valid != raw.len() {
            tracing::warn!(
                kept = valid / INDEX_RECORD,
                "content index had a torn or dangling tail; cut off"
            );
            idx.set_len(valid as u64).map_err(io_err)?;
        }
        // The index is not synced on its own (the pack is): check that its last record
        // names the pack record it points at; if not, rebuild the whole index from the pack.
        if let Some(rec) = raw[..valid].chunks_exact(INDEX_RECORD).last() {
            let off = u64::from_le_bytes(rec[32..40].try_into().expect("8 bytes"));
            let mut header = [0u8; PACK_HEADER as usize];
            let ok = pack.read_exact_at(&mut header, off - PACK_HEADER).is_ok()
                && header[8..] == rec[..32]
                && header[..8] == rec[40..48];
            if ok && !rebuild {
                // Records are appended in pack order: the last one ends where the re-indexing
                // of what a crash left unindexed starts (a damaged record before it must not
                // move that start into the middle of a body).
                end = off + u64::from_le_bytes(rec[40..48].try_into().expect("8 bytes"));
            } else {
                if !rebuild {
                    tracing::warn!("content index does not match the pack; rebuilding it");
                }
                rebuilt = true;
                index.clear();
                end = 0;
                idx.set_len(0).map_err(io_err)?;
            }
        }
        let mut inner = Inner {
            doc: doc_of(dir),
            index,
            complete: true,
            pack,
            idx,
            pack_end: pack_len,
            dirty: false,
            fresh: pack_len == 0,
            rebuilt,
        };
        inner.recover_tail(end, pack_len)?;
        Ok(inner)
    }

    /// Re-indexes whole, hash-checked pack records after `from` (written before a crash cut
    /// their index records off). A record that is not whole (a zero hole a power cut left,
    /// a torn or damaged record) is skipped: the scan resumes at the next whole record after
    /// it (P3, issue 39: a cut can keep a later synced append and lose an earlier unsynced
    /// one, and the bodies after the hole are those of acknowledged events). What follows
    /// the last whole record is cut off when it is a record running past the end (an append
    /// a crash cut short), else left as it is (later appends go after it).
    fn recover_tail(&mut self, from: u64, pack_len: u64) -> Result<(), EngineError> {
        // `from` is the end of the last indexed body, i.e. the start of the next header.
        let mut pos = from;
        let mut recovered = 0;
        let mut skipped = 0u64;
        loop {
            let whole = match self.record_at(pos, pack_len)? {
                Some(whole) => Some((pos, whole)),
                None => {
                    let next = self.next_record(pos + 1, pack_len)?;
                    if let Some((at, _)) = next {
                        skipped += at - pos;
                    }
                    next
                }
            };
            let Some((at, (key, len))) = whole else { break };
            let body = at + PACK_HEADER;
            if let std::collections::hash_map::Entry::Vacant(v) = self.index.entry(key) {
                v.insert((body, len));
                self.idx
                    .write_all(&index_record(&key, body, len))
                    .map_err(io_err)?;
                recovered += 1;
            }
            pos = body + len;
        }
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "content pack: skipped bytes that are no whole record (a hole a power cut left, or damage)"
            );
        }
        if pos < pack_len {
            let mut len = [0u8; 8];
            // Unreadable: taken for a length of 0 (left as it is).
            let _ = self.pack.read_exact_at(&mut len, pos);
            let runs_past = pos + PACK_HEADER > pack_len
                || u64::from_le_bytes(len).saturating_add(pos + PACK_HEADER) > pack_len;
            if runs_past {
                tracing::warn!(
                    at = pos,
                    "content pack had a torn record at its end; cut off"
                );
                self.pack.set_len(pos).map_err(io_err)?;
            } else {
                tracing::warn!(
                    at = pos,
                    "content pack: a record does not match its hash; left as it is"
                );
                pos = pack_len;
            }
        }
        self.pack_end = pos;
        if recovered > 0 {
            tracing::info!(recovered, "re-indexed content records from the pack");
            self.dirty = true;
        }
        Ok(())
    }

    /// The record at `pos` when it is whole (its body within `pack_len` and matching its
    /// hash): its hash and length.
    fn record_at(&self, pos: u64, pack_len: u64) -> Result<Option<Whole>, EngineError> {
        if pos + PACK_HEADER > pack_len {
            return Ok(None);
        }
        let mut header = [0u8; PACK_HEADER as usize];
        self.pack.read_exact_at(&mut header, pos).map_err(io_err)?;
        let len = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let key: [u8; 32] = header[8..].try_into().expect("32 bytes");
        if len > pack_len - pos - PACK_HEADER {
            return Ok(None);
        }
        let mut buf = vec![0u8; len as usize];
        self.pack
            .read_exact_at(&mut buf, pos + PACK_HEADER)
            .map_err(io_err)?;
        Ok((blake3::hash(&buf).as_bytes() == &key).then_some((key, len)))
    }

    /// The first whole record starting at or after `from`: its start, hash and length. Reads
    /// the rest of the pack in windows; a start is tried (its body hashed) only when its
    /// length fits in the pack and its hash is not all zero, so a hole of zeros or text
    /// costs one pass.
    fn next_record(&self, from: u64, pack_len: u64) -> Result<Option<(u64, Whole)>, EngineError> {
        const WINDOW: u64 = 1 << 20;
        let mut start = from;
        while start + PACK_HEADER <= pack_len {
            let n = (pack_len - start).min(WINDOW + PACK_HEADER);
            let mut buf = vec![0u8; n as usize];
            self.pack.read_exact_at(&mut buf, start).map_err(io_err)?;
            let last = (n - PACK_HEADER).min(WINDOW - 1);
            for i in 0..=last as usize {
                let len = u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
                let at = start + i as u64;
                if len > pack_len - at - PACK_HEADER || buf[i + 8..i + 40].iter().all(|&b| b == 0) {
                    continue;
                }
                if let Some(whole) = self.record_at(at, pack_len)? {
                    return Ok(Some((at, whole)));
                }
            }
            start += last + 1;
        }
        Ok(None)
    }

    fn append(&mut self, key: &[u8; 32], bytes: &[u8]) -> Result<(), EngineError> {
        let len = bytes.len() as u64;
        let mut header = [0u8; PACK_HEADER as usize];
        header[..8].copy_from_slice(&len.to_le_bytes());
        header[8..].copy_from_slice(key);
        let body = self.pack_end + PACK_HEADER;
        let written = self
            .pack
            .write_all(&header)
            .and_then(|()| self.pack.write_all(bytes))
            .and_then(|()| self.idx.write_all(&index_record(key, body, len)));
        if let Err(e) = written {
            self.take_back(self.pack_end);
            return Err(self.write_error(e));
        }
        self.pack_end = body + len;
        self.index.insert(*key, (body, len));
        self.dirty = true;
        Ok(())
    }
}

impl Inner {
    fn append_from(
        &mut self,
        r: &ContentRef,
        mut reader: impl std::io::Read,
    ) -> Result<(), EngineError> {
        let start = self.pack_end;
        let mut header = [0u8; PACK_HEADER as usize];
        header[..8].copy_from_slice(&r.len.to_le_bytes());
        header[8..].copy_from_slice(&r.hash.0);
        let copied = (|| -> Result<(), CopyFailure> {
            self.pack.write_all(&header).map_err(CopyFailure::Write)?;
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; 64 * 1024];
            let mut left = r.len;
            while left > 0 {
                let want = buf.len().min(left as usize);
                let n = reader
                    .read(&mut buf[..want])
                    .map_err(|e| CopyFailure::Bad(e.to_string()))?;
                if n == 0 {
                    return Err(CopyFailure::Bad(format!(
                        "the body {} ended {left} bytes short",
                        r.hash
                    )));
                }
                hasher.update(&buf[..n]);
                self.pack.write_all(&buf[..n]).map_err(CopyFailure::Write)?;
                left -= n as u64;
            }
            if hasher.finalize().as_bytes() != &r.hash.0 {
                return Err(CopyFailure::Bad(format!(
                    "the bytes received for body {} do not match its hash",
                    r.hash
                )));
            }
            Ok(())
        })();
        let body = start + PACK_HEADER;
        let copied = copied.and_then(|()| {
            self.idx
                .write_all(&index_record(&r.hash.0, body, r.len))
                .map_err(CopyFailure::Write)
        });
        if let Err(why) = copied {
            self.take_back(start);
            return Err(match why {
                CopyFailure::Write(e) => self.write_error(e),
                CopyFailure::Bad(why) => EngineError::Effect(why),
            });
        }
        self.pack_end = body + r.len;
        self.index.insert(r.hash.0, (body, r.len));
        self.dirty = true;
        Ok(())
    }
}

/// Why copying a body into the pack stopped.
enum CopyFailure {
    /// Writing failed (the disk).
    Write(std::io::Error),
    /// The bytes given were not the body (short, unreadable or another hash).
    Bad(String),
}

impl Inner {
    /// Takes a failed append back out: the pack is cut back to `pack_end` (where the record
    /// began) and the index to its last whole record, so the next append follows a whole
    /// record. Left in, a torn record shifted every later body away from the offset its index
    /// record names (reads found them damaged), and the next load cut the pack at the torn
    /// record, losing the acknowledged bodies after it.
    fn take_back(&mut self, pack_end: u64) {
        let _ = self.pack.set_len(pack_end);
        let _ = self.pack.seek(SeekFrom::Start(pack_end));
        if let Ok(m) = self.idx.metadata() {
            let _ = self
                .idx
                .set_len(m.len() / INDEX_RECORD as u64 * INDEX_RECORD as u64);
        }
    }

    /// A write of the store failed with `e` (see [`crate::error::write_error`]).
    fn write_error(&self, e: std::io::Error) -> EngineError {
        crate::error::write_error(&self.doc, e, io_err)
    }
}

/// The document folder of a content store's folder.
fn doc_of(content_dir: &Path) -> PathBuf {
    content_dir.parent().unwrap_or(content_dir).to_owned()
}

fn index_record(key: &[u8; 32], off: u64, len: u64) -> [u8; INDEX_RECORD] {
    let mut rec = [0u8; INDEX_RECORD];
    rec[..32].copy_from_slice(key);
    rec[32..40].copy_from_slice(&off.to_le_bytes());
    rec[40..].copy_from_slice(&len.to_le_bytes());
    rec
}

#[cfg(test)]
mod tests;
