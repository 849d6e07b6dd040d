//! The imperative shell around the pure core: one [`FileHandle`] (a ractor actor plus a flusher
//! thread) per open `.elf`, an append-only sled [`log`], group commit, snapshots and
//! subscriptions.
//!
//! Pipeline of one command (see docs/ARCHITECTURE.md): the actor checks idempotency, runs
//! [`elfiee_capabilities::Registry::execute`] against its working state, seals the events into
//! the hash chain and writes them in one atomic sled batch, then hands them to the
//! [`commit_queue::CommitQueue`]. The flusher thread flushes everything queued so far in one
//! `fsync` (group commit), applies the events to the committed state, publishes them and only
//! then answers the callers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), elfiee_engine::EngineError> {
//! use elfiee_engine::Engine;
//! use elfiee_model::Command;
//! let engine = Engine::global();
//! let file = engine.init("notes.elf", "Alice").await?;
//! let owner = file.owner().unwrap();
//! let events = file
//!     .submit(Command::new(&owner, "core.create", None, serde_json::json!({"name": "todo", "block_type": "markdown"})))
//!     .await?;
//! println!("created {} at seq {}", events[0].entity, events[0].seq);
//! file.close().await;
//! # Ok(()) }
//! ```

mod actor;
pub mod cmd_index;
pub mod codec;
pub mod commit_queue;
mod engine;
mod error;
mod handle;
pub mod layout;
pub mod log;
pub mod node;
pub mod remote;
pub mod replay;
mod subscription;
mod sync;

pub use engine::{Engine, EngineConfig};
pub use error::EngineError;
pub use handle::FileHandle;
pub use replay::{replay, replay_log, verify, verify_log, ReplayReport, VerifyReport};
pub use subscription::Subscription;
