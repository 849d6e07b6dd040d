use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use elfiee_capabilities::cbac;
use elfiee_model::{Block, CapError, Command, Event};
use elfiee_projections::State;

use crate::actor::{FileMsg, Shared};
use crate::{EngineError, Subscription};

const CHECKPOINT_TREE: &str = "effect_checkpoints";

/// Another state to show readers of a file (see [`FileHandle::set_view`]).
pub trait StateView: Send + Sync {
    /// Calls `f` once with the state to show (not calling it shows the committed state).
    fn view(&self, f: &mut dyn FnMut(&State));
}

/// A cloneable handle to one open `.elf`. All clones talk to the same actor.
#[derive(Clone)]
pub struct FileHandle {
    /// The file as this process sees it: owned here (its actor and log are set) or through
    /// another process (its `remote` is set); which one can change when an owner goes away.
    pub(crate) shared: Arc<Shared>,
    pub(crate) closer: Arc<crate::engine::Closer>,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("path", &self.shared.paths.root)
            .finish()
    }
}

impl FileHandle {
    /// Runs one command through the pipeline. Answers once its events are durable; a rejected
    /// command writes nothing. Resubmitting a committed `cmd_id` returns the original events.
    pub async fn submit(&self, cmd: Command) -> Result<Vec<Event>, EngineError> {
        self.call(vec![cmd], false).await
    }

    /// Runs several commands all-or-nothing: either every event commits (in one atomic batch,
    /// all carrying the first command's `cmd_id`), or nothing does and the error names the
    /// failing command.
    pub async fn submit_all(&self, cmds: Vec<Command>) -> Result<Vec<Event>, EngineError> {
        self.call(cmds, true).await
    }

    async fn call(&self, cmds: Vec<Command>, all: bool) -> Result<Vec<Event>, EngineError> {
        let mut req =
            Arc::new(if all {
                crate::remote::Request::SubmitAll(cmds)
            } else {
                crate::remote::Request::Submit(cmds.into_iter().next().ok_or_else(|| {
                    EngineError::Rejected(CapError::rejected("no command to submit"))
                })?)
            });
        // Owners may keep going away under this call (short-lived processes, each owning the
        // file for one command): hand over as often as it takes, for up to `handover_wait`.
        let deadline = std::time::Instant::now() + self.shared.config.handover_wait;
        loop {
            let Some(remote) = self.shared.remote() else {
                // The fast path: sequence on this task, under the file actor's sequencer lock
                // (which serializes these commands with the ones in the actor's mailbox),
                // without two task hand-offs per command.
                let cmds = match Arc::try_unwrap(req) {
                    Ok(crate::remote::Request::Submit(cmd)) => vec![cmd],
                    Ok(crate::remote::Request::SubmitAll(cmds)) => cmds,
                    _ => return Err(EngineError::Closed),
                };
                let (port, rx) = ractor::concurrency::oneshot();
                self.shared.submit(cmds, port.into(), true);
                return rx.await.unwrap_or(Err(EngineError::Closed));
            };
            // Another process owns the file: send the command to its actor.
            let (r, q) = (remote.clone(), req.clone());
            let resp = tokio::task::spawn_blocking(move || r.call(&q))
                .await
                .map_err(|e| EngineError::Storage(format!("request task failed: {e}")))?;
            match resp {
                Ok(crate::remote::Response::Events(ev)) => {
                    if let Some(last) = ev.last() {
                        if let Err(e) = crate::remote::wait_for_seq(&self.shared, last.seq).await {
                            // The owner acknowledged (so the events are durable) and then went
                            // away before streaming them back: the command succeeded.
                            if !remote.is_closed() {
                                return Err(e);
                            }
                            tracing::debug!(error = %e, seq = last.seq, "acknowledged by an owner that then went away");
                        }
                    }
                    return Ok(ev);
                }
                Ok(_) => {
                    return Err(EngineError::Storage(
                        "unexpected answer from the owner process".into(),
                    ))
                }
                // The owner went away with the command in flight: take over (or reach whoever
                // did) and send it again with the same cmd_id; if the old owner committed it,
                // the answer is its original events.
                Err(e)
                    if remote.is_closed()
                        && std::time::Instant::now() < deadline
                        && !self.shared.closing.load(Ordering::Acquire) =>
                {
                    tracing::info!(error = %e, "owner went away with a command in flight; handing over and resubmitting");
                    self.closer.engine.take_over(self).await?;
                    req = match Arc::try_unwrap(req) {
                        Ok(r) => Arc::new(r),
                        Err(shared) => shared,
                    };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts `spec`'s child under this file's actor, which restarts it with backoff when it
    /// fails (see [`crate::tree`]) and stops it when the file closes. Only the process that
    /// owns the file runs children: on a handle to another process's file this refuses.
    pub async fn supervise(&self, spec: crate::tree::ChildSpec) -> Result<(), EngineError> {
        let actor = self.shared.actor().ok_or_else(|| {
            EngineError::Effect(format!(
                "another process (pid {}) owns this file; its children run there",
                self.owner_pid().unwrap_or(0)
            ))
        })?;
        ractor::call!(actor, |port| FileMsg::Supervise(spec, Some(port)))
            .map_err(|_| EngineError::Closed)?
            .map_err(EngineError::Effect)
    }

    /// When the owner process went away, takes the file over or connects to whoever did
    /// (see docs/ARCHITECTURE.md, "Hand-over between processes"); does nothing otherwise.
    /// [`FileHandle::submit`] does this by itself; a caller whose read failed because the
    /// owner went away (the handle is remote and [`FileHandle::is_open`] is false) calls it
    /// and reads again.
    pub async fn take_over(&self) -> Result<(), EngineError> {
        match self.shared.remote() {
            Some(r) if r.is_closed() => self.closer.engine.take_over(self).await,
            _ => Ok(()),
        }
    }

    /// Runs `hook` whenever this process takes the file over from an owner that went away
    /// (a client becomes the owner). A host that runs effects only where it owns the file
    /// starts them here; `elfiee_adapters::attach` does.
    pub fn on_takeover(&self, hook: crate::tree::TakeoverHook) {
        self.shared
            .takeover_hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }

    /// The supervised children of this file and whether they are running, restarting or
    /// stopped (empty when another process owns the file).
    pub async fn children(&self) -> Vec<crate::tree::ChildStatus> {
        match self.shared.actor() {
            Some(a) => ractor::call_t!(a, FileMsg::Children, 10_000).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Whether the file is still open through this handle (not closed, and for a handle to
    /// another process's file, the connection to its owner is up).
    pub fn is_open(&self) -> bool {
        match self.shared.remote() {
            Some(r) => !r.is_closed(),
            None => self.shared.log().is_ok(),
        }
    }

    /// The pid of the process that owns this file, when it is another process.
    pub fn owner_pid(&self) -> Option<u32> {
        self.shared.remote().map(|r| r.owner_pid)
    }

    /// Whether another process owns this file and this handle talks to it over its socket.
    pub fn is_remote(&self) -> bool {
        self.shared.remote().is_some()
    }

    /// Runs `f` on the committed state (everything durable so far) — or, when a view is set
    /// ([`FileHandle::set_view`]), on the state that view shows (a synced document's merged
    /// state).
    pub fn with_state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        let view = self
            .shared
            .view
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut f = Some(f);
        if let Some(view) = view {
            let mut out = None;
            view.view(&mut |s: &State| {
                if let Some(f) = f.take() {
                    out = Some(f(s));
                }
            });
            if let Some(out) = out {
                return out;
            }
        }
        let f = f.expect("taken only by a view, which then answered");
        f(&self
            .shared
            .committed
            .read()
            .unwrap_or_else(|p| p.into_inner()))
    }

    /// Shows readers of this handle ([`FileHandle::with_state`], `state`, `block`, …, and
    /// the processes that reach this one through its owner socket) the state `view` gives
    /// instead of the committed one, which stays what commands are checked against and what
    /// snapshots and `replay` hold. Sync sets its merged state here; `None` removes it.
    pub fn set_view(&self, view: Option<std::sync::Arc<dyn StateView>>) {
        *self.shared.view.write().unwrap_or_else(|p| p.into_inner()) = view;
    }

    /// A copy of the committed state.
    pub fn state(&self) -> State {
        self.with_state(State::clone)
    }

    /// One block with its whole contents (bodies read from the content store), unchecked
    /// (the host decides who sees what). `None` if there is no such block or a body cannot be
    /// read (see [`FileHandle::resolve`] for the reason).
    pub fn block(&self, id: &str) -> Option<Block> {
        let b = self.block_meta(id)?;
        self.resolve(&b).ok()
    }

    /// One block as the state keeps it: metadata, small contents, and references to the
    /// bodies in `content_refs` (nothing read from disk).
    pub fn block_meta(&self, id: &str) -> Option<Block> {
        self.with_state(|s| s.block(id).cloned())
    }

    /// One block as `editor` may see it, with its whole contents: checks
    /// `<block_type>.read` through CBAC.
    pub fn read_block(&self, editor: &str, id: &str) -> Result<Block, EngineError> {
        let b = self.with_state(|s| {
            let b = s
                .block(id)
                .ok_or_else(|| CapError::BlockNotFound(id.to_owned()))?;
            cbac::authorize(s, editor, &format!("{}.read", b.block_type), Some(b))?;
            Ok::<_, EngineError>(b.clone())
        })?;
        self.resolve(&b)
    }

    /// A body from the document's content store, checked against its hash.
    pub fn content(&self, r: &elfiee_model::ContentRef) -> Result<String, EngineError> {
        if let Some(remote) = self.shared.remote() {
            return match remote.call(&crate::remote::Request::Content(r.clone()))? {
                crate::remote::Response::Content(text) => Ok(text),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        self.shared.content.get(r)
    }

    /// Whether this file's content store holds the body `r` refers to (the owner's store).
    pub fn has_content(&self, r: &elfiee_model::ContentRef) -> Result<bool, EngineError> {
        self.owned_log()?;
        self.shared.content.contains(r)
    }

    /// Stores a body that arrived from another device; durable with the next commit (the
    /// content store is synced before the events that name it). Only in the owner process.
    pub fn put_content(&self, text: &str) -> Result<elfiee_model::ContentRef, EngineError> {
        self.owned_log()?;
        self.shared.content.put(text)
    }

    /// Stores a body from `reader` (exactly `r.len` bytes, hashed on the way; a mismatch
    /// stores nothing), copied piece by piece: the body is never whole in memory. Durable
    /// with the next commit. Only in the owner process.
    pub fn put_content_from(
        &self,
        r: &elfiee_model::ContentRef,
        reader: impl std::io::Read,
    ) -> Result<(), EngineError> {
        self.owned_log()?;
        self.shared.content.put_reader(r, reader)
    }

    /// Stores any bytes (a project file kept by a checkpoint) in the document's content
    /// store, in whichever process owns the file; durable with the next commit.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<elfiee_model::ContentRef, EngineError> {
        if let Some(remote) = self.shared.remote() {
            return match remote.call(&crate::remote::Request::PutBytes(bytes.to_vec()))? {
                crate::remote::Response::Stored(r) => Ok(r),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        self.shared.content.put_bytes(bytes)
    }

    /// The bytes `r` refers to in the content store (see [`FileHandle::put_bytes`]), checked
    /// against its hash.
    pub fn bytes(&self, r: &elfiee_model::ContentRef) -> Result<Vec<u8>, EngineError> {
        if let Some(remote) = self.shared.remote() {
            return match remote.call(&crate::remote::Request::Bytes(r.clone()))? {
                crate::remote::Response::Bytes(b) => Ok(b),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        self.shared.content.get_bytes(r)
    }

    /// `block` with its bodies read from the content store (a block of any state: committed,
    /// or an earlier one from [`FileHandle::state_at`]).
    pub fn resolve(&self, block: &Block) -> Result<Block, EngineError> {
        elfiee_projections::content::resolve(block, |r| self.content(r))
    }

    /// An event's value with the bodies it refers to read back (for showing history).
    pub fn resolve_value(
        &self,
        value: &serde_json::Value,
    ) -> Result<serde_json::Value, EngineError> {
        elfiee_projections::content::resolve_value(value, |r| self.content(r))
    }

    /// The state as of `seq` (time travel): the newest stored snapshot at or before it plus
    /// the events up to `seq`, or a replay from the start. Bodies are references; read them
    /// with [`FileHandle::resolve`].
    pub async fn state_at(&self, seq: u64) -> Result<State, EngineError> {
        let last = self.last_seq();
        if seq > last {
            return Err(EngineError::Rejected(CapError::rejected(format!(
                "seq {seq} is after the last event ({last}); pick a seq from `elfiee log`"
            ))));
        }
        if seq == last {
            return Ok(self.state());
        }
        if let Some(r) = self.shared.remote() {
            return match tokio::task::spawn_blocking(move || {
                r.call(&crate::remote::Request::StateAt(seq))
            })
            .await
            .map_err(|e| EngineError::Storage(e.to_string()))??
            {
                crate::remote::Response::State { state, .. } => {
                    rmp_serde::from_slice(&state).map_err(|e| EngineError::Storage(e.to_string()))
                }
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        let log = self.shared.log()?;
        let paths = self.shared.paths.clone();
        let folds = self.shared.config.registry.folds().clone();
        tokio::task::spawn_blocking(move || {
            crate::replay::state_at(log.as_ref(), &paths, seq, &folds)
        })
        .await
        .map_err(|e| EngineError::Storage(e.to_string()))?
    }

    /// Event kinds in this document that the engine's registry has no fold for, with their
    /// event counts ([`State::unknown_kinds`]): written by a program that registered more
    /// kinds. Empty when every kind is known.
    pub fn unknown_kinds(&self) -> std::collections::BTreeMap<String, u64> {
        self.with_state(|s| s.unknown_kinds.clone())
    }

    /// The file owner's editor id.
    pub fn owner(&self) -> Option<String> {
        self.with_state(|s| s.file_owner.clone())
    }

    /// Seq of the last durable event.
    pub fn last_seq(&self) -> u64 {
        self.shared.committed_seq.load(Ordering::Acquire)
    }

    /// How far this file's log is known durable (`fdatasync` completed), when this process
    /// owns the file; `None` for a handle that talks to the owner process.
    pub fn durability(&self) -> Option<crate::log::Durability> {
        if self.shared.remote().is_some() {
            return None;
        }
        self.shared.log().ok().map(|l| l.durability())
    }

    /// Digest of the committed state.
    pub fn state_digest(&self) -> String {
        self.with_state(State::digest)
    }

    /// Committed events from `from` on, read from the log.
    pub fn events(&self, from: u64) -> Result<Vec<Event>, EngineError> {
        self.shared.read_events(from.max(1), self.last_seq())
    }

    /// The events a committed command produced (`None` if it never committed). Effects use
    /// this with deterministic command ids to tell whether their outcome is already recorded.
    pub fn command_events(&self, cmd_id: uuid::Uuid) -> Result<Option<Vec<Event>>, EngineError> {
        if let Some(r) = self.shared.remote() {
            return match r.call(&crate::remote::Request::CommandEvents(cmd_id))? {
                crate::remote::Response::MaybeEvents(ev) => Ok(ev),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        let log = self.shared.log()?;
        match self.shared.command_range(cmd_id) {
            Some((first, count)) if first + count - 1 <= self.last_seq() => {
                crate::log::read_events(log.as_ref(), first, first + count - 1, None)
                    .collect::<Result<_, _>>()
                    .map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Last seq an effect named `name` has handled (0 if never). Stored inside the `.elf`.
    pub fn checkpoint(&self, name: &str) -> Result<u64, EngineError> {
        use crate::log::EventLog;
        if let Some(r) = self.shared.remote() {
            return match r.call(&crate::remote::Request::GetCheckpoint(name.to_owned()))? {
                crate::remote::Response::Checkpoint(s) => Ok(s),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        let bytes = self.shared.log()?.get_aux(CHECKPOINT_TREE, name)?;
        Ok(bytes
            .and_then(|b| b.as_slice().try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    /// Records that effect `name` handled everything up to `seq`. Written with the next group
    /// commit's flush (or at close); effects must tolerate re-handling events after a crash.
    pub fn set_checkpoint(&self, name: &str, seq: u64) -> Result<(), EngineError> {
        use crate::log::EventLog;
        if let Some(r) = self.shared.remote() {
            return r
                .call(&crate::remote::Request::SetCheckpoint(name.to_owned(), seq))
                .map(|_| ());
        }
        self.shared
            .log()?
            .put_aux(CHECKPOINT_TREE, name, &seq.to_be_bytes())
    }

    /// Keeps each submission's commands (capability and target) beside its events from now
    /// on, so [`FileHandle::command_of`] can name the command an event came from (sync seals
    /// events with it). Off by default: it costs one more record per submission.
    pub fn record_commands(&self, on: bool) {
        self.shared.record_commands.store(on, Ordering::Release);
    }

    /// The command (capability, target block) event `seq` came from, when this file recorded
    /// it ([`FileHandle::record_commands`]); `None` for an event from before that, or from
    /// another device. Only in the process that owns the file.
    pub fn command_of(&self, seq: u64) -> Result<Option<(String, Option<String>)>, EngineError> {
        let log = self.owned_log()?;
        let found = log.side_before(
            &crate::log::side_key(b'm', &0u64.to_be_bytes()),
            &crate::log::side_key(b'm', &seq.to_be_bytes()),
        )?;
        let Some((key, bytes)) = found else {
            return Ok(None);
        };
        let first = key
            .get(1..9)
            .and_then(|k| k.try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(u64::MAX);
        let list: Vec<(u64, String, Option<String>)> = rmp_serde::from_slice(&bytes)
            .map_err(|e| EngineError::Storage(format!("a command record does not decode: {e}")))?;
        let mut at = first;
        for (count, cap, target) in list {
            if seq < at + count {
                return Ok((seq >= at).then_some((cap, target)));
            }
            at += count;
        }
        Ok(None)
    }

    /// Appends events decided on another device, in one atomic batch with `side` records
    /// (`(key, value)`, stored under `x‖key`; read them with [`FileHandle::side`]). Each event
    /// gets the next local seq and joins the hash chain; `origin` is kept beside it
    /// ([`FileHandle::foreign`]). No handler runs and no command is indexed: the sender
    /// decided them. Answers once they are durable. Only in the process that owns the file.
    pub async fn append_foreign(
        &self,
        events: Vec<(Event, Vec<u8>)>,
        side: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<Event>, EngineError> {
        self.owned_log()?;
        let side = side
            .into_iter()
            .map(|(k, v)| (crate::log::side_key(b'x', &k), v))
            .collect();
        let (port, rx) = ractor::concurrency::oneshot();
        self.shared.append_foreign(events, side, port.into());
        rx.await.unwrap_or(Err(EngineError::Closed))
    }

    /// The `origin` bytes kept with event `seq` when it came from another device
    /// ([`FileHandle::append_foreign`]); `None` for this file's own events.
    pub fn foreign(&self, seq: u64) -> Result<Option<Vec<u8>>, EngineError> {
        self.owned_log()?
            .side(&crate::log::side_key(b'f', &seq.to_be_bytes()))
    }

    /// A side record stored by [`FileHandle::append_foreign`].
    pub fn side(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.owned_log()?.side(&crate::log::side_key(b'x', key))
    }

    fn owned_log(&self) -> Result<std::sync::Arc<crate::log::SledEventLog>, EngineError> {
        if self.shared.remote().is_some() {
            return Err(EngineError::Effect(
                "another process owns this file: only the owner reads or writes another device's events".into(),
            ));
        }
        self.shared.log()
    }

    /// Rebuilds the state from this file's log alone ([`crate::replay()`]), in whichever process
    /// owns the file. The returned state is empty when the replay ran in another process.
    pub async fn replay(&self) -> Result<(crate::ReplayReport, State), EngineError> {
        if let Some(r) = self.shared.remote() {
            return match tokio::task::spawn_blocking(move || {
                r.call(&crate::remote::Request::Replay)
            })
            .await
            .map_err(|e| EngineError::Storage(e.to_string()))??
            {
                crate::remote::Response::Replayed(rep) => Ok((rep, State::default())),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        let log = self.shared.log()?;
        let folds = self.shared.config.registry.folds().clone();
        tokio::task::spawn_blocking(move || {
            crate::replay::replay_log(log.as_ref(), &folds, |_, _| {})
        })
        .await
        .map_err(|e| EngineError::Storage(e.to_string()))?
    }

    /// Checks this file's log ([`crate::verify`]) in whichever process owns it.
    pub async fn verify(&self) -> Result<crate::VerifyReport, EngineError> {
        if let Some(r) = self.shared.remote() {
            return match tokio::task::spawn_blocking(move || {
                r.call(&crate::remote::Request::Verify)
            })
            .await
            .map_err(|e| EngineError::Storage(e.to_string()))??
            {
                crate::remote::Response::Verified(rep) => Ok(rep),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        let log = self.shared.log()?;
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            crate::replay::verify_log(
                log.as_ref(),
                &crate::replay::VerifyInputs {
                    index: &|id| shared.command_range(id),
                    complete: true,
                    snapshot: crate::replay::newest_snapshot(&shared.paths),
                    content: Some(&shared.content),
                    folds: shared.config.registry.folds(),
                },
                |_, _| {},
            )
        })
        .await
        .map_err(|e| EngineError::Storage(e.to_string()))?
    }

    /// Live committed events from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription::new(self.shared.clone(), None)
    }

    /// Committed events from `seq` on: the backlog from the log, then live.
    pub fn subscribe_from(&self, seq: u64) -> Subscription {
        Subscription::new(self.shared.clone(), Some(seq))
    }

    /// The document's directory (canonical).
    pub fn path(&self) -> &Path {
        &self.shared.paths.root
    }

    /// Stops the actor, drains and flushes pending commands, writes a fresh snapshot and
    /// releases the file. Other clones of this handle get [`EngineError::Closed`] afterwards.
    pub async fn close(&self) {
        self.closer.close().await;
    }
}
