//! The `graph` phase: `elfiee graph` on two generated 1,000-block documents
//! ([`elfiee::graph::sample`]): `project`, shaped like a project (about 1,200 relations between
//! specs, code and tools, a fifth of the blocks unrelated), and `random`, the layout's hard
//! case (1,500 relations between random blocks, which span many layers).
//!
//! For each:
//! - `library`: in this process, on the open document: building the [`Graph`] from the state,
//!   then rendering SVG (layout included), DOT and Mermaid; medians of several runs.
//! - `cli`: `elfiee --elf D graph -o graph.svg` as a child process (open the document, build,
//!   lay out, write the file) beside `elfiee --elf D --json block list` on the same document
//!   (the same open and read of every block, without the picture): `engine` / `raw` / `ratio`.
//!
//! Each sits beside the target (a 1,000-block SVG in under a second) in `targets`.

use std::path::Path;
use std::time::Instant;

use elfiee::graph::{sample, Graph};
use elfiee_engine::Engine;
use serde_json::{json, Value};

use crate::common::{
    median, ms_since, ms_stats, round, BoxError, ChildRun, Cli, Plan, Targets, OWNER,
};

const BLOCKS: usize = 1000;
/// Relations of the `random` document.
const RANDOM_RELATIONS: usize = 1500;
/// Seed of both documents (fixed, so every run draws the same graphs).
const SEED: u64 = 0x00E1_F1EE;
/// The target for a 1,000-block SVG.
const TARGET_MS: f64 = 1000.0;

pub(super) fn graph_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    let dir = base.join("graph");
    std::fs::create_dir_all(&dir)?;
    let runs = if plan.mode == "quick" { 3 } else { 7 };
    let mut cli = Cli::new(&dir)?;
    let mut targets = Targets::default();
    let mut out = json!({"blocks": BLOCKS, "seed": SEED});
    for (name, spec) in [
        ("project", sample::plan(BLOCKS, SEED)),
        (
            "random",
            sample::random_plan(BLOCKS, RANDOM_RELATIONS, SEED),
        ),
    ] {
        let v = document(rt, engine, &mut cli, &dir.join(name), &spec, runs)?;
        targets.at_most(
            &format!("graph ({name}): 1,000-block SVG in the library"),
            v["library"]["build_ms"]
                .as_f64()
                .zip(v["library"]["svg_ms"].as_f64())
                .map(|(b, s)| b + s),
            TARGET_MS,
            "ms",
        );
        targets.at_most(
            &format!("graph ({name}): `elfiee graph -o graph.svg` wall"),
            v["cli"]["engine"].as_f64(),
            TARGET_MS,
            "ms",
        );
        out[name] = v;
    }
    targets.summary("graph");
    out["targets"] = json!(targets.0);
    Ok(out)
}

/// Builds `spec` as a document in `dir`, then measures the library and the CLI on it.
fn document(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    cli: &mut Cli,
    dir: &Path,
    spec: &sample::Plan,
    runs: usize,
) -> Result<Value, BoxError> {
    std::fs::create_dir_all(dir)?;
    let doc = dir.join("graph.elf");
    info!(
        "graph: {}: {} blocks, {} relations",
        dir.display(),
        spec.blocks.len(),
        spec.links.len()
    );
    let (mut build, mut svg, mut dot, mut mermaid) = (vec![], vec![], vec![], vec![]);
    let mut svg_bytes = 0;
    let (blocks, relations) = rt.block_on(async {
        let f = engine.init(&doc, "Bench").await?;
        sample::build(&f, OWNER, spec).await?;
        let mut counts = (0, 0);
        for _ in 0..runs {
            let t = Instant::now();
            let g = f.with_state(Graph::document);
            build.push(ms_since(t));
            let t = Instant::now();
            svg_bytes = std::hint::black_box(g.to_svg()).len();
            svg.push(ms_since(t));
            let t = Instant::now();
            std::hint::black_box(g.to_dot());
            dot.push(ms_since(t));
            let t = Instant::now();
            std::hint::black_box(g.to_mermaid());
            mermaid.push(ms_since(t));
            counts = (g.nodes.len(), g.edges.len());
        }
        f.close().await;
        Ok::<_, BoxError>(counts)
    })?;
    let library = json!({
        "build_ms": round(median(&build), 2), "svg_ms": round(median(&svg), 2),
        "dot_ms": round(median(&dot), 2), "mermaid_ms": round(median(&mermaid), 2),
        "svg_bytes": svg_bytes, "statistic": format!("median of {runs}"),
        "how": "in process on the open document: Graph::document(state), then to_svg (rust-sugiyama layout + drawing), to_dot, to_mermaid",
    });
    info!("graph: library {library}");

    let out = dir.join("graph.svg");
    let out_arg = crate::common::path_str(&out)?.to_owned();
    let (mut drawn, mut listed) = (Vec::new(), Vec::new());
    for r in 0..runs {
        // Alternate which goes first, so neither always meets a warm or cold cache.
        for graph_turn in [r % 2 == 0, r % 2 == 1] {
            if graph_turn {
                drawn.push(cli.run(Some(&doc), &["graph", "-o", &out_arg])?);
            } else {
                listed.push(cli.run(Some(&doc), &["--json", "block", "list"])?);
            }
        }
    }
    let written = std::fs::read_to_string(&out)?;
    if !written.starts_with("<svg ") || !written.trim_end().ends_with("</svg>") {
        return Err("`elfiee graph -o graph.svg` did not write an SVG".into());
    }
    let wall = |runs: &[ChildRun]| median(&runs.iter().map(ChildRun::ms).collect::<Vec<_>>());
    let (g_ms, l_ms) = (wall(&drawn), wall(&listed));
    let cli_v = json!({
        "engine": round(g_ms, 1), "raw": round(l_ms, 1), "ratio": round(g_ms / l_ms, 3),
        "unit": "ms wall per call (lower is better)",
        "graph": ms_stats(&drawn), "block_list": ms_stats(&listed),
        "statistic": format!("median of {runs} (graph and block list alternate, order swapped each round)"),
        "how": "`elfiee --elf D graph -o graph.svg` (engine) vs `elfiee --elf D --json block list` (raw: the same open and read of every block, no picture), release binaries as child processes",
    });
    info!("graph: cli {cli_v}");
    Ok(json!({"blocks": blocks, "relations": relations, "library": library, "cli": cli_v}))
}
