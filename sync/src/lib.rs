//! Several devices on one `.elf` document: replication of its events through NATS JetStream
//! (issue 16; see docs/ARCHITECTURE.md, "sync/", and docs/EVENTS.md, "Sync").
//!
//! - [`node`]: [`node::SyncNode`] — turn sync on for an open file: the merged state over the
//!   local log, `SyncPublisher` and `SyncIngest` as supervised children of the file actor,
//!   status for subscribers; [`node::synced_state`] and [`node::offline_status`] for a file
//!   nobody syncs now.
//! - [`identity`]: node keys (Ed25519), an event's origin (`node`, `origin_seq`, `prev`,
//!   `deps`), its id (blake3 of origin and change, independent of local seqs) and signature,
//!   and why a forged event is rejected.
//! - [`encryption`]: what the broker holds is ciphertext — the document key, its
//!   generations, each device's copy sealed to its X25519 key (decision 0047).
//! - [`merge`]: the merge order (Lamport time, node, id) every node folds in, and causal order
//!   ("happened before", concurrency) for conflicts.
//! - [`replica`]: the state as the fold of every node's events in merge order — merge
//!   positions as seqs, so equal event sets give equal digests; CBAC at merge, conflicts,
//!   skipped changes.
//! - [`membership`]: `node.add` (the file owner adds a device by its key), registered like an
//!   embedder's capability.
//! - [`broker`]: how a device reaches a locked broker — TLS, credentials — kept in memory
//!   only, and a refusal in one line that names its cause.
//! - `testing` (feature `testing`): a `nats-server` per test (loopback, JetStream in a temporary folder, killed
//!   when dropped) and a TCP relay a test can cut and restore (partitions).

pub mod broker;
pub mod encryption;
pub mod envelope;
pub mod identity;
pub mod membership;
pub mod merge;
pub mod node;
pub mod replica;
#[cfg(feature = "testing")]
pub mod testing;
