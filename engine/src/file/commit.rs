//! The commit path: write a group of sequenced commands, make it durable with one flush,
//! apply it to the committed state, publish it and answer its callers; the flusher thread
//! that does so for whatever queued up (group commit); the hand-off of due snapshots.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use elfiee_model::{Event, EventHash};

use super::core::{Committed, FileCore, Origin};
use super::sequencer::CommandRanges;
use super::snapshotter::SnapshotJob;
use crate::commit_queue::CommitQueue;
use crate::error::EngineError;
use crate::log::{EventLog, SledEventLog};

/// Where a submission's answer goes: its events once durable, or the refusal.
pub(crate) type Reply = tokio::sync::oneshot::Sender<Result<Vec<Event>, EngineError>>;

/// What the owner's commit path shares between the submitting tasks and the flusher thread.
pub(crate) struct CommitPath {
    pub core: Arc<FileCore>,
    pub queue: CommitQueue<Pending>,
    pub cursor: Mutex<Cursor>,
    /// Commands handed to the commit path and not yet answered.
    pub in_progress: AtomicUsize,
    /// Hands due snapshots (and the command index entries they cover) to the snapshot
    /// thread; `None` once closed.
    pub snapshots: Mutex<Option<std::sync::mpsc::Sender<SnapshotJob>>>,
    pub commands: CommandRanges,
    /// The first write or flush that failed. Every command sequenced after it chains onto
    /// events that are not durable, so from then on each is refused with this error.
    pub failed: Mutex<Option<EngineError>>,
}

/// A sequenced command waiting to be written, flushed and answered.
pub(crate) struct Pending {
    pub cmd_id: uuid::Uuid,
    pub origin: Origin,
    /// Answered only once durable: every local command; another device's events when their
    /// appender asks ([`crate::ForeignLog::append_deferred`] does not).
    pub durable: bool,
    pub work: Work,
    pub reply: Reply,
    /// The command's `commit` span (disabled unless DEBUG tracing is on for the engine).
    pub span: tracing::Span,
}

pub(crate) enum Work {
    /// New events, their sealed records, and the side records written with them.
    Fresh(Vec<Event>, Vec<(u64, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>),
    /// A resubmitted command: answer with its original events `(first_seq, count)`, read from
    /// the log once they are durable. Nothing to write, apply or publish.
    Repeat(u64, u64),
}

/// Where the committed part of the log ends; shared by the flusher and the inline path.
pub(crate) struct Cursor {
    pub last_hash: EventHash,
    pub last_snapshot: u64,
    /// Stored bytes of the events committed since the last snapshot (what the next open
    /// would replay).
    pub tail_bytes: u64,
    /// The tail holds a bulk command (an import chunk, stored as a group): replaying it
    /// after a reopen means rebuilding many blocks, so the file snapshots before it closes.
    pub tail_bulk: bool,
    /// Index entries of the commands committed since the last index append, in seq order.
    pub to_index: Vec<(uuid::Uuid, u64, u64)>,
}

/// Writes, flushes, applies, publishes and answers one group of commands, in order; hands a
/// snapshot to the snapshot thread when one is due. The caller holds the cursor, so groups
/// commit in seq order. After a failed write or flush every group is refused: its events
/// chain onto ones that never became durable.
pub(crate) fn commit_group(
    path: &CommitPath,
    log: &SledEventLog,
    mut cursor: std::sync::MutexGuard<'_, Cursor>,
    batch: Vec<Pending>,
) {
    let t = Instant::now();
    if let Some(e) = path.failure() {
        return path.refuse(batch, &e);
    }
    let group: Vec<&[(u64, Vec<u8>)]> = batch
        .iter()
        .filter_map(|p| match &p.work {
            Work::Fresh(_, records, _) => Some(records.as_slice()),
            Work::Repeat(..) => None,
        })
        .collect();
    let side: Vec<(Vec<u8>, Vec<u8>)> = batch
        .iter()
        .flat_map(|p| match &p.work {
            Work::Fresh(_, _, side) => side.as_slice(),
            Work::Repeat(..) => &[],
        })
        .cloned()
        .collect();
    let side = match super::foreign::merge_command_records(side) {
        Ok(side) => side,
        Err(e) => return path.fail(batch, e),
    };
    let n = batch.len();
    // Another device's events may be answered before they are durable (a deferred append:
    // the broker keeps them, and the ingest checkpoint written with them, in the same atomic
    // batch, is lost with them, so a crash makes ingest read them again). The next durable
    // group, a snapshot or the close makes them durable (docs/ARCHITECTURE.md, "Invariants").
    let durable = batch.iter().any(|p| p.durable);
    // Bodies first: a durable event never refers to bytes that are not.
    let written = path
        .core
        .content
        .sync()
        .and_then(|_| log.write_group(&group, &side))
        .and_then(|_| if durable { log.flush() } else { Ok(()) });
    if let Err(e) = written {
        return path.fail(batch, e);
    }
    let flush_us = t.elapsed().as_micros() as u64;
    {
        let mut state = path
            .core
            .committed
            .write()
            .unwrap_or_else(|p| p.into_inner());
        for p in &batch {
            if let Work::Fresh(events, records, _) = &p.work {
                let applied = Instant::now();
                for e in events {
                    path.core.config.registry.apply(&mut state, e);
                }
                tracing::debug!(
                    parent: &p.span,
                    write_flush_us = flush_us,
                    apply_us = applied.elapsed().as_micros() as u64,
                    group = n,
                    "committed"
                );
                cursor.tail_bytes += records.iter().map(|(_, r)| r.len() as u64).sum::<u64>();
                cursor.tail_bulk |= records.len() >= crate::log::GROUP_MIN_EVENTS;
                if let (Some(first), Some(last)) = (events.first(), events.last()) {
                    cursor.last_hash = last.hash;
                    if p.origin == Origin::Local {
                        cursor
                            .to_index
                            .push((p.cmd_id, first.seq, events.len() as u64));
                    } else {
                        // Another device's events: indexed by runs of one command, as an
                        // open indexes a log's tail (`verify` does not hold them to it).
                        for e in events {
                            match cursor.to_index.last_mut() {
                                Some((c, s, n)) if *c == e.cmd_id && *s + *n == e.seq => *n += 1,
                                _ => cursor.to_index.push((e.cmd_id, e.seq, 1)),
                            }
                            let (c, s, n) = *cursor.to_index.last().expect("pushed above");
                            path.commands.insert(c, (s, n));
                        }
                    }
                }
            }
        }
        path.core
            .committed_seq
            .store(state.last_seq, Ordering::Release);
    }
    let tx = path.core.listened();
    let published = path.core.last_seq();
    for p in batch {
        let answer = match p.work {
            Work::Fresh(events, _, _) => {
                if let Some(tx) = &tx {
                    for e in &events {
                        let _ = tx.send(Arc::new(Committed {
                            event: e.clone(),
                            origin: p.origin,
                        }));
                    }
                }
                Ok(events)
            }
            Work::Repeat(first, count) => {
                crate::log::read_events(log, first, first + count - 1, None).collect()
            }
        };
        let _ = p.reply.send(answer);
    }
    path.core.mark_published(published);
    path.in_progress.fetch_sub(n, Ordering::AcqRel);
    tracing::trace!(commands = n, flush_us, "group committed");
    if snapshot_due(path, &cursor) {
        hand_off_snapshot(path, log, &mut cursor);
    }
}

impl CommitPath {
    fn failure(&self) -> Option<EngineError> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A write or flush failed: refuse further commands (the file is poisoned) and this group.
    fn fail(&self, batch: Vec<Pending>, e: EngineError) {
        tracing::error!(error = %e, "flush failed (its commands were not acknowledged); refusing further commands");
        // Later commands are refused as `Storage(why)`: the same words, not wrapped twice.
        let why = match &e {
            EngineError::Storage(why) => why.clone(),
            e => e.to_string(),
        };
        self.core.set_poisoned(Some(why));
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e.clone());
        self.refuse(batch, &e);
    }

    fn refuse(&self, batch: Vec<Pending>, e: &EngineError) {
        let n = batch.len();
        for p in batch {
            let _ = p.reply.send(Err(e.clone()));
        }
        self.in_progress.fetch_sub(n, Ordering::AcqRel);
    }
}

/// A snapshot pays when the tail an open would replay is long (in events) or large (in
/// bytes); never just because a process ends (a short-lived process costs what it changed),
/// unless what it changed was a bulk command (see [`Cursor::tail_bulk`] and `run_flusher`).
fn snapshot_due(path: &CommitPath, cursor: &Cursor) -> bool {
    let seq = path.core.committed_seq.load(Ordering::Acquire);
    seq > cursor.last_snapshot
        && (seq - cursor.last_snapshot >= path.core.config.snapshot_every
            || cursor.tail_bytes >= path.core.config.snapshot_tail_bytes)
}

/// The flusher thread: one write + flush per round for everything queued (group commit).
/// (Writing group N+1 on a thread of its own while group N's flush ran was tried: slower, as
/// the writer woke for nearly every command; see docs/PERFORMANCE.md.)
pub(crate) fn run_flusher(path: Arc<CommitPath>, log: Arc<SledEventLog>) {
    while let Some(batch) = path.queue.take_all() {
        let cursor = path.cursor.lock().unwrap_or_else(|p| p.into_inner());
        commit_group(&path, &log, cursor, batch);
    }
    // Closing: a snapshot only when the tail is worth it (`snapshot_at_close_after`, or a
    // bulk command in it); the next open replays the short tail and indexes its commands.
    let mut cursor = path.cursor.lock().unwrap_or_else(|p| p.into_inner());
    let seq = path.core.committed_seq.load(Ordering::Acquire);
    // Other devices' events appended since the last local commit: durable before closing.
    if let Err(e) = log.flush_written() {
        tracing::warn!(error = %e, "other devices' last events not made durable at close");
    }
    let at_close = path.core.config.snapshot_at_close_after.max(1);
    if snapshot_due(&path, &cursor) || seq >= cursor.last_snapshot + at_close || cursor.tail_bulk {
        hand_off_snapshot(&path, &log, &mut cursor);
    }
    // Dropping the sender lets the snapshot thread finish the jobs it has and stop.
    path.snapshots
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
}

/// Encodes the committed state (the caller holds the cursor, so no commit moves it) and hands
/// it, with the pending index entries, to the snapshot thread. A snapshot (and the HEAD
/// written with it) says every event up to its seq is durable: other devices' events not
/// flushed yet are flushed first.
fn hand_off_snapshot(path: &CommitPath, log: &SledEventLog, cursor: &mut Cursor) {
    if let Err(e) = log.flush_written() {
        tracing::warn!(error = %e, "snapshot skipped: the events before it are not durable");
        return;
    }
    let (seq, bytes) = {
        let state = path
            .core
            .committed
            .read()
            .unwrap_or_else(|p| p.into_inner());
        (
            state.last_seq,
            crate::replay::encode_snapshot(
                state.last_seq,
                cursor.last_hash,
                path.core.config.registry.folds().fingerprint(),
                &state,
            ),
        )
    };
    let job = SnapshotJob {
        seq,
        hash: cursor.last_hash,
        bytes,
        entries: std::mem::take(&mut cursor.to_index),
    };
    cursor.last_snapshot = seq;
    cursor.tail_bytes = 0;
    cursor.tail_bulk = false;
    let tx = path.snapshots.lock().unwrap_or_else(|p| p.into_inner());
    match tx.as_ref().map(|tx| tx.send(job)) {
        Some(Ok(())) => {}
        // No snapshot thread (closing): the entries stay in memory; the next open replays
        // the tail and rebuilds them.
        _ => tracing::warn!(seq, "snapshot thread gone; snapshot not written"),
    }
}
