//! The pure projection of an Elfiee event log into [`State`].
//!
//! [`apply`] folds one committed event into the state. It is total and deterministic: it reads
//! nothing but its arguments, never panics, and skips events it does not understand (so logs
//! written by newer versions still open). No disk, network, clock or randomness here.
//!
//! ```
//! use elfiee_projections::State;
//! let state = State::default();
//! assert_eq!(state.blocks.len(), 0);
//! assert_eq!(state.digest(), State::default().digest());
//! ```

mod apply;
pub mod content;
pub mod context;
mod graph;
pub mod lazy;
mod state;

pub use apply::{apply, entry_path, IMPORT_INCOMPLETE};
pub use context::{
    collect_context, collect_context_with, count_tokens, Context, ContextItem, ContextOptions,
};
pub use graph::RelationGraph;
pub use lazy::{Image, LazyMap};
pub use state::{State, StateDigest};
