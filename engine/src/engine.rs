//! [`Engine`]: the open files of a process, and the making and ending of their roles — own
//! the file (start its file actor, which opens it, and serve the owner socket) or connect to
//! the process that owns it; take it over when that owner goes away; close it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use elfiee_model::Command;
use ractor::{Actor, ActorRef};
use tokio::sync::OnceCell;

use crate::children::BoxFuture;
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::file::core::FileCore;
use crate::file::owned::Owned;
use crate::handle::{FileHandle, Lifecycle, Link, Mode};
use crate::layout::ElfPaths;
use crate::tree::{EngineMsg, EngineSupervisor, FileActor, FileArgs};

pub(crate) type Slot = Arc<OnceCell<FileHandle>>;

static GLOBAL: OnceLock<Engine> = OnceLock::new();

/// The registry of open files: opening the same canonical path twice in one process returns
/// the same actor. Needs a tokio runtime.
///
/// Most programs use the process-wide [`Engine::global`] (made once with
/// [`Engine::set_global`] when they bring their own capabilities); [`Engine::new`] makes a
/// separate one, e.g. for a test with its own configuration.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use elfiee_engine::{Engine, EngineConfig};
///
/// # let dir = tempfile::tempdir()?;
/// # std::env::set_current_dir(dir.path())?; // (this example runs in a scratch folder)
/// let path = "notes.elf";
/// let engine = Engine::new(EngineConfig::default()); // the built-in capabilities
/// let file = engine.init(path, "Alice").await?; // a new document; its owner is `alice`
/// assert_eq!(file.owner().as_deref(), Some("alice"));
///
/// // The same path again is the same open file, not a second writer.
/// let again = engine.open(path).await?;
/// assert_eq!(engine.open_files().len(), 1);
/// assert_eq!(again.last_seq(), file.last_seq());
///
/// file.close().await; // drains, snapshots, releases the lock (every clone)
/// assert!(engine.open_files().is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    config: EngineConfig,
    files: Arc<DashMap<PathBuf, Slot>>,
    /// The engine supervisor (see [`crate::tree`]); spawned with the first file this process
    /// owns, again if the runtime it ran on has gone.
    supervisor: Arc<tokio::sync::Mutex<Option<ActorRef<EngineMsg>>>>,
}

impl Engine {
    /// An engine with no files open, over `config` (its capabilities, folds and limits). It
    /// starts nothing until the first file is opened.
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
        let (s, _) = Actor::spawn(None, EngineSupervisor, ())
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

    /// The configuration this engine opens files with (its registry: the capabilities it
    /// knows).
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
        let handle = FileHandle {
            core: Arc::new(FileCore::new(paths, self.config.clone())),
            link: Arc::new(Link::new(Arc::new(self.clone()))),
        };
        self.own_or_connect(&handle).await?;
        Ok(handle)
    }

    /// Makes `handle` the owner of its file, or a client of the process that owns it. Between
    /// the two the owner may be starting (locked, socket not bound yet) or closing (socket
    /// gone, lock not yet released): both are tried in turn, pausing 5 ms doubling to 100 ms,
    /// until `handover_wait` has passed. Used to open a file, and to take over when the owner
    /// went away (see [`Engine::take_over`]).
    async fn own_or_connect(&self, handle: &FileHandle) -> Result<(), EngineError> {
        let root = handle.core.paths.root.clone();
        let deadline = std::time::Instant::now() + self.config.handover_wait;
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            match self.own(handle).await {
                Err(EngineError::Locked(_)) => {}
                other => return other,
            }
            let core = handle.core.clone();
            let link = Arc::downgrade(&handle.link);
            // When the owner's stream ends: end a closing handle's subscriptions, and wake
            // the watcher (which takes the file over).
            let lost = Box::new(move |core: &FileCore| {
                if let Some(link) = link.upgrade() {
                    if link.closing.load(std::sync::atomic::Ordering::Acquire) {
                        core.end_stream();
                    }
                    link.owner_lost.notify_waiters();
                }
            });
            let connected =
                tokio::task::spawn_blocking(move || crate::remote::client::connect(&core, lost))
                    .await
                    .map_err(|e| EngineError::Storage(format!("connecting task failed: {e}")))?;
            match connected {
                Ok(client) => {
                    handle.link.set_mode(Mode::Client(client));
                    handle.core.applied.notify_waiters();
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
                    tracing::debug!(path = %root.display(), error = %e, ?pause, "file locked and its owner does not answer; trying again");
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
    async fn take_over_file(&self, handle: &FileHandle) -> Result<(), EngineError> {
        let (core, link) = (&handle.core, &handle.link);
        let _one = link.handover.lock().await;
        if link.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        match link.remote() {
            // Done already (by another caller, or the owner is back).
            None => return Ok(()),
            Some(r) if !r.is_closed() => return Ok(()),
            Some(r) => {
                tracing::info!(path = %core.paths.root.display(), old_owner = r.owner_pid, "the owner went away; taking over")
            }
        }
        let taken = self.own_or_connect(handle).await;
        if taken.is_ok() && !handle.is_remote() {
            let hooks = link
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
            tracing::error!(path = %core.paths.root.display(), error = %e, "hand-over failed");
            core.set_poisoned(Some(e.to_string()));
            core.end_stream();
            core.applied.notify_waiters();
        }
        taken
    }

    /// A client watches its owner: when the owner's event stream ends (it closed or died)
    /// and the handle is not being closed, this process takes over at once, so its
    /// subscriptions go on and its next command needs no wait.
    fn watch_owner(&self, handle: &FileHandle) {
        let engine = self.clone();
        let (core, link) = (Arc::downgrade(&handle.core), Arc::downgrade(&handle.link));
        tokio::spawn(async move {
            {
                let Some(l) = link.upgrade() else { return };
                let notify = l.owner_lost.clone();
                let lost = notify.notified();
                tokio::pin!(lost);
                lost.as_mut().enable();
                let gone = l.remote().is_none_or(|r| r.is_closed());
                drop(l);
                if !gone {
                    lost.await;
                }
            }
            let (Some(core), Some(link)) = (core.upgrade(), link.upgrade()) else {
                return;
            };
            if link.closing.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            // Connected to a new owner, a new watcher follows that one.
            let _ = engine.take_over_file(&FileHandle { core, link }).await;
        });
    }

    /// Makes `handle` the owner of its file: starts its file actor under the engine
    /// supervisor, whose `pre_start` opens the file ([`Owned::open`]) and serves the owner
    /// socket. `Locked` when another process holds the file.
    async fn own(&self, handle: &FileHandle) -> Result<(), EngineError> {
        let supervisor = self.supervisor().await?;
        let core = handle.core.clone();
        let opened: Arc<std::sync::Mutex<Option<Arc<Owned>>>> = Arc::default();
        let slot = opened.clone();
        let open = Box::new(move || -> BoxFuture<'static, _> {
            Box::pin(async move {
                let paths = core.paths.clone();
                let auto = core.config.auto_backup.clone();
                let owned = Owned::open(core)
                    .await
                    .map_err(|e| crate::salvage::advise(&paths, auto.as_ref(), e))?;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(owned.clone());
                // Serve other processes (CLI, MCP servers, the desktop app).
                match crate::remote::server::serve(owned.clone()) {
                    Ok(stop) => owned.on_close(stop),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot serve the owner socket; other processes cannot open this file meanwhile")
                    }
                }
                Ok(owned)
            })
        });
        let spawned =
            Actor::spawn_linked(None, FileActor, FileArgs { open }, supervisor.get_cell()).await;
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
        // The actor started, so its `pre_start` opened the file.
        let owned = opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or(EngineError::Closed)?;
        // From here on commands run here, not at the (former) owner.
        handle.link.set_mode(Mode::Owner {
            owned: owned.clone(),
            actor: actor.clone(),
        });
        let _ = supervisor.cast(EngineMsg::Watch {
            actor,
            owned,
            forget: self.forgetter(&handle.core),
        });
        Ok(())
    }

    /// Removes the file of `core` from the open files (if it is still that one).
    fn forgetter(&self, core: &Arc<FileCore>) -> Box<dyn FnOnce() + Send + Sync> {
        let (files, core) = (self.files.clone(), Arc::downgrade(core));
        Box::new(move || {
            let Some(core) = core.upgrade() else { return };
            files.remove_if(&core.paths.root, |_, s| {
                s.get().is_some_and(|h| Arc::ptr_eq(&h.core, &core))
            });
        })
    }

    async fn close_file(&self, handle: &FileHandle) {
        let link = &handle.link;
        link.closing
            .store(true, std::sync::atomic::Ordering::Release);
        // Not while a hand-over is making this process the owner.
        let _one = link.handover.lock().await;
        match link.mode() {
            Mode::Client(remote) => {
                remote.close();
                handle.core.end_stream();
            }
            Mode::Owner { owned, actor } => {
                // The file actor's post_stop stops its children and then the file; if the
                // actor had failed, the engine supervisor may not have cleaned up yet.
                let _ = actor.stop_and_wait(None, None).await;
                owned.shut_down().await;
            }
            Mode::Unopened => {}
        }
        self.forgetter(&handle.core)();
    }
}

impl Lifecycle for Engine {
    fn take_over<'a>(&'a self, file: &'a FileHandle) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(self.take_over_file(file))
    }

    fn close<'a>(&'a self, file: &'a FileHandle) -> BoxFuture<'a, ()> {
        Box::pin(self.close_file(file))
    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn owner_ids_are_slugs_of_the_name() {
        assert_eq!(super::owner_id_for("Alice"), "alice");
        assert_eq!(super::owner_id_for(" Alice Smith "), "alice-smith");
        assert_eq!(super::owner_id_for("李雷"), "owner");
    }
}
