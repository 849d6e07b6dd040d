//! Capabilities: the only way to change a `.elf` document.
//!
//! A [`Capability`] is a pure handler `(cmd, &State, &Ctx) -> events`. The [`Registry`] runs the
//! whole pure part of the command pipeline in [`Registry::execute`]: lookup → target check →
//! CBAC ([`cbac::authorize`]) → handler (panics caught) → optimistic concurrency → events.
//! Nothing here touches the disk, the network, the clock or a random source.
//!
//! ```
//! use elfiee_capabilities::Registry;
//! use elfiee_model::{Command, Ctx};
//! use elfiee_projections::State;
//! use serde_json::json;
//!
//! let registry = Registry::builtin();
//! let ctx = registry.ctx(chrono::DateTime::UNIX_EPOCH, "node-1", [7; 16]);
//! let mut state = State::default();
//! let init = Command::new("alice", "elf.init", None, json!({"name": "Alice"}));
//! for (i, mut e) in registry.execute(&init, &state, &ctx).unwrap().into_iter().enumerate() {
//!     e.seq = i as u64 + 1;
//!     registry.apply(&mut state, &e);
//! }
//! let create = Command::new("alice", "core.create", None, json!({"name": "notes", "block_type": "markdown"}));
//! let events = registry.execute(&create, &state, &ctx).unwrap();
//! assert_eq!(events[0].attribute, "alice/core.create");
//! ```

pub mod builtin;
pub mod cbac;
mod payload;
mod registry;

pub use payload::{json_depth, too_deep, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH};
pub use registry::{Capability, Handled, Merge, Registry, Target};
