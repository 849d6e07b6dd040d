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
//!   and a client that rides out a partition.

pub mod testing;
