//! The pure projection of an Elfiee event log into [`State`].
//!
//! [`Folds::apply`] folds one committed event into the state with the fold registered for its
//! kind ([`Fold`]). This crate knows no event kind by name: every kind, built-in or an
//! embedder's, brings its fold with its capability (`elfiee_capabilities::Registry::builtin()
//! .folds()` holds the built-in ones), built from the generic pieces in [`toolkit`]. Folding is
//! total and deterministic: it reads nothing but its arguments, never panics, and counts the
//! kinds it has no fold for (so logs written by newer versions or by an embedder's program
//! still open, and say what they hold). No disk, network, clock or randomness here.
//!
//! ```
//! use elfiee_projections::State;
//! let state = State::default();
//! assert_eq!(state.blocks.len(), 0);
//! assert_eq!(state.digest(), State::default().digest());
//! ```

mod caught;
pub mod content;
pub mod context;
mod fold;
mod graph;
pub mod lazy;
mod state;
pub mod toolkit;
pub mod upcast;

pub use caught::panic_message;
pub use context::{
    collect_context, collect_context_with, count_tokens, keywords, Context, ContextItem,
    ContextOptions, Rank,
};
pub use fold::{Applied, Fold, Folded, Folds, SALVAGE_LOST};
pub use graph::RelationGraph;
pub use lazy::{Image, LazyMap};
pub use state::{State, StateDigest};
pub use toolkit::{fold_patch, set_block, update_block};
pub use upcast::{UpcastError, Upcaster};
