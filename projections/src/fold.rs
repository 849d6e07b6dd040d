//! The extension point of the projection: which pure function folds each event kind into the
//! [`State`].
//!
//! Every event kind has at most one [`Fold`], kept in a [`Folds`] table. This crate knows no
//! kind by name: the built-in kinds bring their folds with their capabilities
//! (`elfiee_capabilities::Registry::builtin().folds()`), exactly as an embedder's kinds do
//! (`Capability::fold`, or `Registry::register_fold`); there is no closed list that custom
//! kinds cannot join. The shapes folds share are in [`crate::toolkit`].
//!
//! [`Folds::apply`] does the bookkeeping every event gets (`last_seq`, the vector clock, the
//! block's seq when the fold says it touched its block), and records the kinds it has no fold
//! for in [`State::unknown_kinds`], so a document written by a program that knew more kinds
//! still opens, and says what it could not give a meaning.
//!
//! ```
//! use elfiee_projections::{Folded, Folds, State};
//! use elfiee_model::Event;
//!
//! // A counter kept in the state's extension data: its own namespace, its own fold.
//! fn bump(state: &mut State, _event: &Event) -> Folded {
//!     let n = state.extensions.entry("counter".into()).or_insert(0.into());
//!     *n = (n.as_u64().unwrap_or(0) + 1).into();
//!     Folded::Done
//! }
//! let mut folds = Folds::default();
//! folds.register("counter.bump", bump);
//! assert!(folds.knows("counter.bump") && !folds.knows("core.create"));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use elfiee_model::Event;

use crate::state::State;

/// What a fold did with its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folded {
    /// It changed the block the event names (`event.entity`): that block's seq (used for
    /// optimistic concurrency, `Command::expected_seq`) becomes the event's.
    Block,
    /// Anything else: it changed something other than a block, or nothing (a malformed value,
    /// a block that is gone — folds skip what they cannot use, they never fail).
    Done,
}

/// A pure function from (state, event) to the next state, for one event kind.
///
/// It must be total and deterministic: no I/O, no clock, no randomness, no iteration over
/// hash maps whose order leaks into the state, and no panics (a panic is caught and logged,
/// and leaves the state however far the fold got). `elfiee::testkit` checks all of this.
pub trait Fold: Send + Sync + 'static {
    fn apply(&self, state: &mut State, event: &Event) -> Folded;

    /// Bump when the meaning of the kind changes: snapshots record the versions of the folds
    /// that made them, and one made by other folds is not used (the log is replayed instead).
    fn version(&self) -> u32 {
        1
    }
}

impl<F> Fold for F
where
    F: Fn(&mut State, &Event) -> Folded + Send + Sync + 'static,
{
    fn apply(&self, state: &mut State, event: &Event) -> Folded {
        self(state, event)
    }
}

/// What [`Folds::apply`] did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Its kind's fold ran.
    Folded(Folded),
    /// No fold is registered for its kind: it is counted in [`State::unknown_kinds`].
    Unknown,
    /// The kind's fold panicked (with this message); the state holds what it did until then.
    Panicked(String),
}

/// The fold of every known event kind.
#[derive(Clone, Default)]
pub struct Folds {
    by_kind: BTreeMap<String, Arc<dyn Fold>>,
    fingerprint: String,
    /// Event kind → the `value.contents` keys that may hold a large body.
    bodies: BTreeMap<String, Vec<String>>,
    /// Block type → the `contents` keys of its body (set by a kind of `typed_bodies`).
    block_bodies: BTreeMap<String, Vec<String>>,
    /// Kinds whose body keys are those of the block type their value names (`core.create`).
    typed_bodies: BTreeSet<String>,
}

impl std::fmt::Debug for Folds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Folds")
            .field("kinds", &self.by_kind.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Folds {
    /// Sets the fold of `kind` (replacing one registered before).
    pub fn register(&mut self, kind: impl Into<String>, fold: impl Fold) {
        self.register_arc(kind, Arc::new(fold));
    }

    /// [`Folds::register`] for a fold already shared.
    pub fn register_arc(&mut self, kind: impl Into<String>, fold: Arc<dyn Fold>) {
        self.by_kind.insert(kind.into(), fold);
        self.fingerprint = fingerprint(&self.by_kind);
    }

    /// Registers `kind` as known with no effect on the state (a request that an effect
    /// answers, a read): its events are not reported as unknown.
    pub fn register_noop(&mut self, kind: impl Into<String>) {
        self.register(kind, |_: &mut State, _: &Event| Folded::Done);
    }

    /// Declares that events of `kind` may carry large bodies at `value.contents.<key>` for
    /// each of `keys`: the engine stores a body of 256 bytes or more in the document's content
    /// store and the event carries a reference, which [`crate::toolkit::fold_patch`] (or a fold that
    /// calls [`crate::content::take_refs`]) moves into the block's `content_refs`.
    pub fn declare_body(&mut self, kind: impl Into<String>, keys: &[&str]) {
        self.bodies
            .insert(kind.into(), keys.iter().map(|k| k.to_string()).collect());
    }

    /// Declares the body keys of blocks of `block_type`: an event of a kind declared with
    /// [`Folds::declare_typed_body`] (the built-ins' `core.create`) that makes such a block with
    /// large `contents` at those keys stores them in the content store.
    pub fn declare_block_body(&mut self, block_type: impl Into<String>, keys: &[&str]) {
        self.block_bodies.insert(
            block_type.into(),
            keys.iter().map(|k| k.to_string()).collect(),
        );
    }

    /// Declares that events of `kind` make a block whose type is the value's `block_type`:
    /// their body keys are that type's ([`Folds::declare_block_body`]), not the kind's.
    pub fn declare_typed_body(&mut self, kind: impl Into<String>) {
        self.typed_bodies.insert(kind.into());
    }

    /// The `value.contents` keys an event of `kind` with this value may set a body at.
    pub fn body_keys<'a>(&'a self, kind: &str, value: &serde_json::Value) -> &'a [String] {
        let keys = if self.typed_bodies.contains(kind) {
            let ty = value
                .get("block_type")
                .and_then(|t| t.as_str())
                .unwrap_or("");
            self.block_bodies.get(ty)
        } else {
            self.bodies.get(kind)
        };
        keys.map_or(&[], Vec::as_slice)
    }

    pub fn get(&self, kind: &str) -> Option<&Arc<dyn Fold>> {
        self.by_kind.get(kind)
    }

    pub fn knows(&self, kind: &str) -> bool {
        self.by_kind.contains_key(kind)
    }

    /// Every kind with a fold, sorted.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.by_kind.keys().map(String::as_str)
    }

    /// A short hash of the kinds and their fold versions. Snapshots record it: a state folded
    /// by other folds is not the one these folds would give.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Folds one committed event into `state`: `last_seq`, the vector clock, then the kind's
    /// fold (panics caught), then the block's seq if the fold touched its block. Total.
    pub fn apply(&self, state: &mut State, event: &Event) -> Applied {
        state.last_seq = event.seq;
        for (k, v) in &event.clock {
            let e = state.clocks.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
        let kind = event.cap_id();
        let Some(fold) = self.by_kind.get(kind) else {
            *state.unknown_kinds.entry(kind.to_owned()).or_insert(0) += 1;
            return Applied::Unknown;
        };
        match catch_unwind(AssertUnwindSafe(|| fold.apply(state, event))) {
            Ok(Folded::Block) => {
                state.block_seq.insert(event.entity.clone(), event.seq);
                Applied::Folded(Folded::Block)
            }
            Ok(Folded::Done) => Applied::Folded(Folded::Done),
            Err(p) => {
                let message = panic_message(p.as_ref());
                tracing::error!(
                    kind,
                    seq = event.seq,
                    %message,
                    "a fold panicked; the event's meaning is incomplete in this state"
                );
                Applied::Panicked(message)
            }
        }
    }
}

/// The text of a caught panic.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

fn fingerprint(by_kind: &BTreeMap<String, Arc<dyn Fold>>) -> String {
    let mut h = blake3::Hasher::new();
    for (kind, fold) in by_kind {
        h.update(kind.as_bytes());
        h.update(&[0]);
        h.update(&fold.version().to_le_bytes());
    }
    h.finalize().to_hex()[..16].to_string()
}
