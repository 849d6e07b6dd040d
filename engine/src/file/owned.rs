//! The owner's half of an open file: the log, the sequencer, the commit path and the snapshot
//! thread. Every write, whoever sends it (this process, another process through the owner
//! socket, another device through sync), goes through one door: [`Owned::submit`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use elfiee_model::{Command, Event};
use elfiee_projections::State;

use super::commit::{commit_group, run_flusher, CommitPath, Cursor, Pending, Reply, Work};
use super::core::{Committed, FileCore, Origin};
use super::sequencer::{dismantle, Inputs, Prepared, Sequencer};
use super::snapshotter::run_snapshots;
use crate::commit_queue::CommitQueue;
use crate::error::EngineError;
use crate::log::SledEventLog;
use crate::subscription::EventSource;

const CHECKPOINT_TREE: &str = "effect_checkpoints";

/// One write, as it enters the owner.
pub(crate) enum Submission {
    /// Commands of this process: one alone in the pipeline commits on the caller's task.
    Local(Vec<Command>),
    /// Commands of another process (the owner socket): always through the flusher, so the
    /// commands of many client processes share flushes.
    Socket(Vec<Command>),
    /// Events decided on another device, with their `origin` bytes, and side records
    /// written in the same atomic batch (see [`crate::foreign`]); whether they are answered
    /// only once durable.
    Foreign(Vec<(Event, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>, bool),
}

/// What a file actor owns besides its state: stopped when the file closes.
struct Parts {
    flusher: std::thread::JoinHandle<()>,
    snapshotter: std::thread::JoinHandle<()>,
    /// Stops serving other processes (set once the owner socket is up).
    stop_serving: Option<Box<dyn FnOnce() + Send>>,
    /// The automatic backup, when the engine has one.
    auto_backup: Option<super::backup::Auto>,
}

/// The file as this process owns it (see the module docs). Made by [`Owned::open`], ended by
/// [`Owned::shut_down`]; a later take-over makes a new one on the same [`FileCore`].
pub(crate) struct Owned {
    pub core: Arc<FileCore>,
    /// `None` once closed.
    log: RwLock<Option<Arc<SledEventLog>>>,
    commit: Arc<CommitPath>,
    /// `None` once closed: submits answer `Closed` (or the poison).
    sequencer: Mutex<Option<Sequencer>>,
    /// Submits between entering the pipeline and being queued (or answered); one that finds
    /// others here queues for a shared flush instead of flushing alone.
    sequencing: AtomicUsize,
    /// Keep each submission's commands beside its events (see [`crate::foreign`]).
    pub(crate) record_commands: AtomicBool,
    parts: Mutex<Option<Parts>>,
}

impl Owned {
    /// Opens the file's log here (`Locked` when another process holds it; then nothing has
    /// changed), loads the committed state into `core` and starts the flusher and snapshot
    /// threads.
    pub(crate) async fn open(core: Arc<FileCore>) -> Result<Arc<Owned>, EngineError> {
        let paths = core.paths.clone();
        let folds = core.config.registry.folds().clone();
        let (log, opened) = tokio::task::spawn_blocking({
            let paths = paths.clone();
            move || -> Result<_, EngineError> {
                // Decode the newest snapshot while sled opens the log (two independent reads).
                let (log, predecoded) = std::thread::scope(|scope| {
                    let decoding = std::thread::Builder::new()
                        .name("elfiee-snapshot-decode".into())
                        .spawn_scoped(scope, || crate::replay::decode_newest(&paths));
                    let t0 = Instant::now();
                    let log = SledEventLog::open(&paths.log_dir(), &paths.root);
                    let sled_us = t0.elapsed().as_micros() as u64;
                    let predecoded = match decoding {
                        Ok(h) => h.join().unwrap_or(None),
                        Err(_) => None,
                    };
                    tracing::debug!(
                        sled_us,
                        both_us = t0.elapsed().as_micros() as u64,
                        "log and newest snapshot opened"
                    );
                    (log, predecoded)
                });
                let log = Arc::new(log?);
                start_writeback(&paths.log_dir().join("db"));
                let loading = Instant::now();
                let opened = crate::replay::load_state(log.as_ref(), &paths, predecoded, &folds)?;
                tracing::debug!(us = loading.elapsed().as_micros() as u64, "state loaded");
                if !opened.state.unknown_kinds.is_empty() {
                    // Info, not a warning: the caller decides how to tell its user
                    // (`FileHandle::unknown_kinds`; the CLI prints one line).
                    tracing::info!(
                        kinds = %crate::replay::describe_kinds(&opened.state.unknown_kinds),
                        "this document holds events of kinds this program has no fold for; their meaning is missing from the state"
                    );
                }
                Ok((log, opened))
            }
        })
        .await
        .map_err(|e| EngineError::Storage(format!("opening task failed: {e}")))??;
        let crate::replay::Opened {
            state,
            hash: prev_hash,
            snapshot_seq,
            commands,
            unsaved,
        } = opened;
        let last_seq = state.last_seq;
        core.reset(state);
        core.set_poisoned(None);
        let (snapshot_tx, snapshot_rx) = std::sync::mpsc::channel();
        let ranges = super::sequencer::CommandRanges::new();
        for (cmd_id, first, count) in commands {
            ranges.insert(cmd_id, (first, count));
        }
        let commit = Arc::new(CommitPath {
            core: core.clone(),
            queue: CommitQueue::new(),
            cursor: Mutex::new(Cursor {
                last_hash: prev_hash,
                // The next snapshot is due `snapshot_every` events after the one loaded.
                last_snapshot: snapshot_seq,
                tail_bytes: 0,
                tail_bulk: false,
                to_index: unsaved,
            }),
            in_progress: AtomicUsize::new(0),
            snapshots: Mutex::new(Some(snapshot_tx)),
            commands: ranges,
            failed: Mutex::new(None),
        });
        let snapshotter = std::thread::Builder::new()
            .name("elfiee-snapshots".into())
            .spawn({
                let paths = paths.clone();
                move || run_snapshots(paths, snapshot_rx)
            })
            .map_err(|e| EngineError::Storage(format!("cannot start the snapshot thread: {e}")))?;
        let flusher = std::thread::Builder::new()
            .name("elfiee-flusher".into())
            .spawn({
                let (commit, log) = (commit.clone(), log.clone());
                move || run_flusher(commit, log)
            })
            .map_err(|e| EngineError::Storage(format!("cannot start the flusher thread: {e}")))?;
        let sequencer = Sequencer::new(
            log.clone(),
            core.config.registry.clone(),
            last_seq,
            prev_hash,
        );
        // A replica's subscribers wait for events; wake them to read what they missed.
        core.applied.notify_waiters();
        tracing::info!(path = %paths.root.display(), seq = last_seq, "opened");
        let policy = core.config.auto_backup.clone();
        let owned = Arc::new(Owned {
            core,
            log: RwLock::new(Some(log)),
            commit,
            sequencer: Mutex::new(Some(sequencer)),
            sequencing: AtomicUsize::new(0),
            record_commands: AtomicBool::new(false),
            parts: Mutex::new(Some(Parts {
                flusher,
                snapshotter,
                stop_serving: None,
                auto_backup: None,
            })),
        });
        if let Some(policy) = policy {
            let source: std::sync::Weak<dyn super::backup::Source> = Arc::downgrade(&owned) as _;
            let auto = super::backup::start(source, &policy, &paths.root);
            if let Some(p) = owned
                .parts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                p.auto_backup = auto;
            }
        }
        Ok(owned)
    }

    /// Keeps `stop` to run first when the file closes (the owner socket's).
    pub(crate) fn on_close(&self, stop: Box<dyn FnOnce() + Send>) {
        match self
            .parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            Some(p) => p.stop_serving = Some(stop),
            None => stop(),
        }
    }

    /// Whether [`Owned::shut_down`] has not run yet (or ran only partly).
    pub(crate) fn is_running(&self) -> bool {
        self.parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Closes the file, in order: no more requests from other processes, no more commands,
    /// the queued ones committed (the flusher's last round), the last snapshot written, the
    /// log released. Runs once; later calls do nothing.
    pub(crate) async fn shut_down(&self) {
        let Some(parts) = self.parts.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        if let Some(stop) = parts.stop_serving {
            stop();
        }
        // Refuse further submits (they answer `Closed`); one being sequenced finishes first.
        self.sequencer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.commit.queue.close();
        // The flusher commits what is queued, hands its last snapshot to the snapshot thread
        // and drops the sender; the snapshot thread then writes what it has and stops.
        let log = self.log.read().unwrap_or_else(|p| p.into_inner()).clone();
        let core = self.core.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let _ = parts.flusher.join();
            let _ = parts.snapshotter.join();
            if let Some(log) = &log {
                record_head(log, &core.paths);
            }
            if let (Some(auto), Some(log)) = (parts.auto_backup, log) {
                // Everything is committed: the last events go into the backup too.
                auto.finish(&log, &core);
            }
        })
        .await;
        self.core.end_stream();
        let last = self.log.write().unwrap_or_else(|p| p.into_inner()).take();
        // The close is over when sled's lock on the folder is released, so that the next
        // open or `verify`, here or in another process, finds the folder free. Dropping the
        // log does not release it at once: a read that began before the close may still
        // hold the log, and sled's I/O threads finish their last writes with the file open
        // (a `verify` right after `close` was refused as locked, once in CI).
        let db = self.core.paths.log_dir().join("db");
        let root = self.core.paths.root.clone();
        let _ = tokio::task::spawn_blocking(move || {
            drop(last);
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            loop {
                // sled locks its `db` file with flock: a probe on a file description of our
                // own conflicts with it, even in this process.
                let free = match std::fs::File::open(&db) {
                    Ok(f) => !matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
                    Err(_) => true,
                };
                if free {
                    return;
                }
                if Instant::now() > deadline {
                    tracing::warn!(path = %root.display(), "closed, but sled still holds the folder's lock after 5 s");
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
        .await;
        tracing::info!(path = %self.core.paths.root.display(), "closed");
    }

    pub(crate) fn log(&self) -> Result<Arc<SledEventLog>, EngineError> {
        self.log
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(EngineError::Closed)
    }

    /// Runs `f` while nothing is being written: no command is sequenced (the sequencer lock
    /// is held) and everything written is committed and durable. Writers wait meanwhile (one flush at
    /// most, plus `f`); an error when the file is closed or does not settle within 10 s.
    pub(crate) fn quiet<R>(
        &self,
        f: impl FnOnce(&Arc<SledEventLog>) -> R,
    ) -> Result<R, EngineError> {
        use crate::log::EventLog;
        let guard = self.sequencer.lock().unwrap_or_else(|p| p.into_inner());
        let log = guard.as_ref().ok_or(EngineError::Closed)?.log().clone();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while log.tail()?.0 != self.core.last_seq() {
            if Instant::now() > deadline {
                return Err(EngineError::Storage(
                    "the file's commits did not settle within 10 s; try again".into(),
                ));
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        // Another device's events may be committed before they are durable: a cut holds
        // only durable events.
        log.flush_written()?;
        let out = f(&log);
        drop(guard);
        Ok(out)
    }

    /// Appends what is new up to the committed tail to the backup file `to`
    /// ([`crate::backup`]). Writers wait only while the cut is taken (the tail and sync's
    /// records); the events are read after, while they write on.
    pub(crate) async fn backup(
        self: &Arc<Self>,
        to: std::path::PathBuf,
    ) -> Result<crate::backup::BackupReport, EngineError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || super::backup::Source::back_up(me.as_ref(), &to))
            .await
            .map_err(|e| EngineError::Storage(format!("backup task failed: {e}")))?
    }

    /// Where a command's events are, `(first_seq, count)`, if it was accepted (it may not be
    /// durable yet: compare with the committed seq).
    pub(crate) fn command_range(&self, cmd_id: uuid::Uuid) -> Option<(u64, u64)> {
        self.commit.commands.get(&cmd_id).map(|r| *r)
    }

    /// The one door for writes: sequences `s` under the sequencer lock on the caller's task,
    /// hands it to the commit path and answers once its events are durable (or with the
    /// refusal; a rejected command writes nothing).
    pub(crate) async fn submit(&self, s: Submission) -> Result<Vec<Event>, EngineError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        match s {
            Submission::Local(cmds) => self.sequence(cmds, tx, true),
            Submission::Socket(cmds) => self.sequence(cmds, tx, false),
            Submission::Foreign(events, side, durable) => {
                self.sequence_foreign(events, side, durable, tx)
            }
        }
        rx.await.unwrap_or(Err(EngineError::Closed))
    }

    /// With `inline`, a command alone in the pipeline commits on the caller's thread;
    /// otherwise it always goes to the flusher.
    fn sequence(&self, cmds: Vec<Command>, reply: Reply, inline: bool) {
        self.sequencing.fetch_add(1, Ordering::AcqRel);
        let mut guard = self.sequencer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(seq) = guard.as_mut() else {
            // Closed; if because something failed, say what.
            let why = self.core.poisoned();
            let answer = Err(why.map(EngineError::Storage).unwrap_or(EngineError::Closed));
            return self.answer_now(guard, reply, answer);
        };
        let started = Instant::now();
        let log = seq.log().clone();
        let inputs = Inputs {
            core: &self.core,
            commands: &self.commit.commands,
            record_commands: self.record_commands.load(Ordering::Acquire),
        };
        let (work, span) = match seq.prepare(&inputs, &cmds) {
            Ok(Prepared::Done(events)) => return self.answer_now(guard, reply, Ok(events)),
            Ok(Prepared::Repeat(first, count)) => {
                (Work::Repeat(first, count), tracing::Span::none())
            }
            Ok(Prepared::Write(events, records, side)) => {
                let span = tracing::debug_span!("commit", cmd_id = %cmds[0].cmd_id, cap_id = %cmds[0].cap_id,
                    editor = %cmds[0].editor_id, seq = events.last().map(|e| e.seq).unwrap_or(0));
                span.in_scope(|| {
                    tracing::debug!(
                        handler_us = seq.handler_time().as_micros() as u64,
                        sequence_us = started.elapsed().as_micros() as u64,
                        events = events.len(),
                        "sequenced, awaiting flush"
                    )
                });
                self.commit
                    .commands
                    .insert(cmds[0].cmd_id, (events[0].seq, events.len() as u64));
                (Work::Fresh(events, records, side), span)
            }
            Err(e) => {
                tracing::debug!(cap_id = %cmds.first().map(|c| c.cap_id.as_str()).unwrap_or(""), error = %e, "command rejected");
                self.answer_now(guard, reply, Err(e));
                // Dropping a very deep JSON value recurses; take refused ones apart iteratively
                // (whatever their depth: measuring it again would cost as much).
                for cmd in cmds {
                    dismantle(cmd.payload);
                }
                return;
            }
        };
        // A commit made inline happens inside the command's span.
        let _in_span = span.clone().entered();
        let p = Pending {
            cmd_id: cmds[0].cmd_id,
            origin: Origin::Local,
            durable: true,
            work,
            reply,
            span,
        };
        self.enqueue(guard, &log, inline, p);
    }

    /// Appends events decided on another device (see [`Sequencer::prepare_foreign`]), in one
    /// atomic batch with `side`.
    fn sequence_foreign(
        &self,
        foreign: Vec<(Event, Vec<u8>)>,
        side: Vec<(Vec<u8>, Vec<u8>)>,
        durable: bool,
        reply: Reply,
    ) {
        self.sequencing.fetch_add(1, Ordering::AcqRel);
        let mut guard = self.sequencer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(seq) = guard.as_mut() else {
            return self.answer_now(guard, reply, Err(EngineError::Closed));
        };
        let log = seq.log().clone();
        match seq.prepare_foreign(&self.core, foreign, side) {
            Ok(Prepared::Write(events, records, side)) => self.enqueue(
                guard,
                &log,
                true,
                Pending {
                    cmd_id: uuid::Uuid::nil(),
                    origin: Origin::Foreign,
                    durable,
                    work: Work::Fresh(events, records, side),
                    reply,
                    span: tracing::Span::none(),
                },
            ),
            Ok(_) => self.answer_now(guard, reply, Ok(Vec::new())),
            Err(e) => self.answer_now(guard, reply, Err(e)),
        }
    }

    /// Answers a submission that needs nothing written (refused, a repeat already durable,
    /// or the file closed), letting the next one into the sequencer first.
    fn answer_now(
        &self,
        guard: std::sync::MutexGuard<'_, Option<Sequencer>>,
        reply: Reply,
        answer: Result<Vec<Event>, EngineError>,
    ) {
        drop(guard);
        self.sequencing.fetch_sub(1, Ordering::AcqRel);
        let _ = reply.send(answer);
    }

    /// Hands a sequenced command to the commit path. Nobody else in the pipeline and nothing
    /// in flight: commit right here (no thread hand-off). Otherwise queue it, in seq order
    /// (the caller holds the sequencer lock), so it shares the flusher's next flush.
    fn enqueue(
        &self,
        guard: std::sync::MutexGuard<'_, Option<Sequencer>>,
        log: &SledEventLog,
        inline: bool,
        p: Pending,
    ) {
        let commit = &self.commit;
        let alone = inline
            && self.sequencing.load(Ordering::Acquire) == 1
            && commit.in_progress.load(Ordering::Acquire) == 0;
        commit.in_progress.fetch_add(1, Ordering::AcqRel);
        if alone && !commit.queue.is_closed() {
            // Take the commit cursor before letting the next command in, so commits stay in
            // seq order; the next command can be sequenced while this one is written.
            let cursor = commit.cursor.lock().unwrap_or_else(|p| p.into_inner());
            drop(guard);
            self.sequencing.fetch_sub(1, Ordering::AcqRel);
            commit_group(commit, log, cursor, vec![p]);
            return;
        }
        let pushed = commit.queue.push(p);
        drop(guard);
        self.sequencing.fetch_sub(1, Ordering::AcqRel);
        if let Err(p) = pushed {
            commit.in_progress.fetch_sub(1, Ordering::AcqRel);
            let _ = p.reply.send(Err(EngineError::Closed));
        }
    }

    /// Committed events `from..=to`, read from the log.
    pub(crate) fn read_events(&self, from: u64, to: u64) -> Result<Vec<Event>, EngineError> {
        let log = self.log()?;
        crate::log::read_events(log.as_ref(), from.max(1), to, None).collect()
    }

    /// The events a committed command produced (`None` if it never committed).
    pub(crate) fn command_events(
        &self,
        cmd_id: uuid::Uuid,
    ) -> Result<Option<Vec<Event>>, EngineError> {
        let log = self.log()?;
        match self.command_range(cmd_id) {
            Some((first, count)) if first + count - 1 <= self.core.last_seq() => {
                crate::log::read_events(log.as_ref(), first, first + count - 1, None)
                    .collect::<Result<_, _>>()
                    .map(Some)
            }
            _ => Ok(None),
        }
    }

    pub(crate) fn checkpoint(&self, name: &str) -> Result<u64, EngineError> {
        use crate::log::EventLog;
        let bytes = self.log()?.get_aux(CHECKPOINT_TREE, name)?;
        Ok(bytes
            .and_then(|b| b.as_slice().try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    /// What the view adds to the events `from..=to`, by seq (see [`crate::StateView::notes`]).
    pub(crate) fn notes(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, serde_json::Value)>, EngineError> {
        if !self.core.has_view() {
            // Nothing to say: the events are not even read.
            return Ok(Vec::new());
        }
        Ok(self.notes_of(&self.read_events(from, to)?))
    }

    /// What the view adds to `events`, by seq (none without a view).
    pub(crate) fn notes_of(&self, events: &[Event]) -> Vec<(u64, serde_json::Value)> {
        events
            .iter()
            .zip(self.core.notes(events))
            .filter_map(|(e, n)| n.map(|n| (e.seq, n)))
            .collect()
    }

    pub(crate) fn set_checkpoint(&self, name: &str, seq: u64) -> Result<(), EngineError> {
        use crate::log::EventLog;
        self.log()?
            .put_aux(CHECKPOINT_TREE, name, &seq.to_be_bytes())
    }

    /// The state as of `seq` (before the last one), from snapshots and the log.
    pub(crate) async fn state_at(&self, seq: u64) -> Result<State, EngineError> {
        let log = self.log()?;
        let paths = self.core.paths.clone();
        let folds = self.core.config.registry.folds().clone();
        tokio::task::spawn_blocking(move || {
            crate::replay::state_at(log.as_ref(), &paths, seq, &folds)
        })
        .await
        .map_err(|e| EngineError::Storage(e.to_string()))?
    }

    pub(crate) async fn replay(&self) -> Result<(crate::replay::ReplayReport, State), EngineError> {
        let log = self.log()?;
        let folds = self.core.config.registry.folds().clone();
        tokio::task::spawn_blocking(move || {
            crate::replay::replay_log(log.as_ref(), &folds, |_, _| {})
        })
        .await
        .map_err(|e| EngineError::Storage(e.to_string()))?
    }

    pub(crate) async fn verify(
        self: &Arc<Self>,
    ) -> Result<crate::replay::VerifyReport, EngineError> {
        let log = self.log()?;
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let core = &me.core;
            crate::replay::verify_log(
                log.as_ref(),
                &crate::replay::VerifyInputs {
                    index: &|id| me.command_range(id),
                    complete: true,
                    snapshot: crate::replay::newest_snapshot(&core.paths),
                    content: Some(&core.content),
                    folds: core.config.registry.folds(),
                    foreign: super::foreign::foreign_seqs(&log, 1, u64::MAX)?,
                },
                |_, _| {},
            )
        })
        .await
        .map_err(|e| EngineError::Storage(e.to_string()))?
    }
}

impl EventSource for Owned {
    /// Events `from..=to` with their origins: the foreign ones found by one range scan of
    /// their `f‖seq` records (none when the document never synced), not a read per event.
    fn read_committed(&self, from: u64, to: u64) -> Result<Vec<Committed>, EngineError> {
        let log = self.log()?;
        let from = from.max(1);
        let events: Vec<Event> =
            crate::log::read_events(log.as_ref(), from, to, None).collect::<Result<_, _>>()?;
        let foreign = super::foreign::foreign_seqs(&log, from, to)?;
        Ok(events
            .into_iter()
            .map(|event| Committed {
                origin: if foreign.contains(&event.seq) {
                    Origin::Foreign
                } else {
                    Origin::Local
                },
                event,
            })
            .collect())
    }
}

/// sled rewrites every free segment of its file when it opens (512 KiB of marker bytes each;
/// a document that took a large import keeps a few), and its close waits for them with an
/// fsync. Starting their write-back now, without waiting (`SYNC_FILE_RANGE_WRITE`), lets the
/// disk work while the open is used, so the close does not pay for it; unlike an fdatasync it
/// does not stand in front of the commits' own flushes.
fn start_writeback(db: &std::path::Path) {
    #[cfg(target_os = "linux")]
    if let Ok(f) = std::fs::File::open(db) {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on a descriptor this function owns for the call's duration.
        unsafe {
            libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = db;
}

/// Records the log's tail in `HEAD` when the file closes (when it is ahead of what `HEAD`
/// says), so a log that later loses events after the last snapshot is found out at the next
/// open instead of opening short.
fn record_head(log: &SledEventLog, paths: &crate::layout::ElfPaths) {
    use crate::log::EventLog;
    let recorded = paths.read_head().map_or(0, |(seq, _)| seq);
    let tail = log.flush_written().and_then(|()| log.tail());
    match tail {
        Ok((seq, hash)) if seq > recorded => {
            if let Err(e) = paths.write_head(seq, &hash) {
                tracing::warn!(error = %e, "HEAD not written at close");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "HEAD not written at close"),
    }
}

impl super::backup::Source for Owned {
    fn committed(&self) -> u64 {
        self.core.last_seq()
    }

    fn back_up(&self, to: &std::path::Path) -> Result<crate::backup::BackupReport, EngineError> {
        let (cut, log) = self.quiet(|log| -> Result<_, EngineError> {
            Ok((super::backup::cut_of(log)?, log.clone()))
        })??;
        crate::backup::write_backup(&log, &self.core.content, cut, to, |_, _| {})
    }
}
