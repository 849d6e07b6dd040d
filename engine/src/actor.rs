//! The file actor (sequencer) and the flusher thread (durability, apply, publish, answer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use chrono::Utc;
use elfiee_capabilities::Registry;
use elfiee_model::{Command, Event, EventHash, FORMAT_VERSION};
use elfiee_projections::{apply, State};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::broadcast;

use crate::codec;
use crate::commit_queue::CommitQueue;
use crate::layout::ElfPaths;
use crate::log::{EventLog, SledEventLog};
use crate::replay::{SNAPSHOT_KEY, SNAPSHOT_TREE};
use crate::{EngineConfig, EngineError};

pub(crate) type Reply = RpcReplyPort<Result<Vec<Event>, EngineError>>;

pub enum FileMsg {
    /// Run one command.
    Submit(Command, Reply),
    /// Run several commands all-or-nothing: every event commits in one batch, or none does.
    SubmitAll(Vec<Command>, Reply),
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
    /// Submits sent to the actor and not yet picked up (ractor does not expose its mailbox).
    pub waiting: std::sync::atomic::AtomicUsize,
    /// Commands handed to the commit path and not yet answered.
    pub in_progress: std::sync::atomic::AtomicUsize,
    pub cursor: Mutex<Cursor>,
    /// Signalled whenever a remote replica applied events (read-your-writes waits on it).
    pub applied: tokio::sync::Notify,
    /// Commands accepted but not yet durable, for idempotency checks.
    pub inflight: dashmap::DashMap<uuid::Uuid, Vec<Event>>,
    /// Set when this process is not the owner: requests go to the owner's socket.
    pub remote: Option<Arc<crate::remote::RemoteClient>>,
}

impl Shared {
    pub fn log(&self) -> Result<Arc<SledEventLog>, EngineError> {
        self.log
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(EngineError::Closed)
    }
}

/// A command accepted by the actor, waiting for the flusher to write and flush it.
pub(crate) struct Pending {
    events: Vec<Event>,
    /// Sealed records to write (empty for a repeat).
    records: Vec<(u64, Vec<u8>)>,
    cmd_id: uuid::Uuid,
    /// False for an idempotent replay of an earlier command: nothing to apply or publish.
    fresh: bool,
    reply: Reply,
}

pub(crate) struct FileActor;

pub(crate) struct ActorState {
    shared: Arc<Shared>,
    log: Arc<SledEventLog>,
    registry: Registry,
    working: State,
    prev_hash: EventHash,
    /// Per-command id seeds: a random base (once) mixed with a counter.
    id_base: [u8; 16],
    id_counter: u64,
}

pub(crate) struct ActorArgs {
    pub shared: Arc<Shared>,
    pub working: State,
    pub prev_hash: EventHash,
}

impl Actor for FileActor {
    type Msg = FileMsg;
    type State = ActorState;
    type Arguments = ActorArgs;

    async fn pre_start(
        &self,
        _me: ActorRef<FileMsg>,
        args: ActorArgs,
    ) -> Result<ActorState, ActorProcessingErr> {
        let log = args.shared.log()?;
        let registry = args.shared.config.registry.clone();
        let id_base = *uuid::Uuid::new_v4().as_bytes();
        Ok(ActorState {
            shared: args.shared,
            log,
            registry,
            working: args.working,
            prev_hash: args.prev_hash,
            id_base,
            id_counter: 0,
        })
    }

    async fn handle(
        &self,
        _me: ActorRef<FileMsg>,
        msg: FileMsg,
        st: &mut ActorState,
    ) -> Result<(), ActorProcessingErr> {
        st.shared.waiting.fetch_sub(1, Ordering::AcqRel);
        match msg {
            FileMsg::Submit(cmd, reply) => st.submit(vec![cmd], reply),
            FileMsg::SubmitAll(cmds, reply) => st.submit(cmds, reply),
        }
        Ok(())
    }
}

impl ActorState {
    fn submit(&mut self, cmds: Vec<Command>, reply: Reply) {
        let started = Instant::now();
        match self.prepare(&cmds) {
            Ok(Prepared::Done(events)) => {
                let _ = reply.send(Ok(events));
            }
            Ok(Prepared::Repeat(events)) => self.enqueue(Pending {
                events,
                records: Vec::new(),
                cmd_id: cmds[0].cmd_id,
                fresh: false,
                reply,
            }),
            Ok(Prepared::Write(events, records)) => {
                let span = tracing::debug_span!("commit", cmd_id = %cmds[0].cmd_id, cap_id = %cmds[0].cap_id,
                    editor = %cmds[0].editor_id, seq = events.last().map(|e| e.seq).unwrap_or(0));
                let _g = span.enter();
                tracing::debug!(
                    handler_us = started.elapsed().as_micros() as u64,
                    events = events.len(),
                    "written, awaiting flush"
                );
                self.shared.inflight.insert(cmds[0].cmd_id, events.clone());
                self.enqueue(Pending {
                    events,
                    records,
                    cmd_id: cmds[0].cmd_id,
                    fresh: true,
                    reply,
                });
            }
            Err(e) => {
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

    fn enqueue(&mut self, p: Pending) {
        // Nobody else waiting and nothing in flight: commit right here and skip two thread
        // hand-offs. Otherwise queue it so that it shares the next flush (group commit).
        let alone = self.shared.waiting.load(Ordering::Acquire) == 0
            && self.shared.in_progress.load(Ordering::Acquire) == 0;
        self.shared.in_progress.fetch_add(1, Ordering::AcqRel);
        if alone && !self.shared.queue.is_closed() {
            commit_group(&self.shared, &self.log, vec![p]);
            return;
        }
        if let Err(p) = self.shared.queue.push(p) {
            self.shared.in_progress.fetch_sub(1, Ordering::AcqRel);
            let _ = p.reply.send(Err(EngineError::Closed));
        }
    }

    fn prepare(&mut self, cmds: &[Command]) -> Result<Prepared, EngineError> {
        if let Some(why) = self
            .shared
            .poisoned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(EngineError::Storage(why));
        }
        let Some(first) = cmds.first() else {
            return Ok(Prepared::Done(Vec::new()));
        };
        for cmd in cmds {
            // Depth first: measuring the size serializes, which recurses.
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
            let limit = self.shared.config.max_payload_bytes;
            if size > limit {
                return Err(EngineError::PayloadTooLarge { size, limit });
            }
        }
        // Idempotency: a batch is keyed by its first command. In-flight commands are checked
        // before the log: the flusher drops them from `inflight` only after writing them.
        if let Some(events) = self.shared.inflight.get(&first.cmd_id).map(|e| e.clone()) {
            return Ok(Prepared::Repeat(events));
        }
        if let Some(events) = self.log.command_events(first.cmd_id)? {
            return Ok(Prepared::Repeat(events));
        }
        // Run every command against a scratch state so a later command sees earlier ones; the
        // working state is only touched once all of them passed.
        let mut scratch: Option<State> = None;
        let mut all = Vec::new();
        for (i, cmd) in cmds.iter().enumerate() {
            self.id_counter += 1;
            let mut seed = self.id_base;
            seed[..8]
                .iter_mut()
                .zip(self.id_counter.to_le_bytes())
                .for_each(|(b, c)| *b ^= c);
            let ctx = self
                .registry
                .ctx(Utc::now(), &self.shared.config.node_id, seed);
            let state = scratch.as_ref().unwrap_or(&self.working);
            let mut events = self.registry.execute(cmd, state, &ctx).map_err(|e| {
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
                let s = scratch.get_or_insert_with(|| self.working.clone());
                for (k, e) in events.iter_mut().enumerate() {
                    e.seq = s.last_seq + 1 + k as u64;
                }
                for e in &events {
                    apply(s, e);
                }
            }
            // Every event of the batch carries the batch's first cmd_id, so idempotency and the
            // command index cover the whole batch.
            for e in &mut events {
                e.cmd_id = first.cmd_id;
            }
            all.extend(events);
        }
        if all.is_empty() {
            return Ok(Prepared::Done(all));
        }
        let mut prev = self.prev_hash;
        let mut next = self.working.last_seq + 1;
        let mut records = Vec::with_capacity(all.len());
        for e in &mut all {
            e.seq = next;
            next += 1;
            records.push((e.seq, codec::seal(&prev, e)));
            prev = e.hash;
        }
        self.prev_hash = prev;
        for e in &all {
            apply(&mut self.working, e);
        }
        Ok(Prepared::Write(all, records))
    }
}

/// Bytes of the compact JSON encoding of `v` (what `serde_json::to_vec` would produce),
/// computed without serializing and without recursion.
fn json_size(v: &serde_json::Value) -> usize {
    fn string_len(s: &str) -> usize {
        s.len()
            + 2
            + s.bytes()
                .map(|b| match b {
                    b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 1,
                    0..=0x1f => 5,
                    _ => 0,
                })
                .sum::<usize>()
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
    /// Already committed earlier: answer with the original events once durable.
    Repeat(Vec<Event>),
    /// Accepted; the flusher writes the records, flushes, then answers.
    Write(Vec<Event>, Vec<(u64, Vec<u8>)>),
}

/// The flusher thread's loop: one flush per round for everything queued, then apply, publish,
/// answer, and snapshot when due.
/// Where the committed part of the log ends; shared by the flusher and the actor's inline path.
pub(crate) struct Cursor {
    pub last_hash: EventHash,
    pub last_snapshot: u64,
}

/// Writes, flushes, applies, publishes and answers one group of commands, in order.
fn commit_group(shared: &Shared, log: &SledEventLog, batch: Vec<Pending>) {
    let mut cursor = shared.cursor.lock().unwrap_or_else(|p| p.into_inner());
    let t = Instant::now();
    let group: Vec<(uuid::Uuid, &[(u64, Vec<u8>)])> = batch
        .iter()
        .filter(|p| p.fresh)
        .map(|p| (p.cmd_id, p.records.as_slice()))
        .collect();
    let n = batch.len();
    if let Err(e) = log.write_group(&group).and_then(|_| log.flush()) {
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
        for p in batch.iter().filter(|p| p.fresh) {
            for e in &p.events {
                apply(&mut state, e);
                cursor.last_hash = e.hash;
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
        if p.fresh {
            shared.inflight.remove(&p.cmd_id);
            if let Some(tx) = &tx {
                for e in &p.events {
                    let _ = tx.send(Arc::new(e.clone()));
                }
            }
        }
        let _ = p.reply.send(Ok(p.events));
    }
    shared.in_progress.fetch_sub(n, Ordering::AcqRel);
    tracing::trace!(commands = n, flush_us, "group committed");
    let seq = shared.committed_seq.load(Ordering::Acquire);
    if seq >= cursor.last_snapshot + shared.config.snapshot_every {
        write_snapshot(shared, log, cursor.last_hash);
        cursor.last_snapshot = seq;
    }
}

/// The flusher thread: one write + flush per round for everything queued (group commit).
pub(crate) fn run_flusher(shared: Arc<Shared>, log: Arc<SledEventLog>) {
    while let Some(batch) = shared.queue.take_all() {
        commit_group(&shared, &log, batch);
    }
    // Closing: make the last snapshot current so the next open replays nothing.
    let cursor = shared.cursor.lock().unwrap_or_else(|p| p.into_inner());
    let seq = shared.committed_seq.load(Ordering::Acquire);
    if seq > cursor.last_snapshot {
        write_snapshot(&shared, log.as_ref(), cursor.last_hash);
    }
    if let Err(e) = log.flush() {
        tracing::warn!(error = %e, "final flush failed");
    }
}

fn write_snapshot(shared: &Shared, log: &dyn EventLog, hash: EventHash) {
    let t = Instant::now();
    let (seq, bytes) = {
        let state = shared.committed.read().unwrap_or_else(|p| p.into_inner());
        let snap = SnapshotRef {
            format_version: FORMAT_VERSION,
            seq: state.last_seq,
            hash,
            state: &state,
        };
        (
            state.last_seq,
            rmp_serde::to_vec_named(&snap).unwrap_or_default(),
        )
    };
    match log
        .put_aux(SNAPSHOT_TREE, SNAPSHOT_KEY, &bytes)
        .and_then(|_| log.flush())
    {
        Ok(()) => tracing::debug!(
            bytes = bytes.len(),
            ms = t.elapsed().as_millis() as u64,
            "snapshot written"
        ),
        Err(e) => tracing::warn!(error = %e, "snapshot not written; the next open replays more"),
    }
    // Everything up to `seq` is durable: record it outside sled.
    if let Err(e) = shared.paths.write_head(seq, &hash) {
        tracing::warn!(error = %e, "HEAD not written");
    }
}

/// Borrowing twin of [`crate::replay::Snapshot`] (same field names and order, so it decodes as one).
#[derive(serde::Serialize)]
struct SnapshotRef<'a> {
    format_version: u32,
    seq: u64,
    hash: EventHash,
    state: &'a State,
}
