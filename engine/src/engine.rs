use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use dashmap::DashMap;
use elfiee_capabilities::Registry;
use elfiee_model::Command;
use ractor::{Actor, ActorRef};
use tokio::sync::OnceCell;

use crate::actor::{run_flusher, run_snapshots, Sequencer, Shared};
use crate::layout::ElfPaths;
use crate::log::SledEventLog;
use crate::tree::{CloseParts, EngineMsg, EngineSupervisor, FileActor, FileArgs, SharedParts};
use crate::{EngineError, FileHandle};

/// Settings shared by every file an [`Engine`] opens.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// First half of vector-clock keys; see [`crate::node::node_id`].
    pub node_id: String,
    /// Write a snapshot once this many events came after the last one (default 1000).
    pub snapshot_every: u64,
    /// ... or once the events after the last one take this many stored bytes (default 4 MiB).
    pub snapshot_tail_bytes: u64,
    /// At close, write one if at least this many events came after the last one (default
    /// 100, so a process that made a few changes — a CLI call, an MCP tool call — closes
    /// without writing the whole state, and the next open replays at most about this many
    /// events; 1 writes one at every close that changed something).
    pub snapshot_at_close_after: u64,
    /// Largest accepted payload, in bytes of JSON (default 16 MiB).
    pub max_payload_bytes: usize,
    /// Live events buffered per subscriber before it has to catch up from the log.
    pub channel_capacity: usize,
    /// How long an open waits for a file locked by another process: it tries the owner's
    /// socket and the lock in turn (the owner may be starting, or closing and about to let
    /// go), then gives up with [`EngineError::Locked`]'s explanation (default 10 s).
    pub handover_wait: std::time::Duration,
    /// The capabilities and the folds of every event kind (built-in ones, plus an embedder's).
    pub registry: Registry,
    /// For tests: run every command at a fixed time with ids from a fixed base instead of the
    /// clock and a random seed, so the same commands give the same events as the pure
    /// pipeline ([`FixedCtx`]). `None` (the default) in real use.
    pub fixed_ctx: Option<FixedCtx>,
}

/// A fixed handler context: commands run at `now`, and the id seed of the `i`-th command of a
/// batch on a state whose last event is `last_seq` is
/// [`elfiee_model::Ctx::command_seed`]`(id_base, last_seq, i)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedCtx {
    pub now: chrono::DateTime<chrono::Utc>,
    pub id_base: [u8; 16],
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            node_id: crate::node::node_id(),
            snapshot_every: 1000,
            snapshot_tail_bytes: 4 * 1024 * 1024,
            snapshot_at_close_after: 100,
            max_payload_bytes: elfiee_capabilities::MAX_PAYLOAD_BYTES,
            channel_capacity: 4096,
            handover_wait: std::time::Duration::from_secs(10),
            registry: Registry::builtin(),
            fixed_ctx: None,
        }
    }
}

pub(crate) type Slot = Arc<OnceCell<FileHandle>>;

static GLOBAL: OnceLock<Engine> = OnceLock::new();

/// The registry of open files: opening the same canonical path twice in one process returns
/// the same actor. Needs a tokio runtime.
#[derive(Clone)]
pub struct Engine {
    config: EngineConfig,
    files: Arc<DashMap<PathBuf, Slot>>,
    /// The engine supervisor (see [`crate::tree`]); spawned with the first file this process
    /// owns, again if the runtime it ran on has gone.
    supervisor: Arc<tokio::sync::Mutex<Option<ActorRef<EngineMsg>>>>,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Engine {
        Engine {
            config,
            files: Arc::new(DashMap::new()),
            supervisor: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// The engine supervisor, started if needed.
    async fn supervisor(&self) -> Result<ActorRef<EngineMsg>, EngineError> {
        let mut slot = self.supervisor.lock().await;
        if let Some(s) = slot.as_ref() {
            if s.get_status() == ractor::ActorStatus::Running {
                return Ok(s.clone());
            }
        }
        let (s, _) = Actor::spawn(None, EngineSupervisor, self.files.clone())
            .await
            .map_err(|e| {
                EngineError::Storage(format!("cannot start the engine supervisor: {e}"))
            })?;
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Every file this process owns, with the state of its supervised children (effects):
    /// what a host shows when it wants to know whether something is restarting.
    pub async fn status(&self) -> Vec<crate::tree::FileStatus> {
        let Some(s) = self.supervisor.lock().await.clone() else {
            return Vec::new();
        };
        ractor::call_t!(s, EngineMsg::Status, 10_000).unwrap_or_default()
    }

    /// A process-wide engine: the one [`Engine::set_global`] made, else one with the default
    /// configuration.
    pub fn global() -> &'static Engine {
        GLOBAL.get_or_init(|| Engine::new(EngineConfig::default()))
    }

    /// Makes the process-wide engine ([`Engine::global`]) one with `config` (an embedder's
    /// registry, say). Only before anything used it: returns false (and changes nothing)
    /// otherwise.
    pub fn set_global(config: EngineConfig) -> bool {
        let mut config = Some(config);
        GLOBAL.get_or_init(|| Engine::new(config.take().unwrap_or_default()));
        config.is_none()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Creates a new `.elf` at `path` owned by a new editor named `owner_name` (its id is the
    /// name in lower case, e.g. `Alice` → `alice`) and opens it.
    pub async fn init(
        &self,
        path: impl AsRef<Path>,
        owner_name: &str,
    ) -> Result<FileHandle, EngineError> {
        self.init_with_owner(path, owner_name, &owner_id_for(owner_name))
            .await
    }

    /// Like [`Engine::init`] with an explicit owner id.
    pub async fn init_with_owner(
        &self,
        path: impl AsRef<Path>,
        owner_name: &str,
        owner_id: &str,
    ) -> Result<FileHandle, EngineError> {
        let paths = ElfPaths::create(path.as_ref())?;
        let file = self.open(&paths.root).await?;
        let cmd = Command::new(
            owner_id,
            "elf.init",
            None,
            serde_json::json!({"name": owner_name}),
        );
        file.submit(cmd).await?;
        Ok(file)
    }

    /// Creates a new, empty `.elf` at `path` (no owner, no `elf.init`) and opens it: a device
    /// joining a synced document starts from one and receives the document's history.
    pub async fn create_empty(&self, path: impl AsRef<Path>) -> Result<FileHandle, EngineError> {
        let paths = ElfPaths::create(path.as_ref())?;
        self.open(&paths.root).await
    }

    /// Opens an existing `.elf` (newest valid snapshot + tail), or returns the handle already
    /// open in this process.
    pub async fn open(&self, path: impl AsRef<Path>) -> Result<FileHandle, EngineError> {
        let paths = ElfPaths::existing(path.as_ref())?;
        let key = paths.root.clone();
        let slot = self
            .files
            .entry(key.clone())
            .or_insert_with(|| Arc::new(OnceCell::new()))
            .clone();
        let res = slot.get_or_try_init(|| self.start(paths)).await.cloned();
        if res.is_err() {
            self.files
                .remove_if(&key, |_, s| Arc::ptr_eq(s, &slot) && s.get().is_none());
        }
        res
    }

    /// Paths of the files open now.
    pub fn open_files(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|e| e.value().initialized())
            .map(|e| e.key().clone())
            .collect()
    }

    /// Opens the file here, or, when another process holds it, through that owner.
    async fn start(&self, paths: ElfPaths) -> Result<FileHandle, EngineError> {
        let shared = Arc::new(Shared::new(paths, self.config.clone()));
        let closer = Arc::new(Closer {
            parts: Arc::new(Mutex::new(None)),
            engine: self.clone(),
            shared: shared.clone(),
            files: self.files.clone(),
        });
        let handle = FileHandle { shared, closer };
        self.own_or_connect(&handle).await?;
        Ok(handle)
    }

    /// Makes `handle` the owner of its file, or a client of the process that owns it. Between
    /// the two the owner may be starting (locked, socket not bound yet) or closing (socket
    /// gone, lock not yet released): both are tried in turn, pausing 5 ms doubling to 100 ms,
    /// until `handover_wait` has passed. Used to open a file, and to take over when the owner
    /// went away (see [`Engine::take_over`]).
    async fn own_or_connect(&self, handle: &FileHandle) -> Result<(), EngineError> {
        let paths = handle.shared.paths.clone();
        let deadline = std::time::Instant::now() + self.config.handover_wait;
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            match self.own(handle).await {
                Err(EngineError::Locked(_)) => {}
                other => return other,
            }
            let config = self.config.clone();
            let shared = handle.shared.clone();
            let connected =
                tokio::task::spawn_blocking(move || crate::remote::connect(&shared, &config))
                    .await
                    .map_err(|e| EngineError::Storage(format!("connecting task failed: {e}")))?;
            match connected {
                Ok(()) => {
                    self.watch_owner(handle);
                    return Ok(());
                }
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(EngineError::Storage(format!(
                        "{e} (tried the lock and the owner for {:?})",
                        self.config.handover_wait
                    )))
                }
                Err(e) => {
                    tracing::debug!(path = %paths.root.display(), error = %e, ?pause, "file locked and its owner does not answer; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(100));
                }
            }
        }
    }

    /// The owner of `handle`'s file went away: this process takes the file over, or connects
    /// to the process that did. Concurrent calls for one file do it once. Commands in flight
    /// are then resubmitted with their `cmd_id` by [`FileHandle::submit`], so they get their
    /// true result (idempotency).
    pub(crate) async fn take_over(&self, handle: &FileHandle) -> Result<(), EngineError> {
        let shared = &handle.shared;
        let _one = shared.handover.lock().await;
        if shared.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        match shared.remote() {
            // Done already (by another caller, or the owner is back).
            None => return Ok(()),
            Some(r) if !r.is_closed() => return Ok(()),
            Some(r) => {
                tracing::info!(path = %shared.paths.root.display(), old_owner = r.owner_pid, "the owner went away; taking over")
            }
        }
        let taken = self.own_or_connect(handle).await;
        if taken.is_ok() && !handle.is_remote() {
            let hooks = handle
                .shared
                .takeover_hooks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            for hook in hooks {
                hook(handle.clone()).await;
            }
        }
        if let Err(e) = &taken {
            // Nobody can be reached: end the replica's subscriptions with the reason.
            tracing::error!(path = %shared.paths.root.display(), error = %e, "hand-over failed");
            *shared.poisoned.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            shared
                .events_tx
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            shared.applied.notify_waiters();
        }
        taken
    }

    /// A client watches its owner: when the owner's event stream ends (it closed or died)
    /// and the handle is not being closed, this process takes over at once, so its
    /// subscriptions go on and its next command needs no wait.
    fn watch_owner(&self, handle: &FileHandle) {
        let engine = self.clone();
        let (shared, closer) = (
            Arc::downgrade(&handle.shared),
            Arc::downgrade(&handle.closer),
        );
        tokio::spawn(async move {
            {
                let Some(s) = shared.upgrade() else { return };
                let notify = s.owner_lost.clone();
                let lost = notify.notified();
                tokio::pin!(lost);
                lost.as_mut().enable();
                let gone = s.remote().is_none_or(|r| r.is_closed());
                drop(s);
                if !gone {
                    lost.await;
                }
            }
            let (Some(shared), Some(closer)) = (shared.upgrade(), closer.upgrade()) else {
                return;
            };
            if shared.closing.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            // Connected to a new owner, a new watcher follows that one.
            let _ = engine.take_over(&FileHandle { shared, closer }).await;
        });
    }

    /// Makes `handle` the owner of its file: starts its file actor under the engine
    /// supervisor, whose `pre_start` opens the file ([`open_here`]). `Locked` when another
    /// process holds the file.
    async fn own(&self, handle: &FileHandle) -> Result<(), EngineError> {
        let supervisor = self.supervisor().await?;
        let spawned = Actor::spawn_linked(
            None,
            FileActor,
            FileArgs {
                handle: handle.clone(),
            },
            supervisor.get_cell(),
        )
        .await;
        let actor = match spawned {
            Ok((actor, _)) => actor,
            Err(ractor::SpawnErr::StartupFailed(e)) => {
                return Err(match e.downcast::<EngineError>() {
                    Ok(e) => *e,
                    Err(e) => EngineError::Storage(format!("cannot start the file actor: {e}")),
                })
            }
            Err(e) => {
                return Err(EngineError::Storage(format!(
                    "cannot start the file actor: {e}"
                )))
            }
        };
        let _ = supervisor.cast(EngineMsg::Watch {
            actor,
            shared: handle.shared.clone(),
            parts: handle.closer.parts.clone(),
        });
        Ok(())
    }
}

/// The file actor's start: opens the file's log here and makes `handle` its owner (loads the
/// state, starts the flusher and snapshot threads and the owner socket). `Locked` when
/// another process holds the file; then nothing has changed.
pub(crate) async fn open_here(
    handle: &FileHandle,
    actor: ActorRef<crate::actor::FileMsg>,
) -> Result<(), EngineError> {
    let paths = handle.shared.paths.clone();
    let folds = handle.shared.config.registry.folds().clone();
    let (log, opened) = tokio::task::spawn_blocking({
        let paths = paths.clone();
        move || -> Result<_, EngineError> {
            // Decode the newest snapshot while sled opens the log (two independent reads).
            let (log, predecoded) = std::thread::scope(|scope| {
                let decoding = std::thread::Builder::new()
                    .name("elfiee-snapshot-decode".into())
                    .spawn_scoped(scope, || crate::replay::decode_newest(&paths));
                let t0 = std::time::Instant::now();
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
            let loading = std::time::Instant::now();
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
    let shared = &handle.shared;
    let (snapshot_tx, snapshot_rx) = std::sync::mpsc::channel();
    *shared.log.write().unwrap_or_else(|p| p.into_inner()) = Some(log.clone());
    {
        let mut committed = shared.committed.write().unwrap_or_else(|p| p.into_inner());
        *committed = state;
        shared
            .committed_seq
            .store(last_seq, std::sync::atomic::Ordering::Release);
    }
    shared.commands.clear();
    for (cmd_id, first, count) in commands {
        shared.commands.insert(cmd_id, (first, count));
    }
    *shared.cursor.lock().unwrap_or_else(|p| p.into_inner()) = crate::actor::Cursor {
        last_hash: prev_hash,
        // The next snapshot is due `snapshot_every` events after the one loaded.
        last_snapshot: snapshot_seq,
        tail_bytes: 0,
        tail_bulk: false,
        to_index: unsaved,
    };
    *shared.snapshots.lock().unwrap_or_else(|p| p.into_inner()) = Some(snapshot_tx);
    *shared.sequencer.lock().unwrap_or_else(|p| p.into_inner()) = Some(Sequencer::new(
        log.clone(),
        shared.config.registry.clone(),
        last_seq,
        prev_hash,
    ));
    *shared.poisoned.lock().unwrap_or_else(|p| p.into_inner()) = None;
    // From here on commands run here, not at the (former) owner.
    shared
        .remote
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    // A replica's subscribers wait for events; wake them to read what they missed.
    shared.applied.notify_waiters();
    let snapshotter = std::thread::Builder::new()
        .name("elfiee-snapshots".into())
        .spawn({
            let shared = shared.clone();
            move || run_snapshots(shared, snapshot_rx)
        })
        .map_err(|e| EngineError::Storage(format!("cannot start the snapshot thread: {e}")))?;
    let flusher = std::thread::Builder::new()
        .name("elfiee-flusher".into())
        .spawn({
            let shared = shared.clone();
            move || run_flusher(shared, log)
        })
        .map_err(|e| EngineError::Storage(format!("cannot start the flusher thread: {e}")))?;
    let parts: SharedParts = handle.closer.parts.clone();
    *parts.lock().unwrap_or_else(|p| p.into_inner()) = Some(CloseParts {
        flusher,
        snapshotter,
        server: None,
    });
    *shared.actor.lock().unwrap_or_else(|p| p.into_inner()) = Some(actor);
    tracing::info!(path = %paths.root.display(), seq = last_seq, "opened");
    // Serve other processes (CLI, MCP servers, the desktop app) through our actor.
    match crate::remote::serve(handle.clone()) {
        Ok(server) => {
            if let Some(p) = parts.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                p.server = Some(server);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot serve the owner socket; other processes cannot open this file meanwhile")
        }
    }
    Ok(())
}

/// `Alice Smith` → `alice-smith`; `owner` when nothing usable is left.
fn owner_id_for(name: &str) -> String {
    let id: String = name
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = id.trim_matches('-').to_owned();
    if id.is_empty() || id.len() > 64 {
        "owner".into()
    } else {
        id
    }
}

pub(crate) struct Closer {
    /// What the file actor owns besides its state (empty while this process is a client).
    pub(crate) parts: SharedParts,
    /// The engine that opened the file (to take it over when its owner goes away).
    pub(crate) engine: Engine,
    shared: Arc<Shared>,
    files: Arc<DashMap<PathBuf, Slot>>,
}

impl Closer {
    fn forget(&self) {
        let root = &self.shared.paths.root;
        self.files.remove_if(root, |_, s| {
            s.get()
                .is_some_and(|h| Arc::ptr_eq(&h.shared, &self.shared))
        });
    }

    pub(crate) async fn close(&self) {
        self.shared
            .closing
            .store(true, std::sync::atomic::Ordering::Release);
        // Not while a hand-over is making this process the owner.
        let _one = self.shared.handover.lock().await;
        if let Some(remote) = self.shared.remote() {
            remote.close();
            self.shared
                .events_tx
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            self.forget();
            return;
        }
        // The file actor's post_stop stops its children and then the file (see
        // `tree::shut_down`); commands still in its mailbox are answered `Closed`.
        if let Some(actor) = self.shared.actor() {
            let _ = actor.stop_and_wait(None, None).await;
        }
        // If the actor had failed, the engine supervisor may not have cleaned up yet.
        crate::tree::shut_down(&self.shared, &self.parts).await;
        self.forget();
    }
}

/// sled rewrites every free segment of its file when it opens (512 KiB of marker bytes each; a
/// document that took a large import keeps a few), and its close waits for them with an
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

#[cfg(test)]
mod tests {
    #[test]
    fn owner_ids_are_slugs_of_the_name() {
        assert_eq!(super::owner_id_for("Alice"), "alice");
        assert_eq!(super::owner_id_for(" Alice Smith "), "alice-smith");
        assert_eq!(super::owner_id_for("李雷"), "owner");
    }
}
