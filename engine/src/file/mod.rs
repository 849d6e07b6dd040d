//! The open file, split by role (see docs/ARCHITECTURE.md):
//! - [`core`] — what both roles share: the committed state and the view readers see,
//!   publishing committed events, the content store. No actor, no socket.
//! - [`owned`] — the owner's half: the log and the one door for every write,
//!   `Owned::submit` (this process's commands, the owner socket's, another device's events).
//! - [`sequencer`] — idempotency, payload checks, the pure handlers, sealing.
//! - [`commit`] — write, flush, apply, publish, answer; the flusher thread (group commit).
//! - [`backup`] — a backup taken while the file serves (the format: [`crate::backup`]).
//! - [`snapshotter`] — the snapshot thread (command index appends, snapshot files).
//! - [`foreign`] — how another device's events and sync's records are stored beside the
//!   events (the storage half of [`crate::foreign`]).
//!
//! A client's half (the replica of another process's file) is `crate::remote::client`.

pub(crate) mod backup;
pub(crate) mod commit;
pub(crate) mod core;
pub(crate) mod foreign;
pub(crate) mod owned;
pub(crate) mod sequencer;
pub(crate) mod snapshotter;
