//! The relation graph of a document as a picture: blocks are nodes (name and type), relations
//! (`reference`, `implement`) are edges, drawn as DOT, Mermaid or a self-contained SVG.
//!
//! [`Graph`] is plain data (it serializes to `{"nodes", "edges"}`), built from a [`State`](crate::State)
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
mod model;
#[doc(hidden)]
pub mod sample;
mod svg;

pub use model::{Edge, Graph, GraphError, Node};

impl Graph {
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
