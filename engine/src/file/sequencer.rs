//! The sequencing half of the pipeline: idempotency, the payload checks, the pure handlers
//! against the working state, large bodies to the content store, and sealing into the hash
//! chain. The owner ([`super::owned::Owned`]) keeps it behind a lock so a submit runs it on the
//! caller's own task.

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use elfiee_capabilities::Registry;
use elfiee_model::{Command, Event, EventHash};
use elfiee_projections::State;

use super::core::FileCore;
use crate::codec;
use crate::error::EngineError;
use crate::log::SledEventLog;

/// The command index in memory (see [`crate::cmd_index`]): `(first_seq, count)` of every
/// accepted command; an entry is added when the command is sequenced, before it is durable.
pub(crate) type CommandRanges = dashmap::DashMap<uuid::Uuid, (u64, u64)>;

/// What the sequencer reads besides its own state.
pub(crate) struct Inputs<'a> {
    pub core: &'a FileCore,
    pub commands: &'a CommandRanges,
    /// Keep the submission's commands in an `m‖seq` side record (see [`crate::foreign`]).
    pub record_commands: bool,
}

/// The sequencing half of the pipeline: the working state (committed + accepted, not yet
/// durable), the hash chain head and the id seeds. It lives behind a mutex in
/// [`super::owned::Owned`], so every writer runs the pipeline on its own task, with no task
/// hand-off (see docs/decisions/0013-sequencer-on-the-callers-task.md).
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

impl Sequencer {
    /// The log the sequencer seals for (the commit path writes it).
    pub(crate) fn log(&self) -> &Arc<SledEventLog> {
        &self.log
    }

    /// Time the capability handlers of the last prepared submission took.
    pub(crate) fn handler_time(&self) -> std::time::Duration {
        self.handler_time
    }

    pub(crate) fn prepare(
        &mut self,
        inp: &Inputs<'_>,
        cmds: &[Command],
    ) -> Result<Prepared, EngineError> {
        let core = inp.core;
        core.check_poisoned()?;
        let Some(first) = cmds.first() else {
            return Ok(Prepared::Done(Vec::new()));
        };
        for cmd in cmds {
            // One pass measures both; depth before size: a payload both too deep and too large
            // is refused for its depth. The registry then runs without checking depth again.
            let (size, depth) = measure(&cmd.payload);
            if depth > elfiee_capabilities::MAX_PAYLOAD_DEPTH {
                return Err(EngineError::Rejected(elfiee_capabilities::too_deep(
                    &cmd.cap_id,
                    depth,
                )));
            }
            let limit = core.config.max_payload_bytes;
            if size > limit {
                return Err(EngineError::PayloadTooLarge { size, limit });
            }
        }
        // Idempotency: a batch is keyed by its first command.
        if let Some((first, count)) = inp.commands.get(&first.cmd_id).map(|r| *r) {
            return Ok(Prepared::Repeat(first, count));
        }
        // The state the pipeline validates against: the committed one when everything accepted
        // is committed (no copy), else the working state (made now if needed).
        let committed = core.committed.read().unwrap_or_else(|p| p.into_inner());
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
        let outcome = self.run_handlers(core, cmds, working.as_ref().unwrap_or(&committed));
        self.working = working;
        drop(committed);
        let mut all = outcome?;
        if all.is_empty() {
            return Ok(Prepared::Done(all));
        }
        for e in &mut all {
            // Large bodies go to the content store (DESIGN §3: content is not state).
            elfiee_projections::content::externalize(core.config.registry.folds(), e, |t| {
                core.content.put(t)
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
        self.accept(&all, core.last_seq());
        let mut side = Vec::new();
        if inp.record_commands {
            side.push(super::foreign::commands_record(
                all[0].seq,
                cmds,
                &self.counts,
            ));
        }
        Ok(Prepared::Write(all, records, side))
    }

    /// Accepted events not yet committed: applied to the working state, or kept for it.
    /// `committed`: the last seq of the committed state now.
    fn accept(&mut self, events: &[Event], committed: u64) {
        match &mut self.working {
            Some(w) => {
                for e in events {
                    self.registry.apply(w, e);
                }
            }
            None => {
                // What was committed since needs no keeping: a working state starts from the
                // committed one. (A device that only receives other devices' events never
                // makes a working state: without this, every event it received stayed here.)
                self.unapplied.retain(|e| e.seq > committed);
                self.unapplied.extend(events.iter().cloned());
            }
        }
    }

    /// Sequences events decided elsewhere (another device's, already checked): local seqs
    /// and hash chain, one `o‖first_seq` side record with their `origin` bytes, and `side`.
    pub(crate) fn prepare_foreign(
        &mut self,
        core: &FileCore,
        foreign: Vec<(Event, Vec<u8>)>,
        mut side: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Prepared, EngineError> {
        core.check_poisoned()?;
        let mut prev = self.prev_hash;
        let mut records = Vec::with_capacity(foreign.len());
        let mut all = Vec::with_capacity(foreign.len());
        let mut origins = Vec::with_capacity(foreign.len());
        for (seq, (mut e, origin)) in (self.last_seq + 1..).zip(foreign) {
            e.seq = seq;
            records.push((seq, codec::seal(&prev, &mut e)));
            origins.push(origin);
            prev = e.hash;
            all.push(e);
        }
        if !origins.is_empty() {
            side.push(super::foreign::origins_record(self.last_seq + 1, &origins)?);
        }
        if all.is_empty() && side.is_empty() {
            return Ok(Prepared::Done(all));
        }
        self.prev_hash = prev;
        self.last_seq += all.len() as u64;
        self.accept(&all, core.last_seq());
        Ok(Prepared::Write(all, records, side))
    }

    /// Runs the handlers of a submission against `base` (each command of a batch sees the
    /// ones before it); the events, or the refusal.
    fn run_handlers(
        &mut self,
        core: &FileCore,
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
            let ctx = match &core.config.fixed_ctx {
                Some(fixed) => self.registry.ctx(
                    fixed.now,
                    &core.config.node_id,
                    elfiee_model::Ctx::command_seed(&fixed.id_base, state.last_seq, i as u32),
                ),
                None => {
                    self.id_counter += 1;
                    let mut seed = self.id_base;
                    seed[..8]
                        .iter_mut()
                        .zip(self.id_counter.to_le_bytes())
                        .for_each(|(b, c)| *b ^= c);
                    self.registry.ctx(Utc::now(), &core.config.node_id, seed)
                }
            };
            let handler_started = Instant::now();
            let executed = self.registry.execute_depth_checked(cmd, state, &ctx);
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

/// Bytes of the compact JSON encoding of `v` (what `serde_json::to_vec` would produce) and
/// its deepest nesting of arrays/objects (as [`elfiee_capabilities::json_depth`] counts it),
/// in one pass, without serializing and without recursion.
fn measure(v: &serde_json::Value) -> (usize, usize) {
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
    let (mut total, mut deepest) = (0usize, 0usize);
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        total += match v {
            serde_json::Value::Null | serde_json::Value::Bool(true) => 4,
            serde_json::Value::Bool(false) => 5,
            serde_json::Value::Number(n) => n.to_string().len(),
            serde_json::Value::String(s) => string_len(s),
            serde_json::Value::Array(a) => {
                stack.extend(a.iter().map(|x| (x, depth + 1)));
                2 + a.len().saturating_sub(1)
            }
            serde_json::Value::Object(o) => {
                stack.extend(o.values().map(|x| (x, depth + 1)));
                2 + o.len().saturating_sub(1) + o.keys().map(|k| string_len(k) + 1).sum::<usize>()
            }
        };
    }
    (total, deepest)
}

/// Drops a JSON value without recursion.
pub(crate) fn dismantle(v: serde_json::Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Array(a) => stack.extend(a),
            serde_json::Value::Object(o) => stack.extend(o.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

pub(crate) enum Prepared {
    /// Nothing to write (reads); answer now.
    Done(Vec<Event>),
    /// Accepted earlier: answer with the original events `(first_seq, count)` once durable.
    Repeat(u64, u64),
    /// Accepted: write the sealed records (and side records), then answer once a flush made
    /// them durable.
    Write(Vec<Event>, Vec<(u64, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>),
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::*;

    /// Another device's event on block `b1`.
    fn theirs(n: u64) -> Event {
        Event {
            seq: 0,
            event_id: uuid::Uuid::from_u64_pair(1, n),
            cmd_id: uuid::Uuid::from_u64_pair(2, n),
            entity: "b1".into(),
            attribute: "bob/markdown.write".into(),
            value: serde_json::json!({"markdown": format!("write {n}")}),
            clock: Default::default(),
            created_at: chrono::DateTime::from_timestamp(0, 0).unwrap_or_default(),
            hash: EventHash::ZERO,
        }
    }

    /// A device that only receives other devices' events never makes a working state; what
    /// is committed is not kept for one (every received event stayed in memory before).
    #[test]
    fn a_receiving_device_keeps_no_committed_event_for_a_working_state() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r.elf");
        let log = SledEventLog::open_scratch(&root.join("log"), &root).unwrap();
        let core = FileCore::new(
            crate::layout::ElfPaths::new(&root),
            crate::EngineConfig::default(),
        );
        let mut seq = Sequencer::new(Arc::new(log), Registry::builtin(), 0, EventHash::ZERO);
        for n in 1..=100u64 {
            let prepared = seq
                .prepare_foreign(&core, vec![(theirs(n), b"origin".to_vec())], Vec::new())
                .unwrap();
            assert!(matches!(prepared, Prepared::Write(..)));
            // The commit path committed it (what it stores once the group is written).
            core.committed_seq.store(n, Ordering::Release);
        }
        assert!(seq.working.is_none());
        assert_eq!(
            seq.unapplied.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![100],
            "only the event not committed when it was accepted is kept"
        );
    }

    #[test]
    fn measure_matches_serde_json_and_json_depth() {
        let samples = [
            serde_json::json!({"markdown": "x\"y\\z\n\u{1}é", "n": [1, -2.5, null, true, false, {}], "e": []}),
            serde_json::json!("plain"),
            serde_json::json!(12345678901234u64),
        ];
        for v in samples {
            assert_eq!(
                super::measure(&v),
                (
                    serde_json::to_vec(&v).unwrap().len(),
                    elfiee_capabilities::json_depth(&v)
                ),
                "{v}"
            );
        }
    }
}
