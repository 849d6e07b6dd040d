//! The owner socket's wire format: frames of a 4-byte big-endian length followed by a
//! MessagePack body ([`Request`] → [`Response`]), i.e. tokio-util's `LengthDelimitedCodec`
//! framing. A request connection answers one response per request; a connection that sends
//! `Subscribe` becomes a one-way stream of `Response::Event`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::path::PathBuf;

use elfiee_model::{Command, Event};
use serde::{Deserialize, Serialize};

use crate::error::EngineError;
use crate::file::core::Origin;
use crate::layout::ElfPaths;

/// The owner socket's file name inside the document's folder.
pub const SOCKET_NAME: &str = "owner.sock";
pub(crate) const MAX_FRAME: usize = 512 * 1024 * 1024;

/// What a client process asks the owner process.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// The first request of a connection: who owns the file, and how far it is
    /// ([`Response::Hello`]).
    Hello,
    /// Run one command, as [`crate::FileHandle::submit`] ([`Response::Events`]).
    Submit(Command),
    /// Run commands in one group, as [`crate::FileHandle::submit_all`] ([`Response::Events`]).
    SubmitAll(Vec<Command>),
    /// The committed events `from..=to` ([`Response::Events`]).
    Events {
        /// First seq.
        from: u64,
        /// Last seq.
        to: u64,
    },
    /// The events a command committed, by its `cmd_id` ([`Response::MaybeEvents`]).
    CommandEvents(uuid::Uuid),
    /// The committed state now ([`Response::State`]).
    State,
    /// Turns the connection into a stream of committed events from `from` on
    /// ([`Response::Event`], one frame each), until the file closes.
    Subscribe {
        /// The first seq to send.
        from: u64,
    },
    /// Committed events with their origins, as [`Response::Committed`].
    Committed {
        /// First seq.
        from: u64,
        /// Last seq.
        to: u64,
    },
    /// The seq a named checkpoint holds ([`Response::Checkpoint`]; 0 when unset).
    GetCheckpoint(String),
    /// What the view adds to the events `from..=to` ([`crate::StateView::notes`]).
    Notes {
        /// First seq.
        from: u64,
        /// Last seq.
        to: u64,
    },
    /// Sets a named checkpoint to a seq ([`Response::Done`]).
    SetCheckpoint(String, u64),
    /// Replay the log in the owner ([`Response::Replayed`]).
    Replay,
    /// Verify the log in the owner ([`Response::Verified`]).
    Verify,
    /// Append to the backup file at this (absolute) path.
    Backup(std::path::PathBuf),
    /// A body from the content store.
    Content(elfiee_model::ContentRef),
    /// The state as of a seq (time travel), as [`Response::State`].
    StateAt(u64),
    /// Stores bytes in the content store, answered with [`Response::Stored`].
    PutBytes(#[serde(with = "serde_bytes_vec")] Vec<u8>),
    /// Bytes from the content store, as [`Response::Bytes`].
    Bytes(elfiee_model::ContentRef),
    /// A call of a service the owner registered ([`crate::FileHandle::provide`]), answered
    /// with [`Response::Service`] or [`Response::NoService`].
    Service {
        /// The service's name.
        name: String,
        /// The request, in the service's own encoding.
        #[serde(with = "serde_bytes_vec")]
        body: Vec<u8>,
    },
}

/// What the owner answers (one per request; a `Subscribe` connection gets only `Event`s).
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// The owner process and its last committed seq.
    Hello {
        /// The owner's process id.
        pid: u32,
        /// Its last committed seq.
        last_seq: u64,
    },
    /// Committed events, in seq order.
    Events(Vec<Event>),
    /// A command's events; `None` when no command with that id was committed.
    MaybeEvents(Option<Vec<Event>>),
    /// A state and the seq it is at.
    State {
        /// The state's last seq.
        seq: u64,
        /// The state in its canonical encoding ([`elfiee_projections::State::canonical_bytes`]).
        state: Vec<u8>,
    },
    /// One event of a `Subscribe` stream, and where it was decided.
    Event(Event, Origin),
    /// Committed events with where each was decided.
    Committed(Vec<(Event, Origin)>),
    /// The seq a named checkpoint holds.
    Checkpoint(u64),
    /// `(seq, fields)` of each event the view said something about.
    Notes(Vec<(u64, serde_json::Value)>),
    /// What the owner's replay found.
    Replayed(crate::replay::ReplayReport),
    /// What the owner's verify found.
    Verified(crate::replay::VerifyReport),
    /// What the owner's backup run did.
    BackedUp(crate::backup::BackupReport),
    /// A body from the content store, as text.
    Content(String),
    /// Where the bytes were stored.
    Stored(elfiee_model::ContentRef),
    /// Bytes from the content store.
    Bytes(#[serde(with = "serde_bytes_vec")] Vec<u8>),
    /// A service's reply.
    Service(#[serde(with = "serde_bytes_vec")] Vec<u8>),
    /// The owner offers no service of that name.
    NoService(String),
    /// The request was carried out; nothing to return.
    Done,
    /// The request failed (a rejected command, a storage error, …).
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

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(v).unwrap_or_default()
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(b: &[u8]) -> Result<T, EngineError> {
    rmp_serde::from_slice(b)
        .map_err(|e| EngineError::Storage(format!("bad message from the owner process: {e}")))
}

/// Where the owner of the document at `paths` serves its socket.
pub fn socket_path(paths: &ElfPaths) -> PathBuf {
    paths.root.join(SOCKET_NAME)
}

pub(crate) fn write_frame(s: &mut StdStream, body: &[u8]) -> std::io::Result<()> {
    s.write_all(&(body.len() as u32).to_be_bytes())?;
    s.write_all(body)
}

pub(crate) fn read_frame(s: &mut StdStream) -> std::io::Result<Vec<u8>> {
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

pub(crate) fn round_trip(s: &mut StdStream, req: &Request) -> Result<Response, EngineError> {
    write_frame(s, &encode(req)).map_err(|e| EngineError::Storage(e.to_string()))?;
    let body = read_frame(s).map_err(|e| EngineError::Storage(e.to_string()))?;
    decode(&body)
}
