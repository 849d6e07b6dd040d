//! One writer per `.elf` across processes (DESIGN.md §4).
//!
//! sled lets one process open a database. The process that opens a `.elf` (the *owner*) serves
//! `<elf>/owner.sock` (a Unix socket, mode 0600). Another process whose open hits the lock
//! connects there instead: it gets the owner's committed state, keeps a replica by applying the
//! committed events the owner streams to it, and sends its commands to the owner's actor. So
//! every process sees one history. When the owner exits, the next process to open the file
//! becomes the owner.
//!
//! Wire format: frames of a 4-byte big-endian length followed by a MessagePack body
//! ([`Request`] → [`Response`]), i.e. tokio-util's `LengthDelimitedCodec` framing. A request
//! connection answers one response per request; a connection that sends `Subscribe` becomes a
//! one-way stream of `Response::Event`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use elfiee_model::{Command, Event};
use elfiee_projections::State;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::UnixListener;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::actor::Shared;
use crate::layout::ElfPaths;
use crate::{EngineConfig, EngineError, FileHandle};

pub const SOCKET_NAME: &str = "owner.sock";
const MAX_FRAME: usize = 512 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Hello,
    Submit(Command),
    SubmitAll(Vec<Command>),
    Events {
        from: u64,
        to: u64,
    },
    CommandEvents(uuid::Uuid),
    State,
    Subscribe {
        from: u64,
    },
    GetCheckpoint(String),
    SetCheckpoint(String, u64),
    Replay,
    Verify,
    /// A body from the content store.
    Content(elfiee_model::ContentRef),
    /// The state as of a seq (time travel), as [`Response::State`].
    StateAt(u64),
    /// Stores bytes in the content store, answered with [`Response::Stored`].
    PutBytes(#[serde(with = "serde_bytes_vec")] Vec<u8>),
    /// Bytes from the content store, as [`Response::Bytes`].
    Bytes(elfiee_model::ContentRef),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    Hello { pid: u32, last_seq: u64 },
    Events(Vec<Event>),
    MaybeEvents(Option<Vec<Event>>),
    State { seq: u64, state: Vec<u8> },
    Event(Event),
    Checkpoint(u64),
    Replayed(crate::ReplayReport),
    Verified(crate::VerifyReport),
    Content(String),
    Stored(elfiee_model::ContentRef),
    Bytes(#[serde(with = "serde_bytes_vec")] Vec<u8>),
    Done,
    Error(EngineError),
}

/// Byte vectors as MessagePack binary (not an array of numbers, 1–2 bytes per byte).
mod serde_bytes_vec {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(v).unwrap_or_default()
}

fn decode<T: for<'de> Deserialize<'de>>(b: &[u8]) -> Result<T, EngineError> {
    rmp_serde::from_slice(b)
        .map_err(|e| EngineError::Storage(format!("bad message from the owner process: {e}")))
}

pub fn socket_path(paths: &ElfPaths) -> PathBuf {
    paths.root.join(SOCKET_NAME)
}

// ---------------------------------------------------------------- owner side

/// Serves the owner socket for an open file until the task is aborted (at close).
pub(crate) fn serve(file: FileHandle) -> Result<tokio::task::JoinHandle<()>, EngineError> {
    let path = socket_path(&file.shared.paths);
    // We hold sled's lock, so a socket file left here belongs to a dead owner.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| EngineError::io(&path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| EngineError::io(&path, e))?;
    }
    Ok(tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => { conns.spawn(connection(file.clone(), stream)); }
                    Err(e) => { tracing::warn!(error = %e, "owner socket accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    }))
}

async fn connection(file: FileHandle, stream: tokio::net::UnixStream) {
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec();
    let mut framed = Framed::new(stream, codec);
    while let Some(Ok(frame)) = framed.next().await {
        let req: Request = match decode(&frame) {
            Ok(r) => r,
            Err(e) => {
                let _ = framed
                    .send(tokio_util::bytes::Bytes::from(encode(&Response::Error(e))))
                    .await;
                continue;
            }
        };
        let resp = match req {
            Request::Subscribe { from } => {
                let mut sub = file.subscribe_from(from);
                while let Some(e) = sub.recv().await {
                    if framed
                        .send(tokio_util::bytes::Bytes::from(encode(&Response::Event(e))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                return;
            }
            Request::Hello => Response::Hello {
                pid: std::process::id(),
                last_seq: file.last_seq(),
            },
            // Through the file actor's mailbox: the commands of every client are serialized
            // there and share the flusher's flushes.
            Request::Submit(cmd) => {
                through_actor(&file, |port| crate::actor::FileMsg::Submit(cmd, port)).await
            }
            Request::SubmitAll(cmds) => {
                through_actor(&file, |port| crate::actor::FileMsg::SubmitAll(cmds, port)).await
            }
            Request::Events { from, to } => file
                .shared
                .read_events(from, to)
                .map(Response::Events)
                .unwrap_or_else(Response::Error),
            Request::CommandEvents(id) => file
                .command_events(id)
                .map(Response::MaybeEvents)
                .unwrap_or_else(Response::Error),
            Request::State => {
                let (seq, state) = file.with_state(|s| (s.last_seq, s.canonical_bytes()));
                Response::State { seq, state }
            }
            Request::Replay => file
                .replay()
                .await
                .map(|(r, _)| Response::Replayed(r))
                .unwrap_or_else(Response::Error),
            Request::Verify => file
                .verify()
                .await
                .map(Response::Verified)
                .unwrap_or_else(Response::Error),
            Request::GetCheckpoint(n) => file
                .checkpoint(&n)
                .map(Response::Checkpoint)
                .unwrap_or_else(Response::Error),
            Request::SetCheckpoint(n, s) => file
                .set_checkpoint(&n, s)
                .map(|_| Response::Done)
                .unwrap_or_else(Response::Error),
            Request::Content(r) => file
                .content(&r)
                .map(Response::Content)
                .unwrap_or_else(Response::Error),
            Request::PutBytes(b) => file
                .put_bytes(&b)
                .map(Response::Stored)
                .unwrap_or_else(Response::Error),
            Request::Bytes(r) => file
                .bytes(&r)
                .map(Response::Bytes)
                .unwrap_or_else(Response::Error),
            Request::StateAt(seq) => file
                .state_at(seq)
                .await
                .map(|s| Response::State {
                    seq: s.last_seq,
                    state: s.canonical_bytes(),
                })
                .unwrap_or_else(Response::Error),
        };
        if framed
            .send(tokio_util::bytes::Bytes::from(encode(&resp)))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Sends a command to the file actor and waits for its answer.
async fn through_actor(
    file: &FileHandle,
    msg: impl FnOnce(crate::actor::Reply) -> crate::actor::FileMsg,
) -> Response {
    let Some(actor) = file.shared.actor() else {
        return Response::Error(EngineError::Closed);
    };
    let (port, rx) = ractor::concurrency::oneshot();
    if actor.send_message(msg(port.into())).is_err() {
        return Response::Error(EngineError::Closed);
    }
    match rx.await {
        Ok(Ok(events)) => Response::Events(events),
        Ok(Err(e)) => Response::Error(e),
        Err(_) => Response::Error(EngineError::Closed),
    }
}

// ---------------------------------------------------------------- client side

/// A connection to the owner process.
pub(crate) struct RemoteClient {
    sock: PathBuf,
    req: Mutex<StdStream>,
    closed: AtomicBool,
    pub owner_pid: u32,
}

fn write_frame(s: &mut StdStream, body: &[u8]) -> std::io::Result<()> {
    s.write_all(&(body.len() as u32).to_be_bytes())?;
    s.write_all(body)
}

fn read_frame(s: &mut StdStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other("frame too large"));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok(body)
}

fn round_trip(s: &mut StdStream, req: &Request) -> Result<Response, EngineError> {
    write_frame(s, &encode(req)).map_err(|e| EngineError::Storage(e.to_string()))?;
    let body = read_frame(s).map_err(|e| EngineError::Storage(e.to_string()))?;
    decode(&body)
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

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(s) = self.req.lock() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// One attempt; the caller ([`crate::Engine`]'s open) retries it and the lock in turn.
fn connect_stream(sock: &Path) -> Result<StdStream, EngineError> {
    StdStream::connect(sock).map_err(|e| {
        EngineError::Storage(format!(
            "{} is locked by another process, but its owner socket {} does not answer ({e}); if no elfiee process is running, remove the stale lock by restarting the owner",
            sock.parent().unwrap_or(sock).display(),
            sock.display()
        ))
    })
}

/// Makes `shared` a client of its file's owner process: a replica of the owner's committed
/// state, kept up to date by a thread that applies what the owner streams. Blocking; call
/// from `spawn_blocking`.
pub(crate) fn connect(shared: &Arc<Shared>, _config: &EngineConfig) -> Result<(), EngineError> {
    let paths = &shared.paths;
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
        _ => {
            return Err(EngineError::Storage(
                "unexpected answer from the owner process".into(),
            ))
        }
    };
    // The replica: apply what the owner commits, then publish it locally.
    let mut push = connect_stream(&sock)?;
    write_frame(&mut push, &encode(&Request::Subscribe { from: seq + 1 }))
        .map_err(|e| EngineError::io(&sock, e))?;
    {
        let mut committed = shared.committed.write().unwrap_or_else(|p| p.into_inner());
        *committed = state;
        shared.committed_seq.store(seq, Ordering::Release);
    }
    *shared.remote.write().unwrap_or_else(|p| p.into_inner()) = Some(client.clone());
    *shared.poisoned.lock().unwrap_or_else(|p| p.into_inner()) = None;
    shared.applied.notify_waiters();
    let weak = Arc::downgrade(shared);
    let pusher = client.clone();
    std::thread::Builder::new()
        .name("elfiee-replica".into())
        .spawn(move || {
            while let Ok(body) = read_frame(&mut push) {
                let Some(shared) = weak.upgrade() else { return };
                let Ok(Response::Event(e)) = decode::<Response>(&body) else {
                    continue;
                };
                {
                    let mut st = shared.committed.write().unwrap_or_else(|p| p.into_inner());
                    if e.seq <= st.last_seq {
                        continue;
                    }
                    shared.config.registry.apply(&mut st, &e);
                    shared.committed_seq.store(st.last_seq, Ordering::Release);
                }
                shared.applied.notify_waiters();
                let tx = shared
                    .events_tx
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                if let Some(tx) = tx {
                    let _ = tx.send(Arc::new(e));
                }
            }
            // The owner went away: requests to it fail from now on. Unless this handle is
            // being closed, the engine's watcher takes the file over (or connects to whoever
            // did) and the subscriptions go on.
            pusher.close();
            if let Some(shared) = weak.upgrade() {
                if shared.closing.load(Ordering::Acquire) {
                    shared
                        .events_tx
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take();
                }
                shared.owner_lost.notify_waiters();
                shared.applied.notify_waiters();
            }
        })
        .map_err(|e| EngineError::Storage(format!("cannot start the replica thread: {e}")))?;
    tracing::info!(path = %paths.root.display(), owner_pid, seq, "opened through the owner process");
    Ok(())
}

/// Waits until the local replica has applied `seq` (read-your-writes for remote submits).
pub(crate) async fn wait_for_seq(shared: &Shared, seq: u64) -> Result<(), EngineError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let applied = shared.applied.notified();
        tokio::pin!(applied);
        applied.as_mut().enable();
        if shared.committed_seq.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        if shared.remote().is_some_and(|r| r.is_closed()) || Instant::now() > deadline {
            return Err(EngineError::Storage(format!(
                "the owner process acknowledged seq {seq} but did not stream it back"
            )));
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), applied).await;
    }
}

impl Shared {
    /// Committed events `from..=to` from the local log or the owner.
    pub(crate) fn read_events(&self, from: u64, to: u64) -> Result<Vec<Event>, EngineError> {
        if let Some(r) = self.remote() {
            return match r.call(&Request::Events { from, to })? {
                Response::Events(ev) => Ok(ev),
                _ => Err(EngineError::Storage(
                    "unexpected answer from the owner process".into(),
                )),
            };
        }
        let log = self.log()?;
        crate::log::read_events(log.as_ref(), from.max(1), to, None).collect()
    }
}
