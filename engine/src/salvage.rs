//! Salvage: a new document from a damaged one, holding every event that can be proven intact
//! (see docs/EVENTS.md, "Backups, salvage and the format promise").
//!
//! The events come, in seq order, from
//! 1. the damaged log, from seq 1 for as long as each record continues the hash chain: as
//!    sled reads it, and where sled cannot (it refuses or panics on its file, a record is
//!    damaged), from the copies of the records the log's files hold (`raw_records::RawRecords`, found
//!    by their bytes; decision 0042), then sled again past them;
//! 2. then the newest backup ([`crate::backup`]), from where the log stopped up to the
//!    backup's point, when the backup holds the same history (its hash where the log stopped
//!    agrees);
//! 3. then the damaged log again (as in 1), past the backup's point, for as long as the
//!    chain holds.
//!
//! An event whose body is neither in the damaged content store (whole, or found by its hash
//! in the pack when the store's index lost it) nor in the backup ends the salvage too: a
//! document that refers to a missing body would fail `verify`. What is not recovered is
//! reported as seq ranges with the reason, up to the last seq anything in the damaged
//! document still knows of (its log's tail, `HEAD`, snapshot names, the command index, the
//! backup; `HEAD` and the index only where they agree with the recovered events, as neither
//! has a checksum). The damaged document is never written to.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use elfiee_model::{ContentRef, EventHash};
use elfiee_projections::Folds;
use serde::{Deserialize, Serialize};

use crate::backup::{format, seal_document, Rebuilt};
use crate::content::ContentStore;
use crate::error::EngineError;
use crate::layout::{copy_tree, ElfPaths};
use crate::log::{EventLog, SideRecord, SledEventLog};
use crate::raw_records::RawRecords;

/// Events recovered from one source.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Span {
    /// The first event of the span ...
    pub from: u64,
    /// ... and its last.
    pub to: u64,
    /// `"log"` (read through sled), `"scan"` (found by its bytes in the log's files where
    /// sled could not read them) or `"backup"`.
    pub source: String,
}

/// Events not recovered: `from` to `to` (`None`: to an end nothing in the document knows).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lost {
    /// The first event lost.
    pub from: u64,
    /// The last one, when something still says where the document ended.
    pub to: Option<u64>,
    /// Why they could not be recovered, in words (where each was looked for, what was
    /// found).
    pub why: String,
}

/// What [`salvage`] recovered and what it could not.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SalvageReport {
    /// The new document.
    pub path: PathBuf,
    /// It holds events 1 to `seq` ...
    pub seq: u64,
    /// ... and this is the last one's hash (hex).
    pub head: String,
    /// Where each recovered range of events came from, in seq order.
    pub recovered: Vec<Span>,
    /// The ranges that could not be recovered, with why.
    pub lost: Vec<Lost>,
    /// The backup that was used ...
    pub backup: Option<PathBuf>,
    /// ... and the seq of its point.
    pub backup_seq: Option<u64>,
    /// Bodies put into the new document's content store.
    pub bodies: u64,
    /// The digest of the new document's state.
    pub state_digest: String,
    /// Things the user should know (a backup of another history, sync's records left out).
    pub notes: Vec<String>,
    /// How long the salvage took, in milliseconds.
    pub elapsed_ms: u64,
}

/// Rebuilds what can be proven of the damaged document `damaged` at `to` (see the module
/// docs), with the backup `backup` (default: [`crate::backup::default_path`] beside it, if
/// there is one). `progress(done)` counts recovered events.
pub fn salvage(
    damaged: &Path,
    to: &Path,
    backup: Option<&Path>,
    folds: &Folds,
    mut progress: impl FnMut(u64),
) -> Result<SalvageReport, EngineError> {
    let started = Instant::now();
    let root = damaged
        .canonicalize()
        .map_err(|e| EngineError::rejected(format!("cannot read {}: {e}", damaged.display())))?;
    if !root.is_dir() {
        return Err(EngineError::NotAnElf(damaged.to_owned()));
    }
    crate::layout::refuse_inside(&root, to, "the salvaged document")?;
    let mut notes = Vec::new();
    if to.exists() {
        return Err(EngineError::AlreadyExists(to.to_owned()));
    }
    // sled and the content store mend what they open; salvage reads a copy, so the damaged
    // document stays exactly as it was.
    let scratch = scratch_dir(to);
    let _cleanup = RemoveOnDrop(scratch.clone());
    copy_tree(&root, &scratch, |file, e| {
        // A full disk where the copy goes stops the salvage; a file that cannot be read is
        // damage: salvage goes on without it.
        if matches!(
            e.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        ) {
            return Err(e);
        }
        tracing::warn!(error = %e, file = %file.display(), "salvage: a file of the damaged document cannot be read");
        Ok(())
    })
    .map_err(|e| {
        let beside = scratch.parent().unwrap_or(&scratch).to_owned();
        crate::error::write_error(&beside, e, |e| {
            EngineError::io(&scratch, format!("cannot copy the damaged document: {e}"))
        })
    })?;
    let source = ElfPaths { root: scratch };
    let backup_path = backup
        .map(Path::to_owned)
        .or_else(|| Some(crate::backup::default_path(&root)).filter(|p| p.is_file()));
    let saved = match &backup_path {
        Some(p) => match Saved::open(p) {
            Ok(s) => Some(s),
            Err(why) if backup.is_some() => return Err(EngineError::rejected(why)),
            Err(why) => {
                notes.push(format!("the backup beside it was not used: {why}"));
                None
            }
        },
        None => None,
    };
    let log = open_quietly(&source, &mut notes);
    if let Err(why) = &log {
        notes.push(format!("the log could not be opened: {why}"));
    }
    let log = log.ok();
    let store = ContentStore::new(&source.root);

    let out = crate::layout::create_whole(to, |paths| {
        let new_log = SledEventLog::open(&paths.log_dir(), &paths.root)?;
        let content = ContentStore::new(&paths.root);
        let mut w = Writer {
            rebuilt: Rebuilt::new(&new_log, &content),
            progress: &mut progress,
            pending: Vec::new(),
            bodies_from: (&store, saved.as_ref()),
            pack: PackBodies::new(&root),
            spans: Vec::new(),
            commands: Vec::new(),
        };
        // 1. The log from the start.
        let mut raw = None;
        let mut stop = w.read_log(log.as_ref(), &mut raw, &root, 1)?;
        // 2. The backup past where the log stopped, if it holds the same history.
        if let Some(s) = saved.as_ref() {
            w.flush()?;
            let at = w.rebuilt.seq;
            if s.point.seq > at {
                match s.hash_at(at) {
                    Ok(h) if h == w.rebuilt.prev || at == 0 => {
                        stop = w.backup_from(s, at)?;
                        if stop.is_none() {
                            stop = w.read_log(log.as_ref(), &mut raw, &root, s.point.seq + 1)?;
                        }
                    }
                    Ok(_) => notes.push(format!(
                        "the backup {} holds another history (its event {at} differs) and was not used",
                        s.path.display()
                    )),
                    Err(why) => notes.push(format!("the backup was not used: {why}")),
                }
            }
        }
        w.flush()?;
        if w.rebuilt.seq == 0 {
            let why = stop.clone().unwrap_or_default();
            return Err(EngineError::rejected(format!(
                "nothing in {} can be proven intact ({why}); if you have a backup of it, give it with --backup, or rebuild it with `elfiee restore BACKUP NEW.elf`",
                damaged.display()
            )));
        }
        let (seq, prev) = (w.rebuilt.seq, w.rebuilt.prev);
        let bodies = w.rebuilt.bodies;
        let spans = std::mem::take(&mut w.spans);
        // The records kept beside the events: those of recovered events only, and sync's
        // own only when nothing was lost (they would point past what is left).
        let end = known_end(
            &source,
            log.as_ref(),
            saved.as_ref(),
            (seq, prev, &w.commands),
        );
        let complete = stop.is_none() || end.is_some_and(|e| e <= seq);
        w.rebuilt.side = side_records(log.as_ref(), saved.as_ref(), seq, complete);
        if !complete && has_sync_records(log.as_ref(), saved.as_ref()) {
            notes.push("sync's records were left out, as events were lost: to sync this document again, join it afresh (`elfiee sync join`) and let `elfiee serve --sync` bring the events back".into());
        }
        w.rebuilt.finish()?;
        let digest = seal_document(paths, &new_log, folds)?;
        let lost = match (stop, end) {
            (_, Some(end)) if end <= seq => Vec::new(),
            (None, None) => Vec::new(),
            (why, end) => vec![Lost {
                from: seq + 1,
                to: end,
                why: why
                    .unwrap_or_else(|| "the log ends before the seq the document recorded".into()),
            }],
        };
        Ok((seq, prev, bodies, spans, lost, digest))
    });
    // Messages name the damaged document, not the copy salvage read.
    let scratch = source.root.display().to_string();
    let original = root.display().to_string();
    let name = |s: String| s.replace(&scratch, &original);
    let notes: Vec<String> = notes.into_iter().map(name).collect();
    let (paths, (seq, prev, bodies, recovered, lost, state_digest)) = match out {
        Ok((paths, (seq, prev, bodies, spans, lost, digest))) => {
            let lost = lost
                .into_iter()
                .map(|l| Lost {
                    why: name(l.why),
                    ..l
                })
                .collect::<Vec<_>>();
            (paths, (seq, prev, bodies, spans, lost, digest))
        }
        // Nothing is left behind ([`crate::layout::create_whole`]).
        Err(e) => return Err(e),
    };
    Ok(SalvageReport {
        path: paths.root,
        seq,
        head: prev.to_hex(),
        recovered,
        lost,
        backup: saved.as_ref().map(|s| s.path.clone()),
        backup_seq: saved.as_ref().map(|s| s.point.seq),
        bodies,
        state_digest,
        notes,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// `e`, an open of the document at `paths` that failed, with what to do when it failed
/// because the document is damaged (a broken chain, a log sled cannot read): `elfiee
/// salvage`, the newest backup there is (the automatic backup's place from `auto`, else the
/// default one), and for a synced document, joining it afresh. Other errors are returned as
/// they are (a full disk says what to do already).
pub fn advise(paths: &ElfPaths, auto: Option<&crate::AutoBackup>, e: EngineError) -> EngineError {
    let damaged = match &e {
        EngineError::Corrupt { .. } => true,
        EngineError::Storage(_) => !e.blames_the_disk(),
        _ => false,
    };
    if !damaged {
        return e;
    }
    let root = &paths.root;
    let backup = auto
        .map(|a| a.path_for(root))
        .unwrap_or_else(|| crate::backup::default_path(root));
    let mut advice = format!(
        "the document is damaged: `elfiee salvage {} NEW.elf` recovers every event it can prove into a new document, leaving this one as it is",
        root.display()
    );
    match crate::backup::newest_point(&backup) {
        Some(p) => {
            let when = chrono::DateTime::from_timestamp_millis(p.at_ms)
                .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
                .unwrap_or_default();
            advice.push_str(&format!(
                " (with its newest backup, {}: seq {}, taken {when})",
                backup.display(),
                p.seq
            ));
        }
        None => advice.push_str(
            " (give it a backup with --backup FILE if you have one; `elfiee restore BACKUP NEW.elf` rebuilds from a backup alone)",
        ),
    }
    if root.join("sync-status.json").is_file() {
        advice.push_str("; as it syncs, you can also join the document afresh from its broker (`elfiee sync join NEW.elf --broker URL --doc NAME`, then `elfiee serve --sync URL`) and receive every event again");
    }
    match e {
        EngineError::Corrupt { seq, reason } => EngineError::Corrupt {
            seq,
            reason: format!("{reason}; {advice}"),
        },
        EngineError::Storage(msg) => EngineError::Storage(format!("{msg}; {advice}")),
        other => other,
    }
}

/// Opens the damaged log without letting a panic of sled's out. sled refuses a log whose own
/// files beside its data are damaged, though the data may be whole: its page-table
/// snapshots (`log/snap.*`, rebuilt from the data when missing; an open of a damaged log
/// can leave one that no longer fits it) and its settings (`log/conf`: segment size,
/// compression, version, which the engine never changes; written anew when missing). So
/// when the open fails, it is tried again without them.
fn open_quietly(paths: &ElfPaths, notes: &mut Vec<String>) -> Result<SledEventLog, String> {
    let dir = paths.log_dir();
    let open = || {
        std::panic::catch_unwind(|| SledEventLog::open_scratch(&dir, &paths.root))
            .map_err(|_| "sled panicked while opening it".to_string())?
            .map_err(|e| e.to_string())
    };
    let mut why = match open() {
        Ok(log) => return Ok(log),
        Err(why) => why,
    };
    // Set aside in turn: what, and how the names of its files begin.
    let steps = [
        ("its page-table snapshots (log/snap.*)", "snap."),
        ("its settings file (log/conf)", "conf"),
    ];
    let mut without = Vec::new();
    for (what, aside) in steps {
        let removed = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(aside))
            .filter(|e| std::fs::remove_file(e.path()).is_ok())
            .count();
        if removed == 0 {
            continue;
        }
        without.push(what);
        match open() {
            Ok(log) => {
                notes.push(format!(
                    "the log could not be opened ({why}); it was read without {}",
                    without.join(" and ")
                ));
                return Ok(log);
            }
            Err(again) => why = format!("{why}; without {what}: {again}"),
        }
    }
    Err(why)
}

/// The last seq anything in the damaged document (or its backup) knows of, given what was
/// recovered: events 1 to `seq`, the last one's hash `prev`, and their commands.
fn known_end(
    paths: &ElfPaths,
    log: Option<&SledEventLog>,
    saved: Option<&Saved>,
    (seq, prev, commands): (u64, EventHash, &[CommandSpan]),
) -> Option<u64> {
    let tail = log.and_then(|l| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.tail().ok()))
            .ok()
            .flatten()
    });
    // A `HEAD` whose hash is that of the log's last record, or of the last event recovered,
    // under another seq, had its seq damaged: it is no sign of lost events.
    let head = paths.read_head().filter(|&(s, h)| {
        let names = |(at, hash): (u64, EventHash)| hash == h && at != s;
        !names((seq, prev)) && !tail.is_some_and(names)
    });
    let snapshot = crate::replay::stored_snapshots(paths)
        .first()
        .map(|(s, _)| *s);
    let index = crate::cmd_index::load(&paths.commands_index_file())
        .ok()
        .and_then(|entries| index_end(&entries, commands, seq));
    let backup = saved.map(|s| s.point.seq);
    [
        tail.map(|(s, _)| s),
        head.map(|(s, _)| s),
        snapshot,
        index,
        backup,
    ]
    .into_iter()
    .flatten()
    .max()
}

/// A command of the recovered events: its id, first seq and number of events.
type CommandSpan = (uuid::Uuid, u64, u64);

/// The last seq the command index `entries` names, if every entry agrees with the recovered
/// `commands` (events 1 to `seq`): one that names recovered events names their command and
/// count (the last command may go on past `seq`), and one past `seq` names no recovered
/// command. `None` otherwise: the index has no checksum, and a damaged entry names any seq.
fn index_end(
    entries: &[crate::cmd_index::Entry],
    commands: &[CommandSpan],
    seq: u64,
) -> Option<u64> {
    let mut end = 0;
    let mut past = std::collections::HashSet::new();
    for &(id, first, count) in entries {
        let last = first.checked_add(count.checked_sub(1)?)?;
        if first == 0 {
            return None;
        }
        if first <= seq {
            let at = commands.binary_search_by_key(&first, |c| c.1).ok()?;
            let (cmd, _, n) = commands[at];
            let cut_short = at + 1 == commands.len() && count > n;
            if cmd != id || !(count == n || cut_short) {
                return None;
            }
        } else {
            past.insert(id);
        }
        end = end.max(last);
    }
    if !past.is_empty() && commands.iter().any(|c| past.contains(&c.0)) {
        return None;
    }
    Some(end)
}

/// Appends recovered events (with their bodies) to the new document.
struct Writer<'a, 'b> {
    rebuilt: Rebuilt<'a>,
    /// Told the count of events recovered after each flush.
    progress: &'b mut dyn FnMut(u64),
    pending: Vec<(u64, Vec<u8>)>,
    /// Where bodies come from: the damaged store, else the backup, else the damaged pack as
    /// salvage reads it.
    bodies_from: (&'b ContentStore, Option<&'b Saved>),
    pack: PackBodies,
    spans: Vec<Span>,
    /// The commands of the events taken, in seq order.
    commands: Vec<CommandSpan>,
}

impl Writer<'_, '_> {
    /// Takes one record; `Err(why)` when it cannot be proven (the caller stops there).
    fn take(
        &mut self,
        seq: u64,
        bytes: Vec<u8>,
        source: &str,
    ) -> Result<Result<(), String>, EngineError> {
        let expect = self.rebuilt.seq + self.pending.len() as u64 + 1;
        if seq != expect {
            return Ok(Err(format!(
                "event {expect} is missing (the next readable one is {seq})"
            )));
        }
        let prev = self.pending.last().map_or(self.rebuilt.prev, |(_, b)| {
            EventHash(b[..32].try_into().unwrap_or_default())
        });
        let e = match crate::codec::open(seq, &bytes, Some(&prev)) {
            Ok(e) => e,
            Err(why) => return Ok(Err(format!("event {seq}: {why}"))),
        };
        for r in elfiee_projections::content::event_refs(&e.value) {
            if let Err(why) = self.body(&r) {
                return Ok(Err(format!(
                    "event {seq} refers to a body that is lost ({why})"
                )));
            }
        }
        match self.commands.last_mut() {
            Some((id, first, n)) if *id == e.cmd_id && *first + *n == seq => *n += 1,
            _ => self.commands.push((e.cmd_id, seq, 1)),
        }
        match self.spans.last_mut() {
            Some(s) if s.source == source && s.to + 1 == seq => s.to = seq,
            _ => self.spans.push(Span {
                from: seq,
                to: seq,
                source: source.into(),
            }),
        }
        self.pending.push((seq, bytes));
        if self.pending.len() >= 4096 {
            self.flush()?;
        }
        Ok(Ok(()))
    }

    fn flush(&mut self) -> Result<(), EngineError> {
        let records = std::mem::take(&mut self.pending);
        self.rebuilt
            .events(&records)
            .map_err(|why| EngineError::Storage(format!("salvage: {why}")))?;
        (self.progress)(self.rebuilt.seq);
        Ok(())
    }

    /// Stores body `r` in the new document, from the damaged store, the backup, or the
    /// damaged pack.
    fn body(&mut self, r: &ContentRef) -> Result<(), String> {
        let from_store = self
            .bodies_from
            .0
            .get_bytes_or_why(r)
            .map_err(|why| format!("in the store: {why}"));
        let bytes = match from_store {
            Ok(b) => b,
            Err(why) => {
                let from_backup = match self.bodies_from.1 {
                    Some(s) => s.body(r).map_err(|w| format!("{why}; in the backup: {w}")),
                    None => Err(format!("{why}; no backup")),
                };
                match from_backup {
                    Ok(b) => b,
                    Err(why) => self
                        .pack
                        .get(r)
                        .map_err(|w| format!("{why}; by its hash in the pack: {w}"))?,
                }
            }
        };
        self.rebuilt.body(&r.hash.0, &bytes)
    }

    /// The seq and previous hash the next event taken must have.
    fn next(&self) -> (u64, EventHash) {
        let prev = self.pending.last().map_or(self.rebuilt.prev, |(_, b)| {
            EventHash(b[..32].try_into().unwrap_or_default())
        });
        (self.rebuilt.seq + self.pending.len() as u64 + 1, prev)
    }

    /// Events of the damaged log from `from` on: as sled reads them, and where sled cannot
    /// (it cannot open its file, a record is damaged, it panics), as the log's files hold
    /// them ([`RawRecords`], scanned from the damaged document at `root` when first
    /// needed), then sled again past that; why it stopped (`None`: the log's end).
    fn read_log(
        &mut self,
        log: Option<&SledEventLog>,
        raw: &mut Option<RawRecords>,
        root: &Path,
        from: u64,
    ) -> Result<Option<String>, EngineError> {
        let mut from = from;
        loop {
            // Where sled ends is not where the log ends when sled mended it short: the files
            // are asked for the next event in either case.
            let why = match log {
                Some(log) => self.log_from(log, from)?,
                None => Some("the log could not be opened".to_string()),
            };
            let raw = raw.get_or_insert_with(|| RawRecords::scan(&RawRecords::files_of(root)));
            let (before, _) = self.next();
            loop {
                let (seq, prev) = self.next();
                let Some(record) = raw.record(seq, &prev) else {
                    break;
                };
                if let Err(e) = self.take(seq, record, "scan")? {
                    return Ok(Some(e));
                }
            }
            let (after, _) = self.next();
            match why {
                None if after == before => return Ok(None),
                Some(why) if after == before => {
                    return Ok(Some(format!(
                        "{why}; no intact copy of event {after} is in the log's files either"
                    )))
                }
                Some(why) if log.is_none() => {
                    return Ok(Some(format!(
                        "{why}; the log's files hold no intact copy of event {after}"
                    )))
                }
                _ => from = after,
            }
        }
    }

    /// Events from the damaged log from `from` on, while the chain holds; why it stopped
    /// (`None`: it reached the log's end).
    fn log_from(&mut self, log: &SledEventLog, from: u64) -> Result<Option<String>, EngineError> {
        let mut records = log.records(from, u64::MAX);
        loop {
            let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| records.next()));
            let (seq, bytes) = match next {
                Err(_) => return Ok(Some("the log is unreadable here (sled panicked)".into())),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Ok(Some(e.to_string())),
                Ok(Some(Ok(r))) => r,
            };
            if let Err(why) = self.take(seq, bytes, "log")? {
                return Ok(Some(why));
            }
        }
    }

    /// Events from the backup after `at` up to its point; why it stopped (`None`: whole).
    fn backup_from(&mut self, s: &Saved, at: u64) -> Result<Option<String>, EngineError> {
        for &(first, count, offset) in &s.event_frames {
            if first + count as u64 <= at + 1 {
                continue;
            }
            let records = match s.events_at(offset) {
                Ok(r) => r,
                Err(why) => return Ok(Some(format!("the backup: {why}"))),
            };
            for (seq, bytes) in records {
                if seq <= at || seq > s.point.seq {
                    continue;
                }
                if let Err(why) = self.take(seq, bytes, "backup")? {
                    return Ok(Some(format!("the backup: {why}")));
                }
            }
        }
        Ok(None)
    }
}

/// The bodies of the damaged document's content pack as salvage finds them itself, whatever
/// the store made of them: the store drops a body whose index record is damaged (the index
/// has no checksum), and cuts its pack at the first damaged record when it rebuilds the
/// index, losing the whole bodies after it. Read from the damaged document, not the copy the
/// store mends.
struct PackBodies {
    dir: PathBuf,
    /// Where each body may be: the records met walking the pack from its start (until one is
    /// damaged), then the damaged document's index records; `None` until first needed.
    places: Option<HashMap<[u8; 32], (u64, u64)>>,
}

/// A record's head in the pack: `len (u64 LE) ‖ blake3`.
const PACK_HEAD: usize = 40;

impl PackBodies {
    fn new(root: &Path) -> PackBodies {
        PackBodies {
            dir: root.join("content"),
            places: None,
        }
    }

    /// Body `r`, checked against its hash: where the walk or the index places it, else
    /// wherever its hash stands in the pack before its bytes.
    fn get(&mut self, r: &ContentRef) -> Result<Vec<u8>, String> {
        let file = File::open(self.dir.join("pack")).map_err(|e| e.to_string())?;
        let size = file.metadata().map_err(|e| e.to_string())?.len();
        let places = self
            .places
            .get_or_insert_with(|| places(&file, size, &self.dir.join("index")));
        let read = |at: u64| {
            let mut body = vec![0u8; r.len as usize];
            let whole = file.read_exact_at(&mut body, at).is_ok()
                && blake3::hash(&body).as_bytes() == &r.hash.0;
            whole.then_some(body)
        };
        if let Some(body) = places
            .get(&r.hash.0)
            .filter(|&&(_, len)| len == r.len)
            .and_then(|&(at, _)| read(at))
        {
            return Ok(body);
        }
        search(&file, size, r)?
            .and_then(read)
            .ok_or_else(|| "not there".into())
    }
}

/// Where [`PackBodies`] looks for bodies.
fn places(pack: &File, size: u64, index: &Path) -> HashMap<[u8; 32], (u64, u64)> {
    let mut out = HashMap::new();
    let mut at = 0u64;
    let mut head = [0u8; PACK_HEAD];
    while at + PACK_HEAD as u64 <= size && pack.read_exact_at(&mut head, at).is_ok() {
        let len = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
        let body = at + PACK_HEAD as u64;
        if len > size - body {
            break;
        }
        let mut bytes = vec![0u8; len as usize];
        if pack.read_exact_at(&mut bytes, body).is_err()
            || blake3::hash(&bytes).as_bytes()[..] != head[8..]
        {
            break;
        }
        out.insert(head[8..].try_into().unwrap_or_default(), (body, len));
        at = body + len;
    }
    for rec in std::fs::read(index).unwrap_or_default().chunks_exact(48) {
        let key: [u8; 32] = rec[..32].try_into().unwrap_or_default();
        let off = u64::from_le_bytes(rec[32..40].try_into().unwrap_or_default());
        let len = u64::from_le_bytes(rec[40..].try_into().unwrap_or_default());
        out.entry(key).or_insert((off, len));
    }
    out
}

/// The offset of the bytes after the first head `r.len ‖ r.hash` in the pack.
fn search(file: &File, size: u64, r: &ContentRef) -> Result<Option<u64>, String> {
    let mut want = [0u8; PACK_HEAD];
    want[..8].copy_from_slice(&r.len.to_le_bytes());
    want[8..].copy_from_slice(&r.hash.0);
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at + PACK_HEAD as u64 <= size {
        let n = buf.len().min((size - at) as usize);
        file.read_exact_at(&mut buf[..n], at)
            .map_err(|e| e.to_string())?;
        // Every head that starts in `0..=n - PACK_HEAD` is whole in this window; the next
        // one starts where the first that is not begins.
        if let Some(i) = buf[..n].windows(PACK_HEAD).position(|w| w == want) {
            return Ok(Some(at + (i + PACK_HEAD) as u64));
        }
        at += (n - PACK_HEAD + 1) as u64;
    }
    Ok(None)
}

/// The side records to keep: those of the events up to `seq` (the backup's, then the log's),
/// and sync's own (`x‖`) only when `complete`.
fn side_records(
    log: Option<&SledEventLog>,
    saved: Option<&Saved>,
    seq: u64,
    complete: bool,
) -> Vec<SideRecord> {
    let mut all: Vec<SideRecord> = saved.map(|s| s.side.clone()).unwrap_or_default();
    if let Some(log) = log {
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut v = crate::file::foreign::records_of(log, 1, seq).unwrap_or_default();
            v.extend(crate::file::foreign::current_records(log).unwrap_or_default());
            v
        }));
        all.extend(read.unwrap_or_default());
    }
    let mut keep: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
    for (k, v) in all {
        let ok = match crate::file::foreign::record_seq(&k) {
            Some(Some(s)) => s <= seq,
            Some(None) => complete,
            None => false,
        };
        if ok {
            keep.insert(k, v);
        }
    }
    keep.into_iter().collect()
}

fn has_sync_records(log: Option<&SledEventLog>, saved: Option<&Saved>) -> bool {
    let in_log = log.is_some_and(|l| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::file::foreign::current_records(l).is_ok_and(|v| !v.is_empty())
        }))
        .unwrap_or(false)
    });
    let in_backup = saved.is_some_and(|s| {
        s.side
            .iter()
            .any(|(k, _)| matches!(crate::file::foreign::record_seq(k), Some(None)))
    });
    in_log || in_backup
}

/// A backup as salvage reads it: where its event frames and bodies are, up to its newest
/// whole point.
struct Saved {
    path: PathBuf,
    file: File,
    point: format::Point,
    /// `(first seq, count, frame offset)` of each `E` frame.
    event_frames: Vec<(u64, u32, u64)>,
    /// blake3 → (offset, len) of each body.
    bodies: HashMap<[u8; 32], (u64, u64)>,
    side: Vec<SideRecord>,
}

impl Saved {
    fn open(path: &Path) -> Result<Saved, String> {
        let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let outline = format::outline(&file, path)?;
        let point = outline
            .last
            .ok_or_else(|| format!("{} holds no whole backup", path.display()))?;
        let mut side = Vec::new();
        for &(at, len) in &outline.sides {
            let mut p = vec![0u8; len as usize];
            file.read_exact_at(&mut p, at).map_err(|e| e.to_string())?;
            if let Ok(records) = format::decode_side(&p) {
                side.extend(records);
            }
        }
        Ok(Saved {
            path: path.to_owned(),
            file,
            point,
            event_frames: outline.events,
            bodies: outline.bodies,
            side,
        })
    }

    /// The records of the `E` frame at `offset`, checked against its crc.
    fn events_at(&self, offset: u64) -> Result<Vec<(u64, Vec<u8>)>, String> {
        let mut f = &self.file;
        f.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
        let mut frames = format::Frames::at(f, offset, self.point.end);
        match frames.next_frame()? {
            Some(format::Frame::Events(records)) => Ok(records),
            _ => Err(format!("no events at byte {offset}")),
        }
    }

    /// The hash of event `seq` as the backup holds it (`ZERO` for 0).
    fn hash_at(&self, seq: u64) -> Result<EventHash, String> {
        if seq == 0 {
            return Ok(EventHash::ZERO);
        }
        let frame = self
            .event_frames
            .iter()
            .find(|(first, n, _)| (*first..*first + *n as u64).contains(&seq))
            .ok_or_else(|| format!("it does not hold event {seq}"))?;
        let records = self.events_at(frame.2)?;
        let (_, bytes) = records
            .iter()
            .find(|(s, _)| *s == seq)
            .ok_or_else(|| format!("it does not hold event {seq}"))?;
        let hash = bytes.get(..32).ok_or("a record too short")?;
        Ok(EventHash(hash.try_into().unwrap_or_default()))
    }

    /// A body, checked against its hash.
    fn body(&self, r: &ContentRef) -> Result<Vec<u8>, String> {
        let (off, len) = *self.bodies.get(&r.hash.0).ok_or("not there")?;
        let mut buf = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut buf, off)
            .map_err(|e| e.to_string())?;
        if blake3::hash(&buf).as_bytes() != &r.hash.0 {
            return Err("damaged".into());
        }
        Ok(buf)
    }
}

/// A scratch folder beside `to` for the copy of the damaged document.
fn scratch_dir(to: &Path) -> PathBuf {
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "salvaged".into());
    to.with_file_name(format!(".{name}.salvage-{}", std::process::id()))
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
