use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use elfiee_model::{Block, CapError, Command, Ctx, Event, EventDraft, EventHash, WILDCARD};
use elfiee_projections::{Applied, Fold, Folds, State};

use crate::cbac;

/// What a capability acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The whole file (`*`): the command carries no block id; CBAC needs a grant on `*`.
    File,
    /// One existing block, optionally of one type.
    Block(Option<&'static str>),
    /// A block, or `*` when the command carries no block id (grants).
    BlockOrFile,
}

/// How events of a kind merge when devices write concurrently (sync asks the kind; see
/// `elfiee_sync::replica`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Merge {
    /// Folded in the merged order, nothing else (the default).
    #[default]
    Fold,
    /// Changes the block it names: skipped when that block is gone in the merged order.
    BlockPatch,
    /// Overwrites the block's content (a body, a name): skipped when the block is gone; of
    /// concurrent writes the later in the merged order wins, and the block lists the loser
    /// in `metadata.custom.conflicts` (the loser stays in the log).
    BlockWrite,
    /// A relation from the block it names: skipped when that block is gone or when it would
    /// close a cycle.
    Link,
}

/// What a handler returns: the events to commit (possibly none), or why the command is
/// refused.
pub type Handled = Result<Vec<EventDraft>, CapError>;

/// A pure command handler. Implementations must not do I/O, read the clock or use randomness:
/// everything they need is in the command, the state and the [`Ctx`].
pub trait Capability: Send + Sync + 'static {
    /// Stable id, `namespace.verb` (e.g. `markdown.write`).
    fn id(&self) -> &'static str;
    /// What the command targets; checked before the handler runs.
    fn target(&self) -> Target;
    /// Validates the command against the state and returns the events to commit (possibly none).
    fn handle(&self, cmd: &Command, state: &State, ctx: &Ctx) -> Handled;
    /// The capability CBAC checks for this one. Effect outcomes (e.g. `terminal.output`) are
    /// authorized by the capability that triggered the effect (`terminal.execute`).
    fn authorized_by(&self, _cmd: &Command) -> &'static str {
        self.id()
    }
    /// How events of kind [`Capability::id`] fold into the state, registered with the
    /// capability by [`Registry::register`]. `None` (the default) registers the kind as known
    /// with no effect on the state, unless a fold for it is registered already
    /// ([`Registry::register_fold`], which also serves kinds without a command of their own).
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        None
    }
    /// How this capability's events (kind = [`Capability::id`]) merge across devices.
    fn merge(&self) -> Merge {
        Merge::Fold
    }
}

/// All known capabilities, by id, and the fold of every known event kind: what an engine
/// needs to run commands and to fold their events (live, on replay, from a snapshot).
///
/// [`Registry::builtin`] holds the built-in block types; a program adds its own
/// capabilities with [`Registry::register`] and gives the registry to the engine
/// (`EngineConfig { registry, .. }`), the command line (`elfiee::cli::main_with`) and the
/// test kit alike. Its capabilities then get what the built-in ones get: CBAC, the log,
/// replay, snapshots, `elfiee exec`, MCP.
///
/// ```
/// use std::sync::Arc;
/// use elfiee_capabilities::{Capability, Handled, Registry, Target};
/// use elfiee_model::{Command, Ctx, EventDraft};
/// use elfiee_projections::{fold_patch, Fold, State};
/// use serde_json::json;
///
/// /// `note.pin`: marks a markdown block as pinned (`metadata.custom.pinned`).
/// struct Pin;
///
/// impl Capability for Pin {
///     fn id(&self) -> &'static str {
///         "note.pin"
///     }
///     fn target(&self) -> Target {
///         Target::Block(Some("markdown")) // checked before `handle` runs
///     }
///     fn handle(&self, cmd: &Command, _: &State, _: &Ctx) -> Handled {
///         let block = cmd.block_id.clone().unwrap_or_default();
///         Ok(vec![EventDraft::new(block, self.id(), json!({"custom": {"pinned": true}}))])
///     }
///     fn fold(&self) -> Option<Arc<dyn Fold>> {
///         Some(Arc::new(fold_patch)) // `custom` keys go into the block's metadata
///     }
/// }
///
/// let mut registry = Registry::builtin();
/// registry.register(Arc::new(Pin));
/// assert!(registry.ids().iter().any(|id| id == "note.pin"));
///
/// // The pure pipeline by hand, as the engine runs it (the engine adds the log and the seqs).
/// let ctx = registry.ctx(chrono::DateTime::UNIX_EPOCH, "node-1", [7; 16]);
/// let mut state = State::default();
/// let mut seq = 0;
/// let mut run = |state: &mut State, cmd: Command| {
///     let events = registry.execute(&cmd, state, &ctx)?;
///     for mut event in events.clone() {
///         seq += 1;
///         event.seq = seq;
///         registry.apply(state, &event);
///     }
///     Ok::<_, elfiee_model::CapError>(events)
/// };
/// run(&mut state, Command::new("alice", "elf.init", None, json!({"name": "Alice"})))?;
/// let created = run(&mut state, Command::new("alice", "core.create", None, json!({"name": "n", "block_type": "markdown"})))?;
/// let note = created[0].entity.clone();
///
/// run(&mut state, Command::new("alice", "note.pin", Some(&note), json!({})))?;
/// assert_eq!(state.blocks[note.as_str()].metadata.custom["pinned"], true);
/// // CBAC: an editor without a grant is refused before the handler runs.
/// assert!(run(&mut state, Command::new("bob", "note.pin", Some(&note), json!({}))).is_err());
/// # Ok::<(), elfiee_model::CapError>(())
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    caps: BTreeMap<&'static str, Arc<dyn Capability>>,
    ids: Arc<[String]>,
    folds: Folds,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("caps", &self.ids)
            .field("folds", &self.folds)
            .finish()
    }
}

impl Registry {
    /// Adds (or replaces) a capability, with its fold ([`Capability::fold`]).
    pub fn register(&mut self, cap: Arc<dyn Capability>) {
        match cap.fold() {
            Some(fold) => self.folds.register_arc(cap.id(), fold),
            None if !self.folds.knows(cap.id()) => self.folds.register_noop(cap.id()),
            None => {}
        }
        self.caps.insert(cap.id(), cap);
        self.ids = self
            .caps
            .keys()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .into();
    }

    /// Sets the fold of events of `kind` (replacing the one there), for a kind without a
    /// command of its own; a capability's kind gets its fold from [`Capability::fold`].
    pub fn register_fold(&mut self, kind: impl Into<String>, fold: impl Fold) {
        self.folds.register(kind, fold);
    }

    /// Registers the upcaster of `kind`'s payload from `from_version` to the next
    /// ([`Folds::register_upcast`]; once each, in order, from 1, or this panics). Events this
    /// registry's handlers commit for `kind` then carry `"$v": <current version>`, and older
    /// ones reach the fold (and so every handler's view of the state) in the current shape.
    pub fn register_upcast(
        &mut self,
        kind: impl Into<String>,
        from_version: u32,
        upcaster: impl Fn(serde_json::Value) -> serde_json::Value + Send + Sync + 'static,
    ) {
        self.folds.register_upcast(kind, from_version, upcaster);
    }

    /// Declares where events of `kind` carry large bodies ([`Folds::declare_body`]).
    pub fn declare_body(&mut self, kind: impl Into<String>, keys: &[&str]) {
        self.folds.declare_body(kind, keys);
    }

    /// Declares the body keys of a block type ([`Folds::declare_block_body`]).
    pub fn declare_block_body(&mut self, block_type: impl Into<String>, keys: &[&str]) {
        self.folds.declare_block_body(block_type, keys);
    }

    /// Declares that events of `kind` take the body keys of the block type their value names
    /// ([`Folds::declare_typed_body`]).
    pub fn declare_typed_body(&mut self, kind: impl Into<String>) {
        self.folds.declare_typed_body(kind);
    }

    /// The folds of every known kind.
    pub fn folds(&self) -> &Folds {
        &self.folds
    }

    /// Folds one committed event into `state` ([`Folds::apply`]).
    pub fn apply(&self, state: &mut State, event: &Event) -> Applied {
        self.folds.apply(state, event)
    }

    /// How events of `kind` merge across devices: what the capability of that id declares
    /// ([`Merge::Fold`] for a kind without one).
    pub fn merge_of(&self, kind: &str) -> Merge {
        self.caps.get(kind).map_or(Merge::Fold, |c| c.merge())
    }

    pub fn get(&self, id: &str) -> Option<&Arc<dyn Capability>> {
        self.caps.get(id)
    }

    /// Ids of every registered capability, sorted.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// A handler context for this registry.
    pub fn ctx(&self, now: DateTime<Utc>, node_id: &str, id_seed: [u8; 16]) -> Ctx {
        let mut ctx = Ctx::new(now, node_id, id_seed);
        ctx.known_caps = self.ids.clone();
        ctx
    }

    /// The pure pipeline for one command: lookup, target check, CBAC, handler, optimistic
    /// concurrency, then events with ids, attribute, clock, time and payload version
    /// ([`Folds::stamp_version`]) filled in. `seq` and `hash`
    /// are left at zero for the log to assign. A payload nested deeper than
    /// [`crate::MAX_PAYLOAD_DEPTH`] is refused before any handler sees it.
    pub fn execute(&self, cmd: &Command, state: &State, ctx: &Ctx) -> Result<Vec<Event>, CapError> {
        self.run(cmd, state, ctx, true)
    }

    /// [`Registry::execute`] for a caller that has refused payloads deeper than
    /// [`crate::MAX_PAYLOAD_DEPTH`] itself (the engine measures depth and size in one pass),
    /// so the depth is checked once.
    pub fn execute_depth_checked(
        &self,
        cmd: &Command,
        state: &State,
        ctx: &Ctx,
    ) -> Result<Vec<Event>, CapError> {
        self.run(cmd, state, ctx, false)
    }

    fn run(
        &self,
        cmd: &Command,
        state: &State,
        ctx: &Ctx,
        check_depth: bool,
    ) -> Result<Vec<Event>, CapError> {
        let cap = self
            .get(&cmd.cap_id)
            .ok_or_else(|| CapError::UnknownCapability(cmd.cap_id.clone()))?;
        if check_depth {
            let depth = crate::payload::json_depth(&cmd.payload);
            if depth > crate::payload::MAX_PAYLOAD_DEPTH {
                return Err(crate::payload::too_deep(&cmd.cap_id, depth));
            }
        }
        let block = resolve_target(cap.as_ref(), cmd, state)?;
        cbac::authorize(state, &cmd.editor_id, cap.authorized_by(cmd), block)?;
        let drafts =
            catch_unwind(AssertUnwindSafe(|| cap.handle(cmd, state, ctx))).map_err(|p| {
                CapError::HandlerPanic {
                    cap: cmd.cap_id.clone(),
                    message: elfiee_projections::panic_message(p.as_ref()),
                }
            })??;
        if let (Some(expected), Some(b)) = (cmd.expected_seq, block) {
            let actual = state.block_seq.get(&b.block_id).copied().unwrap_or(0);
            if actual > expected {
                return Err(CapError::Conflict {
                    block: b.block_id.clone(),
                    expected,
                    actual,
                });
            }
        }
        Ok(finalize(cmd, drafts, state, ctx, &self.folds))
    }
}

fn resolve_target<'s>(
    cap: &dyn Capability,
    cmd: &Command,
    state: &'s State,
) -> Result<Option<&'s Block>, CapError> {
    let Some(id) = cmd.block_id.as_deref().filter(|b| *b != WILDCARD) else {
        return match cap.target() {
            Target::Block(_) => Err(CapError::payload(
                cap.id(),
                format!("'{}' needs a target block id", cap.id()),
            )),
            Target::File | Target::BlockOrFile => Ok(None),
        };
    };
    if cap.target() == Target::File {
        return Err(CapError::payload(
            cap.id(),
            format!(
                "'{}' acts on the whole file and takes no block id (got '{id}')",
                cap.id()
            ),
        ));
    }
    let block = state
        .block(id)
        .ok_or_else(|| CapError::BlockNotFound(id.to_owned()))?;
    if let Target::Block(Some(ty)) = cap.target() {
        if block.block_type != ty {
            // Seed 001 §12.1's wording first, then what to do.
            return Err(CapError::rejected(format!(
                "Expected block_type '{ty}', got '{}': '{}' works on {ty} blocks; block '{id}' is a {} block",
                block.block_type,
                cap.id(),
                block.block_type
            )));
        }
    }
    Ok(Some(block))
}

/// Turns handler drafts into events: deterministic ids from `ctx`, attribute
/// `"<editor>/<kind>"`, the editor's vector clock advanced once per event, time from `ctx`,
/// the kind's current payload version in the value.
fn finalize(
    cmd: &Command,
    drafts: Vec<EventDraft>,
    state: &State,
    ctx: &Ctx,
    folds: &Folds,
) -> Vec<Event> {
    let key = format!("{}:{}", ctx.node_id, cmd.editor_id);
    let mut clock = state.clocks.clone();
    drafts
        .into_iter()
        .enumerate()
        .map(|(i, mut d)| {
            *clock.entry(key.clone()).or_insert(0) += 1;
            folds.stamp_version(&d.kind, &mut d.value);
            Event {
                seq: 0,
                event_id: ctx.new_id(1_000_000 + i as u32),
                cmd_id: cmd.cmd_id,
                entity: d.entity,
                attribute: format!("{}/{}", cmd.editor_id, d.kind),
                value: d.value,
                clock: clock.clone(),
                created_at: ctx.now,
                hash: EventHash::ZERO,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_capability_is_a_known_kind_and_custom_ones_join() {
        let r = Registry::builtin();
        for id in r.ids() {
            assert!(r.folds().knows(id), "{id} has no fold");
        }
        struct Note;
        impl Capability for Note {
            fn id(&self) -> &'static str {
                "note.add"
            }
            fn target(&self) -> Target {
                Target::File
            }
            fn handle(&self, _: &Command, _: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
                Ok(vec![])
            }
        }
        let mut r2 = r.clone();
        r2.register(Arc::new(Note));
        assert!(r2.folds().knows("note.add"));
        assert_ne!(r2.folds().fingerprint(), r.folds().fingerprint());
    }
}
