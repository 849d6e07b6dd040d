//! [`Builtin`]: a capability declared as data — its id, target, how it merges, who authorizes
//! it, its handler and its fold, the last two plain functions. Every built-in is one such
//! value in its file (`CAPABILITIES`), so a file says only what makes its kinds differ.

use std::sync::Arc;

use elfiee_model::{Command, Ctx, Event};
use elfiee_projections::{Fold, Folded, State};

use crate::{Capability, Handled, Merge, Target};

/// A pure command handler as a plain function ([`Capability::handle`]).
pub type Handler = fn(&Command, &State, &Ctx) -> Handled;

/// A fold as a plain function ([`Capability::fold`]; version 1).
pub type FoldFn = fn(&mut State, &Event) -> Folded;

/// A [`Capability`] from plain data:
/// `Builtin::new("core.rename", Target::Block(None), handle).merge(Merge::BlockWrite).fold(fold_rename)`.
/// What is not given takes the trait's default: [`Merge::Fold`], authorized by its own id,
/// no fold (the kind is known and leaves the state alone). An embedder may declare its own
/// capabilities the same way, or implement [`Capability`] itself.
///
/// ```
/// use std::sync::Arc;
/// use elfiee_capabilities::builtin::Builtin;
/// use elfiee_capabilities::{Handled, Registry, Target};
/// use elfiee_model::{Command, Ctx, EventDraft};
/// use elfiee_projections::State;
///
/// fn add(cmd: &Command, _: &State, _: &Ctx) -> Handled {
///     let block = cmd.block_id.clone().unwrap_or_default();
///     Ok(vec![EventDraft::new(block, "note.add", cmd.payload.clone())])
/// }
///
/// let mut registry = Registry::builtin();
/// registry.register(Arc::new(Builtin::new("note.add", Target::Block(None), add)));
/// assert!(registry.ids().iter().any(|id| id == "note.add"));
/// assert!(registry.folds().knows("note.add"));
/// ```
#[derive(Clone, Copy)]
pub struct Builtin {
    id: &'static str,
    target: Target,
    handle: Handler,
    merge: Merge,
    authorized_by: Option<fn(&Command) -> &'static str>,
    fold: Option<FoldFn>,
    /// The block type whose body it writes ([`Builtin::body_write`]).
    body: Option<&'static str>,
}

impl Builtin {
    pub const fn new(id: &'static str, target: Target, handle: Handler) -> Builtin {
        Builtin {
            id,
            target,
            handle,
            merge: Merge::Fold,
            authorized_by: None,
            fold: None,
            body: None,
        }
    }

    /// A write to the body of a block of `block_type` (`markdown.write`, `code.write`): it
    /// targets such a block, its event is a block patch ([`elfiee_projections::fold_patch`])
    /// and concurrent writes merge as [`Merge::BlockWrite`] (one winner, a conflict mark).
    pub const fn body_write(
        id: &'static str,
        block_type: &'static str,
        handle: Handler,
    ) -> Builtin {
        let write = Builtin::new(id, Target::Block(Some(block_type)), handle)
            .merge(Merge::BlockWrite)
            .fold(elfiee_projections::fold_patch);
        Builtin {
            body: Some(block_type),
            ..write
        }
    }

    /// The block type whose body it writes, for a [`Builtin::body_write`]: the registry
    /// declares that type's body keys for the kind and the block type.
    pub const fn body(&self) -> Option<&'static str> {
        self.body
    }

    /// How its events merge across devices ([`Capability::merge`]).
    pub const fn merge(self, merge: Merge) -> Builtin {
        Builtin { merge, ..self }
    }

    /// The capability CBAC checks instead of its own id ([`Capability::authorized_by`]).
    pub const fn authorized_by(self, by: fn(&Command) -> &'static str) -> Builtin {
        Builtin {
            authorized_by: Some(by),
            ..self
        }
    }

    /// How its events fold into the state ([`Capability::fold`]).
    pub const fn fold(self, fold: FoldFn) -> Builtin {
        Builtin {
            fold: Some(fold),
            ..self
        }
    }
}

impl Capability for Builtin {
    fn id(&self) -> &'static str {
        self.id
    }
    fn target(&self) -> Target {
        self.target
    }
    fn handle(&self, cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
        (self.handle)(cmd, state, ctx)
    }
    fn authorized_by(&self, cmd: &Command) -> &'static str {
        self.authorized_by.map_or(self.id, |by| by(cmd))
    }
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        self.fold.map(|f| Arc::new(f) as Arc<dyn Fold>)
    }
    fn merge(&self) -> Merge {
        self.merge
    }
}
