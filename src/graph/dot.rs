//! Graphviz DOT output.

use std::fmt::Write as _;

use super::model::Graph;

/// A DOT quoted string holding `s` as an escString label: `"` and `\` escaped, a newline as `\n`
/// (a centred line break), other control characters dropped (a NUL ends a string for some
/// readers; `\r` would mean "right-justify").
pub(super) fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Fill colour of a block type (unknown types white).
pub(super) fn fill(block_type: &str) -> &'static str {
    match block_type {
        "markdown" => "#e8f0fe",
        "code" => "#e6f4ea",
        "directory" => "#fef7e0",
        "terminal" => "#f1f3f4",
        "agent" => "#fce8e6",
        _ => "#ffffff",
    }
}

pub(super) fn render(g: &Graph) -> String {
    let mut out = String::with_capacity(96 * (g.nodes.len() + g.edges.len()) + 256);
    out.push_str("digraph elfiee {\n");
    out.push_str("  graph [rankdir=BT, fontname=\"Helvetica\"];\n");
    out.push_str(
        "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n",
    );
    out.push_str("  edge [fontname=\"Helvetica\", fontsize=9];\n");
    for n in &g.nodes {
        let _ = writeln!(
            out,
            "  {} [label={}, fillcolor=\"{}\"];",
            quoted(&n.id),
            quoted(&format!("{}\n{}", n.name, n.block_type)),
            fill(&n.block_type),
        );
    }
    for e in &g.edges {
        let style = if e.relation == "implement" {
            ", style=dashed"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {} -> {} [label={}{style}];",
            quoted(&e.from),
            quoted(&e.to),
            quoted(&e.relation),
        );
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use graphviz_rust::dot_structures::{
        Attribute, Edge as DotEdge, EdgeTy, Graph as DotGraph, Id, Stmt, Vertex,
    };
    use proptest::prelude::*;

    use super::super::model::{Edge, Graph, Node};

    /// The text a DOT escString label shows: the inverse of `quoted` per the DOT rules.
    fn unquote(id: &Id) -> String {
        let Id::Escaped(raw) = id else {
            panic!("expected a quoted string, got {id:?}");
        };
        let inner = &raw[1..raw.len() - 1];
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => out.push('\n'),
                    Some(other) => out.push(other),
                    None => panic!("dangling backslash in {raw}"),
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    fn attr<'a>(attrs: &'a [Attribute], key: &str) -> Option<&'a Id> {
        attrs.iter().find_map(|Attribute(k, v)| match k {
            Id::Plain(k) if k == key => Some(v),
            _ => None,
        })
    }

    type Nodes = Vec<(String, String)>;
    type Edges = Vec<(String, String, String)>;

    /// Parses `dot` with graphviz-rust (an independent, grammar-based parser) and reads back
    /// the nodes as (id, label) and the edges as (from, to, label).
    fn parse(dot: &str) -> (Nodes, Edges) {
        let DotGraph::DiGraph { stmts, .. } =
            graphviz_rust::parse(dot).unwrap_or_else(|e| panic!("not DOT: {e}\n{dot}"))
        else {
            panic!("not a digraph");
        };
        let (mut nodes, mut edges) = (Vec::new(), Vec::new());
        for stmt in stmts {
            match stmt {
                Stmt::Node(n) => {
                    let label = attr(&n.attributes, "label")
                        .map(unquote)
                        .unwrap_or_default();
                    nodes.push((unquote(&n.id.0), label));
                }
                Stmt::Edge(DotEdge {
                    ty: EdgeTy::Pair(Vertex::N(a), Vertex::N(b)),
                    attributes,
                }) => {
                    let label = attr(&attributes, "label").map(unquote).unwrap_or_default();
                    edges.push((unquote(&a.0), unquote(&b.0), label));
                }
                Stmt::GAttribute(_) => {}
                other => panic!("unexpected statement {other:?}"),
            }
        }
        (nodes, edges)
    }

    proptest! {
        /// Whatever the names hold (quotes, backslashes, newlines, braces, non-ASCII), the DOT
        /// parses and every label reads back as `name\ntype`.
        #[test]
        fn any_names_survive_a_dot_parser(names in proptest::collection::vec("\\PC{0,12}|[\"\\\\\n\r\u{0}\u{1}{};\\[\\]=-]{0,6}", 1..6)) {
            let nodes: Vec<Node> = names.iter().enumerate().map(|(i, name)| Node {
                id: format!("b{i}"), name: name.clone(), block_type: "code".into(),
            }).collect();
            let edges: Vec<Edge> = (1..nodes.len()).map(|i| Edge {
                from: format!("b{i}"), to: "b0".into(), relation: "reference".into(),
            }).collect();
            let g = Graph { nodes, edges };
            let (nodes, edges) = parse(&g.to_dot());
            let expected: Vec<(String, String)> = g.nodes.iter()
                .map(|n| (n.id.clone(), format!("{}\ncode", n.name.chars().filter(|c| *c == '\n' || !c.is_control()).collect::<String>())))
                .collect();
            prop_assert_eq!(nodes, expected);
            prop_assert_eq!(edges.len(), g.edges.len());
        }
    }

    #[test]
    fn implement_edges_are_dashed_and_labelled() {
        let g = Graph {
            nodes: vec![],
            edges: vec![Edge {
                from: "a".into(),
                to: "b".into(),
                relation: "implement".into(),
            }],
        };
        assert!(g
            .to_dot()
            .contains("\"a\" -> \"b\" [label=\"implement\", style=dashed];"));
    }
}
