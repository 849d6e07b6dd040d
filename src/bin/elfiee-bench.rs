//! `elfiee-bench`: the engine beside raw sled, on the same event bytes, in one run.
//!
//! ```text
//! cargo run --release --bin elfiee-bench -- [--quick]
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
//! documents with `elfiee graph`, in this process and as a CLI call (`elfiee-bench/graph.rs`).
//!
//! Options: `--only sequential,concurrent,big` runs a subset (for profiling); `--keep` keeps the
//! scratch directory; `RUST_LOG=elfiee_engine=trace` prints the engine's group-commit traces.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use elfiee::project_gen;
use elfiee_engine::codec::{self, event_key};
use elfiee_engine::log::SledSync;
use elfiee_engine::{Engine, EngineConfig, EngineError, FileHandle};
use elfiee_model::{Command, EventHash};
use serde_json::{json, Value};

const OWNER: &str = "bench";

#[derive(Parser, Debug)]
#[command(
    name = "elfiee-bench",
    about = "Elfiee engine vs raw sled, in one run; prints one JSON object"
)]
struct Args {
    /// Smaller sizes (200,000-event log, shorter windows): finishes in well under a minute.
    #[arg(long)]
    quick: bool,
    /// Concurrent submitters for the concurrent measurement.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// Keep the temporary directory (printed on stderr) instead of deleting it.
    #[arg(long)]
    keep: bool,
    /// Run only some measurements (for profiling): comma-separated of `sequential`,
    /// `concurrent`, `big` (build + replay + open), `context`, `socket`, `mcp`, `project`,
    /// `graph`, `sync`, `checkpoint`. The output then lacks the others.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Commands per `submit_all` group when building the big log (default 1024).
    #[arg(long)]
    build_batch: Option<usize>,
    /// Concurrent tasks building the big log (default 8).
    #[arg(long)]
    build_tasks: Option<usize>,
    /// Events in the big log (default 1,000,000; 200,000 with --quick).
    #[arg(long)]
    big_events: Option<u64>,
    /// `project` phase: text files in the generated tree (default 10,000; 2,000 with --quick).
    #[arg(long)]
    project_files: Option<usize>,
    /// `project` phase: total text bytes of the generated tree (default 100,000,000;
    /// 20,000,000 with --quick); the ten-times-larger tree holds ten times as much.
    #[arg(long)]
    project_bytes: Option<u64>,
    /// `project` phase: CLI writes in the growth step (default 1,000; 200 with --quick).
    #[arg(long)]
    project_writes: Option<usize>,
    /// Internal: run as the project phase's spawn server (see `spawn_server`).
    #[arg(long, hide = true)]
    spawn_server: bool,
}

impl Args {
    fn wants(&self, what: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == what)
    }
}

/// Sizes and time windows of one run.
struct Plan {
    mode: &'static str,
    seq_window: Duration,
    conc_window: Duration,
    warmup: Duration,
    /// Shortest raw write measurement (the engine's records are re-fed until it has passed).
    raw_min: Duration,
    big_events: u64,
    big_blocks: usize,
    build_tasks: usize,
    build_batch: usize,
    commit_runs: usize,
    replay_runs: usize,
    open_runs: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                seq_window: Duration::from_millis(800),
                conc_window: Duration::from_millis(800),
                warmup: Duration::from_millis(200),
                raw_min: Duration::from_millis(500),
                big_events: 200_000,
                big_blocks: 1_000,
                build_tasks: 8,
                build_batch: 1024,
                // Five alternating engine/raw runs: the median of five resists the
                // machine's run-to-run swings better than the median of three.
                commit_runs: 5,
                replay_runs: 3,
                open_runs: 5,
            }
        } else {
            Plan {
                mode: "full",
                seq_window: Duration::from_millis(1000),
                conc_window: Duration::from_millis(1200),
                warmup: Duration::from_millis(300),
                raw_min: Duration::from_millis(1000),
                big_events: 1_000_000,
                big_blocks: 1_000,
                build_tasks: 8,
                build_batch: 1024,
                // Five alternating engine/raw runs: the median of five resists the
                // machine's run-to-run swings better than the median of three.
                commit_runs: 5,
                replay_runs: 3,
                open_runs: 5,
            }
        }
    }
}

macro_rules! info {
    ($($t:tt)*) => { eprintln!("[elfiee-bench] {}", format!($($t)*)) };
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

// In a folder of its own: a file beside this one would be taken for another binary.
#[path = "elfiee-bench/checkpoint.rs"]
mod checkpoint;
#[path = "elfiee-bench/graph.rs"]
mod graph;
#[path = "elfiee-bench/project.rs"]
mod project;
#[path = "elfiee-bench/raw.rs"]
mod raw;
#[path = "elfiee-bench/surfaces.rs"]
mod surfaces;

use project::*;
use raw::*;
use surfaces::*;
#[path = "elfiee-bench/sync.rs"]
mod sync;

/// Called with each record (seq, stored bytes) of a raw layout read.
type RecordSink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), BoxError> + 'a;

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
    if args.wants("sync") {
        out["sync"] = sync::sync_phase(&rt, base, &plan)?;
    }
    // Not in the default run: it writes 1.25 GiB twice over (sender and receiver).
    if args.only.iter().any(|o| o == "sync-memory") {
        out["sync_memory"] = sync::memory_phase(&rt, base, &plan)?;
    }
    out["elapsed_before_cleanup_s"] = round(started.elapsed().as_secs_f64(), 1);
    Ok(out)
}

fn sequential_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    let path = base.join("sequential.elf");
    let (f, block) = rt.block_on(async {
        let f = engine.init(&path, "Bench").await?;
        let block = create_block(&f, 0).await?;
        Ok::<_, EngineError>((f, block))
    })?;
    let mut next = 0u64;
    rt.block_on(sequential_window(&f, &block, plan.warmup, &mut next))?;
    let (mut eng, mut raw) = (Vec::new(), Vec::new());
    let mut events = 0;
    let mut records = Vec::new();
    for r in 0..plan.commit_runs {
        let run = rt.block_on(sequential_window(&f, &block, plan.seq_window, &mut next))?;
        records = sealed_records(&f, run.first_seq, run.last_seq)?;
        events += records.len();
        eng.push(run.rate);
        raw.push(sequential_raw(
            &base.join(format!("sequential-raw-{r}")),
            &records,
            plan.raw_min,
        )?);
        info!(
            "sequential run {}: engine {:.0} events/s, raw {:.0} events/s",
            r + 1,
            eng[r],
            raw[r]
        );
    }
    rt.block_on(f.close());
    let sequential = pair(
        median(&eng),
        median(&raw),
        json!({
            "unit": "events/s (durable, higher is better)",
            "runs": plan.commit_runs,
            "statistic": "median",
            "engine_runs": eng.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "raw_runs": raw.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "engine_events": events,
            "event_bytes_avg": avg_len(&records),
            "window_s": plan.seq_window.as_secs_f64(),
            "raw_min_s": plan.raw_min.as_secs_f64(),
            "target": "ratio >= 0.8",
            "how": "engine: 1 submitter awaiting FileHandle::submit(markdown.write, ~150 bytes of text) in a loop for window_s; raw: the very record bytes of that run (re-sealed with codec::seal, hash checked equal), sled Tree::insert + Db::flush + SledSync::sync (the engine's fdatasync) per event, re-fed under continuing seq keys until the raw run lasts >= raw_min_s; runs alternate engine/raw",
        }),
    );
    info!("sequential: {}", sequential);
    Ok(sequential)
}

fn concurrent_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
    tasks: usize,
) -> Result<Value, BoxError> {
    let path = base.join("concurrent.elf");
    let (f, blocks) = rt.block_on(async {
        let f = engine.init(&path, "Bench").await?;
        let mut blocks = Vec::with_capacity(tasks);
        for i in 0..tasks {
            blocks.push(create_block(&f, i).await?);
        }
        Ok::<_, EngineError>((f, blocks))
    })?;
    rt.block_on(concurrent_window(&f, &blocks, plan.warmup))?;
    let (mut eng, mut raw) = (Vec::new(), Vec::new());
    let mut events = 0;
    for r in 0..plan.commit_runs {
        let run = rt.block_on(concurrent_window(&f, &blocks, plan.conc_window))?;
        let records = sealed_records(&f, run.first_seq, run.last_seq)?;
        events += records.len();
        eng.push(run.rate);
        raw.push(concurrent_raw(
            &base.join(format!("concurrent-raw-{r}")),
            &records,
            tasks,
            plan.raw_min,
        )?);
        info!(
            "concurrent run {}: engine {:.0} events/s, raw {:.0} events/s",
            r + 1,
            eng[r],
            raw[r]
        );
    }
    rt.block_on(f.close());
    let concurrent = pair(
        median(&eng),
        median(&raw),
        json!({
            "unit": "events/s (durable, higher is better)",
            "submitters": tasks,
            "runs": plan.commit_runs,
            "statistic": "median",
            "engine_runs": eng.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "raw_runs": raw.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "engine_events": events,
            "window_s": plan.conc_window.as_secs_f64(),
            "raw_min_s": plan.raw_min.as_secs_f64(),
            "target": "ratio >= 0.5",
            "how": format!("engine: {tasks} tokio tasks on the multi-thread runtime, each awaiting FileHandle::submit(markdown.write on its own block) in a loop for window_s; raw: the very record bytes of that run (re-sealed with codec::seal, hash checked equal), one sled::Batch of {tasks} inserts + one Db::flush + SledSync::sync (the engine's fdatasync) per batch on one thread, re-fed under continuing seq keys until the raw run lasts >= raw_min_s; runs alternate engine/raw"),
        }),
    );
    info!("concurrent: {}", concurrent);
    Ok(concurrent)
}

/// The stored record bytes of events `from..=to`, rebuilt with [`codec::seal`] from the
/// committed events; each rebuilt hash is checked against the stored one, so the bytes are
/// exactly the ones in the engine's log.
fn sealed_records(f: &FileHandle, from: u64, to: u64) -> Result<Vec<Record>, BoxError> {
    let events = f.events(from.saturating_sub(1).max(1))?;
    let mut prev = elfiee_model::EventHash::ZERO;
    let mut out = Vec::with_capacity((to + 1 - from) as usize);
    for e in events {
        if e.seq >= from && e.seq <= to {
            let mut copy = e.clone();
            let bytes = codec::seal(&prev, &mut copy);
            if copy.hash != e.hash {
                return Err(format!("re-sealing event {} gave a different hash", e.seq).into());
            }
            out.push((event_key(e.seq), bytes));
        }
        prev = e.hash;
    }
    if out.len() as u64 != to + 1 - from {
        return Err(format!("expected {} events, got {}", to + 1 - from, out.len()).into());
    }
    Ok(out)
}

fn big_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
    out: &mut Value,
) -> Result<(), BoxError> {
    let snapshot_every = engine.config().snapshot_every;
    // ---- the big log ----
    let big_path = base.join("big.elf");
    let build = rt.block_on(build_big_log(engine, &big_path, plan))?;
    let disk_mb = dir_size(&big_path) as f64 / 1e6;
    info!(
        "big log: {} events in {:.1} s ({:.0} events/s), {:.0} MB on disk",
        build.events,
        build.secs,
        build.events as f64 / build.secs,
        disk_mb
    );
    let snapshot_seq = snapshot_seq(&big_path.join("log"))?;

    // ---- replay ----
    let mut eng_replay = Vec::new();
    let mut raw_replay = Vec::new();
    let mut engine_internal_ms = Vec::new();
    // The raw floor reads the same records from a plain sled tree (the engine keeps bulk
    // commands in events.pack; reading that is no sled floor). Built once, untimed.
    let raw_sled = base.join("big-raw-sled");
    let copied = raw_sled_copy(&big_path.join("log"), &raw_sled, plan.build_batch as u64)?;
    check_count("raw sled copy", copied, build.events)?;
    for i in 0..plan.replay_runs {
        let (n, secs) = raw_replay_run(&raw_sled)?;
        check_count("raw replay", n, build.events)?;
        raw_replay.push(n as f64 / secs);
        let t = Instant::now();
        let (report, _state) = retry_locked(|| elfiee_engine::replay(&big_path, |_, _| {}))?;
        let secs = t.elapsed().as_secs_f64();
        check_count("engine replay", report.events, build.events)?;
        eng_replay.push(report.events as f64 / secs);
        engine_internal_ms.push(report.elapsed_ms as f64);
        info!(
            "replay run {}: engine {:.0} events/s, raw {:.0} events/s",
            i + 1,
            eng_replay[i],
            raw_replay[i]
        );
    }
    let (n0, s0) = raw_replay_variant(&big_path.join("log"), false, false)?;
    let (n1, s1) = raw_replay_variant(&big_path.join("log"), true, false)?;
    let (n2, s2) = raw_replay_variant(&big_path.join("log"), true, true)?;
    info!("replay diagnostics (the engine's own layout): raw decode {:.0}, + chain {:.0}, + apply {:.0} events/s", n0 as f64 / s0, n1 as f64 / s1, n2 as f64 / s2);
    let replay = pair(
        median(&eng_replay),
        median(&raw_replay),
        json!({
            "unit": "events/s (higher is better)",
            "events": build.events,
            "runs": plan.replay_runs,
            "statistic": "median",
            "engine_runs": eng_replay.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "raw_runs": raw_replay.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "engine_reported_elapsed_ms": engine_internal_ms,
            "diagnostics": {
                "unit": "events/s, one run each, no engine code",
                "layout_raw_decode": round(n0 as f64 / s0, 0),
                "layout_raw_decode_and_chain_check": round(n1 as f64 / s1, 0),
                "layout_raw_decode_chain_check_and_apply": round(n2 as f64 / s2, 0),
                "is": "the raw loop over the engine's own files (sled keys + events.pack groups, one positioned read per group, no blake3), then plus the blake3 chain check (codec::open with the previous hash), then plus elfiee_projections::apply into a State: what the engine's replay does, minus the group blake3, its per-record copy and iterator plumbing",
            },
            "target": "ratio >= 0.5",
            "how": "engine: elfiee_engine::replay(path) timed around the call (sled open, hash-chain check, decode, apply, final state digest); raw: the same records copied (untimed) into a sled database of their own as plain e‖seq keys, as the engine stored every event before bulk commands went to events.pack; sled open + iterate the events tree + codec::open(seq, bytes, None) per record (decode only, no chain check, no apply) + close; both timed from before the open to after the database is dropped; runs alternate raw/engine",
        }),
    );
    info!("replay: {}", replay);

    // ---- open ----
    let mut eng_open = Vec::new();
    let mut raw_open = Vec::new();
    let mut snapshot_bytes = 0;
    for i in 0..plan.open_runs {
        let (ms, len) = raw_open_run(&big_path.join("log"))?;
        snapshot_bytes = len;
        raw_open.push(ms);
        let ms = rt.block_on(engine_open_run(engine, &big_path, build.events))?;
        eng_open.push(ms);
        info!(
            "open run {}: engine {:.1} ms, raw {:.1} ms",
            i + 1,
            eng_open[i],
            raw_open[i]
        );
    }
    let e = median(&eng_open);
    let r = median(&raw_open);
    let big_commands = elfiee_engine::cmd_index::load(&big_path.join("commands.idx"))?.len();
    let (index_load_ms, index_entries) = command_index_load(base)?;
    info!("command index: {index_entries} records load in {index_load_ms:.1} ms");
    let open = json!({
        "engine": round(e, 2),
        "raw": round(r, 2),
        "ratio": round(e / r, 3),
        "unit": "ms (lower is better)",
        "events": build.events,
        "snapshot_seq": snapshot_seq,
        "snapshot_bytes": snapshot_bytes,
        "commands": big_commands,
        "diagnostics": {
            "command_index_load_ms": round(index_load_ms, 1),
            "command_index_records": index_entries,
            "is": "what opening a file with that many commands adds: elfiee_engine::cmd_index::load of commands.idx plus building the in-memory index (a DashMap), one run on synthetic records",
        },
        "runs": plan.open_runs,
        "statistic": "median",
        "engine_runs": eng_open.iter().map(|r| round(*r, 2)).collect::<Vec<_>>(),
        "raw_runs": raw_open.iter().map(|r| round(*r, 2)).collect::<Vec<_>>(),
        "target": "ratio <= 3",
        "how": "engine: Engine::open(path) until the handle answers owner()/last_seq() (sled open, tail lookup, snapshot decode + check, tail replay, actor + flusher start), then close (not timed); raw: sled::open of the same log directory + Tree 'snapshots' get('latest') copied out; runs alternate raw/engine",
    });
    info!("open: {}", open);

    out["replay"] = replay;
    out["open"] = open;
    out["big_log"] = json!({
        "events": build.events,
        "blocks": plan.big_blocks,
        "build_seconds": round(build.secs, 1),
        "build_events_per_s": round(build.events as f64 / build.secs, 0),
        "disk_mb": round(disk_mb, 0),
        "snapshot_every": snapshot_every,
        "note": format!(
            "built through the engine by {} concurrent tokio tasks, each calling FileHandle::submit_all with batches of {} commands (one atomic group, one durable flush per group commit): {} core.create then markdown.write (~150 bytes of text) cycling over the blocks; 'open' starts from the newest snapshot file (written every 1000 events) and replays the tail after it",
            plan.build_tasks, plan.build_batch, plan.big_blocks
        ),
    });
    Ok(())
}

// ------------------------------------------------------------------------------------------
// engine side

struct EngineRun {
    rate: f64,
    first_seq: u64,
    last_seq: u64,
}

fn text(i: u64) -> String {
    format!(
        "## Entry {i}\n\nThe quick brown fox jumps over the lazy dog while the log keeps every keystroke; \
         this is line {i:010} of the benchmark."
    )
}

fn write_cmd(block: &str, i: u64) -> Command {
    Command::new(
        OWNER,
        "markdown.write",
        Some(block),
        json!({ "markdown": text(i) }),
    )
}

fn create_cmd(i: usize) -> Command {
    Command::new(
        OWNER,
        "core.create",
        None,
        json!({ "name": format!("doc-{i}"), "block_type": "markdown" }),
    )
}

async fn create_block(f: &FileHandle, i: usize) -> Result<String, EngineError> {
    let ev = f.submit(create_cmd(i)).await?;
    Ok(ev[0].entity.clone())
}

async fn sequential_window(
    f: &FileHandle,
    block: &str,
    window: Duration,
    next: &mut u64,
) -> Result<EngineRun, BoxError> {
    let first_seq = f.last_seq() + 1;
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < window {
        f.submit(write_cmd(block, *next)).await?;
        *next += 1;
        n += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    let last_seq = f.last_seq();
    if last_seq + 1 - first_seq != n {
        return Err(format!(
            "sequential: {n} commands but {} events",
            last_seq + 1 - first_seq
        )
        .into());
    }
    Ok(EngineRun {
        rate: n as f64 / secs,
        first_seq,
        last_seq,
    })
}

async fn concurrent_window(
    f: &FileHandle,
    blocks: &[String],
    window: Duration,
) -> Result<EngineRun, BoxError> {
    static ROUND: AtomicU64 = AtomicU64::new(0);
    let round = ROUND.fetch_add(1, Ordering::Relaxed);
    let first_seq = f.last_seq() + 1;
    let t = Instant::now();
    let deadline = t + window;
    let mut joins = Vec::with_capacity(blocks.len());
    for (task, block) in blocks.iter().enumerate() {
        let f = f.clone();
        let block = block.clone();
        joins.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                f.submit(write_cmd(&block, round << 40 | (task as u64) << 24 | n))
                    .await?;
                n += 1;
            }
            Ok::<u64, EngineError>(n)
        }));
    }
    let mut n = 0;
    for j in joins {
        n += j.await??;
    }
    let secs = t.elapsed().as_secs_f64();
    let last_seq = f.last_seq();
    if last_seq + 1 - first_seq != n {
        return Err(format!(
            "concurrent: {n} commands but {} events",
            last_seq + 1 - first_seq
        )
        .into());
    }
    Ok(EngineRun {
        rate: n as f64 / secs,
        first_seq,
        last_seq,
    })
}

struct Build {
    events: u64,
    secs: f64,
}

async fn build_big_log(engine: &Engine, path: &Path, plan: &Plan) -> Result<Build, BoxError> {
    info!(
        "building a {}-event log through the engine ({} tasks, submit_all batches of {})",
        plan.big_events, plan.build_tasks, plan.build_batch
    );
    let t = Instant::now();
    let f = engine.init(path, "Bench").await?;
    // Blocks first, in batches.
    let mut blocks = Vec::with_capacity(plan.big_blocks);
    for chunk in (0..plan.big_blocks)
        .collect::<Vec<_>>()
        .chunks(plan.build_batch.max(1))
    {
        let evs = f
            .submit_all(chunk.iter().map(|i| create_cmd(*i)).collect())
            .await?;
        blocks.extend(evs.into_iter().map(|e| e.entity));
    }
    let blocks = Arc::new(blocks);
    let start_seq = f.last_seq();
    let total = plan.big_events.saturating_sub(start_seq);
    let claimed = Arc::new(AtomicU64::new(0));
    let batch = plan.build_batch.max(1) as u64;
    let mut joins = Vec::new();
    for _ in 0..plan.build_tasks {
        let (f, blocks, claimed) = (f.clone(), blocks.clone(), claimed.clone());
        joins.push(tokio::spawn(async move {
            loop {
                let from = claimed.fetch_add(batch, Ordering::Relaxed);
                if from >= total {
                    return Ok::<(), EngineError>(());
                }
                let to = (from + batch).min(total);
                let cmds: Vec<Command> = (from..to)
                    .map(|i| write_cmd(&blocks[(i % blocks.len() as u64) as usize], i))
                    .collect();
                if cmds.len() == 1 {
                    f.submit(cmds.into_iter().next().unwrap_or_else(|| unreachable!()))
                        .await?;
                } else {
                    f.submit_all(cmds).await?;
                }
            }
        }));
    }
    let mut last_report = Instant::now();
    let mut done = false;
    while !done {
        done = joins.iter().all(|j| j.is_finished());
        if last_report.elapsed() > Duration::from_secs(5) {
            last_report = Instant::now();
            info!("  … {} events", f.last_seq());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for j in joins {
        j.await??;
    }
    let events = f.last_seq();
    f.close().await; // writes the final snapshot
    Ok(Build {
        events,
        secs: t.elapsed().as_secs_f64(),
    })
}

async fn engine_open_run(engine: &Engine, path: &Path, expect: u64) -> Result<f64, BoxError> {
    let mut tries = 0;
    loop {
        let t = Instant::now();
        match engine.open(path).await {
            Ok(h) => {
                let owner = h.owner();
                let seq = h.last_seq();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                h.close().await;
                if owner.as_deref() != Some(OWNER) || seq != expect {
                    return Err(format!(
                        "opened file has owner {owner:?}, seq {seq}; expected {OWNER}, {expect}"
                    )
                    .into());
                }
                return Ok(ms);
            }
            Err(EngineError::Locked(_)) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn retry_locked<T>(mut f: impl FnMut() -> Result<T, EngineError>) -> Result<T, EngineError> {
    let mut tries = 0;
    loop {
        match f() {
            Err(EngineError::Locked(_)) if tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

// ------------------------------------------------------------------------------------------
// raw sled side

// ------------------------------------------------------------------------------------------
// helpers

fn pair(engine: f64, raw: f64, mut extra: Value) -> Value {
    extra["engine"] = round(engine, 1);
    extra["raw"] = round(raw, 1);
    extra["ratio"] = round(engine / raw, 3);
    extra
}

fn round(x: f64, digits: i32) -> Value {
    let p = 10f64.powi(digits);
    json!((x * p).round() / p)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn avg_len(records: &[([u8; 9], Vec<u8>)]) -> Value {
    let total: usize = records.iter().map(|(_, v)| v.len()).sum();
    round(total as f64 / records.len().max(1) as f64, 0)
}

fn check_count(what: &str, got: u64, want: u64) -> Result<(), BoxError> {
    if got != want {
        return Err(format!("{what} saw {got} events, the log holds {want}").into());
    }
    Ok(())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default()
}

fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn dir_size(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

// ------------------------------------------------------------------------------------------
// context collection, owner socket, MCP round trip

// ------------------------------------------------------------------------------------------
// project: a realistic source tree through the `elfiee` CLI

/// One finished child process.
struct ChildRun {
    wall: Duration,
    /// `ru_maxrss` of the child from `wait4` (KiB on Linux).
    peak_rss_kib: u64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: std::process::ExitStatus,
}

impl ChildRun {
    fn ms(&self) -> f64 {
        self.wall.as_secs_f64() * 1000.0
    }

    fn rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }

    /// `Err` with the tail of stderr unless the child exited 0.
    fn ok(self, what: &str) -> Result<ChildRun, BoxError> {
        if self.status.success() {
            return Ok(self);
        }
        let err = String::from_utf8_lossy(&self.stderr);
        let err = err.trim();
        let tail: String = err
            .chars()
            .skip(err.chars().count().saturating_sub(600))
            .collect();
        Err(format!("`{what}` failed ({}): {tail}", self.status).into())
    }

    fn json(&self) -> Result<Value, BoxError> {
        Ok(serde_json::from_slice(&self.stdout)?)
    }
}

/// Waits for `child` (spawned at `t0`) with `wait4`: wall time from `t0` to the reaping, peak
/// RSS (`ru_maxrss`, KiB), exit status. Whatever pipes the caller holds must be drained by then.
fn reap(
    child: std::process::Child,
    t0: Instant,
) -> std::io::Result<(Duration, u64, std::process::ExitStatus)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = loop {
        // SAFETY: `pid` is our own child, not yet reaped (std waits only when asked); the
        // pointers are to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break r;
    };
    let wall = t0.elapsed();
    if reaped != pid {
        return Err(std::io::Error::last_os_error());
    }
    // Already reaped: dropping `child` neither waits nor kills.
    drop(child);
    Ok((
        wall,
        ru.ru_maxrss.max(0) as u64,
        std::process::ExitStatus::from_raw(status),
    ))
}

/// Runs `cmd` to the end (stdin closed, stdout and stderr captured through pipes) and reaps it
/// with `wait4` for its peak RSS. Wall time is from before the spawn to the reaping.
///
/// Linux folds the spawning process's RSS high-water mark into the child's `ru_maxrss` (the
/// spawn shares or copies the parent's memory until `exec`), so a child of a big process reads
/// big. The project phase therefore runs its children through [`Launcher`], a small process
/// that calls this; used directly only when the launcher cannot start.
fn run_child(cmd: &mut std::process::Command) -> std::io::Result<ChildRun> {
    use std::io::Read;
    use std::process::Stdio;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn()?;
    let mut err_pipe = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_end(&mut b);
        }
        b
    });
    let mut stdout = Vec::new();
    if let Some(mut p) = child.stdout.take() {
        let _ = p.read_to_end(&mut stdout);
    }
    let (wall, peak_rss_kib, status) = reap(child, t0)?;
    let stderr = err_reader.join().unwrap_or_default();
    Ok(ChildRun {
        wall,
        peak_rss_kib,
        stdout,
        stderr,
        status,
    })
}

/// `elfiee-bench --spawn-server`: reads one JSON request per line on stdin
/// (`{"program", "args", "stdout", "stderr"}`, the last two file paths), runs it with stdout
/// and stderr into those files, reaps it with `wait4` and answers one JSON line
/// (`{"wall_ns", "peak_rss_kib", "status"}`). It stays a few MB large, so its children's
/// `ru_maxrss` is theirs and not the benchmark's.
fn spawn_server() -> Result<(), BoxError> {
    use std::io::{BufRead, Write};
    use std::os::unix::process::ExitStatusExt;
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let req: Value = serde_json::from_str(&line?)?;
        let s = |k: &str| req[k].as_str().unwrap_or_default().to_owned();
        let args: Vec<String> = req["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().unwrap_or_default().to_owned())
            .collect();
        let mut cmd = std::process::Command::new(s("program"));
        cmd.args(&args)
            .env_remove("ELFIEE_ELF")
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(s("stdout"))?)
            .stderr(std::fs::File::create(s("stderr"))?);
        let t0 = Instant::now();
        let reply = match cmd.spawn().and_then(|c| reap(c, t0)) {
            Ok((wall, rss, status)) => json!({
                "wall_ns": wall.as_nanos() as u64, "peak_rss_kib": rss, "status": status.into_raw(),
            }),
            Err(e) => json!({"error": e.to_string()}),
        };
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    Ok(())
}

/// Runs `elfiee` commands for the project phase, through a `--spawn-server` child of this
/// binary (see [`run_child`] for why), or directly when that cannot start.
struct Cli {
    exe: PathBuf,
    server: Option<(
        std::process::Child,
        std::process::ChildStdin,
        std::io::BufReader<std::process::ChildStdout>,
    )>,
    out: PathBuf,
    err: PathBuf,
}

impl Cli {
    fn new(dir: &Path) -> Result<Cli, BoxError> {
        let me = std::env::current_exe()?;
        let exe = me.with_file_name("elfiee");
        let server = std::process::Command::new(&me)
            .arg("--spawn-server")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn();
        let server = match server {
            Ok(mut c) => match (c.stdin.take(), c.stdout.take()) {
                (Some(i), Some(o)) => Some((c, i, std::io::BufReader::new(o))),
                _ => None,
            },
            Err(e) => {
                info!(
                    "project: no spawn server ({e}); children's peak RSS includes this process's"
                );
                None
            }
        };
        Ok(Cli {
            exe,
            server,
            out: dir.join("child.stdout"),
            err: dir.join("child.stderr"),
        })
    }

    /// `true` when peak RSS figures come from the small spawn server (not inflated).
    fn clean_rss(&self) -> bool {
        self.server.is_some()
    }

    fn spawn(&mut self, args: &[String]) -> Result<ChildRun, BoxError> {
        use std::io::{BufRead, Write};
        use std::os::unix::process::ExitStatusExt;
        let Some((_, tx, rx)) = self.server.as_mut() else {
            let mut c = std::process::Command::new(&self.exe);
            c.env_remove("ELFIEE_ELF").args(args);
            return Ok(run_child(&mut c)?);
        };
        let req = json!({
            "program": self.exe.to_string_lossy(), "args": args,
            "stdout": self.out.to_string_lossy(), "stderr": self.err.to_string_lossy(),
        });
        writeln!(tx, "{req}")?;
        tx.flush()?;
        let mut line = String::new();
        if rx.read_line(&mut line)? == 0 {
            return Err("the spawn server exited".into());
        }
        let v: Value = serde_json::from_str(&line)?;
        if let Some(e) = v["error"].as_str() {
            return Err(format!(
                "cannot run {} ({e}); build it with `cargo build --release`",
                self.exe.display()
            )
            .into());
        }
        Ok(ChildRun {
            wall: Duration::from_nanos(v["wall_ns"].as_u64().unwrap_or(0)),
            peak_rss_kib: v["peak_rss_kib"].as_u64().unwrap_or(0),
            stdout: std::fs::read(&self.out)?,
            stderr: std::fs::read(&self.err)?,
            status: std::process::ExitStatus::from_raw(v["status"].as_i64().unwrap_or(1) as i32),
        })
    }

    /// `elfiee [--elf doc] args…`, required to succeed.
    fn run(&mut self, doc: Option<&Path>, args: &[&str]) -> Result<ChildRun, BoxError> {
        let mut all: Vec<String> = Vec::with_capacity(args.len() + 2);
        if let Some(d) = doc {
            all.push("--elf".into());
            all.push(path_str(d)?.to_owned());
        }
        all.extend(args.iter().map(|a| a.to_string()));
        let what: String = format!("elfiee {}", args.join(" "))
            .chars()
            .take(120)
            .collect();
        self.spawn(&all)?.ok(&what)
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        if let Some((mut child, tx, rx)) = self.server.take() {
            drop(tx); // end of requests: the server exits
            drop(rx);
            let _ = child.wait();
        }
    }
}

/// Targets of the phase, each with its measured value (or none when the step failed).
#[derive(Default)]
struct Targets(Vec<Value>);

impl Targets {
    /// `value ≤ limit`.
    fn at_most(&mut self, name: &str, value: Option<f64>, limit: f64, unit: &str) {
        self.0.push(json!({
            "name": name, "value": value.map(|v| round(v, 3)), "target": format!("<= {limit} {unit}").trim_end().to_owned(),
            "met": value.map(|v| v <= limit),
        }));
    }

    /// A yes/no check; `None` when it could not be made.
    fn check(&mut self, name: &str, what: String, met: Option<bool>) {
        self.0
            .push(json!({"name": name, "value": what, "target": "yes", "met": met}));
    }

    fn summary(&self, phase: &str) {
        info!("{phase} summary:");
        info!(
            "  {:<54} {:>16}  {:<14} result",
            "figure", "value", "target"
        );
        for t in &self.0 {
            let value = match &t["value"] {
                Value::String(s) => s.clone(),
                Value::Null => "-".into(),
                v => v.to_string(),
            };
            let met = match t["met"].as_bool() {
                Some(true) => "met",
                Some(false) => "NOT MET",
                None => "not measured",
            };
            info!(
                "  {:<54} {:>16}  {:<14} {met}",
                t["name"].as_str().unwrap_or(""),
                value,
                t["target"].as_str().unwrap_or("")
            );
        }
    }
}

fn path_str(p: &Path) -> Result<&str, BoxError> {
    p.to_str()
        .ok_or_else(|| format!("non-UTF-8 path {}", p.display()).into())
}

fn ms_stats(runs: &[ChildRun]) -> Value {
    let w: Vec<f64> = runs.iter().map(ChildRun::ms).collect();
    let r: Vec<f64> = runs.iter().map(ChildRun::rss_mib).collect();
    json!({
        "wall_ms": round(median(&w), 1), "wall_ms_min": round(w.iter().copied().fold(f64::INFINITY, f64::min), 1),
        "wall_ms_max": round(w.iter().copied().fold(0.0, f64::max), 1),
        "peak_rss_mib": round(median(&r), 1), "peak_rss_mib_max": round(r.iter().copied().fold(0.0, f64::max), 1),
        "runs": runs.len(),
    })
}

