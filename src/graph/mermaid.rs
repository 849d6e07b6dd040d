//! Mermaid flowchart output.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::model::Graph;

/// Text safe inside a Mermaid quoted label or edge text: the characters Mermaid would read as
/// syntax or markup become entity codes (`#quot;`, `#35;` …), a newline becomes `<br/>`, other
/// control characters are dropped.
pub(super) fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '#' => out.push_str("#35;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '&' => out.push_str("#amp;"),
            '|' => out.push_str("#124;"),
            '`' => out.push_str("#96;"),
            '\n' => out.push_str("<br/>"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Class (and style) of the block types the picture colours.
const CLASSES: [(&str, &str); 5] = [
    ("markdown", "fill:#e8f0fe,stroke:#4a6fa5"),
    ("code", "fill:#e6f4ea,stroke:#3c8d5a"),
    ("directory", "fill:#fef7e0,stroke:#b08800"),
    ("terminal", "fill:#f1f3f4,stroke:#5f6368"),
    ("agent", "fill:#fce8e6,stroke:#c5221f"),
];

pub(super) fn render(g: &Graph) -> String {
    let mut out = String::with_capacity(80 * (g.nodes.len() + g.edges.len()) + 256);
    out.push_str("flowchart BT\n");
    let index = g.positions();
    let mut by_class: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let id: String = n.id.chars().filter(|c| !c.is_control()).collect();
        let _ = writeln!(out, "  %% n{i} = {id}");
        let _ = writeln!(
            out,
            "  n{i}[\"{}<br/>{}\"]",
            text(&n.name),
            text(&n.block_type)
        );
        if CLASSES.iter().any(|(t, _)| *t == n.block_type) {
            by_class.entry(&n.block_type).or_default().push(i);
        }
    }
    for e in &g.edges {
        let (Some(a), Some(b)) = (index.get(e.from.as_str()), index.get(e.to.as_str())) else {
            continue;
        };
        let arrow = if e.relation == "implement" {
            "-.->"
        } else {
            "-->"
        };
        let _ = writeln!(out, "  n{a} {arrow}|{}| n{b}", text(&e.relation));
    }
    for (ty, style) in CLASSES {
        if let Some(members) = by_class.get(ty) {
            let _ = writeln!(out, "  classDef t_{ty} {style}");
            let list: Vec<String> = members.iter().map(|i| format!("n{i}")).collect();
            let _ = writeln!(out, "  class {} t_{ty}", list.join(","));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::model::{Edge, Graph, Node};

    /// What a Mermaid flowchart says, read line by line: node labels by Mermaid id, edges as
    /// (from, arrow, text, to), and the block id each node's comment names. Panics on any line
    /// that is not one of the forms the renderer writes, or on a label that would end early.
    struct Parsed {
        labels: Vec<(String, String)>,
        block_ids: Vec<String>,
        edges: Vec<(String, String, String, String)>,
    }

    fn parse(text: &str) -> Parsed {
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("flowchart BT"));
        let mut p = Parsed {
            labels: Vec::new(),
            block_ids: Vec::new(),
            edges: Vec::new(),
        };
        for line in lines {
            let line = line
                .strip_prefix("  ")
                .unwrap_or_else(|| panic!("not indented: {line:?}"));
            if let Some(c) = line.strip_prefix("%% ") {
                let (_, id) = c.split_once(" = ").expect("comment n<i> = id");
                p.block_ids.push(id.to_owned());
            } else if line.starts_with("classDef ") || line.starts_with("class ") {
            } else if let Some((id, rest)) = line.split_once("[\"") {
                let label = rest.strip_suffix("\"]").expect("label ends with \"]");
                assert!(!label.contains('"'), "quote inside a label: {line:?}");
                assert!(id.starts_with('n') && id[1..].parse::<usize>().is_ok());
                p.labels.push((id.to_owned(), label.to_owned()));
            } else {
                let parts: Vec<&str> = line.splitn(3, ' ').collect();
                assert_eq!(parts.len(), 3, "not an edge: {line:?}");
                let (arrow, label) = parts[1].split_once('|').expect("edge text");
                let label = label.strip_suffix('|').expect("edge text ends with |");
                assert!(matches!(arrow, "-->" | "-.->"), "{line:?}");
                assert!(!label.contains('|'), "{line:?}");
                p.edges.push((
                    parts[0].to_owned(),
                    arrow.to_owned(),
                    label.to_owned(),
                    parts[2].to_owned(),
                ));
            }
        }
        p
    }

    proptest! {
        /// Whatever the names hold, every label stays one quoted label on one line, and the
        /// edges keep their ends.
        #[test]
        fn any_names_stay_inside_their_labels(names in proptest::collection::vec("\\PC{0,12}|[\"#<>&|`\n\r\\]\\[(){}]{0,6}", 1..6)) {
            let nodes: Vec<Node> = names.iter().enumerate().map(|(i, name)| Node {
                id: format!("b{i}"), name: name.clone(), block_type: "markdown".into(),
            }).collect();
            let edges: Vec<Edge> = (1..nodes.len()).map(|i| Edge {
                from: format!("b{i}"), to: "b0".into(), relation: "implement".into(),
            }).collect();
            let g = Graph { nodes, edges };
            let p = parse(&g.to_mermaid());
            prop_assert_eq!(p.labels.len(), g.nodes.len());
            prop_assert_eq!(p.block_ids, g.nodes.iter().map(|n| n.id.clone()).collect::<Vec<_>>());
            for (i, (id, label)) in p.labels.iter().enumerate() {
                prop_assert_eq!(id, &format!("n{i}"));
                prop_assert!(label.ends_with("<br/>markdown"));
            }
            for (i, e) in p.edges.iter().enumerate() {
                prop_assert_eq!(e, &(format!("n{}", i + 1), "-.->".into(), "implement".into(), "n0".into()));
            }
        }
    }

    #[test]
    fn special_characters_become_entity_codes() {
        assert_eq!(
            super::text("a\"b#c<d>e&f|g`h\ni\u{7}"),
            "a#quot;b#35;c#lt;d#gt;e#amp;f#124;g#96;h<br/>i"
        );
    }
}
