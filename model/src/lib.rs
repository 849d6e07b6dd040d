//! Shared data types of Elfiee: blocks, editors, grants, commands, events and the
//! handler context.
//!
//! This crate does no I/O. Every type is `Serialize`/`Deserialize` so that hosts (Tauri,
//! the CLI, tests) can move them across process boundaries.
//!
//! ```
//! use elfiee_model::{Command, WILDCARD};
//! let cmd = Command::new("alice", "core.create", None, serde_json::json!({
//!     "name": "notes", "block_type": "markdown"
//! }));
//! assert_eq!(cmd.cap_id, "core.create");
//! assert_ne!(WILDCARD, cmd.editor_id);
//! ```

mod block;
mod command;
mod contents;
mod ctx;
mod error;
mod event;

pub use block::{
    Block, BlockMetadata, ContentRef, ContentRefs, Editor, EditorType, Grant, Relation,
};
pub use command::Command;
pub use contents::{
    AgentContents, AgentStatus, DirectoryEntry, ImportedFile, PendingRemoval, SkippedFile,
    TerminalContents, EXTERNAL_ROOT_PATH,
};
pub use ctx::Ctx;
pub use error::CapError;
pub use event::serde_bytes_compat::Bytes as RawBytes;
pub use event::{Event, EventDraft, EventHash, EventPlace};

/// Identifier of a block (a UUID string for generated ids).
pub type BlockId = String;
/// Identifier of an editor (`agent-<uuid>` for agents).
pub type EditorId = String;

/// Matches any editor (in a grant's `editor_id`) or any block (in a grant's `block_id`).
pub const WILDCARD: &str = "*";

/// Version of the on-disk event and snapshot format. Bumped on incompatible changes
/// (2: events may carry content references; snapshots are files holding `content_refs`).
pub const FORMAT_VERSION: u32 = 2;
