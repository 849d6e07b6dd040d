//! The file actor (sequencer) and the flusher thread (durability, apply, publish, answer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use chrono::Utc;
use elfiee_capabilities::Registry;
use elfiee_model::{Command, Event, EventHash};
use elfiee_projections::State;
use ractor::RpcReplyPort;
use tokio::sync::broadcast;

use crate::codec;
use crate::commit_queue::CommitQueue;
use crate::layout::ElfPaths;
use crate::log::{EventLog, SledEventLog};
use crate::{EngineConfig, EngineError};

pub(crate) type Reply = RpcReplyPort<Result<Vec<Event>, EngineError>>;

/// Messages of the file actor ([`crate::tree::FileActor`]).
pub enum FileMsg {
    /// Run one command (from another process, through the owner socket).
    Submit(Command, Reply),
    /// Run several commands all-or-nothing: every event commits in one batch, or none does.
    SubmitAll(Vec<Command>, Reply),
    /// Start a child and keep it running (restart with backoff when it fails).
    Supervise(
        crate::tree::ChildSpec,
        Option<RpcReplyPort<Result<(), String>>>,
    ),
    /// The status of every supervised child.
    Children(RpcReplyPort<Vec<crate::tree::ChildStatus>>),
    /// A failed child's backoff is over (ignored unless `generation` is still its current one).
    Restart { name: String, generation: u64 },
}

/// What the handles, the actor and the flusher share.
pub(crate) struct Shared {
    pub paths: ElfPaths,
    pub config: EngineConfig,
    /// `None` once closed.
    pub log: RwLock<Option<Arc<SledEventLog>>>,
    /// State as of the last durable event.
    pub committed: RwLock<State>,
    /// Seq of the last durable, applied and published event.
    pub committed_seq: AtomicU64,
    pub events_tx: Mutex<Option<broadcast::Sender<Arc<Event>>>>,
    /// Set when a flush failed: the file refuses commands until reopened.
    pub poisoned: Mutex<Option<String>>,
    pub queue: CommitQueue<Pending>,
    /// The sequencer; `None` for a replica of another process's file, and once closed.
    pub sequencer: Mutex<Option<Sequencer>>,
    /// Submits between entering the pipeline and being queued (or answered); one that finds
    /// others here queues for a shared flush instead of flushing alone.
    pub sequencing: std::sync::atomic::AtomicUsize,
    /// Commands handed to the commit path and not yet answered.
    pub in_progress: std::sync::atomic::AtomicUsize,
    pub cursor: Mutex<Cursor>,
    /// Hands due snapshots (and the command index entries they cover) to the snapshot
    /// thread; `None` for replicas and once closed.
    pub snapshots: Mutex<Option<std::sync::mpsc::Sender<SnapshotJob>>>,
    /// Signalled whenever a remote replica applied events (read-your-writes waits on it).
    pub applied: tokio::sync::Notify,
    /// The command index (see [`crate::cmd_index`]): `(first_seq, count)` of every accepted
    /// command; an entry is added when the command is sequenced, before it is durable.
    pub commands: dashmap::DashMap<uuid::Uuid, (u64, u64)>,
    /// Set while this process is not the owner: requests go to the owner's socket. Changes
    /// when the owner goes away and this process takes over (or connects to whoever did).
    pub remote: RwLock<Option<Arc<crate::remote::RemoteClient>>>,
    /// The file actor, while this process owns the file.
    pub actor: Mutex<Option<ractor::ActorRef<FileMsg>>>,
    /// Set once the handle is being closed: a lost owner is then not taken over.
    pub closing: std::sync::atomic::AtomicBool,
    /// Signalled when the owner's event stream ended while this process was its client.
    pub owner_lost: Arc<tokio::sync::Notify>,
    /// One hand-over at a time per file in this process.
    pub handover: tokio::sync::Mutex<()>,
    /// Run when this process took the file over from an owner that went away.
    pub takeover_hooks: Mutex<Vec<crate::tree::TakeoverHook>>,
    /// Block bodies kept out of the log's values and the state (owner only; replicas ask
    /// the owner).
    pub content: crate::content::ContentStore,
    /// Keep each submission's commands (capability, target) beside its events (`m‖seq`
    /// side records): sync seals events with the command they came from.
    pub record_commands: std::sync::atomic::AtomicBool,
    /// What readers see instead of `committed` (see [`crate::FileHandle::set_view`]).
    pub view: RwLock<Option<Arc<dyn crate::handle::StateView>>>,
}

impl Shared {
    /// A file that is neither owned nor connected yet: `Engine` makes it one or the other.
    pub(crate) fn new(paths: ElfPaths, config: EngineConfig) -> Shared {
        let (tx, _) = broadcast::channel(config.channel_capacity.max(1));
        Shared {
            content: crate::content::ContentStore::new(&paths.root),
            paths,
            config,
            log: RwLock::new(None),
            committed: RwLock::new(State::default()),
            committed_seq: AtomicU64::new(0),
            events_tx: Mutex::new(Some(tx)),
            poisoned: Mutex::new(None),
            queue: CommitQueue::new(),
            sequencer: Mutex::new(None),
            sequencing: Default::default(),
            in_progress: Default::default(),
            cursor: Mutex::new(Cursor {
                last_hash: EventHash::ZERO,
                last_snapshot: 0,
                tail_bytes: 0,
                tail_bulk: false,
                to_index: Vec::new(),
            }),
            snapshots: Mutex::new(None),
            applied: tokio::sync::Notify::new(),
            commands: dashmap::DashMap::new(),
            remote: RwLock::new(None),
            actor: Mutex::new(None),
            closing: Default::default(),
            owner_lost: Arc::new(tokio::sync::Notify::new()),
            handover: tokio::sync::Mutex::new(()),
            takeover_hooks: Mutex::new(Vec::new()),
            record_commands: Default::default(),
            view: RwLock::new(None),
        }
    }

    /// The flush failure that poisoned the file, as the error every command now gets.
    fn check_poisoned(&self) -> Result<(), EngineError> {
        match self
            .poisoned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(why) => Err(EngineError::Storage(why)),
            None => Ok(()),
        }
    }

    /// The connection to the owner process, while another process owns the file.
    pub fn remote(&self) -> Option<Arc<crate::remote::RemoteClient>> {
        self.remote
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The file actor, while this process owns the file.
    pub fn actor(&self) -> Option<ractor::ActorRef<FileMsg>> {
        self.actor.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn log(&self) -> Result<Arc<SledEventLog>, EngineError> {
        self.log
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(EngineError::Closed)
    }

    /// Where a command's events are, `(first_seq, count)`, if it was accepted (it may not be
    /// durable yet: compare with `committed_seq`).
    pub fn command_range(&self, cmd_id: uuid::Uuid) -> Option<(u64, u64)> {
        self.commands.get(&cmd_id).map(|r| *r)
    }
}

/// A sequenced command waiting to be written, flushed and answered.
pub(crate) struct Pending {
    cmd_id: uuid::Uuid,
    work: Work,
    reply: Reply,
    /// The command's `commit` span (disabled unless DEBUG tracing is on for the engine).
    span: tracing::Span,
}

enum Work {
    /// New events, their sealed records, and the side records written with them.
    Fresh(Vec<Event>, Vec<(u64, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>),
    /// A resubmitted command: answer with its original events `(first_seq, count)`, read from
    /// the log once they are durable. Nothing to write, apply or publish.
    Repeat(u64, u64),
}

/// The sequencing half of the pipeline: the working state (committed + accepted, not yet
/// durable), the hash chain head and the id seeds. It lives behind a mutex in [`Shared`] so a
/// submit can run the pipeline on the caller's task when nobody else holds it, instead of
/// paying two task hand-offs through the actor's mailbox (see docs/ARCHITECTURE.md).
pub(crate) struct Sequencer {
    log: Arc<SledEventLog>,
    registry: Registry,
    /// The committed state plus the accepted events not yet applied to it. Made (a clone of
    /// the committed state) the first time a command is sequenced while others are in flight,
    /// then kept up to date; until then the pipeline reads the committed state itself, so a
    /// process that submits one command at a time (a CLI call, an MCP tool call) never holds
    /// a second copy of a large document's state.
    working: Option<State>,
    /// Accepted events while `working` is `None` (applied to it if one has to be made).
    unapplied: Vec<Event>,
    /// Seq of the last accepted event.
    last_seq: u64,
    prev_hash: EventHash,
    /// Per-command id seeds: a random base (once) mixed with a counter.
    id_base: [u8; 16],
    id_counter: u64,
    /// Time the capability handlers of the last prepared submission took (for tracing).
    handler_time: std::time::Duration,
    /// Events per command of the last prepared submission.
    counts: Vec<u64>,
}

impl Sequencer {
    pub(crate) fn new(
        log: Arc<SledEventLog>,
        registry: Registry,
        last_seq: u64,
        prev_hash: EventHash,
    ) -> Sequencer {
        Sequencer {
            log,
            registry,
            working: None,
            unapplied: Vec::new(),
            last_seq,
            prev_hash,
            id_base: *uuid::Uuid::new_v4().as_bytes(),
            id_counter: 0,
            handler_time: std::time::Duration::ZERO,
            counts: Vec::new(),
        }
    }
}

impl Shared {
    /// The pipeline for one submission: sequence it under the sequencer lock, then hand it to
    /// the commit path. `reply` is answered once the events are durable, or with the refusal.
    /// With `inline`, a command alone in the pipeline commits on the caller's thread;
    /// otherwise (the file actor's mailbox) it always goes to the flusher.
    pub(crate) fn submit(&self, cmds: Vec<Command>, reply: Reply, inline: bool) {
        self.sequencing.fetch_add(1, Ordering::AcqRel);
        let mut guard = self.sequencer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(seq) = guard.as_mut() else {
            drop(guard);
            self.sequencing.fetch_sub(1, Ordering::AcqRel);
            // Closed; if because something failed, say what.
            let why = self
                .poisoned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let _ = reply.send(Err(why
                .map(EngineError::Storage)
                .unwrap_or(EngineError::Closed)));
            return;
        };
        let started = Instant::now();
        let log = seq.log.clone();
        match seq.prepare(self, &cmds) {
            Ok(Prepared::Done(events)) => {
                drop(guard);
                self.sequencing.fetch_sub(1, Ordering::AcqRel);
                let _ = reply.send(Ok(events));
            }
            Ok(Prepared::Repeat(first, count)) => self.enqueue(
                guard,
                &log,
                inline,
                Pending {
                    cmd_id: cmds[0].cmd_id,
                    work: Work::Repeat(first, count),
                    reply,
                    span: tracing::Span::none(),
                },
            ),
            Ok(Prepared::Write(events, records, side)) => {
                let span = tracing::debug_span!("commit", cmd_id = %cmds[0].cmd_id, cap_id = %cmds[0].cap_id,
                    editor = %cmds[0].editor_id, seq = events.last().map(|e| e.seq).unwrap_or(0));
                let _g = span.enter();
                tracing::debug!(
                    handler_us = seq.handler_time.as_micros() as u64,
                    sequence_us = started.elapsed().as_micros() as u64,
                    events = events.len(),
                    "sequenced, awaiting flush"
                );
                self.commands
                    .insert(cmds[0].cmd_id, (events[0].seq, events.len() as u64));
                self.enqueue(
                    guard,
                    &log,
                    inline,
                    Pending {
                        cmd_id: cmds[0].cmd_id,
                        work: Work::Fresh(events, records, side),
                        reply,
                        span: span.clone(),
                    },
                );
            }
            Err(e) => {
                drop(guard);
                self.sequencing.fetch_sub(1, Ordering::AcqRel);
                tracing::debug!(cap_id = %cmds.first().map(|c| c.cap_id.as_str()).unwrap_or(""), error = %e, "command rejected");
                let _ = reply.send(Err(e));
                // Dropping a very deep JSON value recurses; take refused ones apart iteratively.
                for cmd in cmds {
                    if elfiee_capabilities::json_depth(&cmd.payload)
                        > elfiee_capabilities::MAX_PAYLOAD_DEPTH
                    {
                        dismantle(cmd.payload);
                    }
                }
            }
        }
    }

    /// Appends events decided on another device (see [`Sequencer::prepare_foreign`]), in one
    /// atomic batch with `side`; `reply` is answered once they are durable.
    pub(crate) fn append_foreign(
        &self,
        foreign: Vec<(Event, Vec<u8>)>,
        side: Vec<(Vec<u8>, Vec<u8>)>,
        reply: Reply,
    ) {
        self.sequencing.fetch_add(1, Ordering::AcqRel);
        let mut guard = self.sequencer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(seq) = guard.as_mut() else {
            drop(guard);
            self.sequencing.fetch_sub(1, Ordering::AcqRel);
            let _ = reply.send(Err(EngineError::Closed));
            return;
        };
        let log = seq.log.clone();
        match seq.prepare_foreign(self, foreign, side) {
            Ok(Prepared::Write(events, records, side)) => self.enqueue(
                guard,
                &log,
                true,
                Pending {
                    cmd_id: uuid::Uuid::nil(),
                    work: Work::Fresh(events, records, side),
                    reply,
                    span: tracing::Span::none(),
                },
            ),
            Ok(_) => {
                drop(guard);
                self.sequencing.fetch_sub(1, Ordering::AcqRel);
                let _ = reply.send(Ok(Vec::new()));
            }
            Err(e) => {
                drop(guard);
                self.sequencing.fetch_sub(1, Ordering::AcqRel);
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Hands a sequenced command to the commit path. Nobody else in the pipeline and nothing
    /// in flight: commit right here (no thread hand-off). Otherwise queue it, in seq order (the
    /// caller holds the sequencer lock), so it shares the flusher's next flush (group commit).
    fn enqueue(&self, guard: SequencerGuard<'_>, log: &SledEventLog, inline: bool, p: Pending) {
        let alone = inline
            && self.sequencing.load(Ordering::Acquire) == 1
            && self.in_progress.load(Ordering::Acquire) == 0;
        self.in_progress.fetch_add(1, Ordering::AcqRel);
        if alone && !self.queue.is_closed() {
            // Take the commit cursor before letting the next command in, so commits stay in
            // seq order; the next command can be sequenced while this one is written.
            let cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
            drop(guard);
            self.sequencing.fetch_sub(1, Ordering::AcqRel);
            commit_group(self, log, cursor, vec![p]);
            return;
        }
        let pushed = self.queue.push(p);
        drop(guard);
        self.sequencing.fetch_sub(1, Ordering::AcqRel);
        if let Err(p) = pushed {
            self.in_progress.fetch_sub(1, Ordering::AcqRel);
            let _ = p.reply.send(Err(EngineError::Closed));
        }
    }
}

type SequencerGuard<'a> = std::sync::MutexGuard<'a, Option<Sequencer>>;

impl Sequencer {
    fn prepare(&mut self, shared: &Shared, cmds: &[Command]) -> Result<Prepared, EngineError> {
        shared.check_poisoned()?;
        let Some(first) = cmds.first() else {
            return Ok(Prepared::Done(Vec::new()));
        };
        for cmd in cmds {
            // Depth before size: a payload both too deep and too large is refused for its depth
            // (the registry checks depth too, for callers that run it without the engine).
            let depth = elfiee_capabilities::json_depth(&cmd.payload);
            if depth > elfiee_capabilities::MAX_PAYLOAD_DEPTH {
                return Err(EngineError::Rejected(elfiee_model::CapError::payload(
                    &cmd.cap_id,
                    format!(
                        "the payload is nested {depth} levels deep; the limit is {}",
                        elfiee_capabilities::MAX_PAYLOAD_DEPTH
                    ),
                )));
            }
            let size = json_size(&cmd.payload);
            let limit = shared.config.max_payload_bytes;
            if size > limit {
                return Err(EngineError::PayloadTooLarge { size, limit });
            }
        }
        // Idempotency: a batch is keyed by its first command.
        if let Some((first, count)) = shared.command_range(first.cmd_id) {
            return Ok(Prepared::Repeat(first, count));
        }
        // The state the pipeline validates against: the committed one when everything accepted
        // is committed (no copy), else the working state (made now if needed).
        let committed = shared.committed.read().unwrap_or_else(|p| p.into_inner());
        if committed.last_seq >= self.last_seq {
            self.unapplied.clear();
        } else if self.working.is_none() {
            let mut w = committed.clone();
            for e in self.unapplied.drain(..) {
                if e.seq > w.last_seq {
                    self.registry.apply(&mut w, &e);
                }
            }
            self.working = Some(w);
        }
        let working = self.working.take();
        let outcome = self.run_handlers(shared, cmds, working.as_ref().unwrap_or(&committed));
        self.working = working;
        drop(committed);
        let mut all = outcome?;
        if all.is_empty() {
            return Ok(Prepared::Done(all));
        }
        for e in &mut all {
            // Large bodies go to the content store (DESIGN §3: content is not state).
            elfiee_projections::content::externalize(shared.config.registry.folds(), e, |t| {
                shared.content.put(t)
            })?;
        }
        let mut prev = self.prev_hash;
        let mut records = Vec::with_capacity(all.len());
        for (seq, e) in (self.last_seq + 1..).zip(all.iter_mut()) {
            e.seq = seq;
            records.push((seq, codec::seal(&prev, e)));
            prev = e.hash;
        }
        self.prev_hash = prev;
        self.last_seq += all.len() as u64;
        self.accept(&all);
        let mut side = Vec::new();
        if shared.record_commands.load(Ordering::Acquire) {
            let list: Vec<(u64, &str, Option<&str>)> = cmds
                .iter()
                .zip(&self.counts)
                .map(|(c, n)| (*n, c.cap_id.as_str(), c.block_id.as_deref()))
                .collect();
            // Plain data into a Vec: cannot fail.
            let bytes = rmp_serde::to_vec(&list).unwrap_or_default();
            side.push((crate::log::side_key(b'm', &all[0].seq.to_be_bytes()), bytes));
        }
        Ok(Prepared::Write(all, records, side))
    }

    /// Accepted events not yet committed: applied to the working state, or kept for it.
    fn accept(&mut self, events: &[Event]) {
        match &mut self.working {
            Some(w) => {
                for e in events {
                    self.registry.apply(w, e);
                }
            }
            None => self.unapplied.extend(events.iter().cloned()),
        }
    }

    /// Sequences events decided elsewhere (another device's, already checked): local seqs
    /// and hash chain, an `f‖seq` side record with each one's `origin` bytes, and `side`.
    fn prepare_foreign(
        &mut self,
        shared: &Shared,
        foreign: Vec<(Event, Vec<u8>)>,
        mut side: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Prepared, EngineError> {
        shared.check_poisoned()?;
        let mut prev = self.prev_hash;
        let mut records = Vec::with_capacity(foreign.len());
        let mut all = Vec::with_capacity(foreign.len());
        for (seq, (mut e, origin)) in (self.last_seq + 1..).zip(foreign) {
            e.seq = seq;
            records.push((seq, codec::seal(&prev, &mut e)));
            side.push((crate::log::side_key(b'f', &seq.to_be_bytes()), origin));
            prev = e.hash;
            all.push(e);
        }
        if all.is_empty() && side.is_empty() {
            return Ok(Prepared::Done(all));
        }
        self.prev_hash = prev;
        self.last_seq += all.len() as u64;
        self.accept(&all);
        Ok(Prepared::Write(all, records, side))
    }

    /// Runs the handlers of a submission against `base` (each command of a batch sees the
    /// ones before it); the events, or the refusal.
    fn run_handlers(
        &mut self,
        shared: &Shared,
        cmds: &[Command],
        base: &State,
    ) -> Result<Vec<Event>, EngineError> {
        let Some(first) = cmds.first() else {
            return Ok(Vec::new());
        };
        // Run every command against a scratch state so a later command sees earlier ones; the
        // working state is only touched once all of them passed.
        let mut scratch: Option<State> = None;
        self.handler_time = std::time::Duration::ZERO;
        self.counts.clear();
        let mut all = Vec::new();
        for (i, cmd) in cmds.iter().enumerate() {
            let state = scratch.as_ref().unwrap_or(base);
            let ctx = match &shared.config.fixed_ctx {
                Some(fixed) => self.registry.ctx(
                    fixed.now,
                    &shared.config.node_id,
                    elfiee_model::Ctx::command_seed(&fixed.id_base, state.last_seq, i as u32),
                ),
                None => {
                    self.id_counter += 1;
                    let mut seed = self.id_base;
                    seed[..8]
                        .iter_mut()
                        .zip(self.id_counter.to_le_bytes())
                        .for_each(|(b, c)| *b ^= c);
                    self.registry.ctx(Utc::now(), &shared.config.node_id, seed)
                }
            };
            let handler_started = Instant::now();
            let executed = self.registry.execute(cmd, state, &ctx);
            self.handler_time += handler_started.elapsed();
            let mut events = executed.map_err(|e| {
                if cmds.len() > 1 {
                    EngineError::Rejected(elfiee_model::CapError::rejected(format!(
                        "command {} of {} ('{}' on {}) failed: {e}; nothing was committed",
                        i + 1,
                        cmds.len(),
                        cmd.cap_id,
                        cmd.block_id.as_deref().unwrap_or("*")
                    )))
                } else {
                    EngineError::Rejected(e)
                }
            })?;
            if cmds.len() > 1 && i + 1 < cmds.len() {
                let s = scratch.get_or_insert_with(|| base.clone());
                for (k, e) in events.iter_mut().enumerate() {
                    e.seq = s.last_seq + 1 + k as u64;
                }
                for e in &events {
                    self.registry.apply(s, e);
                }
            }
            // Every event of the batch carries the batch's first cmd_id, so idempotency and the
            // command index cover the whole batch.
            for e in &mut events {
                e.cmd_id = first.cmd_id;
            }
            self.counts.push(events.len() as u64);
            all.extend(events);
        }
        Ok(all)
    }
}

/// Bytes of the compact JSON encoding of `v` (what `serde_json::to_vec` would produce),
/// computed without serializing and without recursion.
fn json_size(v: &serde_json::Value) -> usize {
    /// `"` and `\\` and the short control escapes (`\b \f \n \r \t`) add 1 byte, other
    /// control characters 5 (`\u00XX`). Counted in simple passes the compiler vectorizes
    /// (payloads of many megabytes go through here).
    fn string_len(s: &str) -> usize {
        let b = s.as_bytes();
        let controls = b.iter().filter(|&&c| c < 0x20).count();
        let short = b
            .iter()
            .filter(|&&c| matches!(c, b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t'))
            .count();
        let short_controls = short - b.iter().filter(|&&c| c == b'"' || c == b'\\').count();
        s.len() + 2 + short + 5 * (controls - short_controls)
    }
    let mut total = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total += match v {
            serde_json::Value::Null | serde_json::Value::Bool(true) => 4,
            serde_json::Value::Bool(false) => 5,
            serde_json::Value::Number(n) => n.to_string().len(),
            serde_json::Value::String(s) => string_len(s),
            serde_json::Value::Array(a) => {
                stack.extend(a.iter());
                2 + a.len().saturating_sub(1)
            }
            serde_json::Value::Object(o) => {
                stack.extend(o.values());
                2 + o.len().saturating_sub(1) + o.keys().map(|k| string_len(k) + 1).sum::<usize>()
            }
        };
    }
    total
}

/// Drops a JSON value without recursion.
fn dismantle(v: serde_json::Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Array(a) => stack.extend(a),
            serde_json::Value::Object(o) => stack.extend(o.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

enum Prepared {
    /// Nothing to write (reads); answer now.
    Done(Vec<Event>),
    /// Accepted earlier: answer with the original events `(first_seq, count)` once durable.
    Repeat(u64, u64),
    /// Accepted: write the sealed records (and side records), then answer once a flush made
    /// them durable.
    Write(Vec<Event>, Vec<(u64, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>),
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
/// commit in seq order.
fn commit_group(
    shared: &Shared,
    log: &SledEventLog,
    mut cursor: std::sync::MutexGuard<'_, Cursor>,
    batch: Vec<Pending>,
) {
    let t = Instant::now();
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
    let n = batch.len();
    // Bodies first: a durable event never refers to bytes that are not.
    let written = shared
        .content
        .sync()
        .and_then(|_| log.write_group(&group, &side))
        .and_then(|_| log.flush());
    if let Err(e) = written {
        let why = format!("{e} (the commands in this flush were not acknowledged)");
        tracing::error!(error = %why, "flush failed; refusing further commands");
        *shared.poisoned.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        for p in batch {
            let _ = p.reply.send(Err(e.clone()));
        }
        shared.in_progress.fetch_sub(n, Ordering::AcqRel);
        return;
    }
    let flush_us = t.elapsed().as_micros() as u64;
    {
        let mut state = shared.committed.write().unwrap_or_else(|p| p.into_inner());
        for p in &batch {
            if let Work::Fresh(events, _, _) = &p.work {
                let applied = Instant::now();
                for e in events {
                    shared.config.registry.apply(&mut state, e);
                }
                tracing::debug!(
                    parent: &p.span,
                    write_flush_us = flush_us,
                    apply_us = applied.elapsed().as_micros() as u64,
                    group = n,
                    "committed"
                );
                if let Work::Fresh(_, records, _) = &p.work {
                    cursor.tail_bytes += records.iter().map(|(_, r)| r.len() as u64).sum::<u64>();
                    cursor.tail_bulk |= records.len() >= crate::log::GROUP_MIN_EVENTS;
                }
                if let (Some(first), Some(last)) = (events.first(), events.last()) {
                    cursor.last_hash = last.hash;
                    if !p.cmd_id.is_nil() {
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
                            shared.commands.insert(c, (s, n));
                        }
                    }
                }
            }
        }
        shared
            .committed_seq
            .store(state.last_seq, Ordering::Release);
    }
    let tx = shared
        .events_tx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .filter(|tx| tx.receiver_count() > 0);
    for p in batch {
        let answer = match p.work {
            Work::Fresh(events, _, _) => {
                if let Some(tx) = &tx {
                    for e in &events {
                        let _ = tx.send(Arc::new(e.clone()));
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
    shared.in_progress.fetch_sub(n, Ordering::AcqRel);
    tracing::trace!(commands = n, flush_us, "group committed");
    if snapshot_due(shared, &cursor) {
        hand_off_snapshot(shared, &mut cursor);
    }
}

/// A snapshot pays when the tail an open would replay is long (in events) or large (in
/// bytes); never just because a process ends (a short-lived process costs what it changed),
/// unless what it changed was a bulk command (see [`Cursor::tail_bulk`] and `run_flusher`).
fn snapshot_due(shared: &Shared, cursor: &Cursor) -> bool {
    let seq = shared.committed_seq.load(Ordering::Acquire);
    seq > cursor.last_snapshot
        && (seq - cursor.last_snapshot >= shared.config.snapshot_every
            || cursor.tail_bytes >= shared.config.snapshot_tail_bytes)
}

/// The flusher thread: one write + flush per round for everything queued (group commit).
pub(crate) fn run_flusher(shared: Arc<Shared>, log: Arc<SledEventLog>) {
    while let Some(batch) = shared.queue.take_all() {
        let cursor = shared.cursor.lock().unwrap_or_else(|p| p.into_inner());
        commit_group(&shared, &log, cursor, batch);
    }
    // Closing: a snapshot only when the tail is worth it (`snapshot_at_close_after`, or a
    // bulk command in it); the next open replays the short tail and indexes its commands.
    let mut cursor = shared.cursor.lock().unwrap_or_else(|p| p.into_inner());
    let seq = shared.committed_seq.load(Ordering::Acquire);
    let at_close = shared.config.snapshot_at_close_after.max(1);
    if snapshot_due(&shared, &cursor) || seq >= cursor.last_snapshot + at_close || cursor.tail_bulk
    {
        hand_off_snapshot(&shared, &mut cursor);
    }
    // Dropping the sender lets the snapshot thread finish the jobs it has and stop.
    shared
        .snapshots
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
}

/// A snapshot of the committed state at `seq`, and the index entries of the commands since
/// the previous one.
pub(crate) struct SnapshotJob {
    seq: u64,
    hash: EventHash,
    bytes: Vec<u8>,
    entries: Vec<(uuid::Uuid, u64, u64)>,
}

/// Encodes the committed state (the caller holds the cursor, so no commit moves it) and hands
/// it, with the pending index entries, to the snapshot thread.
fn hand_off_snapshot(shared: &Shared, cursor: &mut Cursor) {
    let (seq, bytes) = {
        let state = shared.committed.read().unwrap_or_else(|p| p.into_inner());
        (
            state.last_seq,
            crate::replay::encode_snapshot(
                state.last_seq,
                cursor.last_hash,
                shared.config.registry.folds().fingerprint(),
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
    let tx = shared.snapshots.lock().unwrap_or_else(|p| p.into_inner());
    match tx.as_ref().map(|tx| tx.send(job)) {
        Some(Ok(())) => {}
        // No snapshot thread (closing): the entries stay in memory; the next open replays
        // the tail and rebuilds them.
        _ => tracing::warn!(seq, "snapshot thread gone; snapshot not written"),
    }
}

/// The snapshot thread: for each job (the latest of those waiting), appends the command index
/// entries to `commands.idx` and syncs it, then stores the snapshot and flushes, so a stored
/// snapshot at seq S always comes after the index entries of every command up to S (an open
/// trusts the snapshot and indexes only the tail). Runs beside the commit path, never in front
/// of it.
pub(crate) fn run_snapshots(shared: Arc<Shared>, jobs: std::sync::mpsc::Receiver<SnapshotJob>) {
    let index_file = shared.paths.commands_index_file();
    let mut entries: Vec<(uuid::Uuid, u64, u64)> = Vec::new();
    while let Ok(mut job) = jobs.recv() {
        entries.append(&mut job.entries);
        while let Ok(mut next) = jobs.try_recv() {
            entries.append(&mut next.entries);
            job = next;
        }
        let t = Instant::now();
        let indexed = entries.len();
        if !entries.is_empty() {
            if let Err(e) = crate::cmd_index::append(&index_file, &entries) {
                // No snapshot without its index; the entries are retried with the next one.
                tracing::warn!(error = %e, "command index not written; snapshot skipped");
                continue;
            }
            entries.clear();
        }
        // The events up to `seq` are durable already (they were flushed before the job was
        // made); the snapshot is a file of its own.
        let written = crate::replay::write_snapshot(&shared.paths, job.seq, &job.bytes)
            .map_err(|e| EngineError::io(shared.paths.snapshots_dir(), e));
        match written {
            Ok(()) => {
                tracing::debug!(
                    seq = job.seq,
                    bytes = job.bytes.len(),
                    indexed,
                    ms = t.elapsed().as_millis() as u64,
                    "snapshot written"
                );
                // Everything up to `seq` is durable: record it outside sled.
                if let Err(e) = shared.paths.write_head(job.seq, &job.hash) {
                    tracing::warn!(error = %e, "HEAD not written");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "snapshot not written; the next open replays more")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_size_matches_serde_json() {
        let samples = [
            serde_json::json!({"markdown": "x\"y\\z\n\u{1}é", "n": [1, -2.5, null, true, false, {}], "e": []}),
            serde_json::json!("plain"),
            serde_json::json!(12345678901234u64),
        ];
        for v in samples {
            assert_eq!(
                super::json_size(&v),
                serde_json::to_vec(&v).unwrap().len(),
                "{v}"
            );
        }
    }
}
