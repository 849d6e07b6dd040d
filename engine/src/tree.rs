//! The actor tree (docs/ARCHITECTURE.md, "Actor tree"):
//!
//! ```text
//! EngineSupervisor            one per Engine; cleans up after a file actor that failed
//!  └─ FileActor               one per .elf this process owns; owns the file's life, serializes
//!      │                      the commands of other processes, restarts its children
//!      └─ children            registered by the host with FileHandle::supervise (the effect
//!                             actors of elfiee-adapters); the engine knows none by name
//! ```
//!
//! Commands of this process take a fast path that stays the file actor's own: the actor's
//! sequencing state lives behind a mutex ([`crate::actor::Sequencer`]) that a local submitter
//! takes on its own task, exactly as the actor does for the commands in its mailbox (see
//! docs/ARCHITECTURE.md, "The commit path").

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use serde::Serialize;

use crate::actor::{FileMsg, Shared};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Starts (or restarts) a child linked to the given supervisor (the file actor's cell).
pub type StartChild =
    Arc<dyn Fn(ActorCell) -> BoxFuture<'static, Result<ActorCell, String>> + Send + Sync>;

/// Called with the handle when this process took its file over from an owner that went away
/// (see [`crate::FileHandle::on_takeover`]).
pub type TakeoverHook = Arc<dyn Fn(crate::FileHandle) -> BoxFuture<'static, ()> + Send + Sync>;

/// A child the file actor keeps running: started at once, restarted with backoff when it fails.
#[derive(Clone)]
pub struct ChildSpec {
    /// Unique per file (a second spec with the same name replaces nothing and is refused).
    pub name: String,
    pub start: StartChild,
    pub restart: RestartPolicy,
}

/// How a failed child is restarted.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    /// Pause before the first restart; it doubles with each failure in a row, up to
    /// `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// Failures in a row after which the child is left stopped ([`ChildState::GaveUp`]).
    pub max_failures: u32,
    /// A child that ran this long before failing starts a new series of failures.
    pub stable_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_failures: 10,
            stable_after: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildState {
    Running,
    /// Failed; restarts after its backoff.
    Restarting,
    /// Ended by itself (or the file is closing).
    Stopped,
    /// Failed `max_failures` times in a row; left stopped.
    GaveUp,
}

/// What a host can read about a supervised child ([`crate::FileHandle::children`]).
#[derive(Clone, Debug, Serialize)]
pub struct ChildStatus {
    pub name: String,
    pub state: ChildState,
    /// Times it was restarted after a failure.
    pub restarts: u32,
    pub last_error: Option<String>,
}

/// One open file as the engine supervisor reports it ([`crate::Engine::status`]).
#[derive(Clone, Debug, Serialize)]
pub struct FileStatus {
    pub path: PathBuf,
    pub last_seq: u64,
    pub children: Vec<ChildStatus>,
}

/// What the file actor owns besides its state: joined (threads) or aborted (the socket task)
/// when the file closes, by the file actor's `post_stop`, or by the engine supervisor when the
/// file actor failed.
pub(crate) struct CloseParts {
    pub flusher: std::thread::JoinHandle<()>,
    pub snapshotter: std::thread::JoinHandle<()>,
    pub server: Option<tokio::task::JoinHandle<()>>,
}

pub(crate) type SharedParts = Arc<Mutex<Option<CloseParts>>>;

/// Stops what [`CloseParts`] holds, in order: no more requests from other processes, no more
/// commands, the queued ones committed (the flusher's last round), the last snapshot written,
/// the log released.
pub(crate) async fn shut_down(shared: &Arc<Shared>, parts: &SharedParts) {
    let Some(parts) = parts.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return;
    };
    if let Some(server) = &parts.server {
        server.abort();
        let _ = std::fs::remove_file(crate::remote::socket_path(&shared.paths));
    }
    // Refuse further submits (they answer `Closed`); one being sequenced finishes first.
    shared
        .sequencer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    shared.queue.close();
    // The flusher commits what is queued, hands its last snapshot to the snapshot thread and
    // drops the sender; the snapshot thread then writes what it has and stops.
    let _ = tokio::task::spawn_blocking(move || {
        let _ = parts.flusher.join();
        let _ = parts.snapshotter.join();
    })
    .await;
    shared
        .events_tx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    shared.log.write().unwrap_or_else(|p| p.into_inner()).take();
    tracing::info!(path = %shared.paths.root.display(), "closed");
}

// ------------------------------------------------------------------ the file actor

/// The file actor: see the module docs.
pub(crate) struct FileActor;

pub(crate) struct FileArgs {
    /// The handle whose file this actor opens and owns.
    pub handle: crate::FileHandle,
}

pub(crate) struct FileState {
    shared: Arc<Shared>,
    parts: SharedParts,
    children: BTreeMap<String, Child>,
    /// Live child actor → its name.
    by_id: HashMap<ActorId, String>,
}

struct Child {
    spec: ChildSpec,
    status: ChildStatus,
    cell: Option<ActorCell>,
    /// Bumped at every (re)start, so a restart timer of an earlier life does nothing.
    generation: u64,
    failures_in_row: u32,
    started: Instant,
}

impl Actor for FileActor {
    type Msg = FileMsg;
    type State = FileState;
    type Arguments = FileArgs;

    /// Opens the file (see [`crate::engine::open_here`]); an error (e.g. `Locked`) is the
    /// spawn's error.
    async fn pre_start(
        &self,
        me: ActorRef<FileMsg>,
        args: FileArgs,
    ) -> Result<FileState, ActorProcessingErr> {
        let handle = args.handle;
        crate::engine::open_here(&handle, me).await?;
        Ok(FileState {
            shared: handle.shared.clone(),
            parts: handle.closer.parts.clone(),
            children: BTreeMap::new(),
            by_id: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        me: ActorRef<FileMsg>,
        msg: FileMsg,
        st: &mut FileState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            // From the owner socket: always through the flusher, so the commands of many
            // client processes share flushes.
            FileMsg::Submit(cmd, reply) => st.shared.submit(vec![cmd], reply, false),
            FileMsg::SubmitAll(cmds, reply) => st.shared.submit(cmds, reply, false),
            FileMsg::Supervise(spec, reply) => {
                if st.children.contains_key(&spec.name) {
                    let why = format!(
                        "a child named '{}' is already supervised by this file",
                        spec.name
                    );
                    tracing::warn!("{why}");
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(why));
                    }
                    return Ok(());
                }
                let name = spec.name.clone();
                st.children.insert(
                    name.clone(),
                    Child {
                        status: ChildStatus {
                            name: name.clone(),
                            state: ChildState::Restarting,
                            restarts: 0,
                            last_error: None,
                        },
                        spec,
                        cell: None,
                        generation: 0,
                        failures_in_row: 0,
                        started: Instant::now(),
                    },
                );
                let started = st.start_child(&me, &name).await;
                if let Err(e) = &started {
                    st.child_failed(&me, &name, e.clone());
                }
                if let Some(reply) = reply {
                    let _ = reply.send(started);
                }
            }
            FileMsg::Children(reply) => {
                let _ = reply.send(st.children.values().map(|c| c.status.clone()).collect());
            }
            FileMsg::Restart { name, generation } => {
                let due = st
                    .children
                    .get(&name)
                    .is_some_and(|c| c.generation == generation && c.cell.is_none());
                if due {
                    if let Err(e) = st.start_child(&me, &name).await {
                        st.child_failed(&me, &name, e);
                    }
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        me: ActorRef<FileMsg>,
        evt: SupervisionEvent,
        st: &mut FileState,
    ) -> Result<(), ActorProcessingErr> {
        match evt {
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(name) = st.by_id.remove(&cell.get_id()) {
                    st.child_failed(&me, &name, err.to_string());
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(name) = st.by_id.remove(&cell.get_id()) {
                    if let Some(c) = st.children.get_mut(&name) {
                        tracing::debug!(child = %name, ?reason, "child stopped");
                        c.cell = None;
                        c.status.state = ChildState::Stopped;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        me: ActorRef<FileMsg>,
        st: &mut FileState,
    ) -> Result<(), ActorProcessingErr> {
        // Children first (an effect may be committing), then the file itself.
        st.by_id.clear();
        me.stop_children_and_wait(Some("file closed".into()), Some(Duration::from_secs(10)))
            .await;
        shut_down(&st.shared, &st.parts).await;
        Ok(())
    }
}

impl FileState {
    async fn start_child(&mut self, me: &ActorRef<FileMsg>, name: &str) -> Result<(), String> {
        let Some(child) = self.children.get_mut(name) else {
            return Ok(());
        };
        child.generation += 1;
        let cell = (child.spec.start)(me.get_cell()).await?;
        self.by_id.insert(cell.get_id(), name.to_owned());
        child.cell = Some(cell);
        child.status.state = ChildState::Running;
        child.started = Instant::now();
        Ok(())
    }

    /// A child failed (or could not be started): restart it after its backoff, or give up.
    fn child_failed(&mut self, me: &ActorRef<FileMsg>, name: &str, err: String) {
        let Some(c) = self.children.get_mut(name) else {
            return;
        };
        let policy = &c.spec.restart;
        if c.cell.is_some() && c.started.elapsed() >= policy.stable_after {
            c.failures_in_row = 0;
        }
        c.cell = None;
        c.failures_in_row += 1;
        c.status.last_error = Some(err.clone());
        if c.failures_in_row > policy.max_failures {
            c.status.state = ChildState::GaveUp;
            tracing::error!(child = %name, failures = c.failures_in_row - 1, error = %err,
                "child keeps failing; left stopped until the file is reopened");
            return;
        }
        let pause = policy
            .backoff
            .saturating_mul(1u32 << (c.failures_in_row - 1).min(16))
            .min(policy.max_backoff);
        c.status.state = ChildState::Restarting;
        c.status.restarts += 1;
        tracing::warn!(child = %name, restart = c.status.restarts, ?pause, error = %err, "child failed; restarting");
        let (name, generation) = (name.to_owned(), c.generation);
        me.send_after(pause, move || FileMsg::Restart { name, generation });
    }
}

// ------------------------------------------------------------------ the engine supervisor

/// The engine supervisor: every file actor of an [`crate::Engine`] is linked to it.
pub(crate) struct EngineSupervisor;

pub(crate) enum EngineMsg {
    /// A file actor started under this supervisor, and what to clean up if it fails.
    Watch {
        actor: ActorRef<FileMsg>,
        shared: Arc<Shared>,
        parts: SharedParts,
    },
    /// Every file open here, with its children.
    Status(RpcReplyPort<Vec<FileStatus>>),
}

pub(crate) struct Watched {
    actor: ActorRef<FileMsg>,
    shared: Arc<Shared>,
    parts: SharedParts,
}

pub(crate) struct EngineState {
    files: HashMap<ActorId, Watched>,
    /// The engine's registry of open files, to forget one whose actor failed.
    registry: Arc<dashmap::DashMap<PathBuf, crate::engine::Slot>>,
}

impl Actor for EngineSupervisor {
    type Msg = EngineMsg;
    type State = EngineState;
    type Arguments = Arc<dashmap::DashMap<PathBuf, crate::engine::Slot>>;

    async fn pre_start(
        &self,
        _me: ActorRef<EngineMsg>,
        registry: Self::Arguments,
    ) -> Result<EngineState, ActorProcessingErr> {
        Ok(EngineState {
            files: HashMap::new(),
            registry,
        })
    }

    async fn handle(
        &self,
        _me: ActorRef<EngineMsg>,
        msg: EngineMsg,
        st: &mut EngineState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            EngineMsg::Watch {
                actor,
                shared,
                parts,
            } => {
                st.files.insert(
                    actor.get_id(),
                    Watched {
                        actor,
                        shared,
                        parts,
                    },
                );
            }
            EngineMsg::Status(reply) => {
                let mut out = Vec::new();
                for w in st.files.values() {
                    let children =
                        ractor::call_t!(w.actor, FileMsg::Children, 5_000).unwrap_or_default();
                    out.push(FileStatus {
                        path: w.shared.paths.root.clone(),
                        last_seq: w
                            .shared
                            .committed_seq
                            .load(std::sync::atomic::Ordering::Acquire),
                        children,
                    });
                }
                out.sort_by(|a, b| a.path.cmp(&b.path));
                let _ = reply.send(out);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _me: ActorRef<EngineMsg>,
        evt: SupervisionEvent,
        st: &mut EngineState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match evt {
            SupervisionEvent::ActorTerminated(cell, ..) => {
                (cell, "it was stopped without closing the file".to_owned())
            }
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            _ => return Ok(()),
        };
        let Some(w) = st.files.remove(&cell.get_id()) else {
            return Ok(());
        };
        // A file actor that closed its file took its parts; one that failed or was killed
        // did not run its post_stop: stop its children, refuse further commands with the
        // reason, commit what was queued, release the file and forget it.
        let unclosed = w.parts.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        if !unclosed {
            return Ok(());
        }
        let why = format!("the file's actor ended ({why}); open the file again");
        tracing::error!(path = %w.shared.paths.root.display(), error = %why, "closing the file its actor left open");
        *w.shared.poisoned.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        cell.stop_children_and_wait(Some("file actor ended".into()), None)
            .await;
        shut_down(&w.shared, &w.parts).await;
        let root = w.shared.paths.root.clone();
        st.registry.remove_if(&root, |_, s| {
            s.get().is_some_and(|h| Arc::ptr_eq(&h.shared, &w.shared))
        });
        drop(w.actor);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineConfig, EngineError};

    /// The engine supervisor's job: a file actor that ends without closing its file (killed
    /// here) leaves no half-open file behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_file_actor_is_cleaned_up_by_the_engine_supervisor() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("k.elf");
        let engine = Engine::new(EngineConfig::default());
        let file = engine.init(&path, "Alice").await.unwrap();
        assert_eq!(engine.status().await.len(), 1);
        let actor = file.shared.actor().unwrap();
        actor.kill();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !engine.open_files().is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(engine.open_files().is_empty(), "the file was not forgotten");
        assert!(engine.status().await.is_empty());
        let cmd = elfiee_model::Command::new(
            "alice",
            "core.create",
            None,
            serde_json::json!({"name": "n", "block_type": "markdown"}),
        );
        let refused = file.submit(cmd.clone()).await;
        assert!(
            matches!(&refused, Err(EngineError::Storage(m)) if m.contains("actor ended")),
            "{refused:?}"
        );
        // The lock was released: the file opens again and takes commands.
        let again = engine.open(&path).await.unwrap();
        again.submit(cmd).await.unwrap();
        again.close().await;
    }
}
