//! The relation graph of a document as a picture: blocks are nodes (name and type), relations
//! (`reference`, `implement`) are edges, drawn as DOT, Mermaid or a self-contained SVG.
//!
//! [`Graph`] is plain data (it serializes to `{"nodes", "edges"}`), built from a [`State`]
//! either for the whole document ([`Graph::document`]) or for the blocks near one block
//! ([`Graph::around`]). The renderers are pure functions of it and deterministic: nodes in
//! block-id order, edges in `(from, to, relation)` order, so the same state gives the same
//! bytes. The SVG is laid out in-process by the `rust-sugiyama` crate (no Graphviz needed);
//! see [`Graph::to_svg`].
//!
//! ```no_run
//! # async fn demo(file: elfiee::FileHandle) -> Result<(), elfiee::graph::GraphError> {
//! use elfiee::graph::Graph;
//!
//! let whole = file.with_state(Graph::document);
//! let near = file.with_state(|s| Graph::around(s, "spec-block-id", Some(2)))?;
//! let picture: String = whole.to_svg();
//! let json = serde_json::to_string(&near).unwrap(); // {"nodes": [...], "edges": [...]}
//! # Ok(()) }
//! ```
//!
//! ```
//! use elfiee::graph::{Edge, Graph, Node};
//!
//! let node = |id: &str, block_type: &str| Node { id: id.into(), name: id.into(), block_type: block_type.into() };
//! let graph = Graph {
//!     nodes: vec![node("parser", "code"), node("spec", "markdown")],
//!     edges: vec![Edge { from: "parser".into(), to: "spec".into(), relation: "implement".into() }],
//! };
//! assert!(graph.to_dot().contains(r#""parser" -> "spec" [label="implement""#));
//! assert!(graph.to_mermaid().contains("n0 -.->|implement| n1"));
//! assert!(graph.to_svg().contains(r#"<g class="node t-code" data-block="parser">"#));
//! ```

mod dot;
mod layout;
mod mermaid;
#[doc(hidden)]
pub mod sample;
mod svg;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use elfiee_projections::State;
use serde::{Deserialize, Serialize};

/// A block, as the picture shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Node {
    /// The block id.
    pub id: String,
    pub name: String,
    pub block_type: String,
}

/// A relation: `from` links to `to` with `relation` (`reference` or `implement`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub relation: String,
}

/// Blocks and the relations between them; nodes sorted by id, edges by `(from, to, relation)`.
/// Every edge's ends are nodes of the graph.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Graph {
    pub nodes: Vec<Node>,
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
    fn sorted(mut nodes: Vec<Node>, mut edges: Vec<Edge>) -> Graph {
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

    /// Graphviz DOT (`rankdir=BT`: related blocks above the blocks that link to them): one
    /// `"id" [label="name\ntype"]` statement per block, one `"from" -> "to" [label="relation"]`
    /// per relation (`implement` dashed).
    pub fn to_dot(&self) -> String {
        dot::render(self)
    }

    /// A Mermaid `flowchart BT` (the direction of the DOT and the SVG): nodes `n0`, `n1`, … in
    /// node order (a `%%` comment maps each to its block id) labelled `name<br/>type`;
    /// `reference` edges `-->`, `implement` edges `-.->`.
    pub fn to_mermaid(&self) -> String {
        mermaid::render(self)
    }

    /// A self-contained SVG (no scripts, no external fonts or links): each connected part laid
    /// out in layers by the `rust-sugiyama` crate (related blocks above the blocks that link
    /// to them), parts packed in rows, blocks without relations in a grid below. Each block is
    /// a `<g class="node" data-block="ID">` with a `<title>` holding its full name, type and id;
    /// each relation a `<g class="edge …" data-from data-to data-relation>`. The root is
    /// `<svg class="elfiee-graph">` and every style rule and id is scoped to it, so the text can
    /// go inline into an HTML page (no XML declaration).
    pub fn to_svg(&self) -> String {
        svg::render(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> Node {
        Node {
            id: id.into(),
            name: id.to_uppercase(),
            block_type: "markdown".into(),
        }
    }

    fn edge(from: &str, to: &str) -> Edge {
        Edge {
            from: from.into(),
            to: to.into(),
            relation: "reference".into(),
        }
    }

    /// a → b → c → d, e → b, f alone.
    fn chain() -> Graph {
        Graph::sorted(
            ["a", "b", "c", "d", "e", "f"].map(node).to_vec(),
            vec![
                edge("a", "b"),
                edge("b", "c"),
                edge("c", "d"),
                edge("e", "b"),
            ],
        )
    }

    fn ids(g: &Graph) -> Vec<&str> {
        g.nodes.iter().map(|n| n.id.as_str()).collect()
    }

    #[test]
    fn reachable_follows_relations_both_ways_up_to_depth() {
        let g = chain();
        assert_eq!(ids(&g.reachable("b", Some(0))), ["b"]);
        assert_eq!(ids(&g.reachable("b", Some(1))), ["a", "b", "c", "e"]);
        assert_eq!(ids(&g.reachable("b", Some(2))), ["a", "b", "c", "d", "e"]);
        assert_eq!(ids(&g.reachable("d", None)), ["a", "b", "c", "d", "e"]);
        assert_eq!(ids(&g.reachable("f", None)), ["f"]);
        assert!(g.reachable("zzz", None).nodes.is_empty());
        let near = g.reachable("b", Some(1));
        assert_eq!(
            near.edges,
            vec![edge("a", "b"), edge("b", "c"), edge("e", "b")]
        );
    }

    #[test]
    fn edges_to_missing_blocks_and_duplicates_are_dropped() {
        let g = Graph::sorted(
            vec![node("b"), node("a")],
            vec![edge("a", "b"), edge("a", "gone"), edge("a", "b")],
        );
        assert_eq!(ids(&g), ["a", "b"]);
        assert_eq!(g.edges, vec![edge("a", "b")]);
    }
}
