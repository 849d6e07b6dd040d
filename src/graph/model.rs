//! What a picture shows: blocks as [`Node`]s, relations as [`Edge`]s, chosen from a [`State`]
//! (the whole document, or the blocks near one). The renderers beside this module draw it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use elfiee_projections::State;
use serde::{Deserialize, Serialize};

/// A block, as the picture shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Node {
    /// The block id.
    pub id: String,
    /// The block's name (the label drawn).
    pub name: String,
    /// Its type (`markdown`, `code`, `directory`, …), drawn under the name.
    pub block_type: String,
}

/// A relation: `from` links to `to` with `relation` (`reference` or `implement`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Edge {
    /// The block the relation goes from (its id).
    pub from: String,
    /// The block it goes to.
    pub to: String,
    /// Its name: `reference` or `implement`.
    pub relation: String,
}

/// Blocks and the relations between them; nodes sorted by id, edges by `(from, to, relation)`.
/// Every edge's ends are nodes of the graph.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Graph {
    /// The blocks, sorted by id.
    pub nodes: Vec<Node>,
    /// The relations between them, sorted by `(from, to, relation)`.
    pub edges: Vec<Edge>,
}

/// Why a graph cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphError {
    /// The block to start from is not in the document.
    UnknownBlock(String),
}

impl std::fmt::Display for GraphError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GraphError::UnknownBlock(id) => write!(f, "block '{id}' not found"),
        }
    }
}

impl std::error::Error for GraphError {}

/// The fields of a block the graph needs, read without decoding its contents (a directory
/// block's entries can be large).
#[derive(Deserialize)]
struct Row {
    block_id: String,
    name: String,
    block_type: String,
    #[serde(default)]
    children: BTreeMap<String, Vec<String>>,
}

impl Graph {
    /// Every block of the document and every relation.
    pub fn document(state: &State) -> Graph {
        let rows = state.blocks.view(|b| Row {
            block_id: b.block_id.clone(),
            name: b.name.clone(),
            block_type: b.block_type.clone(),
            children: b.children.clone(),
        });
        let mut nodes = Vec::new();
        let mut edges = Vec::new();
        for row in rows {
            for (relation, targets) in &row.children {
                edges.extend(targets.iter().map(|to| Edge {
                    from: row.block_id.clone(),
                    to: to.clone(),
                    relation: relation.clone(),
                }));
            }
            nodes.push(Node {
                id: row.block_id,
                name: row.name,
                block_type: row.block_type,
            });
        }
        Graph::sorted(nodes, edges)
    }

    /// The blocks reachable from `block` in at most `depth` relation steps (`None`: any number),
    /// following relations in both directions (what it links to and what links to it), and
    /// every relation between those blocks. `depth` 0 is the block alone.
    pub fn around(state: &State, block: &str, depth: Option<usize>) -> Result<Graph, GraphError> {
        if !state.blocks.contains_key(block) {
            return Err(GraphError::UnknownBlock(block.to_owned()));
        }
        Ok(Graph::document(state).reachable(block, depth))
    }

    /// This graph cut down to the nodes within `depth` steps of `start` (both directions) and
    /// the edges between them; empty when `start` is not a node.
    pub fn reachable(&self, start: &str, depth: Option<usize>) -> Graph {
        let mut neighbours: HashMap<&str, Vec<&str>> = HashMap::new();
        for e in &self.edges {
            neighbours.entry(&e.from).or_default().push(&e.to);
            neighbours.entry(&e.to).or_default().push(&e.from);
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        if self.nodes.iter().any(|n| n.id == start) {
            seen.insert(start);
        }
        let mut queue: VecDeque<(&str, usize)> = seen.iter().map(|s| (*s, 0)).collect();
        while let Some((cur, d)) = queue.pop_front() {
            if depth.is_some_and(|max| d >= max) {
                continue;
            }
            for next in neighbours.get(cur).into_iter().flatten() {
                if seen.insert(next) {
                    queue.push_back((next, d + 1));
                }
            }
        }
        Graph {
            nodes: self
                .nodes
                .iter()
                .filter(|n| seen.contains(n.id.as_str()))
                .cloned()
                .collect(),
            edges: self
                .edges
                .iter()
                .filter(|e| seen.contains(e.from.as_str()) && seen.contains(e.to.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// Sorts, drops duplicate edges and edges whose ends are not nodes (a relation to a block
    /// that is gone cannot be drawn).
    pub(crate) fn sorted(mut nodes: Vec<Node>, mut edges: Vec<Edge>) -> Graph {
        nodes.sort();
        nodes.dedup_by(|a, b| a.id == b.id);
        let ids: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        edges.retain(|e| ids.contains(e.from.as_str()) && ids.contains(e.to.as_str()));
        edges.sort();
        edges.dedup();
        Graph { nodes, edges }
    }

    /// Each node's position in `nodes`, by block id (what the renderers index edges with).
    pub(crate) fn positions(&self) -> std::collections::HashMap<&str, usize> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (node.id.as_str(), i))
            .collect()
    }

    /// "3 blocks, 1 relation": the counts, for captions and messages.
    pub fn summary(&self) -> String {
        let count = |n: usize, noun: &str| format!("{n} {noun}{}", if n == 1 { "" } else { "s" });
        format!(
            "{}, {}",
            count(self.nodes.len(), "block"),
            count(self.edges.len(), "relation")
        )
    }
}
