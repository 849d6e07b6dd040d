//! The imperative shell around the pure core: one [`FileHandle`] (the file's shared core and
//! its role here: owner — sequencer, flusher and snapshot threads, a ractor actor for its
//! lifecycle — or client of the owner process) per open `.elf`, an append-only sled
//! [`log`], group commit, the [`cmd_index`], snapshots and subscriptions.
//!
//! Pipeline of one command (see docs/ARCHITECTURE.md): every write enters through the owner's
//! one door (`file::owned::Owned::submit`: this process's commands, the owner socket's, and
//! another device's events through [`foreign::ForeignLog`]). Under the sequencer lock, on the
//! caller's task, the engine measures the payload (size and depth, one pass), checks
//! idempotency, runs [`elfiee_capabilities::Registry::execute_depth_checked`] against the
//! working state and seals the events into the hash chain. A command alone is then written and flushed right there; otherwise it
//! goes to the [`commit_queue::CommitQueue`] and the flusher thread writes and flushes
//! everything queued in one `fsync` (group commit). Either way the events are applied to the
//! committed state and published, each with its [`Origin`], before the caller is answered.
//!
//! ```
//! # #[tokio::main] async fn main() -> Result<(), elfiee_engine::EngineError> {
//! use elfiee_engine::Engine;
//! use elfiee_model::Command;
//! # let dir = tempfile::tempdir().unwrap();
//! # std::env::set_current_dir(dir.path()).unwrap(); // (this example runs in a scratch folder)
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

#![warn(missing_docs)]

pub mod backup;
mod children;
pub mod cmd_index;
pub mod codec;
pub mod commit_queue;
mod config;
pub mod content;
mod durable;
mod engine;
mod error;
mod file;
pub mod foreign;
mod handle;
pub mod layout;
pub mod log;
pub mod node;
mod raw_records;
pub mod remote;
pub mod replay;
pub mod salvage;
mod services;
mod subscription;
mod sync;
pub mod tree;

pub use children::{ChildSpec, ChildState, ChildStatus, FileStatus, RestartPolicy, StartChild};
pub use config::{AutoBackup, EngineConfig, FixedCtx};
pub use content::ContentStore;
pub use engine::Engine;
pub use error::EngineError;
pub use file::core::{Committed, Origin, StateView};
pub use foreign::ForeignLog;
pub use handle::{FileHandle, TakeoverHook};
pub use replay::{
    describe_kinds, replay, replay_log, replay_with, stored_snapshots, verify, verify_log,
    verify_with, ReplayReport, VerifyInputs, VerifyReport,
};
pub use subscription::Subscription;
