//! Salvage: a new document from a damaged one, holding every event whose bytes are intact
//! (see docs/EVENTS.md, "Backups, salvage and the format promise").
//!
//! The events come, in seq order, from
//! 1. the damaged log, from seq 1 for as long as each record continues the hash chain: as
//!    sled reads it, and where sled cannot (it refuses or panics on its file, a record is
//!    damaged), from the copies of the records the log's files hold (`raw_records::RawRecords`, found
//!    by their bytes; decision 0042), then sled again past them;
//! 2. where the log stops, the newest backup ([`crate::backup`]), up to its point, when it
//!    holds the same history (its hash where the log stopped agrees); then the log again;
//! 3. where neither holds an event (its record is damaged or gone, or a body it refers to is
//!    in neither the damaged content store — whole, or found by its hash in the pack — nor
//!    the backup), a placeholder of kind
//!    [`SALVAGE_LOST`](elfiee_projections::SALVAGE_LOST) (its value says why; its fold
//!    changes nothing) in its place, and the log again from the next event it holds. That
//!    event is taken on its storage's own check (sled's checksum of its messages, a pack
//!    group's hash) when the chain cannot vouch for it (its predecessor is lost), and the
//!    chain holds again from the one after it; where sled reads nothing near (or cannot
//!    open its file), two records next to each other in the log's files whose second
//!    continues the chain from the first (`RawRecords::bridge`): the first is replaced by a
//!    placeholder too (nothing proves its body), the reading resumes at the second. The new
//!    document's chain is sealed anew from the first placeholder
//!    (`SalvageReport::rechained_from`): the same bodies, new hashes.
//!
//! A salvage never ends on placeholders. What is not recovered is reported as seq ranges
//! with the reason; past the last event recovered, up to the last seq anything in the damaged
//! document still knows of (its log's tail, `HEAD`, snapshot names, the command index, the
//! backup; `HEAD` and the index only where they agree with the recovered events, as neither
//! has a checksum). The damaged document is never written to.
use std::path::{Path, PathBuf};
use std::time::Instant;

use elfiee_model::EventHash;
use elfiee_projections::Folds;
use serde::{Deserialize, Serialize};

use crate::backup::{seal_document, Rebuilt};
use crate::content::ContentStore;
use crate::error::EngineError;
use crate::layout::{copy_tree, ElfPaths};
use crate::log::{EventLog, SideRecord, SledEventLog};

mod report;
mod sources;
mod writer;

use report::CommandSpan;
pub use report::{Lost, Span};
use sources::{PackBodies, Saved};
use writer::Writer;

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
    /// The ranges that could not be recovered, with why. A range with events recovered after
    /// it holds placeholders (kind `salvage.lost`) in the new document.
    pub lost: Vec<Lost>,
    /// The first event past a lost one: from it on the new document's hashes differ from the
    /// damaged document's (the chain is sealed again over the placeholders); `None` when
    /// nothing was lost before the last event recovered.
    #[serde(default)]
    pub rechained_from: Option<u64>,
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
            last: Some(EventHash::ZERO),
            proven: None,
            last_at: 0,
            gaps: Vec::new(),
            stored: EventHash::ZERO,
            last_cmd: uuid::Uuid::nil(),
            open_gap: None,
        };
        // 1. The log from the start; at each place it stops, 2. the backup past it, if it
        // holds the same history, and 3. past what neither holds, a placeholder for each lost
        // event, and the log again from the next event it holds.
        let mut raw = None;
        let mut stop = w.read_log(log.as_ref(), &mut raw, &root, 1)?;
        let mut other_history = false;
        loop {
            if let Some(s) = saved.as_ref() {
                let at = w.next().0 - 1;
                if s.point.seq > at && !other_history {
                    match (s.hash_at(at), w.last) {
                        (Ok(h), Some(last)) if h == last || at == 0 => {
                            let stopped = w.backup_from(s, at)?;
                            let (next, _) = w.next();
                            // Whole: the log from past its point. Stopped after some events:
                            // the log again from there (it may hold what the backup lacks).
                            if stopped.is_none() || next > at + 1 {
                                let from = if stopped.is_none() {
                                    s.point.seq + 1
                                } else {
                                    next
                                };
                                stop = w.read_log(log.as_ref(), &mut raw, &root, from)?;
                                continue;
                            }
                        }
                        (Ok(_), Some(_)) => {
                            other_history = true;
                            notes.push(format!(
                                "the backup {} holds another history (its event {at} differs) and was not used",
                                s.path.display()
                            ));
                        }
                        (Err(not), _) => {
                            other_history = true;
                            notes.push(format!("the backup was not used: {not}"));
                        }
                        // Just past a lost event: the backup's history cannot be compared.
                        (Ok(_), None) => {}
                    }
                }
            }
            let Some(why) = stop.take() else { break };
            match w.bridge(log.as_ref(), (&mut raw, &root), &why)? {
                Some(resume) => stop = w.read_log(log.as_ref(), &mut raw, &root, resume)?,
                None => {
                    stop = Some(why);
                    break;
                }
            }
        }
        if let Some(why) = w.trim_gap() {
            stop = Some(why);
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
        // The damaged document's own hash of the last event (the new one differs past a gap).
        let stored = w.stored;
        let end = known_end(
            &source,
            log.as_ref(),
            saved.as_ref(),
            (seq, stored, &w.commands),
        );
        let complete = w.gaps.is_empty() && (stop.is_none() || end.is_some_and(|e| e <= seq));
        w.rebuilt.side = side_records(log.as_ref(), saved.as_ref(), seq, complete);
        if !complete && has_sync_records(log.as_ref(), saved.as_ref()) {
            notes.push("sync's records were left out, as events were lost: to sync this document again, join it afresh (`elfiee sync join`) and let `elfiee serve --sync` bring the events back".into());
        }
        w.rebuilt.finish()?;
        let digest = seal_document(paths, &new_log, folds)?;
        let mut lost = std::mem::take(&mut w.gaps);
        match (stop, end) {
            (_, Some(end)) if end <= seq => {}
            (None, None) => {}
            (why, end) => lost.push(Lost {
                from: seq + 1,
                to: end,
                why: why
                    .unwrap_or_else(|| "the log ends before the seq the document recorded".into()),
            }),
        };
        let rechained = lost.first().map(|l| l.from).filter(|&f| f <= seq);
        Ok((seq, prev, bodies, spans, lost, digest, rechained))
    });
    // Messages name the damaged document, not the copy salvage read.
    let scratch = source.root.display().to_string();
    let original = root.display().to_string();
    let name = |s: String| s.replace(&scratch, &original);
    let notes: Vec<String> = notes.into_iter().map(name).collect();
    let (paths, (seq, prev, bodies, recovered, lost, state_digest, rechained_from)) = match out {
        Ok((paths, (seq, prev, bodies, spans, lost, digest, rechained))) => {
            let lost = lost
                .into_iter()
                .map(|l| Lost {
                    why: name(l.why),
                    ..l
                })
                .collect::<Vec<_>>();
            (paths, (seq, prev, bodies, spans, lost, digest, rechained))
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
        rechained_from,
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
