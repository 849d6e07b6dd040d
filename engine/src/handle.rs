//! [`FileHandle`]: the open file as a caller holds it — the part both roles share
//! ([`FileCore`]) and the role this process plays now (owner, or client of the owner
//! process), which changes when an owner goes away and this process takes over.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use elfiee_capabilities::cbac;
use elfiee_model::{Block, CapError, Command, Event};
use elfiee_projections::State;
use ractor::ActorRef;

use crate::children::{BoxFuture, ChildSpec, ChildStatus};
use crate::error::EngineError;
use crate::file::core::{Committed, FileCore};
use crate::file::owned::{Owned, Submission};
use crate::remote::client::{wait_for_seq, RemoteClient};
use crate::remote::wire::{Request, Response};
use crate::subscription::{EventSource, Subscription};
use crate::tree::FileMsg;

/// Called with the handle when this process took its file over from an owner that went away
/// (see [`FileHandle::on_takeover`]).
pub type TakeoverHook = Arc<dyn Fn(FileHandle) -> BoxFuture<'static, ()> + Send + Sync>;

/// The role this process plays for the file.
#[derive(Clone)]
pub(crate) enum Mode {
    /// Neither owned nor connected yet (the engine is opening it).
    Unopened,
    /// This process owns the file: its log, sequencer and file actor are here.
    Owner {
        owned: Arc<Owned>,
        actor: ActorRef<FileMsg>,
    },
    /// Another process owns the file: this one keeps a replica and sends it requests.
    Client(Arc<RemoteClient>),
}

/// What makes and ends a role: the engine (the handle knows no engine).
pub(crate) trait Lifecycle: Send + Sync {
    /// The owner went away: take the file over, or connect to whoever did.
    fn take_over<'a>(&'a self, file: &'a FileHandle) -> BoxFuture<'a, Result<(), EngineError>>;
    /// Close the file through this handle (every clone).
    fn close<'a>(&'a self, file: &'a FileHandle) -> BoxFuture<'a, ()>;
}

/// What the clones of a handle share besides the core: the role and its changes.
pub(crate) struct Link {
    mode: RwLock<Mode>,
    /// Set once the handle is being closed: a lost owner is then not taken over.
    pub closing: AtomicBool,
    /// Signalled when the owner's event stream ended while this process was its client.
    pub owner_lost: Arc<tokio::sync::Notify>,
    /// One hand-over at a time per file in this process.
    pub handover: tokio::sync::Mutex<()>,
    /// Run when this process took the file over from an owner that went away.
    pub takeover_hooks: Mutex<Vec<TakeoverHook>>,
    pub lifecycle: Arc<dyn Lifecycle>,
}

impl Link {
    pub(crate) fn new(lifecycle: Arc<dyn Lifecycle>) -> Link {
        Link {
            mode: RwLock::new(Mode::Unopened),
            closing: AtomicBool::new(false),
            owner_lost: Arc::new(tokio::sync::Notify::new()),
            handover: tokio::sync::Mutex::new(()),
            takeover_hooks: Mutex::new(Vec::new()),
            lifecycle,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        *self.mode.write().unwrap_or_else(|p| p.into_inner()) = mode;
    }

    /// The owner's half, when this process owns the file (a clone of one `Arc`: the submit
    /// path's only cost for finding its role).
    pub(crate) fn owner(&self) -> Option<Arc<Owned>> {
        match &*self.mode.read().unwrap_or_else(|p| p.into_inner()) {
            Mode::Owner { owned, .. } => Some(owned.clone()),
            _ => None,
        }
    }

    pub(crate) fn remote(&self) -> Option<Arc<RemoteClient>> {
        match &*self.mode.read().unwrap_or_else(|p| p.into_inner()) {
            Mode::Client(c) => Some(c.clone()),
            _ => None,
        }
    }
}

impl EventSource for Link {
    fn read_committed(&self, from: u64, to: u64) -> Result<Vec<Committed>, EngineError> {
        match self.mode() {
            Mode::Owner { owned, .. } => owned.read_committed(from, to),
            Mode::Client(c) => c.read_committed(from, to),
            Mode::Unopened => Err(EngineError::Closed),
        }
    }
}

/// A cloneable handle to one open `.elf`. All clones share the file and its role.
///
/// Every change is a [`Command`] through [`FileHandle::submit`], answered once its events
/// are durable; reads see the committed state without a copy ([`FileHandle::with_state`]) or
/// one block with CBAC ([`FileHandle::read_block`]); a [`Subscription`] gets every committed
/// event in order, with no gaps.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use elfiee_engine::Engine;
/// use elfiee_model::Command;
/// use serde_json::json;
///
/// # let dir = tempfile::tempdir()?;
/// # std::env::set_current_dir(dir.path())?; // (this example runs in a scratch folder)
/// let file = Engine::global().init("notes.elf", "Alice").await?;
/// let mut events = file.subscribe(); // from the next commit on
///
/// let created = file
///     .submit(Command::new("alice", "core.create", None, json!({"name": "Spec", "block_type": "markdown"})))
///     .await?;
/// let spec = created[0].entity.clone();
/// file.submit(Command::new("alice", "markdown.write", Some(&spec), json!({"markdown": "# Hello"})))
///     .await?;
///
/// assert_eq!(events.recv().await.unwrap().cap_id(), "core.create");
/// assert_eq!(events.recv().await.unwrap().cap_id(), "markdown.write");
/// assert_eq!(file.read_block("alice", &spec)?.contents["markdown"], "# Hello");
/// assert_eq!(file.with_state(|s| s.blocks.len()), 1);
///
/// // Who may not write is refused, and nothing is written.
/// let refused = file
///     .submit(Command::new("bob", "markdown.write", Some(&spec), json!({"markdown": "x"})))
///     .await;
/// assert!(refused.is_err());
/// file.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FileHandle {
    pub(crate) core: Arc<FileCore>,
    pub(crate) link: Arc<Link>,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("path", &self.core.paths.root)
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

    async fn call(&self, mut cmds: Vec<Command>, all: bool) -> Result<Vec<Event>, EngineError> {
        if !all && cmds.is_empty() {
            return Err(EngineError::rejected("no command to submit"));
        }
        // Owners may keep going away under this call (short-lived processes, each owning the
        // file for one command): hand over as often as it takes, for up to `handover_wait`.
        let deadline = std::time::Instant::now() + self.core.config.handover_wait;
        loop {
            // The one door: sequenced on this task, under the owner's sequencer lock.
            if let Some(owned) = self.link.owner() {
                return owned.submit(Submission::Local(cmds)).await;
            }
            let Some(remote) = self.link.remote() else {
                return Err(EngineError::Closed);
            };
            // Another process owns the file: send the commands to it (the request comes back
            // with the answer, to be sent again after a hand-over).
            let req = match all {
                true => Request::SubmitAll(cmds),
                false => Request::Submit(cmds.into_iter().next().expect("checked above")),
            };
            let r = remote.clone();
            let (req, resp) = tokio::task::spawn_blocking(move || {
                let resp = r.call(&req);
                (req, resp)
            })
            .await
            .map_err(|e| EngineError::Storage(format!("request task failed: {e}")))?;
            cmds = match req {
                Request::Submit(cmd) => vec![cmd],
                Request::SubmitAll(cmds) => cmds,
                _ => Vec::new(),
            };
            match resp {
                Ok(Response::Events(ev)) => {
                    if let Some(last) = ev.last() {
                        if let Err(e) = wait_for_seq(&self.core, &remote, last.seq).await {
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
                        && !self.link.closing.load(Ordering::Acquire) =>
                {
                    tracing::info!(error = %e, "owner went away with a command in flight; handing over and resubmitting");
                    self.link.lifecycle.take_over(self).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The file actor, while this process owns the file.
    pub(crate) fn actor(&self) -> Option<ActorRef<FileMsg>> {
        match self.link.mode() {
            Mode::Owner { actor, .. } => Some(actor),
            _ => None,
        }
    }

    /// The owner's half, or why this handle has none.
    pub(crate) fn owned(&self) -> Result<Arc<Owned>, EngineError> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => Ok(owned),
            Mode::Client(_) => Err(EngineError::Effect(
                "another process owns this file: only the owner reads or writes another device's events".into(),
            )),
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// Starts `spec`'s child under this file's actor, which restarts it with backoff when it
    /// fails (see [`crate::tree`]) and stops it when the file closes. Only the process that
    /// owns the file runs children: on a handle to another process's file this refuses.
    pub async fn supervise(&self, spec: ChildSpec) -> Result<(), EngineError> {
        let actor = self.actor().ok_or_else(|| {
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
        match self.link.remote() {
            Some(r) if r.is_closed() => self.link.lifecycle.take_over(self).await,
            _ => Ok(()),
        }
    }

    /// Runs `hook` whenever this process takes the file over from an owner that went away
    /// (a client becomes the owner). A host that runs effects only where it owns the file
    /// starts them here; `elfiee_adapters::attach` does.
    pub fn on_takeover(&self, hook: TakeoverHook) {
        self.link
            .takeover_hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }

    /// The supervised children of this file and whether they are running, restarting or
    /// stopped (empty when another process owns the file).
    pub async fn children(&self) -> Vec<ChildStatus> {
        match self.actor() {
            Some(a) => ractor::call_t!(a, FileMsg::Children, 10_000).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Whether the file is still open through this handle (not closed, and for a handle to
    /// another process's file, the connection to its owner is up).
    pub fn is_open(&self) -> bool {
        match self.link.mode() {
            Mode::Client(r) => !r.is_closed(),
            Mode::Owner { owned, .. } => owned.log().is_ok(),
            Mode::Unopened => false,
        }
    }

    /// The pid of the process that owns this file, when it is another process.
    pub fn owner_pid(&self) -> Option<u32> {
        self.link.remote().map(|r| r.owner_pid)
    }

    /// Offers service `name` on the owner socket while this process owns the file (also after
    /// a take-over); another process reaches it with [`crate::remote::call_service`] without
    /// opening the document. Registering again replaces the handler.
    pub fn provide(&self, name: &str, f: crate::remote::ServiceFn) {
        self.core.services.set(name, f);
    }

    /// Whether another process owns this file and this handle talks to it over its socket.
    pub fn is_remote(&self) -> bool {
        self.link.remote().is_some()
    }

    /// Runs `f` on the committed state (everything durable so far) — or, when a view is set
    /// ([`crate::ForeignLog::set_view`]), on the state that view shows (a synced document's merged
    /// state).
    pub fn with_state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        self.core.with_state(f)
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
        match self.link.remote() {
            Some(remote) => remote.content(r),
            None => self.core.content.get(r),
        }
    }

    /// Stores any bytes (a project file kept by a checkpoint) in the document's content
    /// store, in whichever process owns the file; durable with the next commit.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<elfiee_model::ContentRef, EngineError> {
        match self.link.remote() {
            Some(remote) => remote.put_bytes(bytes),
            None => self.core.content.put_bytes(bytes),
        }
    }

    /// The bytes `r` refers to in the content store (see [`FileHandle::put_bytes`]), checked
    /// against its hash.
    pub fn bytes(&self, r: &elfiee_model::ContentRef) -> Result<Vec<u8>, EngineError> {
        match self.link.remote() {
            Some(remote) => remote.bytes(r),
            None => self.core.content.get_bytes(r),
        }
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
            return Err(EngineError::rejected(format!(
                "seq {seq} is after the last event ({last}); pick a seq from `elfiee log`"
            )));
        }
        if seq == last {
            return Ok(self.state());
        }
        match self.link.mode() {
            Mode::Client(r) => r.state_at(seq).await,
            Mode::Owner { owned, .. } => owned.state_at(seq).await,
            Mode::Unopened => Err(EngineError::Closed),
        }
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
        self.core.last_seq()
    }

    /// How far this file's log is known durable (`fdatasync` completed), when this process
    /// owns the file; `None` for a handle that talks to the owner process.
    pub fn durability(&self) -> Option<crate::log::Durability> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.log().ok().map(|l| l.durability()),
            _ => None,
        }
    }

    /// Reads of side records (another device's origins, sync's records) since this process
    /// opened the file; `None` for a handle that talks to the owner process. A test hook:
    /// effects learn an event's origin from [`crate::Committed::origin`], not from storage.
    #[doc(hidden)]
    pub fn side_reads(&self) -> Option<u64> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.log().ok().map(|l| l.side_reads()),
            _ => None,
        }
    }

    /// Digest of the committed state.
    pub fn state_digest(&self) -> String {
        self.with_state(State::digest)
    }

    /// Committed events from `from` on, read from the log.
    pub fn events(&self, from: u64) -> Result<Vec<Event>, EngineError> {
        let (from, to) = (from.max(1), self.last_seq());
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.read_events(from, to),
            Mode::Client(r) => r.read_events(from, to),
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// The events a committed command produced (`None` if it never committed). Effects use
    /// this with deterministic command ids to tell whether their outcome is already recorded.
    pub fn command_events(&self, cmd_id: uuid::Uuid) -> Result<Option<Vec<Event>>, EngineError> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.command_events(cmd_id),
            Mode::Client(r) => r.command_events(cmd_id),
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// What the owner's view (sync's merged state, when it syncs this file) adds to each of
    /// `events` (this file's, in seq order) where they are shown, by seq: fields to merge into
    /// the event's JSON ([`crate::StateView::notes`]). Empty when no view is set. Works from
    /// the owner process (with the events given) and from its clients (the owner reads the
    /// events' range from its log).
    pub fn notes(&self, events: &[Event]) -> Result<Vec<(u64, serde_json::Value)>, EngineError> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => Ok(owned.notes_of(events)),
            Mode::Client(r) => {
                let (Some(first), Some(last)) = (events.first(), events.last()) else {
                    return Ok(Vec::new());
                };
                let seqs: std::collections::HashSet<u64> = events.iter().map(|e| e.seq).collect();
                let mut notes = r.notes(first.seq, last.seq)?;
                notes.retain(|(seq, _)| seqs.contains(seq));
                Ok(notes)
            }
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// Last seq an effect named `name` has handled (0 if never). Stored inside the `.elf`.
    pub fn checkpoint(&self, name: &str) -> Result<u64, EngineError> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.checkpoint(name),
            Mode::Client(r) => r.checkpoint(name),
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// Records that effect `name` handled everything up to `seq`. Written with the next group
    /// commit's flush (or at close); effects must tolerate re-handling events after a crash.
    pub fn set_checkpoint(&self, name: &str, seq: u64) -> Result<(), EngineError> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.set_checkpoint(name, seq),
            Mode::Client(r) => r.set_checkpoint(name, seq),
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// Rebuilds the state from this file's log alone ([`crate::replay()`]), in whichever process
    /// owns the file. The returned state is empty when the replay ran in another process.
    pub async fn replay(&self) -> Result<(crate::replay::ReplayReport, State), EngineError> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.replay().await,
            Mode::Client(r) => Ok((r.replay().await?, State::default())),
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// Checks this file's log ([`crate::verify`]) in whichever process owns it.
    pub async fn verify(&self) -> Result<crate::replay::VerifyReport, EngineError> {
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.verify().await,
            Mode::Client(r) => r.verify().await,
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// Appends to the backup file `to` everything new up to the committed tail (the whole
    /// document the first time), in whichever process owns the file, while writers go on
    /// ([`crate::backup`]). A relative `to` is taken from this process's working folder.
    pub async fn backup(
        &self,
        to: impl AsRef<Path>,
    ) -> Result<crate::backup::BackupReport, EngineError> {
        let to = std::path::absolute(to.as_ref()).map_err(|e| EngineError::io(to.as_ref(), e))?;
        match self.link.mode() {
            Mode::Owner { owned, .. } => owned.backup(to).await,
            Mode::Client(r) => r.backup(to).await,
            Mode::Unopened => Err(EngineError::Closed),
        }
    }

    /// Live committed events from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription::new(self.core.clone(), self.link.clone(), None)
    }

    /// Committed events from `seq` on: the backlog from the log, then live.
    pub fn subscribe_from(&self, seq: u64) -> Subscription {
        Subscription::new(self.core.clone(), self.link.clone(), Some(seq))
    }

    /// The document's directory (canonical).
    pub fn path(&self) -> &Path {
        &self.core.paths.root
    }

    /// Stops the actor, drains and flushes pending commands, writes a fresh snapshot and
    /// releases the file. Other clones of this handle get [`EngineError::Closed`] afterwards.
    pub async fn close(&self) {
        self.link.lifecycle.close(self).await;
    }
}
