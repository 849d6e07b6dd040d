//! The effect runtime (DESIGN.md §5).
//!
//! Each [`Effect`] runs in its own task: it reads committed events from its durable checkpoint
//! on (so a crash or a lagging live stream loses nothing), runs I/O for the events it wants, and
//! commits the outcome through the engine. Outcome commands have **deterministic ids**
//! ([`effect_cmd_id`]) derived from the effect and the triggering event, so:
//! - an effect whose outcome is already in the log is skipped (never runs twice);
//! - an effect interrupted before its outcome committed runs again on the next open (effects
//!   must therefore be idempotent), and its outcome still commits once (engine idempotency).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Command, Event};
use serde_json::Value;
use uuid::Uuid;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that reacts to committed events with I/O.
pub trait Effect: Send + Sync + 'static {
    /// Stable name: the checkpoint key and part of outcome command ids.
    fn name(&self) -> &'static str;
    /// Whether this effect acts on `event`.
    fn wants(&self, event: &Event) -> bool;
    /// Does the I/O and commits the outcome with [`EffectCx::record`] (step `"outcome"`).
    fn run<'a>(
        &'a self,
        cx: &'a EffectCx,
        event: &'a Event,
    ) -> BoxFuture<'a, Result<(), EngineError>>;
}

/// What an effect run may use.
pub struct EffectCx {
    pub file: FileHandle,
    pub config: EffectsConfig,
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

/// Called with (effect name, trigger seq) whenever an effect really runs its I/O; tests use it
/// as a recording sink.
pub type Observer = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// Settings of the effect runtime.
#[derive(Clone)]
pub struct EffectsConfig {
    /// The `elfiee` binary written into `.mcp.json` (absolute path).
    pub elfiee_bin: PathBuf,
    /// Bytes of stdout / stderr kept per terminal run (the rest is cut with a note).
    pub terminal_output_limit: usize,
    pub observer: Option<Observer>,
    /// Builds LLM providers; `None` = the real ones (tests plug in scripted or local ones).
    pub provider_factory: Option<crate::invoke::ProviderFactory>,
}

impl std::fmt::Debug for EffectsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectsConfig")
            .field("elfiee_bin", &self.elfiee_bin)
            .finish()
    }
}

impl Default for EffectsConfig {
    fn default() -> Self {
        EffectsConfig {
            elfiee_bin: default_elfiee_bin(),
            terminal_output_limit: 256 * 1024,
            observer: None,
            provider_factory: None,
        }
    }
}

/// This executable if it is `elfiee`, else `elfiee` found on `PATH`, else the bare name.
pub fn default_elfiee_bin() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_stem().is_some_and(|s| s == "elfiee") {
            return exe;
        }
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("elfiee");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    PathBuf::from("elfiee")
}

/// The built-in effects.
pub fn builtin() -> Vec<Arc<dyn Effect>> {
    vec![
        Arc::new(crate::claude::ClaudeIntegration),
        Arc::new(crate::terminal::TerminalEffect),
        Arc::new(crate::export::ExportEffect),
        Arc::new(crate::invoke::InvokeEffect),
    ]
}

/// Running effect tasks of one file. They stop by themselves when the file closes.
pub struct EffectsHandle {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Per effect: seq of the last event it has dealt with.
    progress: Vec<Arc<AtomicU64>>,
    /// Signalled whenever an effect moves its progress or ends.
    moved: Arc<tokio::sync::Notify>,
}

impl EffectsHandle {
    /// Waits until every effect has dealt with every committed event, including the outcomes
    /// the effects themselves commit. Hosts that are about to close a file call this so that
    /// pending effects finish first (they would otherwise run on the next open).
    pub async fn settle(&self, file: &FileHandle, timeout: Duration) -> Result<(), EngineError> {
        let wait = async {
            loop {
                // Registered before looking, so a move between the look and the wait wakes it.
                let moved = self.moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                let target = file.last_seq();
                let behind = self
                    .progress
                    .iter()
                    .any(|p| p.load(Ordering::Acquire) < target);
                let finished = self.tasks.iter().all(|t| t.is_finished());
                if !behind && file.last_seq() == target || finished {
                    return;
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

    /// Waits for the tasks to end (after the file was closed).
    pub async fn join(self) {
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Starts the built-in effects on `file`: each catches up from its checkpoint, then follows
/// the live stream.
pub fn attach(file: &FileHandle, config: EffectsConfig) -> EffectsHandle {
    attach_effects(file, config, builtin())
}

/// Starts the given effects on `file`.
pub fn attach_effects(
    file: &FileHandle,
    config: EffectsConfig,
    effects: Vec<Arc<dyn Effect>>,
) -> EffectsHandle {
    let mut tasks = Vec::new();
    let mut progress = Vec::new();
    let moved = Arc::new(tokio::sync::Notify::new());
    for effect in effects {
        let cx = EffectCx {
            file: file.clone(),
            config: config.clone(),
            effect: effect.name(),
        };
        let done = Progress {
            seq: Arc::new(AtomicU64::new(0)),
            moved: moved.clone(),
        };
        progress.push(done.seq.clone());
        tasks.push(tokio::spawn(run_effect(effect, cx, done)));
    }
    EffectsHandle {
        tasks,
        progress,
        moved,
    }
}

/// One effect's progress: the seq it has dealt with, and who to tell when it moves (or the
/// effect ends: on drop).
struct Progress {
    seq: Arc<AtomicU64>,
    moved: Arc<tokio::sync::Notify>,
}

impl Progress {
    fn store(&self, seq: u64) {
        self.seq.store(seq, Ordering::Release);
        self.moved.notify_waiters();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.moved.notify_waiters();
    }
}

async fn run_effect(effect: Arc<dyn Effect>, cx: EffectCx, done: Progress) {
    let name = effect.name();
    let from = match cx.file.checkpoint(name) {
        Ok(seq) => seq + 1,
        Err(e) => {
            tracing::error!(effect = name, error = %e, "cannot read the effect checkpoint");
            return;
        }
    };
    done.store(from - 1);
    let mut saved = from - 1;
    let mut events = cx.file.subscribe_from(from);
    loop {
        // Caught up with everything committed so far: say so (and record it, so the next
        // process on this file does not read these events again), then wait for more.
        if events.next_seq() > cx.file.last_seq() {
            let seq = events.next_seq() - 1;
            done.store(seq);
            save_checkpoint(&cx.file, name, &mut saved, seq);
        }
        let Some(event) = events.recv().await else {
            break;
        };
        if effect.wants(&event) {
            let done = effect_cmd_id(name, &event, "outcome");
            match cx.file.command_events(done) {
                Ok(Some(_)) => tracing::debug!(
                    effect = name,
                    seq = event.seq,
                    "outcome already recorded; skipping"
                ),
                Ok(None) => {
                    if crash_hook(name) {
                        tracing::warn!(
                            effect = name,
                            "ELFIEE_TEST_CRASH_BEFORE_EFFECT: aborting before the effect runs"
                        );
                        std::process::abort();
                    }
                    if let Some(obs) = &cx.config.observer {
                        obs(name, event.seq);
                    }
                    let span = tracing::info_span!(
                        "effect",
                        effect = name,
                        seq = event.seq,
                        cap = event.cap_id()
                    );
                    if let Err(e) =
                        tracing::Instrument::instrument(effect.run(&cx, &event), span).await
                    {
                        // Closed file: the outcome was not recorded, so the effect runs again on
                        // the next open. Anything else is logged; the effect itself records
                        // I/O failures as outcomes.
                        tracing::warn!(error = %e, "effect did not record an outcome");
                        if matches!(e, EngineError::Closed) {
                            return;
                        }
                    }
                }
                Err(EngineError::Closed) => return,
                Err(e) => tracing::warn!(effect = name, error = %e, "cannot look up the outcome"),
            }
            save_checkpoint(&cx.file, name, &mut saved, event.seq);
        } else if event.seq % 256 == 0 {
            save_checkpoint(&cx.file, name, &mut saved, event.seq);
        }
        done.store(event.seq);
    }
}

/// Stores `seq` as the effect's checkpoint when it is past the one stored (`saved`).
fn save_checkpoint(file: &FileHandle, name: &str, saved: &mut u64, seq: u64) {
    if seq > *saved && file.set_checkpoint(name, seq).is_ok() {
        *saved = seq;
    }
}

/// Test hook: `ELFIEE_TEST_CRASH_BEFORE_EFFECT=<effect name>` aborts the process right before
/// that effect would run, to prove a crash between commit and effect loses nothing.
fn crash_hook(name: &str) -> bool {
    std::env::var("ELFIEE_TEST_CRASH_BEFORE_EFFECT").is_ok_and(|v| v == name)
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
        loop {
            if let Some(ev) = file.command_events(id)? {
                return Ok(ev);
            }
            match sub.recv().await {
                Some(e) if e.cmd_id == id => {
                    return file.command_events(id).map(|e| e.unwrap_or_default())
                }
                Some(_) => {}
                None => return Err(EngineError::Closed),
            }
        }
    };
    tokio::time::timeout(timeout, wait).await.unwrap_or_else(|_| {
        Err(EngineError::Effect(format!("no outcome from the {effect} effect after {timeout:?}; it is still running or failed — see `elfiee log`")))
    })
}
