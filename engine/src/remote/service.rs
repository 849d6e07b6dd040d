//! Services an owner process offers on its socket besides the log: named request/response
//! handlers that a layer above the engine registers ([`crate::FileHandle::provide`], kept in
//! `services.rs`) and that a short-lived process calls ([`call_service`]) without
//! opening the document.
//!
//! Why: some work is cheap only in a long-lived process that keeps state between calls (a
//! project folder's watch, a session's place in a transcript). A Claude Code hook is a new
//! process per tool call; it hands its payload to the document's owner (the `elfiee
//! mcp-server` Claude Code runs, or `elfiee serve`) in one round trip instead of opening the
//! document and walking the folder itself. The engine knows no service by name.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::wire::{read_frame, socket_path, write_frame, Request, Response};
use crate::layout::ElfPaths;

/// Why [`call_service`] got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No process owns the document now (no socket, or nobody listening on it).
    NoOwner,
    /// The owner does not offer this service (an owner without that layer, or an older one).
    NoService,
    /// The service ran and failed, or the owner's answer could not be read.
    Failed(String),
    /// No answer within the time given.
    TimedOut,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NoOwner => f.write_str("no process has the document open"),
            CallError::NoService => f.write_str("the document's owner does not offer this service"),
            CallError::Failed(why) => write!(f, "the service failed: {why}"),
            CallError::TimedOut => f.write_str("the document's owner did not answer in time"),
        }
    }
}

impl std::error::Error for CallError {}

/// Calls service `name` of the process that owns the document at `elf`, with `body`, waiting
/// at most `timeout` for the answer. Blocking; opens nothing (no state is copied).
pub fn call_service(
    elf: &Path,
    name: &str,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, CallError> {
    let sock = socket_path(&ElfPaths::new(elf));
    let mut s = UnixStream::connect(&sock).map_err(|_| CallError::NoOwner)?;
    let timeout = timeout.max(Duration::from_millis(1));
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let req = Request::Service {
        name: name.to_owned(),
        body,
    };
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::TimedOut,
        // The owner closed the connection: it is going away.
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionReset => CallError::NoOwner,
        _ => CallError::Failed(e.to_string()),
    };
    write_frame(&mut s, &super::wire::encode(&req)).map_err(io)?;
    let frame = read_frame(&mut s).map_err(io)?;
    match super::wire::decode::<Response>(&frame) {
        Ok(Response::Service(reply)) => Ok(reply),
        Ok(Response::NoService(_)) => Err(CallError::NoService),
        // An owner that does not know the request at all (an older binary).
        Ok(Response::Error(e)) if e.to_string().contains("bad message") => {
            Err(CallError::NoService)
        }
        Ok(Response::Error(e)) => Err(CallError::Failed(e.to_string())),
        Ok(other) => Err(CallError::Failed(format!("unexpected answer {other:?}"))),
        Err(e) => Err(CallError::Failed(e.to_string())),
    }
}
