//! A document's state as the fold of every node's events in merge order.
//!
//! Events join in whatever order they arrive (each after its `prev` and `deps`). One that
//! sorts after everything applied is folded at once; one that sorts before applied events
//! rolls the state back to the newest checkpoint before its position and folds the rest
//! again. Events are folded with their merge position as `seq`, so the state — and its
//! digest — depends only on the set of events, never on a device's local log order.
//!
//! The fold also decides, the same way on every node:
//! - **CBAC at merge.** A command is authorized (its capability, as `authorized_by` maps it,
//!   on its target) against the state just before its first event in merge order; when it
//!   fails, none of its events is applied, and their ids are listed in
//!   `extensions.sync.unauthorized`.
//! - **Conflicts.** Of two writes to one block (`markdown.write`, `code.write`,
//!   `core.rename`) where neither is in the other's causal past, the later in merge order
//!   wins; the pair is listed in the block's `metadata.custom.conflicts` (`winner`, `loser`).
//! - **Skips.** A change to a block that a concurrent delete removed, and a link that would
//!   close a cycle once both sides merged, are not applied and are listed in
//!   `extensions.sync.skipped` (`id`, `reason`).
//! - **Removed devices.** A `node.remove {node_id, upto}` cuts that node's history: its
//!   events after origin seq `upto` keep their merge positions but are not applied (every
//!   device stores them, and the cut is a function of the set of events: wherever they
//!   sort, every device folds the same state); they are counted in [`Replica::refused`].

use std::collections::{BTreeMap, HashMap};

use elfiee_capabilities::{Merge, Registry};
use elfiee_model::{Command, Event};
use elfiee_projections::State;
use serde_json::{json, Value};

use crate::identity::{EventId, NodeId, SyncEvent};
use crate::merge::{InsertError, MergeIndex, MergeKey};

/// Keep a copy of the state every this many merge positions (what a rollback starts from).
pub const CHECKPOINT_EVERY: usize = 256;
/// How many of those copies are kept (besides the empty state).
pub const CHECKPOINTS_KEPT: usize = 8;

/// What [`Replica::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// It sorted after every applied event and was folded on top.
    Appended,
    /// It sorted before applied events: the state was rolled back and `refolded` events
    /// (this one included) folded again.
    Reordered { refolded: usize },
    /// It was here already (a redelivery).
    Duplicate,
}

/// The merge-order state of one document on one node.
#[derive(Clone)]
pub struct Replica {
    registry: Registry,
    index: MergeIndex,
    /// Every event with its command's capability and target, as sealed; boxed, so a map of
    /// tens of thousands that grows moves 40 bytes an entry, not the event (growing the
    /// maps of 28,672 events inline stalled a receiver's fold for tens of ms under a burst).
    events: HashMap<EventId, Box<Held>>,
    /// Applied events in merge order (all of them: everything added is applied).
    applied: Vec<MergeKey>,
    state: State,
    /// Position (number of events folded) → the state after them, and each block's last
    /// write then (the verdicts are not copied: see [`FoldMemory`]).
    checkpoints: BTreeMap<usize, (State, HashMap<String, EventId>)>,
    memory: FoldMemory,
    /// Every `node.remove` held: its id → (the node that committed it, the removed node, the
    /// last origin seq of the removed node that stays).
    removals: BTreeMap<EventId, Removal>,
    /// Events a removal cuts (folded unapplied), and their nodes.
    refused: BTreeMap<EventId, NodeId>,
}

/// A `node.remove` the replica holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removal {
    /// The node that committed it.
    pub by: NodeId,
    /// The removed node.
    pub node: NodeId,
    /// Its last origin seq that stays.
    pub upto: u64,
}

/// An event the replica holds, with its command (capability, target).
#[derive(Clone)]
struct Held {
    event: Event,
    command: (String, Option<String>),
    /// Its origin seq (a removal cuts by it).
    origin_seq: u64,
}

/// What the fold remembers besides the state: each command's verdict, with the merge position
/// of its first event, and each block's last write. A rollback to position `p` keeps the
/// verdicts of commands that began before `p` (nothing before `p` changed) and drops the
/// rest, so checkpoints need no copy of them (copying them made every checkpoint cost as
/// much as all commands so far).
#[derive(Clone, Default)]
struct FoldMemory {
    verdicts: HashMap<uuid::Uuid, (usize, bool)>,
    last_write: HashMap<String, EventId>,
}

impl Replica {
    pub fn new(registry: Registry) -> Replica {
        let mut checkpoints = BTreeMap::new();
        checkpoints.insert(0, (State::default(), HashMap::new()));
        Replica {
            registry,
            index: MergeIndex::new(),
            events: HashMap::new(),
            applied: Vec::new(),
            state: State::default(),
            checkpoints,
            memory: FoldMemory::default(),
            removals: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }

    /// Per removed node, how many of its events held here its removal cut.
    pub fn refused(&self) -> BTreeMap<NodeId, u64> {
        let mut out = BTreeMap::new();
        for n in self.refused.values() {
            *out.entry(*n).or_insert(0) += 1;
        }
        out
    }

    /// Every removal held, in no particular order.
    pub fn removals(&self) -> Vec<Removal> {
        self.removals.values().copied().collect()
    }

    /// Per removed node, the last origin seq of its that stays (the lowest, when it was
    /// removed twice).
    pub fn cuts(&self) -> BTreeMap<NodeId, u64> {
        let mut cuts = BTreeMap::new();
        for r in self.removals.values() {
            let c = cuts.entry(r.node).or_insert(r.upto);
            *c = (*c).min(r.upto);
        }
        cuts
    }

    pub fn index(&self) -> &MergeIndex {
        &self.index
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// The digest of the merged state: equal on every node holding the same events.
    pub fn digest(&self) -> String {
        self.state.digest()
    }

    pub fn len(&self) -> usize {
        self.applied.len()
    }

    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }

    /// Adds an event that verified ([`SyncEvent::verify`]). Waits (`Missing`) for events it
    /// names that are not here; a broken history is `Rejected`.
    pub fn add(&mut self, e: &SyncEvent) -> Result<Added, InsertError> {
        self.add_many(vec![e.clone()])
    }

    /// Adds events (each after what it names), then folds once: from the end when they all
    /// sort after the applied ones, else from the newest checkpoint before the first of them
    /// in merge order. On an error the events before the failing one stay added.
    pub fn add_many(&mut self, es: Vec<SyncEvent>) -> Result<Added, InsertError> {
        let before = self.applied.len();
        let mut first_change = usize::MAX;
        let mut failed = None;
        for e in es {
            if self.index.contains(&e.id) {
                continue;
            }
            let key = match self.index.insert(e.id, &e.origin) {
                Ok(k) => k,
                Err(why) => {
                    failed = Some(why);
                    break;
                }
            };
            let id = e.id;
            let origin_seq = e.origin.seq;
            let by = e.origin.node;
            let (event, command) = e.into_parts();
            if let Some((node, upto)) = removal_of(&command.0, &event) {
                self.removals.insert(id, Removal { by, node, upto });
                // What the cut refuses may sort anywhere: folded again from the first of it.
                let events = &self.events;
                let cut = self.applied.iter().position(|k| {
                    k.node == node && events.get(&k.id).is_some_and(|h| h.origin_seq > upto)
                });
                if let Some(at) = cut {
                    first_change = first_change.min(at);
                }
            }
            self.events.insert(
                id,
                Box::new(Held {
                    event,
                    command,
                    origin_seq,
                }),
            );
            let at = self.applied.partition_point(|k| *k < key);
            self.applied.insert(at, key);
            first_change = first_change.min(at);
        }
        let added = if first_change == usize::MAX {
            Added::Duplicate
        } else if first_change >= before {
            self.fold_from(before);
            Added::Appended
        } else {
            // Roll back to the newest checkpoint at or before the first change and fold the
            // rest again.
            self.checkpoints.retain(|pos, _| *pos <= first_change);
            let (&from, (state, last_write)) = self
                .checkpoints
                .iter()
                .next_back()
                .expect("the empty state is always a checkpoint");
            self.state = state.clone();
            self.memory.last_write = last_write.clone();
            self.memory.verdicts.retain(|_, (first, _)| *first < from);
            let refolded = self.applied.len() - from;
            self.fold_from(from);
            Added::Reordered { refolded }
        };
        match failed {
            Some(why) => Err(why),
            None => Ok(added),
        }
    }

    /// Folds `applied[from..]` onto the state, which holds the first `from` events.
    fn fold_from(&mut self, from: usize) {
        let cuts = self.cuts();
        for pos in from..self.applied.len() {
            let MergeKey { id, node, .. } = self.applied[pos];
            let Some(held) = self.events.get_mut(&id) else {
                continue;
            };
            held.event.seq = pos as u64 + 1;
            if beyond(&cuts, &node, held.origin_seq) {
                // It takes its merge position unapplied: the state has seen `seq` events
                // (what a process reaching this one through its owner socket continues from).
                self.refused.insert(id, node);
                self.state.last_seq = held.event.seq;
                continue;
            }
            fold_one(
                &self.registry,
                &self.index,
                &mut self.state,
                &mut self.memory,
                id,
                &held.event,
                &held.command,
            );
            let done = pos + 1;
            if done % CHECKPOINT_EVERY == 0 {
                self.checkpoints
                    .insert(done, (self.state.clone(), self.memory.last_write.clone()));
                // The empty state and the newest few: a rollback reaches further back only
                // for events concurrent with many since (it then folds from the start).
                while self.checkpoints.len() > CHECKPOINTS_KEPT + 1 {
                    let oldest = self.checkpoints.keys().nth(1).copied();
                    if let Some(k) = oldest {
                        self.checkpoints.remove(&k);
                    }
                }
            }
        }
    }

    /// The state folded from scratch in merge order (what [`Replica::state`] must equal).
    pub fn refold(&self) -> State {
        let mut state = State::default();
        let mut memory = FoldMemory::default();
        let cuts = self.cuts();
        for (pos, key) in self.applied.iter().enumerate() {
            let held = &self.events[&key.id];
            let mut e = held.event.clone();
            e.seq = pos as u64 + 1;
            if beyond(&cuts, &key.node, held.origin_seq) {
                state.last_seq = e.seq;
                continue;
            }
            fold_one(
                &self.registry,
                &self.index,
                &mut state,
                &mut memory,
                key.id,
                &e,
                &held.command,
            );
        }
        state
    }
}

/// The node removed and the last origin seq of its that stays, when `cap` is `node.remove`.
fn removal_of(cap: &str, e: &Event) -> Option<(NodeId, u64)> {
    if cap != "node.remove" {
        return None;
    }
    let node = NodeId::from_hex(e.value.get("node_id")?.as_str()?)?;
    Some((node, e.value.get("upto")?.as_u64()?))
}

/// Whether a removal cuts `node`'s event of origin seq `seq`.
fn beyond(cuts: &BTreeMap<NodeId, u64>, node: &NodeId, seq: u64) -> bool {
    cuts.get(node).is_some_and(|upto| seq > *upto)
}

/// Folds one event (its `seq` set to its merge position + 1): authorization of its command,
/// skips, the registry's fold, and the conflict list.
#[allow(clippy::too_many_arguments)]
fn fold_one(
    registry: &Registry,
    index: &MergeIndex,
    state: &mut State,
    memory: &mut FoldMemory,
    id: EventId,
    e: &Event,
    command: &(String, Option<String>),
) {
    fold_change(registry, index, state, memory, id, e, command);
    // Every event takes a merge position, applied or not: the state has seen `e.seq`
    // events (what a process reaching this one through its owner socket continues from).
    state.last_seq = e.seq;
}

/// [`fold_one`] but for the merge position: the change, when it is authorized and applies.
#[allow(clippy::too_many_arguments)]
fn fold_change(
    registry: &Registry,
    index: &MergeIndex,
    state: &mut State,
    memory: &mut FoldMemory,
    id: EventId,
    e: &Event,
    (cap, target): &(String, Option<String>),
) {
    let (_, allowed) = *memory.verdicts.entry(e.cmd_id).or_insert_with(|| {
        // The command as it was submitted, under its own id (`Command::new` would draw a
        // random one: a syscall per command, in what must be a pure fold).
        let cmd = Command {
            cmd_id: e.cmd_id,
            editor_id: e.editor_id().to_owned(),
            cap_id: cap.clone(),
            block_id: target.clone(),
            payload: Value::Null,
            expected_seq: None,
        };
        let authorized_by = registry
            .get(cap)
            .map(|c| c.authorized_by(&cmd))
            .unwrap_or(cap.as_str());
        let block = target.as_deref().and_then(|t| state.block(t));
        let allowed =
            elfiee_capabilities::cbac::authorize(state, e.editor_id(), authorized_by, block)
                .is_ok();
        // Its merge position (`seq` is position + 1).
        (e.seq.saturating_sub(1) as usize, allowed)
    });
    if !allowed {
        sync_list(state, "unauthorized").push(json!(id.to_hex()));
        return;
    }
    let kind = e.cap_id().to_owned();
    // The kind says how it merges (`Capability::merge`): built-ins and an embedder's alike.
    let merge = registry.merge_of(&kind);
    let touches_block = matches!(merge, Merge::BlockWrite | Merge::BlockPatch | Merge::Link);
    if touches_block && state.block(&e.entity).is_none() {
        sync_list(state, "skipped")
            .push(json!({"id": id.to_hex(), "reason": "its block was deleted"}));
        return;
    }
    if merge == Merge::Link {
        // Read as the link fold reads it: a malformed value links nothing and is not skipped.
        let to = elfiee_capabilities::builtin::link_of(e).map(|(to, _)| to);
        if to.is_some_and(|to| to == e.entity || state.reaches(to, &e.entity)) {
            sync_list(state, "skipped")
                .push(json!({"id": id.to_hex(), "reason": "the link would close a cycle"}));
            return;
        }
    }
    registry.apply(state, e);
    if merge == Merge::BlockWrite {
        if let Some(loser) = memory.last_write.insert(e.entity.clone(), id) {
            if index.concurrent(&loser, &id) {
                if let Some(b) = state.blocks.get_mut(&e.entity) {
                    let list = b
                        .metadata
                        .custom
                        .entry("conflicts".into())
                        .or_insert_with(|| json!([]));
                    if let Some(list) = list.as_array_mut() {
                        list.push(json!({"winner": id.to_hex(), "loser": loser.to_hex()}));
                    }
                }
            }
        }
    }
}

/// `extensions.sync.<key>` as a list (made if missing).
fn sync_list<'s>(state: &'s mut State, key: &str) -> &'s mut Vec<Value> {
    let list = state
        .extension_mut("sync")
        .entry(key.to_owned())
        .or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    list.as_array_mut().expect("made an array above")
}
