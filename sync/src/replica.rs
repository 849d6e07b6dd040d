//! A document's state as the fold of every node's events in merge order.
//!
//! Events join in whatever order they arrive (each after its `prev` and `deps`). One that
//! sorts after everything applied is folded at once; one that sorts before applied events
//! rolls the state back to the newest checkpoint before its position and folds the rest
//! again. Events are folded with their merge position as `seq`, so the state — and its
//! digest — depends only on the set of events, never on a device's local log order.

use std::collections::{BTreeMap, HashMap};

use elfiee_capabilities::Registry;
use elfiee_model::Event;
use elfiee_projections::State;

use crate::identity::{EventId, SyncEvent};
use crate::merge::{InsertError, MergeIndex, MergeKey};

/// Keep a copy of the state every this many merge positions (what a rollback starts from).
pub const CHECKPOINT_EVERY: usize = 64;

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
    events: HashMap<EventId, Event>,
    /// Applied events in merge order (all of them: everything added is applied).
    applied: Vec<MergeKey>,
    state: State,
    /// Position (number of events folded) → the state after them.
    checkpoints: BTreeMap<usize, State>,
}

impl Replica {
    pub fn new(registry: Registry) -> Replica {
        let mut checkpoints = BTreeMap::new();
        checkpoints.insert(0, State::default());
        Replica {
            registry,
            index: MergeIndex::new(),
            events: HashMap::new(),
            applied: Vec::new(),
            state: State::default(),
            checkpoints,
        }
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
        if self.index.contains(&e.id) {
            return Ok(Added::Duplicate);
        }
        let key = self.index.insert(e.id, &e.origin)?;
        self.events.insert(e.id, e.to_event());
        let at = self.applied.partition_point(|k| *k < key);
        self.applied.insert(at, key);
        if at + 1 == self.applied.len() {
            self.fold_from(at);
            return Ok(Added::Appended);
        }
        // Roll back to the newest checkpoint at or before `at` and fold the rest again.
        self.checkpoints.retain(|pos, _| *pos <= at);
        let (&from, state) = self
            .checkpoints
            .iter()
            .next_back()
            .expect("the empty state is always a checkpoint");
        self.state = state.clone();
        let refolded = self.applied.len() - from;
        self.fold_from(from);
        Ok(Added::Reordered { refolded })
    }

    /// Folds `applied[from..]` onto the state, which holds the first `from` events.
    fn fold_from(&mut self, from: usize) {
        for pos in from..self.applied.len() {
            let mut e = self.events[&self.applied[pos].id].clone();
            e.seq = pos as u64 + 1;
            self.registry.apply(&mut self.state, &e);
            let done = pos + 1;
            if done % CHECKPOINT_EVERY == 0 {
                self.checkpoints.insert(done, self.state.clone());
            }
        }
    }

    /// The state folded from scratch in merge order (what [`Replica::state`] must equal).
    pub fn refold(&self) -> State {
        let mut state = State::default();
        for (pos, key) in self.applied.iter().enumerate() {
            let mut e = self.events[&key.id].clone();
            e.seq = pos as u64 + 1;
            self.registry.apply(&mut state, &e);
        }
        state
    }
}
