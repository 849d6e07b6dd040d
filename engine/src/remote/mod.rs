//! One writer per `.elf` across processes (DESIGN.md §4).
//!
//! sled lets one process open a database. The process that opens a `.elf` (the *owner*) serves
//! `<elf>/owner.sock` (a Unix socket, mode 0600). Another process whose open hits the lock
//! connects there instead: it gets the owner's committed state, keeps a replica by applying the
//! committed events the owner streams to it, and sends its commands to the owner. So
//! every process sees one history. When the owner exits, the next process to open the file
//! becomes the owner.
//!
//! Three parts: the wire format ([`wire`]), the owner socket (`server`: it hands commands to
//! the owner's one door for writes, `file::owned::Owned::submit`), and the client
//! (`client`: the replica of the owner's committed state, and the requests to the owner).

pub(crate) mod client;
pub(crate) mod server;
pub mod service;
pub mod wire;

pub use crate::services::{ServiceFn, ServiceFuture};
pub use service::{call_service, CallError};
pub use wire::{socket_path, Request, Response, SOCKET_NAME};
