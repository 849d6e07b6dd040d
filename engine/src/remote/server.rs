//! The owner socket: serves `<elf>/owner.sock` for the file this process owns. Commands go
//! straight to [`Owned::submit`] (the one door for writes), so the file actor keeps only the
//! file's lifecycle.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::UnixListener;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use super::wire::{decode, encode, socket_path, Request, Response, MAX_FRAME};
use crate::error::EngineError;
use crate::file::core::FileCore;
use crate::file::owned::{Owned, Submission};
use crate::subscription::{EventSource, Subscription};

/// Serves the owner socket for `owned` until the returned stop is called (at close), which
/// also removes the socket file.
pub(crate) fn serve(owned: Arc<Owned>) -> Result<Box<dyn FnOnce() + Send>, EngineError> {
    let path = socket_path(&owned.core.paths);
    // We hold sled's lock, so a socket file left here belongs to a dead owner.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| EngineError::io(&path, e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| EngineError::io(&path, e))?;
    }
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => { conns.spawn(connection(owned.clone(), stream)); }
                    Err(e) => { tracing::warn!(error = %e, "owner socket accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
    Ok(Box::new(move || {
        task.abort();
        let _ = std::fs::remove_file(&path);
    }))
}

fn answer<T>(r: Result<T, EngineError>, f: impl FnOnce(T) -> Response) -> Response {
    r.map(f).unwrap_or_else(Response::Error)
}

/// The committed state (or the view readers are shown) as it is now.
fn current(core: &FileCore) -> Response {
    let (seq, state) = core.with_state(|s| (s.last_seq, s.canonical_bytes()));
    Response::State { seq, state }
}

async fn connection(owned: Arc<Owned>, stream: tokio::net::UnixStream) {
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
        let core = &owned.core;
        let resp = match req {
            Request::Subscribe { from } => {
                let source: Arc<dyn EventSource> = owned.clone();
                let mut sub = Subscription::new(core.clone(), source, Some(from));
                while let Some(c) = sub.recv_committed().await {
                    let frame = encode(&Response::Event(c.event, c.origin));
                    if framed
                        .send(tokio_util::bytes::Bytes::from(frame))
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
                last_seq: core.last_seq(),
            },
            // Serialized with every other writer by the sequencer; always through the
            // flusher, so the commands of many client processes share flushes.
            Request::Submit(cmd) => answer(
                owned.submit(Submission::Socket(vec![cmd])).await,
                Response::Events,
            ),
            Request::SubmitAll(cmds) => answer(
                owned.submit(Submission::Socket(cmds)).await,
                Response::Events,
            ),
            Request::Events { from, to } => answer(owned.read_events(from, to), Response::Events),
            Request::Committed { from, to } => answer(owned.read_committed(from, to), |c| {
                Response::Committed(c.into_iter().map(|c| (c.event, c.origin)).collect())
            }),
            Request::CommandEvents(id) => answer(owned.command_events(id), Response::MaybeEvents),
            Request::State => current(core),
            Request::Replay => answer(owned.replay().await, |(r, _)| Response::Replayed(r)),
            Request::Verify => answer(owned.verify().await, Response::Verified),
            Request::Backup(to) => answer(owned.backup(to).await, Response::BackedUp),
            Request::GetCheckpoint(n) => answer(owned.checkpoint(&n), Response::Checkpoint),
            Request::Notes { from, to } => answer(owned.notes(from, to), Response::Notes),
            Request::SetCheckpoint(n, s) => answer(owned.set_checkpoint(&n, s), |_| Response::Done),
            Request::Content(r) => answer(core.content.get(&r), Response::Content),
            Request::PutBytes(b) => answer(core.content.put_bytes(&b), Response::Stored),
            Request::Bytes(r) => answer(core.content.get_bytes(&r), Response::Bytes),
            Request::StateAt(seq) if seq == core.last_seq() => current(core),
            Request::Service { name, body } => match core.services.get(&name) {
                Some(f) => match f(body).await {
                    Ok(reply) => Response::Service(reply),
                    Err(why) => Response::Error(EngineError::Storage(why)),
                },
                None => Response::NoService(name),
            },
            Request::StateAt(seq) => answer(owned.state_at(seq).await, |s| Response::State {
                seq: s.last_seq,
                state: s.canonical_bytes(),
            }),
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
