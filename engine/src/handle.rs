use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use elfiee_capabilities::cbac;
use elfiee_model::{Block, CapError, Command, Event};
use elfiee_projections::State;
use ractor::{ActorRef, RpcReplyPort};

use crate::actor::{FileMsg, Shared};
use crate::log::read_events;
use crate::{EngineError, Subscription};

const CHECKPOINT_TREE: &str = "effect_checkpoints";

/// A cloneable handle to one open `.elf`. All clones talk to the same actor.
#[derive(Clone)]
pub struct FileHandle {
    pub(crate) actor: ActorRef<FileMsg>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) closer: Arc<crate::engine::Closer>,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle").field("path", &self.shared.paths.root).finish()
    }
}

impl FileHandle {
    /// Runs one command through the pipeline. Answers once its events are durable; a rejected
    /// command writes nothing. Resubmitting a committed `cmd_id` returns the original events.
    pub async fn submit(&self, cmd: Command) -> Result<Vec<Event>, EngineError> {
        self.call(|port| FileMsg::Submit(cmd, port)).await
    }

    /// Runs several commands all-or-nothing: either every event commits (in one atomic batch,
    /// all carrying the first command's `cmd_id`), or nothing does and the error names the
    /// failing command.
    pub async fn submit_all(&self, cmds: Vec<Command>) -> Result<Vec<Event>, EngineError> {
        self.call(|port| FileMsg::SubmitAll(cmds, port)).await
    }

    async fn call(
        &self,
        msg: impl FnOnce(RpcReplyPort<Result<Vec<Event>, EngineError>>) -> FileMsg,
    ) -> Result<Vec<Event>, EngineError> {
        match self.actor.call(msg, None).await {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            _ => Err(EngineError::Closed),
        }
    }

    /// Runs `f` on the committed state (everything durable so far).
    pub fn with_state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.shared.committed.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// A copy of the committed state.
    pub fn state(&self) -> State {
        self.with_state(State::clone)
    }

    /// One block, unchecked (the host decides who sees what).
    pub fn block(&self, id: &str) -> Option<Block> {
        self.with_state(|s| s.block(id).cloned())
    }

    /// One block as `editor` may see it: checks `<block_type>.read` through CBAC.
    pub fn read_block(&self, editor: &str, id: &str) -> Result<Block, EngineError> {
        self.with_state(|s| {
            let b = s.block(id).ok_or_else(|| CapError::BlockNotFound(id.to_owned()))?;
            cbac::authorize(s, editor, &format!("{}.read", b.block_type), Some(b))?;
            Ok(b.clone())
        })
    }

    /// The file owner's editor id.
    pub fn owner(&self) -> Option<String> {
        self.with_state(|s| s.file_owner.clone())
    }

    /// Seq of the last durable event.
    pub fn last_seq(&self) -> u64 {
        self.shared.committed_seq.load(Ordering::Acquire)
    }

    /// Digest of the committed state.
    pub fn state_digest(&self) -> String {
        self.with_state(State::digest)
    }

    /// Committed events from `from` on, read from the log.
    pub fn events(&self, from: u64) -> Result<Vec<Event>, EngineError> {
        let to = self.last_seq();
        let log = self.shared.log()?;
        read_events(log.as_ref(), from.max(1), to, None).collect()
    }

    /// The events a committed command produced (`None` if it never committed). Effects use
    /// this with deterministic command ids to tell whether their outcome is already recorded.
    pub fn command_events(&self, cmd_id: uuid::Uuid) -> Result<Option<Vec<Event>>, EngineError> {
        use crate::log::EventLog;
        let log = self.shared.log()?;
        match log.command_events(cmd_id)? {
            Some(ev) if ev.first().is_some_and(|e| e.seq <= self.last_seq()) => Ok(Some(ev)),
            _ => Ok(None),
        }
    }

    /// Last seq an effect named `name` has handled (0 if never). Stored inside the `.elf`.
    pub fn checkpoint(&self, name: &str) -> Result<u64, EngineError> {
        use crate::log::EventLog;
        let bytes = self.shared.log()?.get_aux(CHECKPOINT_TREE, name)?;
        Ok(bytes.and_then(|b| b.as_slice().try_into().ok()).map(u64::from_be_bytes).unwrap_or(0))
    }

    /// Records that effect `name` handled everything up to `seq`. Written with the next group
    /// commit's flush (or at close); effects must tolerate re-handling events after a crash.
    pub fn set_checkpoint(&self, name: &str, seq: u64) -> Result<(), EngineError> {
        use crate::log::EventLog;
        self.shared.log()?.put_aux(CHECKPOINT_TREE, name, &seq.to_be_bytes())
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
