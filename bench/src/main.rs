//! `elfiee-bench`: the engine beside raw sled, on the same event bytes, in one run.
//!
//! ```text
//! cargo build --release -p elfiee -p elfiee-bench && ./target/release/elfiee-bench [--quick]
//! ```
//!
//! Prints ONE JSON object on stdout (progress goes to stderr) with four measurements, each
//! `{"engine": …, "raw": …, "ratio": engine / raw, …}`:
//!
//! - `sequential_commit` — one submitter, durable commands/s through [`FileHandle::submit`]
//!   (one `markdown.write` per command) vs raw sled `insert` + `flush` per event.
//! - `concurrent_commit` — 64 tokio tasks submitting concurrently (group commit) vs raw sled
//!   batches of 64 inserts + one `flush` per batch.
//! - `replay` — full replay events/s via [`elfiee_engine::replay`] (hash chain + apply) vs raw
//!   sled iteration of the `events` tree + [`codec::open`] decode of each record.
//! - `open` — milliseconds to open a big log that has a fresh snapshot via [`Engine::open`]
//!   vs `sled::open` + reading the snapshot bytes.
//!
//! The raw side always writes the very bytes the engine stored: after each engine run the
//! benchmark re-seals that run's committed events with [`codec::seal`] (checking that every
//! hash comes out equal to the stored one, so the bytes are identical) and feeds exactly those
//! to raw sled. Raw sled uses the engine's sled configuration (no background flush timer,
//! `HighThroughput` mode) so only the engine's own work differs. `diagnostics` fields break a
//! figure down (replay's decode / chain check / apply; the command index's load time).
//!
//! `project` (also in the default run) measures the `elfiee` CLI binary (as child processes,
//! wall time and peak RSS from `wait4`) on a generated source tree ([`project_gen`]; 10,000
//! files / 100 MB, with `--quick` 2,000 / 20 MB, and a tree with every file ten times larger):
//! `dir import` vs a raw read + blake3 + sled insert floor, the `.elf` size, `block list` on
//! both documents, `dir sync` after changing 1 % of the files, one `markdown write` on a
//! 10-block vs the 10,000-block document, and the `.elf` growth over many writes. Each figure
//! sits beside its target in `project.targets`; a summary table goes to stderr.
//! `--project-files N --project-bytes B --project-writes W` shrink it (for trying it out).
//!
//! `graph` (also in the default run; `--only graph` alone) draws two generated 1,000-block
//! documents with `elfiee graph`, in this process and as a CLI call (`bench/src/graph.rs`).
//!
//! `backup` (also in the default run; `bench/src/backup.rs`): a full backup of a document
//! with an imported project beside `cp -r` of it, an incremental one after 1 % more events
//! beside the full one, and a restore checked against the digest.
//!
//! `hooks` (also in the default run; `bench/src/hooks.rs`, issue 37): one Claude Code tool call
//! recorded through elfiee's hooks (two hook processes, the owner's checkpoint and commits) on
//! a 10,000-file, 100 MB project, beside spawning `true` and the checkpoint alone.
//!
//! Options: `--only sequential,concurrent,big` (alias `--phases`) runs a subset (for profiling); `--keep` keeps the
//! scratch directory; `RUST_LOG=elfiee_engine=trace` prints the engine's group-commit traces.

macro_rules! info {
    ($($t:tt)*) => { eprintln!("[elfiee-bench] {}", format!($($t)*)) };
}

mod common;

mod backup;
mod big;
mod checkpoint;
mod commit;
mod graph;
mod hooks;
mod project;
mod raw;
mod surfaces;
mod sync;
mod sync_figures;
mod sync_parts;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use serde_json::{json, Value};

use big::*;
use commit::*;
use common::*;
use project::*;
use surfaces::*;

fn main() {
    let args = Args::parse();
    if args.spawn_server {
        if let Err(e) = spawn_server() {
            info!("spawn server: {e}");
            std::process::exit(1);
        }
        return;
    }
    if std::env::var_os("RUST_LOG").is_some() {
        // Engine traces (e.g. `RUST_LOG=elfiee_engine=trace` shows group-commit sizes) on stderr.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let started = Instant::now();
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("bench-tmp")
        .join(format!("run-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&base) {
        info!("cannot create {}: {e}", base.display());
        std::process::exit(2);
    }
    info!("scratch directory: {}", base.display());
    let result = run(&args, &base, started);
    if args.keep {
        info!("kept {}", base.display());
    } else if let Err(e) = std::fs::remove_dir_all(&base) {
        info!("could not delete {}: {e}", base.display());
    }
    match result {
        Ok(mut out) => {
            out["total_seconds"] = round(started.elapsed().as_secs_f64(), 1);
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        Err(e) => {
            info!("failed: {e}");
            std::process::exit(1);
        }
    }
}

fn run(args: &Args, base: &Path, started: Instant) -> Result<Value, BoxError> {
    let mut plan = Plan::new(args.quick);
    plan.build_batch = args.build_batch.unwrap_or(plan.build_batch).max(1);
    plan.build_tasks = args.build_tasks.unwrap_or(plan.build_tasks).max(1);
    if let Some(n) = args.big_events {
        plan.big_events = n;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let engine = Engine::new(EngineConfig {
        node_id: OWNER.into(),
        ..Default::default()
    });
    info!(
        "mode {}, {} cpus, tokio multi-thread runtime",
        plan.mode,
        cpus()
    );
    let mut out = json!({
        "mode": plan.mode,
        "machine": {
            "cpus": cpus(),
            "cpu_model": cpu_model(),
            "loadavg_at_start": std::fs::read_to_string("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default(),
            "note": "shared machine; figures vary run to run",
        },
        "sled_config": "flush_every_ms(None), Mode::HighThroughput (the engine's own settings) on both sides",
    });
    if args.wants("sequential") {
        out["sequential_commit"] = sequential_phase(&rt, &engine, base, &plan)?;
    }
    if args.wants("concurrent") {
        out["concurrent_commit"] = concurrent_phase(&rt, &engine, base, &plan, args.tasks)?;
    }
    if args.wants("big") {
        big_phase(&rt, &engine, base, &plan, &mut out)?;
    }
    if args.wants("context") {
        out["context"] = context_phase(&plan);
    }
    if args.wants("socket") {
        out["owner_socket"] = owner_socket_phase(&rt, base, &plan)?;
    }
    if args.wants("mcp") {
        out["mcp_write"] = mcp_phase(base, &plan)?;
    }
    if args.wants("project") {
        out["project"] = project_phase(base, args);
    }
    if args.wants("graph") {
        out["graph"] = graph::graph_phase(&rt, &engine, base, &plan)?;
    }
    if args.wants("checkpoint") {
        out["checkpoint"] = checkpoint::checkpoint_phase(&rt, &engine, base, &plan)?;
    }
    if args.wants("hooks") {
        out["hooks"] = hooks::hooks_phase(&rt, &engine, base, &plan, args.hook_calls)?;
    }
    if args.wants("backup") {
        out["backup"] = backup::backup_phase(&rt, &engine, base, &plan)?;
    }
    if args.wants("sync") {
        settle_disk();
        out["sync"] = sync::sync_phase(&rt, base, &plan)?;
    }
    // Not in the default run: it writes 1.25 GiB twice over (sender and receiver).
    if args.only.iter().any(|o| o == "sync-memory") {
        out["sync_memory"] = sync::memory_phase(&rt, base, &plan)?;
    }
    // Not in the default run: a breakdown of the sync figure, for whoever works on it.
    if args.only.iter().any(|o| o == "sync-parts") {
        out["sync_parts"] = sync_parts::parts_phase(&rt, base, &plan)?;
    }
    engine_summary(&out);
    out["elapsed_before_cleanup_s"] = round(started.elapsed().as_secs_f64(), 1);
    Ok(out)
}

/// Writes back what the earlier phases left dirty (`sync(2)`), so the kernel's writeback of a
/// million-event log and a 10,000-file project does not land in the next phase's flushes.
fn settle_disk() {
    let started = Instant::now();
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    info!(
        "disk settled before the next phase ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

/// The engine phases' ratios beside their targets (issue 27), on stderr.
fn engine_summary(out: &Value) {
    let rows: Vec<(&str, &Value)> = ["sequential_commit", "concurrent_commit", "replay", "open"]
        .into_iter()
        .filter_map(|k| out.get(k).map(|v| (k, v)))
        .collect();
    if rows.is_empty() {
        return;
    }
    info!("engine summary:");
    info!(
        "  {:<20} {:>8}  {:<14} {:>8}  result",
        "figure", "ratio", "target", "margin"
    );
    for (name, v) in rows {
        let result = match (v["met"].as_bool(), v["margin"].as_f64()) {
            (Some(true), Some(m)) if m >= 0.05 => "met",
            (Some(true), _) => "met, no margin (< 5 %)",
            _ => "NOT MET",
        };
        info!(
            "  {:<20} {:>8}  {:<14} {:>8}  {result}",
            name,
            v["ratio"],
            v["target"].as_str().unwrap_or(""),
            v["margin"]
        );
    }
}

// ------------------------------------------------------------------------------------------
// engine side
