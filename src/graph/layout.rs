//! Where each block goes: a layered layout per connected part (the `rust-sugiyama` crate),
//! parts packed in rows, blocks without relations in a grid below.
//!
//! Why `rust-sugiyama` and not a crate that also draws: on 1,000 blocks (release build)
//! `layout-rs` took 78 s (400 blocks: 6 s) and `dagre` 4.8 s, `rust-sugiyama` 0.1–0.3 s without
//! its `transpose` step (with it, up to 3.9 s when relations span many layers) and with its
//! longest-path ranking instead of network simplex. The table is in
//! docs/decisions/0022-graph-layout-with-rust-sugiyama.md.

use std::collections::HashMap;

use rust_sugiyama::configure::{Config, CrossingMinimization, RankingType};

use super::model::Graph;

/// Height of a block's box.
pub(super) const NODE_H: f64 = 40.0;
/// Narrowest and widest box.
const MIN_W: f64 = 80.0;
const MAX_W: f64 = 260.0;
/// Longest name shown in a box (the `<title>` keeps the whole name).
const MAX_LABEL: usize = 34;
/// Space between boxes in a layer, and between layers.
const H_GAP: f64 = 24.0;
const V_GAP: f64 = 56.0;
/// Space between connected parts, and around the picture.
const PART_GAP: f64 = 48.0;
pub(super) const MARGIN: f64 = 16.0;
/// Height of the legend band at the top.
pub(super) const HEADER: f64 = 40.0;

/// A box, by its centre.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Placed {
    pub x: f64,
    pub y: f64,
    pub w: f64,
}

/// Where every node goes (index = node index) and the picture's size.
pub(super) struct Layout {
    pub boxes: Vec<Placed>,
    pub width: f64,
    pub height: f64,
}

/// A name as one short line: line breaks and other control characters as spaces, cut at
/// [`MAX_LABEL`] characters with an ellipsis.
pub(super) fn short(name: &str) -> String {
    let one_line: String = name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= MAX_LABEL {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(MAX_LABEL - 1).collect();
    cut.push('…');
    cut
}

/// Roughly how wide `s` is at 12 px: East Asian and other wide characters count double.
pub(super) fn text_width(s: &str) -> f64 {
    s.chars()
        .map(|c| if (c as u32) >= 0x1100 { 13.0 } else { 7.2 })
        .sum()
}

fn box_width(name: &str, block_type: &str) -> f64 {
    (text_width(&short(name)).max(text_width(block_type) * 0.85) + 20.0).clamp(MIN_W, MAX_W)
}

pub(super) fn layout(g: &Graph) -> Layout {
    let n = g.nodes.len();
    let index = g.positions();
    let widths: Vec<f64> = g
        .nodes
        .iter()
        .map(|node| box_width(&node.name, &node.block_type))
        .collect();
    // Laid out with each relation reversed (target → source), so a block sits above the
    // blocks that link to it; a pair linked twice is one layout edge.
    let mut pairs: Vec<(usize, usize)> = g
        .edges
        .iter()
        .filter_map(|e| Some((*index.get(e.to.as_str())?, *index.get(e.from.as_str())?)))
        .filter(|(a, b)| a != b)
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let mut linked = vec![false; n];
    for &(a, b) in &pairs {
        linked[a] = true;
        linked[b] = true;
    }
    // The crate numbers vertices by position in this list.
    let members: Vec<usize> = (0..n).filter(|i| linked[*i]).collect();
    let position: HashMap<usize, u32> = members
        .iter()
        .enumerate()
        .map(|(p, i)| (*i, p as u32))
        .collect();
    let vertices: Vec<(u32, (f64, f64))> = members
        .iter()
        .enumerate()
        .map(|(p, i)| (p as u32, (widths[*i], NODE_H + V_GAP - H_GAP)))
        .collect();
    let edges: Vec<(u32, u32)> = pairs
        .iter()
        .map(|(a, b)| (position[a], position[b]))
        .collect();
    let config = Config {
        minimum_length: 1,
        // Added to each vertex's width and height; a long relation's bend points are this wide.
        vertex_spacing: H_GAP,
        dummy_vertices: true,
        dummy_size: 1.0,
        // Each block as high as its relations allow (longest path). The crate's default, network
        // simplex, draws relations about 5-35 % shorter but took 0.62 s instead of 0.07 s on
        // 1,000 blocks with 1,500 relations between random blocks.
        ranking_type: RankingType::Up,
        c_minimization: CrossingMinimization::Barycenter,
        // Swapping neighbours to save crossings costs seconds on 1,000 blocks whose relations
        // span many layers (see the module comment).
        transpose: false,
    };
    let parts = if vertices.is_empty() {
        Vec::new()
    } else {
        rust_sugiyama::from_vertices_and_edges(&vertices, &edges, &config)
    };

    // Each part moved so its top-left corner is at (0, 0): (node, centre), width, height.
    type Part = (Vec<(usize, f64, f64)>, f64, f64);
    let mut placed_parts: Vec<Part> = parts
        .into_iter()
        .filter(|(coords, _, _)| !coords.is_empty())
        .map(|(coords, _, _)| {
            let coords: Vec<(usize, f64, f64)> = coords
                .into_iter()
                .filter_map(|(p, (x, y))| Some((*members.get(p)?, x, y)))
                .collect();
            let left = coords
                .iter()
                .map(|(i, x, _)| x - widths[*i] / 2.0)
                .fold(f64::INFINITY, f64::min);
            let right = coords
                .iter()
                .map(|(i, x, _)| x + widths[*i] / 2.0)
                .fold(f64::NEG_INFINITY, f64::max);
            let top = coords.iter().map(|c| c.2).fold(f64::INFINITY, f64::min) - NODE_H / 2.0;
            let bottom =
                coords.iter().map(|c| c.2).fold(f64::NEG_INFINITY, f64::max) + NODE_H / 2.0;
            let moved = coords
                .into_iter()
                .map(|(i, x, y)| (i, x - left, y - top))
                .collect();
            (moved, right - left, bottom - top)
        })
        .collect();
    // Biggest parts first; among equals, the one holding the smallest block id.
    placed_parts.sort_by_key(|(coords, _, _)| {
        let first = coords.iter().map(|c| c.0).min().unwrap_or(usize::MAX);
        (usize::MAX - coords.len(), first)
    });

    let isolated: Vec<usize> = (0..n).filter(|i| !linked[*i]).collect();
    let area: f64 = placed_parts
        .iter()
        .map(|(_, w, h)| (w + PART_GAP) * (h + PART_GAP))
        .sum::<f64>()
        + isolated
            .iter()
            .map(|i| (widths[*i] + H_GAP) * (NODE_H + H_GAP))
            .sum::<f64>();
    // Rows about 1.5 times as wide as the picture is tall, never narrower than the widest part.
    let row_limit = placed_parts
        .iter()
        .map(|p| p.1)
        .fold((area * 1.5).sqrt(), f64::max)
        .max(MAX_W);

    let mut boxes = vec![Placed::default(); n];
    let (mut x, mut y, mut row_h) = (MARGIN, MARGIN + HEADER, 0.0f64);
    for (coords, w, h) in &placed_parts {
        if x > MARGIN && x + w > MARGIN + row_limit {
            x = MARGIN;
            y += row_h + PART_GAP;
            row_h = 0.0;
        }
        for &(i, cx, cy) in coords {
            boxes[i] = Placed {
                x: x + cx,
                y: y + cy,
                w: widths[i],
            };
        }
        x += w + PART_GAP;
        row_h = row_h.max(*h);
    }
    if !placed_parts.is_empty() {
        y += row_h + PART_GAP;
    }
    x = MARGIN;
    for &i in &isolated {
        let w = widths[i];
        if x > MARGIN && x + w > MARGIN + row_limit {
            x = MARGIN;
            y += NODE_H + H_GAP;
        }
        boxes[i] = Placed {
            x: x + w / 2.0,
            y: y + NODE_H / 2.0,
            w,
        };
        x += w + H_GAP;
    }
    let right = boxes.iter().map(|b| b.x + b.w / 2.0).fold(0.0, f64::max);
    let bottom = boxes
        .iter()
        .map(|b| b.y + NODE_H / 2.0)
        .fold(MARGIN + HEADER, f64::max);
    Layout {
        boxes,
        width: right + MARGIN,
        height: bottom + MARGIN,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::prelude::*;

    use super::super::model::{Edge, Graph, Node};
    use super::*;

    pub(crate) fn graph(n: usize, links: &[(usize, usize, &str)]) -> Graph {
        Graph {
            nodes: (0..n)
                .map(|i| Node {
                    id: format!("b{i:03}"),
                    name: format!("block {i}"),
                    block_type: if i % 2 == 0 { "markdown" } else { "code" }.into(),
                })
                .collect(),
            edges: links
                .iter()
                .map(|(a, b, r)| Edge {
                    from: format!("b{a:03}"),
                    to: format!("b{b:03}"),
                    relation: (*r).into(),
                })
                .collect(),
        }
    }

    fn overlaps(a: &Placed, b: &Placed) -> bool {
        (a.x - b.x).abs() < (a.w + b.w) / 2.0 && (a.y - b.y).abs() < NODE_H
    }

    #[test]
    fn a_block_sits_above_the_blocks_that_link_to_it() {
        let g = graph(
            4,
            &[
                (1, 0, "implement"),
                (2, 0, "reference"),
                (3, 1, "reference"),
            ],
        );
        let l = layout(&g);
        assert!(l.boxes[0].y < l.boxes[1].y && l.boxes[0].y < l.boxes[2].y);
        assert!(l.boxes[1].y < l.boxes[3].y);
    }

    #[test]
    fn blocks_without_relations_go_in_a_grid_below_the_parts() {
        let g = graph(30, &[(1, 0, "reference")]);
        let l = layout(&g);
        let part_bottom = l.boxes[0].y.max(l.boxes[1].y);
        assert!(l.boxes[2..].iter().all(|b| b.y > part_bottom));
        let rows: std::collections::BTreeSet<i64> =
            l.boxes[2..].iter().map(|b| b.y as i64).collect();
        assert!(rows.len() > 1, "28 blocks in one row");
    }

    proptest! {
        /// Any acyclic set of relations (several between one pair included): every block gets
        /// a box inside the picture, no two boxes overlap, and the layout does not panic.
        #[test]
        fn boxes_never_overlap_and_stay_inside(
            n in 1usize..40,
            raw in proptest::collection::vec((0usize..40, 0usize..40, any::<bool>()), 0..60),
        ) {
            let links: Vec<(usize, usize, &str)> = raw
                .into_iter()
                .filter(|(a, b, _)| a < &n && b < &n && a > b)
                .map(|(a, b, imp)| (a, b, if imp { "implement" } else { "reference" }))
                .collect();
            let g = graph(n, &links);
            let l = layout(&g);
            for (i, a) in l.boxes.iter().enumerate() {
                prop_assert!(a.x - a.w / 2.0 >= 0.0 && a.x + a.w / 2.0 <= l.width);
                prop_assert!(a.y - NODE_H / 2.0 >= HEADER && a.y + NODE_H / 2.0 <= l.height);
                for b in &l.boxes[i + 1..] {
                    prop_assert!(!overlaps(a, b), "{a:?} overlaps {b:?}");
                }
            }
        }

    }
}
