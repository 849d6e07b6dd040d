//! SVG output: the boxes and curves of a [`super::layout`] as plain SVG elements (no scripts,
//! no external fonts or links), styled by one `<style>` element.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::layout::{layout, short, text_width, Placed, MARGIN, NODE_H};
use super::model::Graph;

/// Relations get a text label only up to this many (beyond, the legend and `<title>` tell).
const LABELLED_EDGES: usize = 60;

/// XML text or attribute value: markup characters escaped, tab, newline and return as
/// character references (so neither line-end nor attribute normalisation changes them),
/// characters XML 1.0 forbids even as references (other control characters, U+FFFE, U+FFFF)
/// replaced by U+FFFD.
pub(super) fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// CSS class of a block type; unknown types share one.
fn type_class(block_type: &str) -> &'static str {
    match block_type {
        "markdown" => "t-markdown",
        "code" => "t-code",
        "directory" => "t-directory",
        "terminal" => "t-terminal",
        "agent" => "t-agent",
        _ => "t-other",
    }
}

fn relation_class(relation: &str) -> &'static str {
    match relation {
        "reference" => "reference",
        "implement" => "implement",
        _ => "other",
    }
}

/// Every rule scoped to the picture's root class: an SVG put inline in an HTML page (the
/// Tauri host does) shares the page's style sheet, both ways.
const STYLE: &str = "\
.elfiee-graph .background{fill:#ffffff}\
.elfiee-graph .caption{font-size:13px;fill:#202124}\
.elfiee-graph .legend text{font-size:11px;fill:#3c4043}\
.elfiee-graph .node rect{stroke-width:1}\
.elfiee-graph .node .name{font-size:12px;font-weight:600;fill:#202124}\
.elfiee-graph .node .type{font-size:10px;fill:#5f6368}\
.elfiee-graph .t-markdown rect{fill:#e8f0fe;stroke:#4a6fa5}\
.elfiee-graph .t-code rect{fill:#e6f4ea;stroke:#3c8d5a}\
.elfiee-graph .t-directory rect{fill:#fef7e0;stroke:#b08800}\
.elfiee-graph .t-terminal rect{fill:#f1f3f4;stroke:#5f6368}\
.elfiee-graph .t-agent rect{fill:#fce8e6;stroke:#c5221f}\
.elfiee-graph .t-other rect{fill:#ffffff;stroke:#5f6368}\
.elfiee-graph .edge path,.elfiee-graph .legend path{fill:none;stroke-width:1.2}\
.elfiee-graph .reference path{stroke:#5f6368}\
.elfiee-graph .implement path{stroke:#b06000;stroke-dasharray:5 3}\
.elfiee-graph .other path{stroke:#8e24aa;stroke-dasharray:1 3}\
.elfiee-graph .edge text{font-size:9px;fill:#5f6368}";

fn marker(out: &mut String, relation: &str, colour: &str) {
    let _ = write!(
        out,
        "<marker id=\"elfiee-arrow-{relation}\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\">\
         <path d=\"M0,0L10,5L0,10z\" fill=\"{colour}\"/></marker>"
    );
}

pub(super) fn render(g: &Graph) -> String {
    let l = layout(g);
    let caption = format!("elfiee relation graph: {}", g.summary());
    // The legend follows the caption (13 px); two samples 130 px apart.
    let legend_x = MARGIN + text_width(&caption) * 1.1 + 24.0;
    let width = l.width.max(legend_x + 2.0 * 130.0);
    let mut out = String::with_capacity(400 * g.nodes.len() + 300 * g.edges.len() + 2048);
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"elfiee-graph\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"Helvetica, Arial, sans-serif\">",
        w = width.ceil(),
        h = l.height.ceil()
    );
    let _ = writeln!(out, "<title>{caption}</title>");
    let _ = writeln!(out, "<style>{STYLE}</style>");
    out.push_str("<defs>");
    marker(&mut out, "reference", "#5f6368");
    marker(&mut out, "implement", "#b06000");
    marker(&mut out, "other", "#8e24aa");
    out.push_str("</defs>\n");
    out.push_str("<rect class=\"background\" width=\"100%\" height=\"100%\"/>\n");
    let _ = writeln!(
        out,
        "<text class=\"caption\" x=\"{MARGIN}\" y=\"{:.1}\">{caption}</text>",
        MARGIN + 14.0
    );
    out.push_str("<g class=\"legend\">");
    for (k, relation) in ["reference", "implement"].into_iter().enumerate() {
        let x = legend_x + k as f64 * 130.0;
        let _ = write!(
            out,
            "<g class=\"{relation}\"><path d=\"M{x:.1},{y:.1}h36\" marker-end=\"url(#elfiee-arrow-{relation})\"/>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\">{relation}</text></g>",
            y = MARGIN + 10.0,
            tx = x + 42.0,
            ty = MARGIN + 14.0,
        );
    }
    out.push_str("</g>\n");

    // Relations first, so boxes are drawn over them.
    let index = g.positions();
    // A pair linked by several relations: the curves are spread apart.
    let mut pair_count: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let ends: Vec<Option<(usize, usize)>> = g
        .edges
        .iter()
        .map(|e| Some((*index.get(e.from.as_str())?, *index.get(e.to.as_str())?)))
        .collect();
    for &(a, b) in ends.iter().flatten() {
        *pair_count.entry((a.min(b), a.max(b))).or_default() += 1;
    }
    let mut pair_seen: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    out.push_str("<g class=\"edges\">\n");
    for (e, end) in g.edges.iter().zip(&ends) {
        let Some((a, b)) = *end else { continue };
        let key = (a.min(b), a.max(b));
        let k = pair_seen.entry(key).or_default();
        let spread = (*k as f64 - (pair_count[&key] as f64 - 1.0) / 2.0) * 14.0;
        *k += 1;
        let (s, t) = (l.boxes[a], l.boxes[b]);
        let half = NODE_H / 2.0;
        // Ends spread along the facing sides, towards the other box, so the relations of a
        // busy block do not all meet in one point.
        let lean = |from: &Placed, to: &Placed| {
            ((to.x - from.x) * 0.25).clamp(-from.w * 0.35, from.w * 0.35) + spread
        };
        // Leave the source on the side facing the target; enter the target on the other side.
        let (x1, y1, x2, y2) = if t.y < s.y - 1.0 {
            (
                s.x + lean(&s, &t),
                s.y - half,
                t.x + lean(&t, &s),
                t.y + half,
            )
        } else if t.y > s.y + 1.0 {
            (
                s.x + lean(&s, &t),
                s.y + half,
                t.x + lean(&t, &s),
                t.y - half,
            )
        } else if t.x >= s.x {
            (s.x + s.w / 2.0, s.y + spread, t.x - t.w / 2.0, t.y + spread)
        } else {
            (s.x - s.w / 2.0, s.y + spread, t.x + t.w / 2.0, t.y + spread)
        };
        let (c1, c2) = if (y2 - y1).abs() > 1.0 {
            let dy = (y2 - y1) / 2.0;
            ((x1, y1 + dy), (x2, y2 - dy))
        } else {
            let dx = (x2 - x1) / 2.0;
            ((x1 + dx, y1 - 24.0), (x2 - dx, y2 - 24.0))
        };
        let class = relation_class(&e.relation);
        let from = &g.nodes[a];
        let to = &g.nodes[b];
        let _ = write!(
            out,
            "<g class=\"edge {class}\" data-from=\"{}\" data-to=\"{}\" data-relation=\"{}\">\
             <title>{} {} {}</title>\
             <path d=\"M{x1:.1},{y1:.1}C{:.1},{:.1} {:.1},{:.1} {x2:.1},{y2:.1}\" \
             marker-end=\"url(#elfiee-arrow-{class})\"/>",
            xml(&e.from),
            xml(&e.to),
            xml(&e.relation),
            xml(&from.name),
            xml(&e.relation),
            xml(&to.name),
            c1.0,
            c1.1,
            c2.0,
            c2.1,
        );
        if g.edges.len() <= LABELLED_EDGES {
            // At the curve's midpoint, on the side away from a parallel relation.
            let mx = (x1 + 3.0 * c1.0 + 3.0 * c2.0 + x2) / 8.0;
            let my = (y1 + 3.0 * c1.1 + 3.0 * c2.1 + y2) / 8.0;
            let (tx, anchor) = if spread < 0.0 {
                (mx - 4.0, "end")
            } else {
                (mx + 4.0, "start")
            };
            let _ = write!(
                out,
                "<text x=\"{tx:.1}\" y=\"{my:.1}\" text-anchor=\"{anchor}\">{}</text>",
                xml(&e.relation)
            );
        }
        out.push_str("</g>\n");
    }
    out.push_str("</g>\n<g class=\"nodes\">\n");
    for (node, b) in g.nodes.iter().zip(&l.boxes) {
        let _ = writeln!(
            out,
            "<g class=\"node {}\" data-block=\"{}\"><title>{} ({}) {}</title>\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{NODE_H}\" rx=\"6\"/>\
             <text class=\"name\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text class=\"type\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
            type_class(&node.block_type),
            xml(&node.id),
            xml(&node.name),
            xml(&node.block_type),
            xml(&node.id),
            b.x - b.w / 2.0,
            b.y - NODE_H / 2.0,
            b.w,
            b.x,
            b.y - 2.0,
            xml(&short(&node.name)),
            b.x,
            b.y + 13.0,
            xml(&short(&node.block_type)),
        );
    }
    out.push_str("</g>\n</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::layout::tests::graph;
    use super::super::model::{Edge, Graph, Node};
    use super::*;

    proptest! {
        /// Whatever the names hold, the SVG is well-formed XML whose titles give the names back
        /// (characters XML cannot hold as U+FFFD).
        #[test]
        fn any_names_give_well_formed_svg(names in proptest::collection::vec("\\PC{0,40}|[<>&\"'\u{1}\u{0}\n\r\t]{0,8}", 1..5)) {
            let nodes: Vec<Node> = names.iter().enumerate().map(|(i, name)| Node {
                id: format!("b{i}"), name: name.clone(), block_type: name.clone(),
            }).collect();
            let edges: Vec<Edge> = (1..nodes.len()).map(|i| Edge {
                from: format!("b{i}"), to: "b0".into(), relation: name_or(&names[i]),
            }).collect();
            let g = Graph { nodes, edges };
            let svg = g.to_svg();
            let doc = roxmltree::Document::parse(&svg).map_err(|e| TestCaseError::fail(format!("{e}\n{svg}")))?;
            let titles: Vec<String> = doc.descendants()
                .filter(|n| n.has_tag_name("g") && n.attribute("class").is_some_and(|c| c.starts_with("node ")))
                .map(|n| n.children().find(|c| c.has_tag_name("title")).and_then(|t| t.text()).unwrap_or_default().to_owned())
                .collect();
            prop_assert_eq!(titles.len(), g.nodes.len());
            for (t, node) in titles.iter().zip(&g.nodes) {
                let clean = |s: &str| s.chars().map(|c| if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') { '\u{FFFD}' } else { c }).collect::<String>();
                let expected = format!("{} ({}) {}", clean(&node.name), clean(&node.block_type), node.id);
                prop_assert_eq!(t, &expected);
            }
        }
    }

    fn name_or(s: &str) -> String {
        if s.is_empty() {
            "reference".into()
        } else {
            s.into()
        }
    }

    #[test]
    fn the_same_graph_gives_the_same_bytes() {
        let links: Vec<(usize, usize, &str)> = (1..200)
            .map(|i| {
                (
                    i,
                    (i * 7919) % i,
                    if i % 3 == 0 { "implement" } else { "reference" },
                )
            })
            .collect();
        let g = graph(240, &links);
        assert_eq!(g.to_svg(), g.to_svg());
    }

    /// Put inline in an HTML page, the picture's style must not reach the page's elements.
    #[test]
    fn every_style_rule_is_scoped_to_the_picture() {
        let svg = graph(2, &[(1, 0, "reference")]).to_svg();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(doc.root_element().attribute("class"), Some("elfiee-graph"));
        let css = doc
            .descendants()
            .find(|n| n.has_tag_name("style"))
            .and_then(|n| n.text())
            .unwrap();
        for rule in css.split('}').filter(|r| !r.is_empty()) {
            let selectors = rule.split('{').next().unwrap();
            for sel in selectors.split(',') {
                assert!(sel.starts_with(".elfiee-graph "), "{sel}");
            }
        }
        assert!(!svg.contains("id=\"arrow"), "ids are prefixed too");
    }

    #[test]
    fn an_empty_graph_is_a_small_valid_picture() {
        let svg = Graph::default().to_svg();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        assert!(svg.contains("0 blocks, 0 relations"));
    }

    #[test]
    fn xml_escapes_markup_and_replaces_what_xml_cannot_hold() {
        assert_eq!(
            xml("a<b>&\"'\u{1}\u{FFFF}\n\r\t"),
            "a&lt;b&gt;&amp;&quot;&apos;\u{FFFD}\u{FFFD}&#10;&#13;&#9;"
        );
    }
}
