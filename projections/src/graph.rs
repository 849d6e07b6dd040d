use std::collections::{BTreeMap, BTreeSet};

use elfiee_model::Relation;
use serde::{Deserialize, Serialize};

/// Reverse index of the relation graph. Forward edges live in each `Block::children`; this keeps
/// `child → {(relation, parent)}` so that deletes and context walks need no full scan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelationGraph {
    parents: BTreeMap<String, BTreeSet<(Relation, String)>>,
}

impl RelationGraph {
    pub(crate) fn add(&mut self, from: &str, to: &str, rel: Relation) {
        self.parents
            .entry(to.to_owned())
            .or_default()
            .insert((rel, from.to_owned()));
    }

    pub(crate) fn remove(&mut self, from: &str, to: &str, rel: Relation) {
        if let Some(set) = self.parents.get_mut(to) {
            set.remove(&(rel, from.to_owned()));
            if set.is_empty() {
                self.parents.remove(to);
            }
        }
    }

    pub(crate) fn forget(&mut self, block: &str) {
        self.parents.remove(block);
        for set in self.parents.values_mut() {
            set.retain(|(_, p)| p != block);
        }
        self.parents.retain(|_, s| !s.is_empty());
    }

    /// Blocks that link *to* `block`, with the relation they use.
    pub fn parents_of<'a>(&'a self, block: &str) -> impl Iterator<Item = (Relation, &'a str)> + 'a {
        self.parents
            .get(block)
            .into_iter()
            .flat_map(|s| s.iter().map(|(r, p)| (*r, p.as_str())))
    }
}
