//! The copy at the heart of a backup run: the log's records `after + 1..=to` and the bodies
//! they refer to, checked and written as frames, on every core.
//!
//! ```text
//! reader (the caller's thread) ──chunks──▶ workers (two): read bodies, write at the chunk's place
//! ```
//!
//! The **reader** walks the log a [`Block`] at a time (a run's or a group's records stay in
//! the buffer they were read in), checks that the seqs follow each other and every record has
//! a hash and a body, finds the bodies each record refers to that the backup does not hold
//! yet, and cuts chunks of about [`CHUNK_BYTES`] of records and bodies together (so a chunk of
//! imports weighs what a chunk of small writes does). It knows every length, so it gives each
//! chunk its place in the file: the frames are laid out before they are written. Each
//! **worker** takes the next chunk, reads its bodies (each checked against its blake3), writes
//! a `C` frame of them and then an `E` frame of the events at the chunk's place, and starts
//! the kernel's write-back of them. Chunks are written in any order; the caller writes the
//! `K` frame after the last one only when every chunk was written, so a run that fails leaves
//! nothing a reader takes (see [`super::format`]).
//!
//! What the disk can damage is checked as it is read: sled checks its own checksums, a group
//! of `events.pack` is checked against its blake3, a body against its own. The hash chain is
//! not computed again here (it costs as much as the rest of the copy, and only a program that
//! wrote a wrong record could break it): [`super::restore`] and `elfiee verify` check every
//! link, and the caller checks that the last record's hash is the committed head's.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Mutex;

use elfiee_model::{ContentRef, EventHash};

use super::format;
use crate::content::ContentStore;
use crate::error::EngineError;
use crate::log::{Block, SledEventLog};

/// A chunk ends once it holds this many records ...
const CHUNK_EVENTS: usize = 1024;
/// ... or this many bytes of records and of the bodies it brings. A body up to this size is
/// read with the others of its chunk; a larger one is read alone when it is written, so one
/// such body at a time is in memory per worker.
const CHUNK_BYTES: u64 = 1 << 20;
/// The workers (the machine this is tuned on has two cores; the reader is light beside them).
const WORKERS: usize = 2;

/// A run of records, the bodies they refer to that the backup does not hold yet, and where
/// their frames go.
struct Chunk {
    /// Its number (chunks are numbered in seq order; a failure reports the first).
    k: usize,
    blocks: Vec<Block>,
    /// The bodies read together (up to [`CHUNK_BYTES`] each), then those read one at a time
    /// as they are written; each in the order the records first refer to them.
    small: Vec<ContentRef>,
    large: Vec<ContentRef>,
    /// Where its frames start in the file, and their bytes.
    at: u64,
    len: u64,
}

/// What [`copy`] wrote.
pub(super) struct Copied {
    pub events: u64,
    pub bodies: u64,
    /// The hash stored with the last event written (the caller checks it is the committed head).
    pub last: EventHash,
    /// Where the frames written end.
    pub end: u64,
}

/// Copies the records `after + 1..=to` of `log`, and the bodies they refer to that `have`
/// does not hold (it then holds them), into the backup file `file` from `at` on;
/// `progress(events)` as they are read.
pub(super) fn copy(
    log: &SledEventLog,
    content: &ContentStore,
    (after, to): (u64, u64),
    (file, at): (&Path, u64),
    have: &mut HashSet<[u8; 32]>,
    progress: impl FnMut(u64),
) -> Result<Copied, EngineError> {
    let prev = crate::log::stored_hash(log, after);
    if after >= to {
        return Ok(Copied {
            events: 0,
            bodies: 0,
            last: prev,
            end: at,
        });
    }
    let (tx, rx) = sync_channel::<Chunk>(WORKERS);
    let chunks = Mutex::new(rx);
    // The first chunk that failed, and why.
    let failed: Mutex<Option<(usize, EngineError)>> = Mutex::new(None);
    let fail = |k: usize, e: EngineError| {
        let mut f = failed.lock().unwrap_or_else(|p| p.into_inner());
        if f.as_ref().is_none_or(|(first, _)| k < *first) {
            *f = Some((k, e));
        }
    };
    let stop = || failed.lock().unwrap_or_else(|p| p.into_inner()).is_some();
    let copied = std::thread::scope(|scope| {
        // Owned here, so a return before the reader takes it stops the workers.
        let tx = tx;
        for _ in 0..WORKERS {
            let (chunks, fail, stop) = (&chunks, &fail, &stop);
            let out = OpenOptions::new()
                .write(true)
                .open(file)
                .map_err(|e| EngineError::io(file, e))?;
            std::thread::Builder::new()
                .name("elfiee-backup".into())
                .spawn_scoped(scope, move || work(content, file, out, chunks, fail, stop))
                .map_err(|e| EngineError::Storage(format!("cannot start a backup thread: {e}")))?;
        }
        Ok::<_, EngineError>(read(
            log,
            (after, to),
            (prev, at),
            have,
            tx,
            &stop,
            &fail,
            progress,
        ))
    })?;
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(copied),
    }
}

/// The reader (see the module docs): sends the chunks to the workers until the log ends or
/// `stop()`; a failure to read is the failure of the chunk it happened in.
#[allow(clippy::too_many_arguments)]
fn read(
    log: &SledEventLog,
    (after, to): (u64, u64),
    (mut prev, mut at): (EventHash, u64),
    have: &mut HashSet<[u8; 32]>,
    tx: std::sync::mpsc::SyncSender<Chunk>,
    stop: &impl Fn() -> bool,
    fail: &impl Fn(usize, EngineError),
    mut progress: impl FnMut(u64),
) -> Copied {
    let new_chunk = |k| Chunk {
        k,
        blocks: Vec::new(),
        small: Vec::new(),
        large: Vec::new(),
        at: 0,
        len: 0,
    };
    let mut copied = Copied {
        events: 0,
        bodies: 0,
        last: prev,
        end: at,
    };
    let mut chunk = new_chunk(0);
    let (mut events, mut bytes) = (0usize, 0u64);
    let mut next_seq = after + 1;
    let mut send = |chunk: &mut Chunk, at: &mut u64| -> bool {
        let next = new_chunk(chunk.k + 1);
        let mut full = std::mem::replace(chunk, next);
        full.at = *at;
        full.len = frames_len(&full);
        *at += full.len;
        copied.events += full.blocks.iter().map(|b| b.len() as u64).sum::<u64>();
        copied.bodies += (full.small.len() + full.large.len()) as u64;
        progress(copied.events);
        tx.send(full).is_ok()
    };
    for block in log.blocks(after + 1, to) {
        let found = block.and_then(|block| {
            if block.first() != next_seq {
                return Err(EngineError::Corrupt {
                    seq: next_seq,
                    reason: format!("missing; the next stored event is {}", block.first()),
                });
            }
            next_seq += block.len() as u64;
            for (seq, record) in block.records() {
                if record.len() < 33 {
                    return Err(EngineError::Corrupt {
                        seq,
                        reason: format!("record is {} bytes", record.len()),
                    });
                }
                bytes += record.len() as u64;
                for r in refs_in(seq, record)? {
                    if have.insert(r.hash.0) {
                        bytes += r.len;
                        if r.len <= CHUNK_BYTES {
                            chunk.small.push(r);
                        } else {
                            chunk.large.push(r);
                        }
                    }
                }
            }
            Ok(block)
        });
        let block = match found {
            Ok(block) => block,
            Err(e) => {
                fail(chunk.k, e);
                return copied;
            }
        };
        events += block.len();
        if let Some((_, last)) = block.records().last() {
            prev = EventHash(last[..32].try_into().expect("33 bytes or more"));
        }
        chunk.blocks.push(block);
        if events >= CHUNK_EVENTS || bytes >= CHUNK_BYTES {
            if stop() || !send(&mut chunk, &mut at) {
                return copied;
            }
            (events, bytes) = (0, 0);
        }
    }
    if !chunk.blocks.is_empty() {
        send(&mut chunk, &mut at);
    }
    copied.last = prev;
    copied.end = at;
    copied
}

/// The bytes of a chunk's frames: one `C` frame of its small bodies (when it has any), one
/// per larger body, one `E` frame.
fn frames_len(chunk: &Chunk) -> u64 {
    let records = chunk.blocks.iter().flat_map(Block::records);
    let mut len = format::events_frame_len(records.map(|(_, r)| r.len() as u64));
    if !chunk.small.is_empty() {
        len += format::bodies_frame_len(chunk.small.iter().map(|r| r.len));
    }
    len + chunk
        .large
        .iter()
        .map(|r| format::bodies_frame_len([r.len]))
        .sum::<u64>()
}

/// A worker (see the module docs): `out` is its own handle on the backup file.
fn work(
    content: &ContentStore,
    file: &Path,
    mut out: File,
    chunks: &Mutex<Receiver<Chunk>>,
    fail: &impl Fn(usize, EngineError),
    stop: &impl Fn() -> bool,
) {
    // The bodies of one chunk at a time, the same memory for every chunk.
    let mut scratch = Vec::new();
    loop {
        let next = chunks.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(chunk) = next else {
            return; // the reader is done
        };
        if stop() {
            continue; // a chunk failed: the run is over, the reader stops soon
        }
        let k = chunk.k;
        if let Err(e) = check_and_write(content, file, &mut out, chunk, &mut scratch) {
            fail(k, e);
        }
    }
}

/// Checks a chunk's bodies against their hashes and writes its frames at its place (see
/// [`frames_len`]); the reader checked its records.
fn check_and_write(
    content: &ContentStore,
    file: &Path,
    out: &mut File,
    chunk: Chunk,
    scratch: &mut Vec<u8>,
) -> Result<(), EngineError> {
    let spans = content.get_many(&chunk.small, scratch)?;
    let bodies = spans.iter().map(|s| &scratch[s.clone()]);
    out.seek(SeekFrom::Start(chunk.at))
        .map_err(|e| EngineError::io(file, e))?;
    let mut written = 0;
    if !chunk.small.is_empty() {
        written += format::write_read_bodies(out, &chunk.small, bodies)
            .map_err(|e| EngineError::io(file, e))?;
    }
    for r in &chunk.large {
        let bytes = content.get_bytes(r)?;
        written += format::write_read_bodies(out, std::slice::from_ref(r), [bytes.as_slice()])
            .map_err(|e| EngineError::io(file, e))?;
    }
    let records: Vec<(u64, &[u8])> = chunk.blocks.iter().flat_map(Block::records).collect();
    written += format::write_events(out, &records).map_err(|e| EngineError::io(file, e))?;
    if written != chunk.len {
        return Err(EngineError::Storage(format!(
            "the backup's frames from byte {} took {written} bytes, not the {} laid out for them",
            chunk.at, chunk.len
        )));
    }
    // Start writing them back, so the fdatasync at the end waits for the last part only.
    start_writeback(out, chunk.at, chunk.len);
    Ok(())
}

/// The bodies an event's record refers to (only records that mention a reference are
/// decoded).
fn refs_in(seq: u64, bytes: &[u8]) -> Result<Vec<ContentRef>, EngineError> {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| {
            memchr::memmem::Finder::new(elfiee_projections::content::CONTENT_KEY)
        });
    if KEY.find(bytes).is_none() {
        return Ok(Vec::new());
    }
    let e = crate::codec::open(seq, bytes, None)
        .map_err(|reason| EngineError::Corrupt { seq, reason })?;
    Ok(elfiee_projections::content::event_refs(&e.value))
}

/// Asks the kernel to start writing `len` bytes of `file` from `from` back to the disk, without
/// waiting (Linux; elsewhere nothing).
fn start_writeback(file: &File, from: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: an open file's descriptor and a range inside it; the call only starts I/O.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                from as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, from, len);
}
