//! The deterministic merge order of events from several nodes, and their causal order.
//!
//! Every node folds the same set of events in the same order, whatever order they arrived in:
//! by Lamport time (1 + the largest Lamport time of `prev` and `deps`), then origin node id,
//! then event id. An event's causal past is what its `prev` and `deps` reach; two events
//! where neither is in the other's past are concurrent (their writes to one block conflict).
//! Causal past is answered with a vector of per-node `origin_seq`s kept for every event.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::identity::{EventId, NodeId, Origin, Rejection};

/// An event's position in the merge order: compare keys to compare positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MergeKey {
    pub lamport: u64,
    pub node: NodeId,
    pub id: EventId,
}

#[derive(Debug, Clone)]
struct Entry {
    key: MergeKey,
    seq: u64,
    /// Per node, the highest `origin_seq` in this event's causal past, itself included.
    past: BTreeMap<NodeId, u64>,
}

/// Why an event cannot join the index yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// It names events this node does not have yet (ingest waits for them).
    Events(Vec<EventId>),
}

/// The events a node has, with their merge keys and causal pasts.
#[derive(Debug, Clone, Default)]
pub struct MergeIndex {
    /// Boxed: growing a map of tens of thousands moves 40 bytes an entry.
    entries: HashMap<EventId, Box<Entry>>,
    /// Per node, the id of its latest event here and that event's `origin_seq`.
    heads: BTreeMap<NodeId, (u64, EventId)>,
    order: BTreeSet<MergeKey>,
}

impl MergeIndex {
    pub fn new() -> MergeIndex {
        MergeIndex::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, id: &EventId) -> bool {
        self.entries.contains_key(id)
    }

    /// What a node's next own event names: its previous event and the other nodes' latest.
    pub fn next_origin(&self, node: NodeId) -> Origin {
        let (seq, prev) = match self.heads.get(&node) {
            Some((seq, id)) => (seq + 1, Some(*id)),
            None => (1, None),
        };
        let mut deps: Vec<EventId> = self
            .heads
            .iter()
            .filter(|(n, _)| **n != node)
            .map(|(_, (_, id))| *id)
            .collect();
        deps.sort();
        Origin {
            node,
            seq,
            prev,
            deps,
        }
    }

    /// Adds an event. Its `prev` must be the node's latest event here (gapless history), and
    /// its `deps` must be here. Returns its merge key; adding one already here returns the
    /// key it has.
    pub fn insert(&mut self, id: EventId, origin: &Origin) -> Result<MergeKey, InsertError> {
        if let Some(e) = self.entries.get(&id) {
            return Ok(e.key);
        }
        let expected = self.heads.get(&origin.node).map(|(seq, id)| (*seq, *id));
        let prev_ok = match (expected, origin.prev) {
            (None, None) => origin.seq == 1,
            (Some((seq, head)), Some(prev)) => prev == head && origin.seq == seq + 1,
            _ => false,
        };
        if !prev_ok {
            // A prev we do not have yet is a gap to wait for, not a forgery.
            if let Some(prev) = origin.prev {
                if !self.entries.contains_key(&prev) {
                    return Err(InsertError::Missing(Missing::Events(vec![prev])));
                }
            }
            return Err(InsertError::Rejected(Rejection::BrokenPrev {
                seq: origin.seq,
                why: match expected {
                    None => "the node's first event must have origin_seq 1 and no prev".into(),
                    Some((seq, _)) => format!(
                        "the node's latest event here is origin_seq {seq}; this one must follow it"
                    ),
                },
            }));
        }
        let missing: Vec<EventId> = origin
            .deps
            .iter()
            .filter(|d| !self.entries.contains_key(*d))
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(InsertError::Missing(Missing::Events(missing)));
        }
        let mut lamport = 0;
        let mut past: BTreeMap<NodeId, u64> = BTreeMap::new();
        for parent in origin.prev.iter().chain(&origin.deps) {
            let p = &self.entries[parent];
            lamport = lamport.max(p.key.lamport);
            for (n, s) in &p.past {
                let e = past.entry(*n).or_insert(0);
                *e = (*e).max(*s);
            }
        }
        past.insert(origin.node, origin.seq);
        let key = MergeKey {
            lamport: lamport + 1,
            node: origin.node,
            id,
        };
        self.entries.insert(
            id,
            Box::new(Entry {
                key,
                seq: origin.seq,
                past,
            }),
        );
        self.heads.insert(origin.node, (origin.seq, id));
        self.order.insert(key);
        Ok(key)
    }

    pub fn key(&self, id: &EventId) -> Option<MergeKey> {
        self.entries.get(id).map(|e| e.key)
    }

    /// Whether `a` is in the causal past of `b` (`a` happened before `b`).
    pub fn happened_before(&self, a: &EventId, b: &EventId) -> bool {
        let (Some(a), Some(b)) = (self.entries.get(a), self.entries.get(b)) else {
            return false;
        };
        a.key.id != b.key.id && b.past.get(&a.key.node).is_some_and(|s| *s >= a.seq)
    }

    /// Neither is in the other's causal past.
    pub fn concurrent(&self, a: &EventId, b: &EventId) -> bool {
        a != b && !self.happened_before(a, b) && !self.happened_before(b, a)
    }

    /// Every event, in merge order.
    pub fn order(&self) -> impl Iterator<Item = &MergeKey> {
        self.order.iter()
    }

    /// The position (from 1) of an event in the merge order.
    pub fn position(&self, id: &EventId) -> Option<usize> {
        let key = self.key(id)?;
        Some(self.order.range(..key).count() + 1)
    }
}

/// Why [`MergeIndex::insert`] did not add an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertError {
    /// It names events not here yet.
    Missing(Missing),
    /// It can never be added: its history is not the node's.
    Rejected(Rejection),
}
