//! Backups of a document into one portable file ([`format`](mod@format)), and documents rebuilt from
//! them.
//!
//! A backup is taken in the process that owns the document, while it serves
//! ([`crate::FileHandle::backup`]): it holds the events up to one seq (the committed tail at
//! the moment it starts), the bodies they refer to, and the records kept beside them. Run
//! again against the same file it appends only what is new. [`restore`] rebuilds a document
//! from the newest whole point of a backup, checking the hash chain and every body.

mod copy;
pub mod format;

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use elfiee_model::{ContentRef, EventHash};
use elfiee_projections::Folds;
use serde::{Deserialize, Serialize};

use crate::content::ContentStore;
use crate::error::EngineError;
use crate::layout::ElfPaths;
use crate::log::{EventLog, SideRecord, SledEventLog};

/// Where a backup of the document at `elf` goes unless told otherwise: `NAME.elf.backup`
/// beside it (outside the document, so a damaged folder does not take its backup with it).
pub fn default_path(elf: &Path) -> PathBuf {
    let name = elf
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "document.elf".into());
    elf.with_file_name(format!("{name}.backup"))
}

/// The newest whole point of the backup at `path` (`None`: no backup there, or none whole).
pub fn newest_point(path: &Path) -> Option<format::Point> {
    let f = File::open(path).ok()?;
    format::outline(&f, path).ok()?.last
}

/// What one run of a backup did.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BackupReport {
    /// The backup file.
    pub path: PathBuf,
    /// The backup now holds every event up to this seq ...
    pub seq: u64,
    /// ... whose hash is this (hex).
    pub head: String,
    /// `false` when this run started the file; `true` when it appended to an earlier backup.
    pub incremental: bool,
    /// The seq this run started from (1 for a new file).
    pub from_seq: u64,
    /// Events this run wrote.
    pub events: u64,
    /// Bodies (content-store entries) this run wrote.
    pub bodies: u64,
    /// Side records (sync's records kept beside the log) this run wrote.
    pub side_records: u64,
    /// Bytes this run appended.
    pub bytes_written: u64,
    /// The file's size after this run.
    pub file_bytes: u64,
    /// How long the run took, in milliseconds.
    pub elapsed_ms: u64,
    /// Of which making the file durable (its fdatasync) took this long.
    pub sync_ms: u64,
}

/// What [`restore`] rebuilt.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RestoreReport {
    /// The new document.
    pub path: PathBuf,
    /// Its events are 1 to `seq` ...
    pub seq: u64,
    /// ... and the last one's hash is this (hex).
    pub head: String,
    /// Bodies put back into its content store.
    pub bodies: u64,
    /// Side records put back beside its log.
    pub side_records: u64,
    /// The digest of its state (the same as the source's at `seq`).
    pub state_digest: String,
    /// When the backup's point was written (ms since the Unix epoch).
    pub backed_up_at_ms: i64,
    /// Bytes after that point that were skipped: what a backup run stopped before its point
    /// was durable left (a crash, a power cut); 0 when the file ends at the point.
    #[serde(default)]
    pub unfinished_bytes: u64,
    /// How long the restore took, in milliseconds.
    pub elapsed_ms: u64,
}

/// A consistent cut of a document: its events up to `seq` and the records that change
/// (sync's), read while nothing was being written.
pub(crate) struct Cut {
    pub seq: u64,
    pub hash: EventHash,
    pub current: Vec<SideRecord>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> EngineError + '_ {
    move |e| EngineError::io(path, e)
}

/// A refusal about the frames of the backup at `path` (messages about the file as a whole,
/// from [`format::outline`] and [`format::Frames::open`], name it already).
fn bad_backup(path: &Path, why: impl std::fmt::Display) -> EngineError {
    EngineError::rejected(format!("the backup {}: {why}", path.display()))
}

/// "is damaged at byte N, after its point at seq S" (or "before its first point").
fn damaged_where(at: u64, last: Option<format::Point>) -> String {
    match last {
        Some(p) => format!("is damaged at byte {at}, after its point at seq {}", p.seq),
        None => format!("is damaged at byte {at}, before its first point"),
    }
}

/// Checks that the stored record `seq` continues the chain after `prev`; its hash.
fn check_link(seq: u64, bytes: &[u8], prev: &EventHash) -> Result<EventHash, EngineError> {
    let corrupt = |reason: String| EngineError::Corrupt { seq, reason };
    if bytes.len() < 33 {
        return Err(corrupt(format!("record is {} bytes", bytes.len())));
    }
    let (hash, body) = bytes.split_at(32);
    let computed = crate::codec::chain_hash(prev, seq, body);
    if computed.0 != hash {
        return Err(corrupt("hash chain broken".into()));
    }
    Ok(computed)
}

/// Appends to the backup file `to` what is new in `log` up to `cut` (see the module docs).
/// `progress(done, total)` counts events.
pub(crate) fn write_backup(
    log: &SledEventLog,
    content: &ContentStore,
    mut cut: Cut,
    to: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<BackupReport, EngineError> {
    let started = Instant::now();
    crate::layout::refuse_inside(log.doc(), to, "the backup")?;
    let existed = to.exists();
    if to.is_dir() {
        return Err(EngineError::rejected(format!(
            "{} is a folder; give a file for the backup (e.g. {}/document.backup)",
            to.display(),
            to.display()
        )));
    }
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            return Err(EngineError::rejected(format!(
                "the folder {} of the backup {} does not exist; create it first, or give another file",
                parent.display(),
                to.display()
            )));
        }
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(to)
        .map_err(io(to))?;
    // One run at a time per backup file (the automatic backup and `elfiee backup` share the
    // default file): a second run waits here, then appends what the first did not take.
    match file.lock() {
        // A file system without locks: runs into one file must not overlap (as before locks).
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {}
        locked => locked.map_err(io(to))?,
    }
    let len = file.metadata().map_err(io(to))?.len();
    let (mut at, done_seq, mut have) = if len == 0 {
        file.write_all(&format::header(elfiee_model::FORMAT_VERSION))
            .map_err(io(to))?;
        (format::HEADER_LEN, 0, std::collections::HashSet::new())
    } else {
        let outline = format::outline(&file, to).map_err(|why| {
            EngineError::rejected(format!(
                "{why}; choose another file for the backup (nothing was written)"
            ))
        })?;
        if let Some(damaged) = outline.damaged_at {
            // Appending cuts off what follows the last whole point: here that holds newer
            // points, which a restore or salvage may still want.
            return Err(bad_backup(
                to,
                format!(
                    "{}, and holds newer points after that; appending would cut them off. Choose another file for the backup (nothing was written), and keep this one for `elfiee salvage DOCUMENT NEW.elf --backup {}`",
                    damaged_where(damaged, outline.last),
                    to.display()
                ),
            ));
        }
        match outline.last {
            Some(p) => {
                if crate::log::stored_hash(log, p.seq) != p.hash {
                    return Err(EngineError::rejected(format!(
                        "{} is a backup of another document (or of another history of this one: its event {} differs); choose another file",
                        to.display(),
                        p.seq
                    )));
                }
                if p.seq > cut.seq {
                    // A run that took its cut after this one's wrote first (runs take turns
                    // at the file's lock, not at the cut): the file already holds more than
                    // this run would add; its point is the cut, and nothing is new.
                    cut = Cut {
                        seq: p.seq,
                        hash: p.hash,
                        current: Vec::new(),
                    };
                }
                (p.end, p.seq, outline.bodies.into_keys().collect())
            }
            None => (format::HEADER_LEN, 0, std::collections::HashSet::new()),
        }
    };
    // Whatever a run that was stopped left after the last point goes, durably before this
    // run writes: a stopped run's bytes mixed with this run's could pass for a point.
    if len > at {
        file.set_len(at).map_err(io(to))?;
        file.sync_data().map_err(io(to))?;
    }
    let first_written = at;
    let total = cut.seq.saturating_sub(done_seq);
    let copy::Copied {
        events,
        bodies,
        last: prev,
        end,
    } = copy::copy(
        log,
        content,
        (done_seq, cut.seq),
        (to, at),
        &mut have,
        |events| progress(events, total),
    )
    .inspect_err(|_| {
        // What the run wrote before it failed goes (a reader would skip it anyway).
        let _ = file.set_len(first_written);
    })?;
    at = end;
    file.seek(SeekFrom::Start(at)).map_err(io(to))?;
    let mut w = BufWriter::new(file);
    let (side_records, sync_ms) = if done_seq > 0 && cut.seq == done_seq {
        // Nothing new: the file stays as it was.
        (0, 0)
    } else {
        if done_seq + events != cut.seq || prev != cut.hash {
            return Err(EngineError::Corrupt {
                seq: done_seq + events + 1,
                reason: format!(
                    "the log holds {} events up to the committed seq {}",
                    done_seq + events,
                    cut.seq
                ),
            });
        }
        let mut side = crate::file::foreign::records_of(log, done_seq + 1, cut.seq)?;
        side.extend(cut.current);
        if !side.is_empty() {
            at += format::write_frame(&mut w, format::SIDE, &[&format::side_payload(&side)])
                .map_err(io(to))?;
        }
        let mut file = w.into_inner().map_err(|e| EngineError::io(to, e.error()))?;
        let syncing = Instant::now();
        // The frames are durable before the point that vouches for them is written, so a power
        // cut never leaves a whole point after frames that are not (`format::outline` tells a
        // stopped run from damage by it).
        file.sync_data().map_err(io(to))?;
        let now = chrono::Utc::now().timestamp_millis();
        at += format::write_frame(
            &mut file,
            format::POINT,
            &[&format::point_payload(cut.seq, &cut.hash, now)],
        )
        .map_err(io(to))?;
        file.sync_data().map_err(io(to))?;
        if !existed {
            if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
                crate::layout::sync_dir(dir).map_err(io(dir))?;
            }
        }
        progress(events, total);
        (side.len() as u64, syncing.elapsed().as_millis() as u64)
    };
    Ok(BackupReport {
        path: to.to_owned(),
        seq: cut.seq,
        head: cut.hash.to_hex(),
        incremental: done_seq > 0,
        from_seq: done_seq + 1,
        events,
        bodies,
        side_records,
        bytes_written: at - first_written,
        file_bytes: at,
        elapsed_ms: started.elapsed().as_millis() as u64,
        sync_ms,
    })
}

/// Rebuilds a document at `to` (which must not exist, or be an empty folder) from the newest
/// whole point of the backup `from`: every event checked against the hash chain, every body
/// against its hash; then the state is folded with `folds`, and a snapshot, the command
/// index and `HEAD` are written, so the new document opens at once. `progress(done, total)`
/// counts events.
pub fn restore(
    from: &Path,
    to: &Path,
    folds: &Folds,
    mut progress: impl FnMut(u64, u64),
) -> Result<RestoreReport, EngineError> {
    let started = Instant::now();
    let (point, unfinished) = {
        let f = File::open(from).map_err(|e| {
            EngineError::rejected(format!("cannot read the backup {}: {e}", from.display()))
        })?;
        let outline = format::outline(&f, from).map_err(EngineError::rejected)?;
        // An older point is never taken silently for the newest (issue 39, F8).
        if let Some(at) = outline.damaged_at {
            let older = match outline.last {
                Some(_) => format!("the newer points cannot be read. `elfiee salvage DOCUMENT NEW.elf --backup {0}` takes what the document and the backup still prove; to rebuild from the older point alone, copy the backup's first {at} bytes (`head -c {at} {0} > older.backup`) and restore that", from.display()),
                None => format!("its points cannot be read. `elfiee salvage DOCUMENT NEW.elf --backup {}` takes what the document and the backup still prove", from.display()),
            };
            return Err(bad_backup(
                from,
                format!("{}: {older}", damaged_where(at, outline.last)),
            ));
        }
        let point = outline.last.ok_or_else(|| {
            bad_backup(from, "holds no whole backup yet (it was cut off before its first point); nothing to restore")
        })?;
        (point, outline.unfinished)
    };
    let (mut frames, _doc) = format::Frames::open(from).map_err(EngineError::rejected)?;
    let written = crate::layout::create_whole(to, |paths| {
        let log = SledEventLog::open(&paths.log_dir(), &paths.root)?;
        let content = ContentStore::new(&paths.root);
        let mut rebuilt = Rebuilt::new(&log, &content);
        while frames.offset() < point.end {
            let frame = frames
                .next_frame()
                .map_err(|why| bad_backup(from, why))?
                .ok_or_else(|| bad_backup(from, "ends before its newest point"))?;
            match frame {
                format::Frame::Events(records) => {
                    rebuilt
                        .events(&records)
                        .map_err(|why| bad_backup(from, why))?;
                    progress(rebuilt.seq, point.seq);
                }
                format::Frame::Content(bodies) => {
                    for (hash, bytes) in bodies {
                        rebuilt
                            .body(&hash, &bytes)
                            .map_err(|why| bad_backup(from, why))?
                    }
                }
                format::Frame::Side(records) => rebuilt.side.extend(records),
                format::Frame::Point(_) => {}
            }
        }
        if (rebuilt.seq, rebuilt.prev) != (point.seq, point.hash) {
            return Err(bad_backup(
                from,
                format!(
                    "its point says seq {} but its events end at {}",
                    point.seq, rebuilt.seq
                ),
            ));
        }
        let (bodies, side) = (rebuilt.bodies, rebuilt.side.len() as u64);
        rebuilt.finish()?;
        let digest = seal_document(paths, &log, folds)?;
        Ok((bodies, side, digest))
    });
    // Half a document is no document: nothing is left behind.
    let (paths, (bodies, side_records, state_digest)) = written?;
    Ok(RestoreReport {
        path: paths.root,
        seq: point.seq,
        head: point.hash.to_hex(),
        bodies,
        side_records,
        state_digest,
        backed_up_at_ms: point.at_ms,
        unfinished_bytes: unfinished,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// A new document's log being written from records already sealed elsewhere (a backup, a
/// salvage): each checked against the hash chain and appended in order.
pub(crate) struct Rebuilt<'a> {
    log: &'a SledEventLog,
    content: &'a ContentStore,
    pub seq: u64,
    pub prev: EventHash,
    pub bodies: u64,
    pub side: Vec<SideRecord>,
}

impl<'a> Rebuilt<'a> {
    pub fn new(log: &'a SledEventLog, content: &'a ContentStore) -> Rebuilt<'a> {
        Rebuilt {
            log,
            content,
            seq: 0,
            prev: EventHash::ZERO,
            bodies: 0,
            side: Vec::new(),
        }
    }

    /// Appends the next records (`(seq, hash ‖ body)`), which must continue the chain.
    pub fn events(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), String> {
        for (seq, bytes) in records {
            if *seq != self.seq + 1 {
                return Err(format!("event {} follows event {}", seq, self.seq));
            }
            // The chain only: the records are decoded once, when the new log is folded
            // (`seal_document`), or were already by the caller.
            self.prev = check_link(*seq, bytes, &self.prev).map_err(|e| match e {
                EngineError::Corrupt { reason, .. } => format!("event {seq}: {reason}"),
                e => e.to_string(),
            })?;
            self.seq = *seq;
        }
        if !records.is_empty() {
            self.log
                .write_group(&[records], &[])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Stores a body, which must match its hash.
    pub fn body(&mut self, hash: &[u8; 32], bytes: &[u8]) -> Result<(), String> {
        let r: ContentRef = elfiee_projections::content::content_ref(bytes);
        if &r.hash.0 != hash {
            return Err(format!(
                "the body {} is damaged (its bytes hash to {})",
                &EventHash(*hash).to_hex()[..12],
                &r.hash.to_hex()[..12]
            ));
        }
        self.content.put_bytes(bytes).map_err(|e| e.to_string())?;
        self.bodies += 1;
        Ok(())
    }

    /// Writes the side records and makes everything durable.
    pub fn finish(self) -> Result<(), EngineError> {
        if !self.side.is_empty() {
            self.log.write_group(&[], &self.side)?;
        }
        self.content.sync()?;
        self.log.flush()
    }
}

/// Folds a freshly written log and stores what an open would otherwise rebuild: the command
/// index, a snapshot and `HEAD`. Returns the state's digest.
pub(crate) fn seal_document(
    paths: &ElfPaths,
    log: &SledEventLog,
    folds: &Folds,
) -> Result<String, EngineError> {
    let mut entries: Vec<crate::cmd_index::Entry> = Vec::new();
    let mut state = elfiee_projections::State::default();
    let mut prev = EventHash::ZERO;
    for e in crate::log::read_events(log, 1, u64::MAX, Some(EventHash::ZERO)) {
        let e = e?;
        match entries.last_mut() {
            Some((c, _, n)) if *c == e.cmd_id => *n += 1,
            _ => entries.push((e.cmd_id, e.seq, 1)),
        }
        prev = e.hash;
        folds.apply(&mut state, &e);
    }
    let index = paths.commands_index_file();
    crate::cmd_index::rewrite(&index, &entries).map_err(io(&index))?;
    if state.last_seq > 0 {
        let bytes =
            crate::replay::encode_snapshot(state.last_seq, prev, folds.fingerprint(), &state);
        crate::replay::write_snapshot(paths, state.last_seq, &bytes)
            .map_err(io(&paths.snapshots_dir()))?;
        paths
            .write_head(state.last_seq, &prev)
            .map_err(io(&paths.head_file()))?;
    }
    Ok(state.digest())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs into one file take turns at its lock, not at their cuts: a run whose cut is older
    /// than the point another run wrote first leaves the file as it is and reports that point.
    /// (It was refused as "a backup of another document": six runs at once hit it on a loaded
    /// machine.)
    #[test]
    fn a_run_whose_cut_is_older_than_the_files_point_leaves_the_file_and_reports_the_point() {
        let dir = tempfile::tempdir().unwrap();
        let elf = dir.path().join("d.elf");
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let engine = crate::Engine::new(crate::EngineConfig::default());
            engine.init(&elf, "Alice").await.unwrap().close().await;
        });
        let paths = ElfPaths::new(&elf);
        let log = SledEventLog::open(&paths.log_dir(), &paths.root).unwrap();
        let content = ContentStore::new(&paths.root);
        let newer = crate::file::backup::cut_of(&log).unwrap();
        let seq = newer.seq - 3;
        let older = Cut {
            seq,
            hash: crate::log::stored_hash(&log, seq),
            current: Vec::new(),
        };
        let to = dir.path().join("x.backup");
        let first = write_backup(&log, &content, newer, &to, |_, _| {}).unwrap();
        let bytes = std::fs::read(&to).unwrap();
        let late = write_backup(&log, &content, older, &to, |_, _| {}).unwrap();
        assert_eq!(
            (
                late.seq,
                late.head.as_str(),
                late.events,
                late.bytes_written
            ),
            (first.seq, first.head.as_str(), 0, 0)
        );
        assert_eq!(late.file_bytes, bytes.len() as u64);
        assert_eq!(std::fs::read(&to).unwrap(), bytes, "the file is unchanged");
    }
}
