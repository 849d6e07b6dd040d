//! A deterministic linked document, for the tests and the benchmark of `elfiee graph`: specs
//! (markdown) that reference earlier specs, code blocks grouped in modules that implement one
//! or two specs and reference code of their module, a few terminals and agents that reference
//! specs or code, and a fifth of the blocks (notes) with no relation at all — about 1.3
//! relations per block, the shape a project document has. Relations always run from a later
//! block to an earlier one, so `core.link` never refuses one as a cycle.

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::Command;
use serde_json::json;

/// What to create: blocks as (name, type), relations as (from, to, relation) by block index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub blocks: Vec<(String, String)>,
    pub links: Vec<(usize, usize, &'static str)>,
}

/// splitmix64: every choice follows from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A document of `blocks` blocks (at least 10).
pub fn plan(blocks: usize, seed: u64) -> Plan {
    let n = blocks.max(10);
    let specs = n * 15 / 100;
    let code = n * 60 / 100;
    let tools = n * 5 / 100;
    let notes = n - specs - code - tools;
    let modules = (code / 12).max(1);
    let mut rng = Rng(seed);
    let mut p = Plan {
        blocks: Vec::with_capacity(n),
        links: Vec::new(),
    };
    for i in 0..specs {
        p.blocks.push((format!("spec {i}"), "markdown".into()));
        for _ in 0..1 + usize::from(rng.chance(50)) {
            if i > 0 {
                let back = 1 + rng.below(i.min(8));
                p.links.push((i, i - back, "reference"));
            }
        }
    }
    for j in 0..code {
        let i = p.blocks.len();
        let module = j * modules / code;
        p.blocks
            .push((format!("src/mod{module}/file{j}.rs"), "code".into()));
        let near = module * specs / modules;
        for _ in 0..1 + usize::from(rng.chance(25)) {
            let spec = (near + rng.below(4)).min(specs - 1);
            p.links.push((i, spec, "implement"));
        }
        let first_of_module = specs + (module * code).div_ceil(modules);
        if i > first_of_module && rng.chance(40) {
            let other = first_of_module + rng.below(i - first_of_module);
            p.links.push((i, other, "reference"));
        }
    }
    for t in 0..tools {
        let i = p.blocks.len();
        let kind = if t % 2 == 0 { "terminal" } else { "agent" };
        p.blocks.push((format!("{kind} {t}"), kind.into()));
        p.links.push((i, rng.below(i), "reference"));
    }
    for k in 0..notes {
        p.blocks.push((format!("note {k}"), "markdown".into()));
    }
    p.links.sort_unstable();
    p.links.dedup();
    p
}

/// The layout's hard case: `blocks` blocks, the first four fifths joined by `relations`
/// relations between random pairs (always later → earlier), so relations span many layers;
/// the last fifth unrelated. One relation per pair; fewer when the pairs run out.
pub fn random_plan(blocks: usize, relations: usize, seed: u64) -> Plan {
    let n = blocks.max(10);
    let linked = n * 4 / 5;
    let relations = relations.min(linked * (linked - 1) / 2);
    let mut rng = Rng(seed);
    let blocks = (0..n)
        .map(|i| {
            let ty = if i % 3 == 0 { "markdown" } else { "code" };
            (format!("block {i}"), ty.to_owned())
        })
        .collect();
    let mut pairs = std::collections::BTreeMap::new();
    while pairs.len() < relations {
        let (a, b) = (rng.below(linked), rng.below(linked));
        let rel = if rng.chance(50) {
            "reference"
        } else {
            "implement"
        };
        if a != b {
            pairs.entry((a.max(b), a.min(b))).or_insert(rel);
        }
    }
    let links = pairs.into_iter().map(|((a, b), r)| (a, b, r)).collect();
    Plan { blocks, links }
}

/// Creates the plan's blocks and relations in `file` as `editor` (in atomic groups of a few
/// hundred commands); returns the block ids in plan order.
pub async fn build(
    file: &FileHandle,
    editor: &str,
    plan: &Plan,
) -> Result<Vec<String>, EngineError> {
    const GROUP: usize = 500;
    let mut ids = Vec::with_capacity(plan.blocks.len());
    for chunk in plan.blocks.chunks(GROUP) {
        let cmds = chunk
            .iter()
            .map(|(name, ty)| {
                Command::new(
                    editor,
                    "core.create",
                    None,
                    json!({"name": name, "block_type": ty}),
                )
            })
            .collect();
        let events = file.submit_all(cmds).await?;
        ids.extend(
            events
                .into_iter()
                .filter(|e| e.attribute.ends_with("/core.create"))
                .map(|e| e.entity),
        );
    }
    for chunk in plan.links.chunks(GROUP) {
        let cmds = chunk
            .iter()
            .map(|(from, to, relation)| {
                Command::new(
                    editor,
                    "core.link",
                    Some(&ids[*from]),
                    json!({"to": ids[*to], "relation": relation}),
                )
            })
            .collect();
        file.submit_all(cmds).await?;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thousand_blocks_have_about_1300_backward_relations_and_200_loners() {
        let p = plan(1000, 7);
        assert_eq!(p.blocks.len(), 1000);
        assert!((1100..1500).contains(&p.links.len()), "{}", p.links.len());
        assert!(p.links.iter().all(|(a, b, _)| a > b));
        let mut linked = vec![false; 1000];
        for (a, b, _) in &p.links {
            linked[*a] = true;
            linked[*b] = true;
        }
        assert_eq!(linked.iter().filter(|l| !**l).count(), 200);
        assert_eq!(p, plan(1000, 7));
    }

    #[test]
    fn a_random_plan_links_four_fifths_backwards() {
        let p = random_plan(1000, 1500, 7);
        assert_eq!(p.blocks.len(), 1000);
        assert_eq!(p.links.len(), 1500);
        assert!(p.links.iter().all(|(a, b, _)| a > b && *a < 800));
        assert_eq!(p, random_plan(1000, 1500, 7));
    }
}
