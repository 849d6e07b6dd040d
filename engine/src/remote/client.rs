//! The client of an owner process: a replica of the owner's committed state (a thread that
//! applies what the owner streams and publishes it locally) and the requests this process
//! sends to the owner.

use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use elfiee_model::Event;
use elfiee_projections::State;

use super::wire::{
    decode, encode, read_frame, round_trip, socket_path, write_frame, Request, Response,
};
use crate::error::EngineError;
use crate::file::core::{Committed, FileCore};
use crate::subscription::EventSource;

/// A connection to the owner process.
pub(crate) struct RemoteClient {
    sock: PathBuf,
    req: Mutex<StdStream>,
    closed: AtomicBool,
    pub owner_pid: u32,
}

fn unexpected() -> EngineError {
    EngineError::Storage("unexpected answer from the owner process".into())
}

impl RemoteClient {
    fn lost(&self) -> EngineError {
        self.closed.store(true, Ordering::Release);
        EngineError::Storage(format!(
            "lost the connection to the process that owns this .elf ({}); a command in flight may or may not have been committed (the owner may have committed it before it went away) — check `elfiee log` before running it again",
            self.sock.display()
        ))
    }

    /// One blocking request/response round trip.
    pub fn call(&self, req: &Request) -> Result<Response, EngineError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        let mut s = self.req.lock().unwrap_or_else(|p| p.into_inner());
        match round_trip(&mut s, req) {
            // The owner is closing: to this client, it went away.
            Ok(Response::Error(EngineError::Closed)) => Err(self.lost()),
            Ok(Response::Error(e)) => Err(e),
            Ok(r) => Ok(r),
            Err(_) => Err(self.lost()),
        }
    }

    /// [`RemoteClient::call`] off the async runtime's threads.
    pub async fn call_blocking(self: &Arc<Self>, req: Request) -> Result<Response, EngineError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.call(&req))
            .await
            .map_err(|e| EngineError::Storage(format!("request task failed: {e}")))?
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(s) = self.req.lock() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Committed events `from..=to`, from the owner.
    pub fn read_events(&self, from: u64, to: u64) -> Result<Vec<Event>, EngineError> {
        match self.call(&Request::Events { from, to })? {
            Response::Events(ev) => Ok(ev),
            _ => Err(unexpected()),
        }
    }

    pub fn command_events(&self, cmd_id: uuid::Uuid) -> Result<Option<Vec<Event>>, EngineError> {
        match self.call(&Request::CommandEvents(cmd_id))? {
            Response::MaybeEvents(ev) => Ok(ev),
            _ => Err(unexpected()),
        }
    }

    pub fn content(&self, r: &elfiee_model::ContentRef) -> Result<String, EngineError> {
        match self.call(&Request::Content(r.clone()))? {
            Response::Content(text) => Ok(text),
            _ => Err(unexpected()),
        }
    }

    pub fn put_bytes(&self, bytes: &[u8]) -> Result<elfiee_model::ContentRef, EngineError> {
        match self.call(&Request::PutBytes(bytes.to_vec()))? {
            Response::Stored(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    pub fn bytes(&self, r: &elfiee_model::ContentRef) -> Result<Vec<u8>, EngineError> {
        match self.call(&Request::Bytes(r.clone()))? {
            Response::Bytes(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    pub fn checkpoint(&self, name: &str) -> Result<u64, EngineError> {
        match self.call(&Request::GetCheckpoint(name.to_owned()))? {
            Response::Checkpoint(s) => Ok(s),
            _ => Err(unexpected()),
        }
    }

    pub fn notes(&self, from: u64, to: u64) -> Result<Vec<(u64, serde_json::Value)>, EngineError> {
        match self.call(&Request::Notes { from, to })? {
            Response::Notes(n) => Ok(n),
            _ => Err(unexpected()),
        }
    }

    pub fn set_checkpoint(&self, name: &str, seq: u64) -> Result<(), EngineError> {
        self.call(&Request::SetCheckpoint(name.to_owned(), seq))
            .map(|_| ())
    }

    pub async fn state_at(self: &Arc<Self>, seq: u64) -> Result<State, EngineError> {
        match self.call_blocking(Request::StateAt(seq)).await? {
            Response::State { state, .. } => {
                rmp_serde::from_slice(&state).map_err(|e| EngineError::Storage(e.to_string()))
            }
            _ => Err(unexpected()),
        }
    }

    pub async fn replay(self: &Arc<Self>) -> Result<crate::replay::ReplayReport, EngineError> {
        match self.call_blocking(Request::Replay).await? {
            Response::Replayed(rep) => Ok(rep),
            _ => Err(unexpected()),
        }
    }

    pub async fn verify(self: &Arc<Self>) -> Result<crate::replay::VerifyReport, EngineError> {
        match self.call_blocking(Request::Verify).await? {
            Response::Verified(rep) => Ok(rep),
            _ => Err(unexpected()),
        }
    }

    pub async fn backup(
        self: &Arc<Self>,
        to: std::path::PathBuf,
    ) -> Result<crate::backup::BackupReport, EngineError> {
        match self.call_blocking(Request::Backup(to)).await? {
            Response::BackedUp(rep) => Ok(rep),
            _ => Err(unexpected()),
        }
    }
}

impl EventSource for RemoteClient {
    fn read_committed(&self, from: u64, to: u64) -> Result<Vec<Committed>, EngineError> {
        match self.call(&Request::Committed { from, to })? {
            Response::Committed(ev) => Ok(ev
                .into_iter()
                .map(|(event, origin)| Committed { event, origin })
                .collect()),
            _ => Err(unexpected()),
        }
    }
}

/// One attempt; the caller (the engine's open) retries it and the lock in turn.
fn connect_stream(sock: &Path) -> Result<StdStream, EngineError> {
    StdStream::connect(sock).map_err(|e| {
        EngineError::Storage(format!(
            "{} is locked by another process, but its owner socket {} does not answer ({e}); if no elfiee process is running, remove the stale lock by restarting the owner",
            sock.parent().unwrap_or(sock).display(),
            sock.display()
        ))
    })
}

/// Makes `core` a replica of its file's owner process: the owner's committed state, kept up
/// to date by a thread that applies what the owner streams. When that stream ends (the owner
/// went away) the client is closed and `lost` runs. Blocking; call from `spawn_blocking`.
pub(crate) fn connect(
    core: &Arc<FileCore>,
    lost: Box<dyn FnOnce(&FileCore) + Send>,
) -> Result<Arc<RemoteClient>, EngineError> {
    let paths = &core.paths;
    let sock = socket_path(paths);
    let mut req = connect_stream(&sock)?;
    let owner_pid = match round_trip(&mut req, &Request::Hello) {
        Ok(Response::Hello { pid, .. }) => pid,
        _ => {
            return Err(EngineError::Storage(format!(
                "the owner socket {} did not answer the greeting",
                sock.display()
            )))
        }
    };
    let client = Arc::new(RemoteClient {
        sock: sock.clone(),
        req: Mutex::new(req),
        closed: AtomicBool::new(false),
        owner_pid,
    });
    let (seq, state) = match client.call(&Request::State)? {
        Response::State { seq, state } => (seq, decode::<State>(&state)?),
        _ => return Err(unexpected()),
    };
    // The replica: apply what the owner commits, then publish it locally.
    let mut push = connect_stream(&sock)?;
    write_frame(&mut push, &encode(&Request::Subscribe { from: seq + 1 }))
        .map_err(|e| EngineError::io(&sock, e))?;
    core.reset(state);
    core.set_poisoned(None);
    let weak = Arc::downgrade(core);
    let pusher = client.clone();
    std::thread::Builder::new()
        .name("elfiee-replica".into())
        .spawn(move || {
            while let Ok(body) = read_frame(&mut push) {
                let Some(core) = weak.upgrade() else { return };
                let Ok(Response::Event(event, origin)) = decode::<Response>(&body) else {
                    continue;
                };
                {
                    let mut st = core.committed.write().unwrap_or_else(|p| p.into_inner());
                    if event.seq <= st.last_seq {
                        continue;
                    }
                    core.config.registry.apply(&mut st, &event);
                    core.committed_seq.store(st.last_seq, Ordering::Release);
                }
                core.applied.notify_waiters();
                let seq = event.seq;
                if let Some(tx) = core.listened() {
                    let _ = tx.send(Arc::new(Committed { event, origin }));
                }
                core.mark_published(seq);
            }
            // The owner went away: requests to it fail from now on; `lost` decides what
            // next (the engine takes the file over, unless the handle is being closed).
            pusher.close();
            if let Some(core) = weak.upgrade() {
                lost(&core);
                core.applied.notify_waiters();
            }
        })
        .map_err(|e| EngineError::Storage(format!("cannot start the replica thread: {e}")))?;
    tracing::info!(path = %paths.root.display(), owner_pid, seq, "opened through the owner process");
    Ok(client)
}

/// Waits until the local replica has applied `seq` (read-your-writes for remote submits).
pub(crate) async fn wait_for_seq(
    core: &FileCore,
    client: &RemoteClient,
    seq: u64,
) -> Result<(), EngineError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let applied = core.applied.notified();
        tokio::pin!(applied);
        applied.as_mut().enable();
        if core.last_seq() >= seq {
            return Ok(());
        }
        if client.is_closed() || Instant::now() > deadline {
            return Err(EngineError::Storage(format!(
                "the owner process acknowledged seq {seq} but did not stream it back"
            )));
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), applied).await;
    }
}
