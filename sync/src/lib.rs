//! Several devices on one `.elf` document: replication of its events through NATS JetStream
//! (issue 16; see docs/ARCHITECTURE.md, "Sync").
//!
//! What exists so far is the ground the replication stands on, checked against the broker
//! CI runs (Debian's `nats-server` 2.9.10):
//! - [`testing`]: a `nats-server` per test (loopback, JetStream in a temporary folder, a free
//!   port read from its ports file, killed when dropped) and a TCP relay between a node and
//!   the broker that a test can cut and restore (partitions);
//! - `tests/broker.rs`: the JetStream features the design relies on, against that server —
//!   message-id deduplication and its window, the last message on a subject, expected last
//!   subject sequence, durable pull consumers with explicit ack, redelivery, termination,
//!   and a client that rides out a partition;
//! - [`identity`]: node keys (Ed25519), an event's origin (`node`, `origin_seq`, `prev`,
//!   `deps`), its id (blake3 of origin and change, independent of local seqs) and signature,
//!   and why a forged event is rejected;
//! - [`merge`]: the merge order (Lamport time, node, id) every node folds in, and causal
//!   order ("happened before", concurrency) for conflicts;
//! - [`replica`]: the state as the fold of every node's events in merge order, with rollback
//!   to a checkpoint when an event sorts before applied ones; merge positions as seqs, so
//!   equal event sets give equal digests; CBAC at merge, conflicts, skipped changes.
//!
//! - [`membership`]: `node.add` (the file owner adds a device by its key), registered like an
//!   embedder's capability, and the members' keys for verifying signatures.
//!
//! Not built yet: the publisher and ingest actors over JetStream, content chunks,
//! `elfiee sync status`.

pub mod identity;
pub mod membership;
pub mod merge;
pub mod node;
pub mod replica;
pub mod testing;
