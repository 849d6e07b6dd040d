//! The effect runtime (DESIGN.md §5). It knows no effect by name: effects register with it
//! ([`EffectSet`]), each in its own module.
//!
//! Every effect is an actor (`EffectActor`), a child of the file actor, which restarts it
//! with backoff when it fails (see `elfiee_engine::tree`). The effect actor reads committed
//! events from its durable checkpoint on (so a crash or a lagging live stream loses nothing)
//! and runs each event it wants in a run actor of its own (`RunActor`, its child):
//! - **Concurrent, ordered by key.** Triggers with different [`Effect::order_key`]s run at the
//!   same time, up to the effect's bound ([`RuntimeConfig::concurrency`]); triggers with the
//!   same key run one at a time, in seq order.
//! - **Checkpoint.** The stored checkpoint is the seq before the oldest unfinished trigger
//!   ([`Tracker`]): it never moves past a trigger that has not finished, whatever order the
//!   runs finish in.
//! - **Supervised runs.** A run that panics or returns an error is retried with backoff; after
//!   [`RuntimeConfig::max_attempts`] the trigger is recorded as a failed outcome
//!   ([`Effect::failed_outcome`]) and the effect goes on. The other runs and effects are not
//!   disturbed.
//! - **Exactly-once outcomes.** Outcome commands have deterministic ids ([`effect_cmd_id`])
//!   derived from the effect and the trigger: a trigger whose outcome is in the log is never
//!   run again, and an outcome committed twice (a run interrupted after its commit, or a run
//!   and the failure record racing) is stored once (engine idempotency). A run interrupted
//!   before its outcome committed runs again, so effects must be idempotent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elfiee_engine::{ChildSpec, ChildState, Committed, EngineError, FileHandle, RestartPolicy};
use elfiee_model::{Command, Event};
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that reacts to committed events with I/O.
pub trait Effect: Send + Sync + 'static {
    /// Stable name: the checkpoint key, part of outcome command ids, the child's name.
    fn name(&self) -> &'static str;
    /// Whether this effect acts on `event`.
    fn wants(&self, event: &Event) -> bool;
    /// Triggers with the same key run one at a time, in seq order; triggers with different
    /// keys may run at the same time. Default: the event's block.
    fn order_key(&self, event: &Event) -> String {
        event.entity.clone()
    }
    /// Does the I/O and commits the outcome with [`EffectCx::record`] (step `"outcome"`).
    fn run<'a>(
        &'a self,
        cx: &'a EffectCx,
        event: &'a Event,
    ) -> BoxFuture<'a, Result<(), EngineError>>;
    /// The outcome recorded for a trigger whose runs kept failing (`why`: the last failure).
    fn failed_outcome(&self, event: &Event, why: &str) -> FailedOutcome;
}

/// The command a failed trigger is recorded with (as the trigger's editor, step `"outcome"`).
pub struct FailedOutcome {
    pub cap_id: &'static str,
    pub block_id: String,
    pub payload: Value,
}

/// The effects a host runs on a file, each registered by its own module.
#[derive(Default, Clone)]
pub struct EffectSet {
    effects: Vec<Arc<dyn Effect>>,
}

impl EffectSet {
    pub fn new() -> EffectSet {
        EffectSet::default()
    }

    /// Adds an effect (a second one with the same name is refused when attaching).
    pub fn register(&mut self, effect: impl Effect) -> &mut Self {
        self.effects.push(Arc::new(effect));
        self
    }

    /// Adds an effect already behind an `Arc`.
    pub fn register_arc(&mut self, effect: Arc<dyn Effect>) -> &mut Self {
        self.effects.push(effect);
        self
    }

    /// Adds every effect of `other`.
    pub fn extend(&mut self, other: &EffectSet) -> &mut Self {
        self.effects.extend(other.effects.iter().cloned());
        self
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.effects.iter().map(|e| e.name()).collect()
    }
}

/// What an effect run may use.
pub struct EffectCx {
    pub file: FileHandle,
    effect: &'static str,
}

impl EffectCx {
    /// Commits `cap` on `block` with a deterministic command id for `(effect, trigger, step)`,
    /// as the editor of the triggering event. Resubmitting returns the original events.
    pub async fn record(
        &self,
        trigger: &Event,
        step: &str,
        cap: &str,
        block: &str,
        payload: Value,
    ) -> Result<Vec<Event>, EngineError> {
        let mut cmd = Command::new(trigger.editor_id(), cap, Some(block), payload);
        cmd.cmd_id = effect_cmd_id(self.effect, trigger, step);
        self.file.submit(cmd).await
    }
}

/// The id of an effect's command for step `step` of the event `trigger`.
pub fn effect_cmd_id(effect: &str, trigger: &Event, step: &str) -> Uuid {
    let mut h = blake3::Hasher::new();
    h.update(b"elfiee-effect\0");
    h.update(effect.as_bytes());
    h.update(b"\0");
    h.update(trigger.event_id.as_bytes());
    h.update(step.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.finalize().as_bytes()[..16]);
    uuid::Builder::from_random_bytes(b).into_uuid()
}

/// Called with (effect name, trigger seq) whenever an effect really runs its I/O (each
/// attempt); tests use it as a recording sink.
pub type Observer = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// Settings of the effect runtime.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Runs of one effect at the same time, unless [`RuntimeConfig::concurrency`] names it.
    pub default_concurrency: usize,
    /// Per effect name: how many of its runs may be in flight at once (1 = one at a time).
    pub concurrency: HashMap<String, usize>,
    /// Attempts of one trigger before it is recorded as a failed outcome.
    pub max_attempts: u32,
    /// Pause before the first retry of a failed run; doubles with each attempt, up to 30 s.
    pub retry_backoff: Duration,
    /// How the file actor restarts an effect actor that failed.
    pub restart: RestartPolicy,
    pub observer: Option<Observer>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            default_concurrency: 8,
            concurrency: HashMap::new(),
            max_attempts: 3,
            retry_backoff: Duration::from_millis(200),
            restart: RestartPolicy::default(),
            observer: None,
        }
    }
}

impl RuntimeConfig {
    fn limit(&self, effect: &str) -> usize {
        self.concurrency
            .get(effect)
            .copied()
            .unwrap_or(self.default_concurrency)
            .max(1)
    }
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("default_concurrency", &self.default_concurrency)
            .field("concurrency", &self.concurrency)
            .field("max_attempts", &self.max_attempts)
            .field("retry_backoff", &self.retry_backoff)
            .finish()
    }
}

// ------------------------------------------------------------------ the tracker

/// Which triggers of one effect may run, and how far its checkpoint may move. Pure
/// bookkeeping (no I/O, no clock), so it is property-tested on its own.
#[derive(Debug, Default)]
pub struct Tracker {
    /// Every event up to here has been looked at (and admitted if wanted).
    seen: u64,
    /// Unfinished triggers by seq.
    pending: BTreeMap<u64, Slot>,
    running: usize,
}

#[derive(Debug)]
struct Slot {
    key: String,
    state: SlotState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Waiting,
    Running,
    /// Failed; waits for its retry (and still holds its key).
    BackingOff,
}

impl Tracker {
    /// A tracker for an effect whose stored checkpoint is `checkpoint`.
    pub fn new(checkpoint: u64) -> Tracker {
        Tracker {
            seen: checkpoint,
            ..Tracker::default()
        }
    }

    /// A wanted event at `seq` (every event before it has been looked at).
    pub fn admit(&mut self, seq: u64, key: String) {
        if seq <= self.seen || self.pending.contains_key(&seq) {
            return;
        }
        self.pending.insert(
            seq,
            Slot {
                key,
                state: SlotState::Waiting,
            },
        );
        self.seen = seq;
    }

    /// Every event up to `seq` has been looked at.
    pub fn seen(&mut self, seq: u64) {
        self.seen = self.seen.max(seq);
    }

    /// Marks as running, and returns, the waiting triggers that may start now: in seq order,
    /// at most `limit` running in all, and none while an earlier trigger with its key is
    /// unfinished.
    pub fn start(&mut self, limit: usize) -> Vec<u64> {
        let mut started = Vec::new();
        let mut held: HashSet<&str> = HashSet::new();
        for (seq, slot) in self.pending.iter_mut() {
            if self.running >= limit {
                break;
            }
            if !held.insert(slot.key.as_str()) {
                continue;
            }
            if slot.state == SlotState::Waiting {
                slot.state = SlotState::Running;
                self.running += 1;
                started.push(*seq);
            }
        }
        started
    }

    /// A running trigger finished (its outcome is recorded).
    pub fn finish(&mut self, seq: u64) {
        if let Some(slot) = self.pending.remove(&seq) {
            if slot.state == SlotState::Running {
                self.running -= 1;
            }
        }
    }

    /// A running trigger failed and waits for a retry.
    pub fn back_off(&mut self, seq: u64) {
        if let Some(slot) = self.pending.get_mut(&seq) {
            if slot.state == SlotState::Running {
                self.running -= 1;
                slot.state = SlotState::BackingOff;
            }
        }
    }

    /// A trigger's retry is due: it waits for a free place again.
    pub fn wake(&mut self, seq: u64) {
        if let Some(slot) = self.pending.get_mut(&seq) {
            if slot.state == SlotState::BackingOff {
                slot.state = SlotState::Waiting;
            }
        }
    }

    /// How far the effect is done: every wanted event up to here has finished.
    pub fn checkpoint(&self) -> u64 {
        match self.pending.keys().next() {
            Some(first) => (first - 1).min(self.seen),
            None => self.seen,
        }
    }

    pub fn running(&self) -> usize {
        self.running
    }

    pub fn unfinished(&self) -> usize {
        self.pending.len()
    }

    /// Whether `seq` is a trigger that has not finished.
    pub fn is_pending(&self, seq: u64) -> bool {
        self.pending.contains_key(&seq)
    }
}

// ------------------------------------------------------------------ status

/// What a host can read about one effect ([`EffectsHandle::status`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct EffectStatus {
    pub name: String,
    /// Times the effect actor started (1 + restarts by the file actor).
    pub starts: u32,
    /// Runs in flight now.
    pub running: usize,
    /// Triggers not finished (running, waiting for a place, or waiting for a retry).
    pub unfinished: usize,
    /// Every wanted event up to here has finished.
    pub checkpoint: u64,
    /// Failed runs that were retried.
    pub retries: u64,
    /// Triggers recorded as failed outcomes after `max_attempts` failed runs.
    pub failed_triggers: Vec<u64>,
    pub last_error: Option<String>,
}

/// One effect's state that outlives restarts of its actor.
pub(crate) struct EffectShared {
    effect: Arc<dyn Effect>,
    cx: Arc<EffectCx>,
    config: RuntimeConfig,
    /// Failed attempts per trigger seq (a restarted actor goes on counting).
    attempts: Mutex<HashMap<u64, u32>>,
    status: Mutex<EffectStatus>,
    /// The effect's checkpoint as last computed (what `settle` waits on).
    progress: AtomicU64,
    /// Set when the effect actor ended normally (the file closed).
    ended: AtomicBool,
    /// Signalled whenever progress moves or the effect ends.
    moved: Arc<tokio::sync::Notify>,
}

impl EffectShared {
    fn name(&self) -> &'static str {
        self.effect.name()
    }

    fn status(&self) -> std::sync::MutexGuard<'_, EffectStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// ------------------------------------------------------------------ the effect actor

/// One effect on one file: reads its events, runs its triggers, keeps its checkpoint.
pub(crate) struct EffectActor;

pub(crate) enum EffectMsg {
    /// A wanted event (the pump looked at every event before it).
    Trigger(Arc<Event>),
    /// The pump looked at every event up to this seq.
    Seen(u64),
    /// A failed trigger's backoff is over.
    Retry(u64),
    /// The event stream ended (the file closed, or the log cannot be read).
    StreamEnded,
    /// The effect's `wants` panicked on an event: the actor fails and is restarted from its
    /// checkpoint.
    WantsPanicked(u64, String),
}

pub(crate) struct EffectState {
    sh: Arc<EffectShared>,
    tracker: Tracker,
    events: HashMap<u64, Arc<Event>>,
    /// Live run actor → its trigger seq.
    runs: HashMap<ActorId, u64>,
    pump: tokio::task::JoinHandle<()>,
    /// The checkpoint stored in the `.elf`.
    saved: u64,
}

impl Actor for EffectActor {
    type Msg = EffectMsg;
    type State = EffectState;
    type Arguments = Arc<EffectShared>;

    async fn pre_start(
        &self,
        me: ActorRef<EffectMsg>,
        sh: Arc<EffectShared>,
    ) -> Result<EffectState, ActorProcessingErr> {
        let name = sh.name();
        let checkpoint = sh.cx.file.checkpoint(name)?;
        {
            let mut st = sh.status();
            st.starts += 1;
            st.checkpoint = checkpoint;
        }
        if sh.status().starts > 1 {
            tracing::warn!(
                effect = name,
                checkpoint,
                "effect restarted from its checkpoint"
            );
        }
        sh.progress.store(checkpoint, Ordering::Release);
        sh.moved.notify_waiters();
        let pump = tokio::spawn(pump(sh.clone(), me, checkpoint));
        Ok(EffectState {
            sh,
            tracker: Tracker::new(checkpoint),
            events: HashMap::new(),
            runs: HashMap::new(),
            pump,
            saved: checkpoint,
        })
    }

    async fn handle(
        &self,
        me: ActorRef<EffectMsg>,
        msg: EffectMsg,
        st: &mut EffectState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            EffectMsg::Trigger(event) => {
                let key = st.sh.effect.order_key(&event);
                st.tracker.admit(event.seq, key);
                if st.tracker.is_pending(event.seq) {
                    st.events.insert(event.seq, event);
                }
            }
            EffectMsg::Seen(seq) => st.tracker.seen(seq),
            EffectMsg::Retry(seq) => st.tracker.wake(seq),
            EffectMsg::WantsPanicked(seq, why) => {
                return Err(format!("`wants` panicked on event {seq}: {why}").into());
            }
            EffectMsg::StreamEnded => {
                if st.sh.cx.file.is_open() {
                    return Err("the event stream ended while the file is open".into());
                }
                me.stop(Some("file closed".into()));
                return Ok(());
            }
        }
        st.schedule(&me).await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        me: ActorRef<EffectMsg>,
        evt: SupervisionEvent,
        st: &mut EffectState,
    ) -> Result<(), ActorProcessingErr> {
        match evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                let Some(seq) = st.runs.remove(&cell.get_id()) else {
                    return Ok(());
                };
                if reason.as_deref() == Some(CLOSED) {
                    // The file is closing: the outcome was not recorded; the trigger runs
                    // again on the next open.
                    st.tracker.back_off(seq);
                    return Ok(());
                }
                st.finished(seq);
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                let Some(seq) = st.runs.remove(&cell.get_id()) else {
                    return Ok(());
                };
                st.run_failed(&me, seq, err.to_string()).await;
            }
            _ => return Ok(()),
        }
        st.schedule(&me).await;
        Ok(())
    }

    async fn post_stop(
        &self,
        me: ActorRef<EffectMsg>,
        st: &mut EffectState,
    ) -> Result<(), ActorProcessingErr> {
        st.pump.abort();
        st.runs.clear();
        // Runs in flight are cut short (a run's future is dropped: a terminal command's
        // process is killed); their triggers run again on the next open.
        for run in me.get_children() {
            let _ = run.kill_and_wait(Some(Duration::from_secs(5))).await;
        }
        st.save_checkpoint();
        st.sh.ended.store(true, Ordering::Release);
        st.sh.moved.notify_waiters();
        Ok(())
    }
}

/// Stop reason of a run that could not record its outcome because the file closed.
const CLOSED: &str = "file closed";

impl EffectState {
    /// Starts the runs the tracker allows, then publishes progress.
    async fn schedule(&mut self, me: &ActorRef<EffectMsg>) {
        let limit = self.sh.config.limit(self.sh.name());
        for seq in self.tracker.start(limit) {
            let Some(event) = self.events.get(&seq).cloned() else {
                self.tracker.finish(seq);
                continue;
            };
            let args = RunArgs {
                sh: self.sh.clone(),
                event,
            };
            match Actor::spawn_linked(None, RunActor, args, me.get_cell()).await {
                Ok((run, _)) => {
                    self.runs.insert(run.get_id(), seq);
                }
                Err(e) => {
                    tracing::error!(effect = self.sh.name(), seq, error = %e, "cannot start a run");
                    self.tracker.back_off(seq);
                    let pause = self.sh.config.retry_backoff;
                    me.send_after(pause, move || EffectMsg::Retry(seq));
                }
            }
        }
        self.publish();
    }

    fn finished(&mut self, seq: u64) {
        self.tracker.finish(seq);
        self.events.remove(&seq);
        self.sh
            .attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&seq);
    }

    /// A run panicked or returned an error: retry after a backoff, or record the trigger as
    /// a failed outcome once it has had its attempts.
    async fn run_failed(&mut self, me: &ActorRef<EffectMsg>, seq: u64, why: String) {
        let name = self.sh.name();
        let attempts = {
            let mut a = self.sh.attempts.lock().unwrap_or_else(|p| p.into_inner());
            let n = a.entry(seq).or_insert(0);
            *n += 1;
            *n
        };
        self.sh.status().last_error = Some(format!("trigger {seq}: {why}"));
        let Some(event) = self.events.get(&seq).cloned() else {
            self.finished(seq);
            return;
        };
        if attempts < self.sh.config.max_attempts {
            let pause = self
                .sh
                .config
                .retry_backoff
                .saturating_mul(1 << (attempts - 1).min(16))
                .min(Duration::from_secs(30));
            tracing::warn!(effect = name, seq, attempt = attempts, ?pause, error = %why, "effect run failed; retrying");
            self.sh.status().retries += 1;
            self.tracker.back_off(seq);
            me.send_after(pause, move || EffectMsg::Retry(seq));
            return;
        }
        tracing::error!(effect = name, seq, attempts, error = %why, "effect run keeps failing; recording a failed outcome");
        let why =
            format!("the {name} effect failed {attempts} times on this event; last failure: {why}");
        let failed = self.sh.effect.failed_outcome(&event, &why);
        let recorded = self
            .sh
            .cx
            .record(
                &event,
                "outcome",
                failed.cap_id,
                &failed.block_id,
                failed.payload,
            )
            .await;
        match recorded {
            Ok(_) => {}
            Err(EngineError::Closed) => {
                self.tracker.back_off(seq);
                return;
            }
            // Even the failure cannot be recorded (e.g. the block is gone): move on, and say so.
            Err(e) => {
                tracing::error!(effect = name, seq, error = %e, "the failed outcome was refused; moving on without one");
                self.sh.status().last_error = Some(format!(
                    "trigger {seq}: {why}; recording the failure was refused: {e}"
                ));
            }
        }
        self.sh.status().failed_triggers.push(seq);
        self.finished(seq);
    }

    /// Stores the checkpoint when it moved, and tells whoever waits on progress.
    fn publish(&mut self) {
        let cp = self.tracker.checkpoint();
        {
            let mut st = self.sh.status();
            st.running = self.tracker.running();
            st.unfinished = self.tracker.unfinished();
            st.checkpoint = cp;
        }
        // Store at least every 256 events, and whenever nothing is left to do.
        if cp >= self.saved + 256 || (self.tracker.unfinished() == 0 && cp > self.saved) {
            self.save_checkpoint();
        }
        if self.sh.progress.swap(cp, Ordering::AcqRel) != cp {
            self.sh.moved.notify_waiters();
        }
    }

    fn save_checkpoint(&mut self) {
        let cp = self.tracker.checkpoint();
        if cp > self.saved && self.sh.cx.file.set_checkpoint(self.sh.name(), cp).is_ok() {
            self.saved = cp;
        }
    }
}

/// Reads committed events from `checkpoint + 1` on and hands the effect's to its actor.
async fn pump(sh: Arc<EffectShared>, me: ActorRef<EffectMsg>, checkpoint: u64) {
    let mut events = sh.cx.file.subscribe_from(checkpoint + 1);
    let mut told = checkpoint;
    loop {
        // Caught up with everything committed so far: say how far we looked.
        let looked = events.next_seq() - 1;
        if looked > told && looked >= sh.cx.file.last_seq() {
            if me.cast(EffectMsg::Seen(looked)).is_err() {
                return;
            }
            told = looked;
        }
        let Some(Committed { event, origin }) = events.recv_committed().await else {
            let _ = me.cast(EffectMsg::StreamEnded);
            return;
        };
        // Another device's event: its effects ran on the device that wrote it (issue 16).
        // Its origin comes with it, so no event costs a storage read here.
        let wants =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sh.effect.wants(&event)))
                .map(|w| w && !origin.is_foreign());
        let wants = match wants {
            Ok(w) => w,
            Err(p) => {
                let why = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                let _ = me.cast(EffectMsg::WantsPanicked(event.seq, why));
                return;
            }
        };
        let sent = if wants {
            told = event.seq;
            me.cast(EffectMsg::Trigger(Arc::new(event)))
        } else if event.seq >= told + 256 {
            told = event.seq;
            me.cast(EffectMsg::Seen(event.seq))
        } else {
            Ok(())
        };
        if sent.is_err() {
            return;
        }
    }
}

// ------------------------------------------------------------------ the run actor

/// One attempt at one trigger: does the I/O and records the outcome, then stops. A panic or
/// an error fails it, and its effect actor decides about a retry.
pub(crate) struct RunActor;

pub(crate) struct RunArgs {
    sh: Arc<EffectShared>,
    event: Arc<Event>,
}

impl Actor for RunActor {
    type Msg = ();
    type State = RunArgs;
    type Arguments = RunArgs;

    async fn pre_start(
        &self,
        _me: ActorRef<()>,
        args: RunArgs,
    ) -> Result<RunArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn post_start(
        &self,
        me: ActorRef<()>,
        st: &mut RunArgs,
    ) -> Result<(), ActorProcessingErr> {
        let (sh, event) = (&st.sh, &st.event);
        let name = sh.name();
        let done = effect_cmd_id(name, event, "outcome");
        match sh.cx.file.command_events(done) {
            Ok(Some(_)) => {
                tracing::debug!(
                    effect = name,
                    seq = event.seq,
                    "outcome already recorded; skipping"
                );
                me.stop(None);
                return Ok(());
            }
            Ok(None) => {}
            Err(EngineError::Closed) => {
                me.stop(Some(CLOSED.into()));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        if crash_hook(name) {
            tracing::warn!(
                effect = name,
                "ELFIEE_TEST_CRASH_BEFORE_EFFECT: aborting before the effect runs"
            );
            std::process::abort();
        }
        if let Some(obs) = &sh.config.observer {
            obs(name, event.seq);
        }
        let span = tracing::info_span!(
            "effect",
            effect = name,
            seq = event.seq,
            cap = event.cap_id()
        );
        match tracing::Instrument::instrument(sh.effect.run(&sh.cx, event), span).await {
            Ok(()) => me.stop(None),
            // The outcome was not recorded; the trigger runs again on the next open.
            Err(EngineError::Closed) => me.stop(Some(CLOSED.into())),
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

/// Test hook: `ELFIEE_TEST_CRASH_BEFORE_EFFECT=<effect name>` aborts the process right before
/// that effect would run, to prove a crash between commit and effect loses nothing.
fn crash_hook(name: &str) -> bool {
    std::env::var("ELFIEE_TEST_CRASH_BEFORE_EFFECT").is_ok_and(|v| v == name)
}

// ------------------------------------------------------------------ attaching

/// The effects running on one file (children of its file actor; they stop when it closes).
/// On a handle to another process's file it holds none until this process takes the file
/// over.
pub struct EffectsHandle {
    effects: Arc<Mutex<Vec<Arc<EffectShared>>>>,
    moved: Arc<tokio::sync::Notify>,
}

impl EffectsHandle {
    /// Waits until every effect has dealt with every committed event, including the outcomes
    /// the effects themselves commit. Hosts that are about to close a file call this so that
    /// pending effects finish first (they would otherwise run on the next open). An effect the
    /// file actor gave up restarting is not waited for.
    pub async fn settle(&self, file: &FileHandle, timeout: Duration) -> Result<(), EngineError> {
        let wait = async {
            loop {
                // Registered before looking, so a move between the look and the wait wakes it.
                let moved = self.moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                let target = file.last_seq();
                let effects = self.list();
                let behind: Vec<&'static str> = effects
                    .iter()
                    .filter(|e| {
                        !e.ended.load(Ordering::Acquire)
                            && e.progress.load(Ordering::Acquire) < target
                    })
                    .map(|e| e.name())
                    .collect();
                if behind.is_empty() && file.last_seq() == target {
                    return;
                }
                if !behind.is_empty() {
                    let children = file.children().await;
                    let given_up = |n: &str| {
                        children
                            .iter()
                            .any(|c| c.name == n && c.state == ChildState::GaveUp)
                    };
                    if behind.iter().all(|n| given_up(n)) {
                        return;
                    }
                }
                // The timeout only guards against a missed signal.
                let _ = tokio::time::timeout(Duration::from_millis(50), moved).await;
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| {
            EngineError::Effect(format!(
                "effects still running after {timeout:?}; they resume on the next open"
            ))
        })
    }

    /// What each effect is doing: runs in flight, retries, failed triggers, restarts.
    pub fn status(&self) -> Vec<EffectStatus> {
        self.list().iter().map(|e| e.status().clone()).collect()
    }

    fn list(&self) -> Vec<Arc<EffectShared>> {
        self.effects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits until every effect actor has ended (after the file was closed).
    pub async fn join(self) {
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.list().iter().all(|e| e.ended.load(Ordering::Acquire)) {
                return;
            }
            if tokio::time::timeout(Duration::from_secs(30), moved)
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Starts `effects` on `file` as children of its file actor: each catches up from its
/// checkpoint, then follows the live stream. Only the process that owns the file runs
/// effects: on a handle to another process's file they start when (if ever) this process
/// takes the file over from an owner that went away.
pub async fn attach_effects(
    file: &FileHandle,
    config: RuntimeConfig,
    effects: EffectSet,
) -> Result<EffectsHandle, EngineError> {
    let handle = EffectsHandle {
        effects: Arc::new(Mutex::new(Vec::new())),
        moved: Arc::new(tokio::sync::Notify::new()),
    };
    if file.is_remote() {
        let (list, moved) = (handle.effects.clone(), handle.moved.clone());
        file.on_takeover(Arc::new(move |file: FileHandle| {
            let (list, moved, config, effects) =
                (list.clone(), moved.clone(), config.clone(), effects.clone());
            Box::pin(async move {
                if let Err(e) = start_effects(&file, &config, effects, &list, &moved).await {
                    tracing::error!(error = %e, "effects not started after the take-over");
                }
            })
        }));
        return Ok(handle);
    }
    start_effects(file, &config, effects, &handle.effects, &handle.moved).await?;
    Ok(handle)
}

async fn start_effects(
    file: &FileHandle,
    config: &RuntimeConfig,
    effects: EffectSet,
    list: &Mutex<Vec<Arc<EffectShared>>>,
    moved: &Arc<tokio::sync::Notify>,
) -> Result<(), EngineError> {
    for effect in effects.effects {
        let name = effect.name();
        let sh = Arc::new(EffectShared {
            cx: Arc::new(EffectCx {
                file: file.clone(),
                effect: name,
            }),
            effect,
            config: config.clone(),
            attempts: Mutex::new(HashMap::new()),
            status: Mutex::new(EffectStatus {
                name: name.to_owned(),
                ..EffectStatus::default()
            }),
            progress: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            moved: moved.clone(),
        });
        let start_with = sh.clone();
        let spec = ChildSpec {
            name: format!("effect:{name}"),
            start: Arc::new(move |supervisor: ActorCell| {
                let sh = start_with.clone();
                Box::pin(async move {
                    Actor::spawn_linked(None, EffectActor, sh, supervisor)
                        .await
                        .map(|(a, _)| a.get_cell())
                        .map_err(|e| e.to_string())
                })
            }),
            restart: config.restart.clone(),
        };
        list.lock().unwrap_or_else(|p| p.into_inner()).push(sh);
        file.supervise(spec).await?;
    }
    Ok(())
}

/// Waits until the outcome of `effect` for `trigger` is committed and returns its events.
pub async fn wait_for_outcome(
    file: &FileHandle,
    effect: &str,
    trigger: &Event,
    timeout: Duration,
) -> Result<Vec<Event>, EngineError> {
    let id = effect_cmd_id(effect, trigger, "outcome");
    let mut sub = file.subscribe();
    let wait = async {
        // Hand-overs on the way (owner processes that went away while we waited) are part of
        // the wait; `timeout` bounds them all.
        loop {
            match file.command_events(id) {
                Ok(Some(ev)) => return Ok(ev),
                Ok(None) => {}
                Err(e) if file.is_remote() && !file.is_open() => {
                    tracing::info!(error = %e, "the owner went away while waiting for an effect; handing over");
                    file.take_over().await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            // Look again after each committed event (cheap: an index lookup).
            if sub.recv().await.is_none() {
                return Err(EngineError::Closed);
            }
        }
    };
    tokio::time::timeout(timeout, wait).await.unwrap_or_else(|_| {
        Err(EngineError::Effect(format!("no outcome from the {effect} effect after {timeout:?}; it is still running or failed — see `elfiee log`")))
    })
}
