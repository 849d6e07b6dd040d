//! The actor tree (docs/ARCHITECTURE.md, "Actor tree"):
//!
//! ```text
//! EngineSupervisor            one per Engine; cleans up after a file actor that failed
//!  └─ FileActor               one per .elf this process owns; owns the file's life (its
//!      │                      close) and restarts its children
//!      └─ children            registered by the host with FileHandle::supervise (the effect
//!                             actors of elfiee-adapters); the engine knows none by name
//! ```
//!
//! Commands do not pass through these actors: every writer (this process, the owner socket,
//! sync) calls the owner's one door, `file::owned::Owned::submit`, which sequences on the
//! writer's own task under a lock (see docs/ARCHITECTURE.md, "The commit path").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

pub use crate::children::{
    BoxFuture, ChildSpec, ChildState, ChildStatus, FileStatus, RestartPolicy, StartChild,
};
use crate::error::EngineError;
use crate::file::owned::Owned;

/// Messages of the file actor: its children (the commands of every writer go to
/// [`Owned`]'s `submit`, not through this mailbox).
pub(crate) enum FileMsg {
    /// Start a child and keep it running (restart with backoff when it fails).
    Supervise(ChildSpec, Option<RpcReplyPort<Result<(), String>>>),
    /// The status of every supervised child.
    Children(RpcReplyPort<Vec<ChildStatus>>),
    /// A failed child's backoff is over (ignored unless `generation` is still its current one).
    Restart { name: String, generation: u64 },
}

// ------------------------------------------------------------------ the file actor

/// The file actor: see the module docs.
pub(crate) struct FileActor;

/// Opens the file here, as the actor starts.
pub(crate) type OpenFile =
    Box<dyn FnOnce() -> BoxFuture<'static, Result<Arc<Owned>, EngineError>> + Send>;

pub(crate) struct FileArgs {
    pub open: OpenFile,
}

pub(crate) struct FileState {
    owned: Arc<Owned>,
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

    /// Opens the file ([`FileArgs::open`]); an error (e.g. `Locked`) is the spawn's error.
    async fn pre_start(
        &self,
        _me: ActorRef<FileMsg>,
        args: FileArgs,
    ) -> Result<FileState, ActorProcessingErr> {
        let owned = (args.open)().await?;
        Ok(FileState {
            owned,
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
        st.owned.shut_down().await;
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
        owned: Arc<Owned>,
        /// Removes the file from the engine's open files (if it is still this one).
        forget: Box<dyn FnOnce() + Send + Sync>,
    },
    /// Every file open here, with its children.
    Status(RpcReplyPort<Vec<FileStatus>>),
}

pub(crate) struct Watched {
    actor: ActorRef<FileMsg>,
    owned: Arc<Owned>,
    forget: Box<dyn FnOnce() + Send + Sync>,
}

pub(crate) struct EngineState {
    files: HashMap<ActorId, Watched>,
}

impl Actor for EngineSupervisor {
    type Msg = EngineMsg;
    type State = EngineState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _me: ActorRef<EngineMsg>,
        _: (),
    ) -> Result<EngineState, ActorProcessingErr> {
        Ok(EngineState {
            files: HashMap::new(),
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
                owned,
                forget,
            } => {
                st.files.insert(
                    actor.get_id(),
                    Watched {
                        actor,
                        owned,
                        forget,
                    },
                );
            }
            EngineMsg::Status(reply) => {
                let mut out = Vec::new();
                for w in st.files.values() {
                    let children =
                        ractor::call_t!(w.actor, FileMsg::Children, 5_000).unwrap_or_default();
                    out.push(FileStatus {
                        path: w.owned.core.paths.root.clone(),
                        last_seq: w.owned.core.last_seq(),
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
        if !w.owned.is_running() {
            return Ok(());
        }
        let why = format!("the file's actor ended ({why}); open the file again");
        tracing::error!(path = %w.owned.core.paths.root.display(), error = %why, "closing the file its actor left open");
        w.owned.core.set_poisoned(Some(why));
        cell.stop_children_and_wait(Some("file actor ended".into()), None)
            .await;
        w.owned.shut_down().await;
        (w.forget)();
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
        let actor = file.actor().unwrap();
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
