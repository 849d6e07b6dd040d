//! The pure projection of an Elfiee event log into [`State`].
//!
//! [`Folds::apply`] folds one committed event into the state with the fold registered for its
//! kind ([`Fold`]; built-in and custom kinds register the same way), and [`apply`] does so with
//! the built-in folds. Folding is total and deterministic: it reads nothing but its arguments,
//! never panics, and counts the kinds it has no fold for (so logs written by newer versions or
//! by an embedder's program still open, and say what they hold). No disk, network, clock or
//! randomness here.
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
mod fold;
mod graph;
pub mod lazy;
mod state;

pub use apply::{apply, entry_path, fold_patch, set_block, update_block, IMPORT_INCOMPLETE};
pub use context::{
    collect_context, collect_context_with, count_tokens, keywords, Context, ContextItem,
    ContextOptions, Rank,
};
pub use fold::{panic_message, Applied, Fold, Folded, Folds};
pub use graph::RelationGraph;
pub use lazy::{Image, LazyMap};
pub use state::{State, StateDigest};
