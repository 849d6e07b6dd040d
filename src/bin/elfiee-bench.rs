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

/// The engine's sled settings (see `SledEventLog::open`).
fn sled_config(dir: &Path) -> sled::Config {
    sled::Config::new()
        .path(dir)
        .flush_every_ms(None)
        .mode(sled::Mode::HighThroughput)
}

fn open_raw(dir: &Path) -> Result<sled::Db, BoxError> {
    let mut tries = 0;
    loop {
        match sled_config(dir).open() {
            Ok(db) => return Ok(db),
            Err(e) if tries < 100 => {
                tries += 1;
                if tries == 1 {
                    info!("raw open of {} failed ({e}); retrying", dir.display());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// One stored event: its key and value bytes.
type Record = ([u8; 9], Vec<u8>);
type Records = [Record];

/// The engine's stored records, again and again until at least `min` has passed since the
/// iterator was made (the pass in progress is finished). Pass `p` stores seq `s` under the key
/// of seq `s + p·n`, so the log keeps growing; the value bytes never change.
struct Passes<'a> {
    records: &'a Records,
    pass: u64,
    i: usize,
    start: Instant,
    min: Duration,
    yielded: u64,
}

impl<'a> Passes<'a> {
    fn new(records: &'a Records, min: Duration) -> Passes<'a> {
        Passes {
            records,
            pass: 0,
            i: 0,
            start: Instant::now(),
            min,
            yielded: 0,
        }
    }
    fn rate(&self) -> f64 {
        self.yielded as f64 / self.start.elapsed().as_secs_f64()
    }
}

impl<'a> Iterator for Passes<'a> {
    type Item = ([u8; 9], &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.records.is_empty() {
            return None;
        }
        if self.i == self.records.len() {
            if self.start.elapsed() >= self.min {
                return None;
            }
            self.pass += 1;
            self.i = 0;
        }
        let (k, v) = &self.records[self.i];
        self.i += 1;
        self.yielded += 1;
        let seq = u64::from_be_bytes(k[1..9].try_into().unwrap_or_default());
        Some((
            event_key(seq + self.pass * self.records.len() as u64),
            v.as_slice(),
        ))
    }
}

fn sequential_raw(dir: &Path, records: &Records, min: Duration) -> Result<f64, BoxError> {
    let db = open_raw(dir)?;
    let tree = db.open_tree("events")?;
    let sync = SledSync::new(dir)?;
    let mut feed = Passes::new(records, min);
    for (k, v) in feed.by_ref() {
        tree.insert(k, v)?;
        db.flush()?;
        sync.sync()?;
    }
    Ok(feed.rate())
}

fn concurrent_raw(
    dir: &Path,
    records: &Records,
    batch: usize,
    min: Duration,
) -> Result<f64, BoxError> {
    let db = open_raw(dir)?;
    let tree = db.open_tree("events")?;
    let sync = SledSync::new(dir)?;
    let mut feed = Passes::new(records, min);
    loop {
        let mut b = sled::Batch::default();
        let mut n = 0;
        for (k, v) in feed.by_ref().take(batch.max(1)) {
            b.insert(&k, v);
            n += 1;
        }
        if n == 0 {
            break;
        }
        tree.apply_batch(b)?;
        db.flush()?;
        sync.sync()?;
    }
    Ok(feed.rate())
}

/// (events, seconds): sled open + iterate event keys + decode each record.
fn raw_replay_run(log_dir: &Path) -> Result<(u64, f64), BoxError> {
    raw_replay_variant(log_dir, false, false)
}

/// Copies every record of the engine's log in `log_dir` (sled keys and the groups in
/// `events.pack`) into a fresh sled database in `out` as plain `e‖seq` keys (what the engine
/// stored before groups existed): the raw floor of the replay reads the same records from
/// sled alone, written in batches of the size the engine's build used. Untimed.
fn raw_sled_copy(log_dir: &Path, out: &Path, batch_len: u64) -> Result<u64, BoxError> {
    let db = open_raw(out)?;
    let tree = db.open_tree("events")?;
    let mut batch = sled::Batch::default();
    let mut n = 0u64;
    for_each_record(log_dir, |seq, rec| {
        batch.insert(&event_key(seq), rec);
        n += 1;
        if n.is_multiple_of(batch_len.max(1)) {
            tree.apply_batch(std::mem::take(&mut batch))?;
        }
        Ok(())
    })?;
    tree.apply_batch(batch)?;
    db.flush()?;
    Ok(n)
}

/// Calls `f(seq, record)` for every stored record of the log in `log_dir`, in seq order: sled
/// `e` keys, and for a bulk command's `g` key its records, read from `events.pack` with one
/// positioned read (no blake3), as `engine/src/log.rs` stores them. Includes the sled open
/// and close.
fn for_each_record(
    log_dir: &Path,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), BoxError>,
) -> Result<(), BoxError> {
    use elfiee_engine::log::{group_key, split_group, GroupEntry};
    use std::os::unix::fs::FileExt;
    let db = open_raw(log_dir)?;
    let tree = db.open_tree("events")?;
    let mut groups = std::collections::VecDeque::new();
    for r in tree.range(group_key(0)..=group_key(u64::MAX)) {
        let (k, v) = r?;
        groups.push_back(GroupEntry::decode(&k, &v)?);
    }
    let pack = match groups.is_empty() {
        true => None,
        false => Some(std::fs::File::open(
            log_dir
                .parent()
                .ok_or("log dir has no parent")?
                .join("events.pack"),
        )?),
    };
    let mut buf = Vec::new();
    let mut groups_before = |seq: u64, f: &mut RecordSink<'_>| {
        while groups.front().is_some_and(|g: &GroupEntry| g.first < seq) {
            let g = groups.pop_front().expect("checked");
            buf.resize(g.len as usize, 0);
            pack.as_ref()
                .ok_or("no events.pack")?
                .read_exact_at(&mut buf, g.offset)?;
            for (seq, rec) in split_group(&g, &buf)? {
                f(seq, &rec)?;
            }
        }
        Ok::<(), BoxError>(())
    };
    for r in tree.range(event_key(0)..=event_key(u64::MAX)) {
        let (k, v) = r?;
        let seq = u64::from_be_bytes(k[1..9].try_into()?);
        groups_before(seq, &mut f)?;
        f(seq, &v)?;
    }
    groups_before(u64::MAX, &mut f)?;
    drop(tree);
    drop(db);
    Ok(())
}

/// (events, seconds): [`for_each_record`] + decode each record; with `chain` the hash chain
/// is checked too (as the engine does), with `fold` each event is applied to a
/// [`elfiee_projections::State`] as well.
fn raw_replay_variant(log_dir: &Path, chain: bool, fold: bool) -> Result<(u64, f64), BoxError> {
    let t = Instant::now();
    let mut n = 0u64;
    let mut bytes = 0usize;
    let mut prev = elfiee_model::EventHash::ZERO;
    let mut state = elfiee_projections::State::default();
    for_each_record(log_dir, |seq, v| {
        let e = codec::open(seq, v, chain.then_some(&prev))?;
        prev = e.hash;
        if fold {
            elfiee_projections::apply(&mut state, &e);
        }
        bytes += e.entity.len();
        n += 1;
        Ok(())
    })?;
    std::hint::black_box((bytes, &state));
    Ok((n, t.elapsed().as_secs_f64()))
}

/// The newest snapshot file of the `.elf` whose log is `log_dir`.
fn newest_snapshot_file(log_dir: &Path) -> Result<std::path::PathBuf, BoxError> {
    let elf = log_dir.parent().ok_or("log dir has no parent")?;
    let paths = elfiee_engine::layout::ElfPaths::existing(elf)?;
    elfiee_engine::stored_snapshots(&paths)
        .into_iter()
        .next()
        .map(|(_, f)| f)
        .ok_or_else(|| "no snapshot stored".into())
}

/// (ms, snapshot length): sled open + read the newest snapshot file's bytes.
fn raw_open_run(log_dir: &Path) -> Result<(f64, usize), BoxError> {
    let file = newest_snapshot_file(log_dir)?;
    let t = Instant::now();
    let db = open_raw(log_dir)?;
    let snap = std::fs::read(&file)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    drop(db);
    Ok((ms, snap.len()))
}

/// Seq of the stored snapshot, checked against the log tail (outside any timing).
/// Time to load a command index of 1,000,000 records (the open path's share for such a file).
fn command_index_load(base: &Path) -> Result<(f64, usize), BoxError> {
    let path = base.join("index-load.idx");
    let entries: Vec<_> = (0..1_000_000u64)
        .map(|i| (uuid::Uuid::new_v4(), i + 1, 1))
        .collect();
    elfiee_engine::cmd_index::append(&path, &entries)?;
    let t = Instant::now();
    let loaded = elfiee_engine::cmd_index::load(&path)?;
    let map: dashmap::DashMap<uuid::Uuid, (u64, u64)> = loaded
        .into_iter()
        .map(|(id, first, count)| (id, (first, count)))
        .collect();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let n = map.len();
    drop(map);
    std::fs::remove_file(&path)?;
    Ok((ms, n))
}

fn snapshot_seq(log_dir: &Path) -> Result<u64, BoxError> {
    let bytes = std::fs::read(newest_snapshot_file(log_dir)?)?;
    let db = open_raw(log_dir)?;
    let snap = elfiee_engine::replay::Snapshot::decode(bytes)?;
    let events = db.open_tree("events")?;
    let single = events
        .range(event_key(0)..=event_key(u64::MAX))
        .next_back()
        .transpose()?
        .map(|(k, _)| u64::from_be_bytes(k[1..9].try_into().unwrap_or_default()))
        .unwrap_or(0);
    let grouped = match events
        .range(elfiee_engine::log::group_key(0)..=elfiee_engine::log::group_key(u64::MAX))
        .next_back()
        .transpose()?
    {
        Some((k, v)) => elfiee_engine::log::GroupEntry::decode(&k, &v)?.last(),
        None => 0,
    };
    let tail = single.max(grouped);
    if snap.seq != tail {
        info!(
            "warning: snapshot at seq {} but the log ends at {tail}; open will replay the tail",
            snap.seq
        );
    }
    Ok(snap.seq)
}

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

/// Context collection + token counting over a 10,000-block state vs tiktoken-rs alone on the
/// same text.
fn context_phase(plan: &Plan) -> Value {
    use elfiee_projections::context::{
        collect_context, synthetic_state, tokenizer, ContextOptions,
    };
    let n = 10_000;
    let state = synthetic_state(n);
    let opts = ContextOptions {
        max_tokens: usize::MAX,
        ..ContextOptions::default()
    };
    tokenizer(); // vocabulary loaded outside the timings
    let runs = if plan.mode == "quick" { 3 } else { 5 };
    let (mut collect, mut alone, mut tokens) = (Vec::new(), Vec::new(), 0);
    for _ in 0..runs {
        let t = Instant::now();
        let ctx = collect_context(&state, &["b0".to_owned()], &opts);
        collect.push(t.elapsed().as_secs_f64() * 1000.0);
        tokens = ctx.total_tokens;
        let text = ctx.to_markdown();
        let t = Instant::now();
        std::hint::black_box(tokenizer().encode_ordinary(&text).len());
        alone.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (c, a) = (median(&collect), median(&alone));
    let v = json!({
        "blocks": n, "tokens": tokens, "collect_ms": round(c, 1), "tiktoken_alone_ms": round(a, 1),
        "engine": round(tokens as f64 / (c / 1000.0), 0), "raw": round(tokens as f64 / (a / 1000.0), 0),
        "ratio": round(a / c, 3), "unit": "tokens/s (higher is better)", "statistic": format!("median of {runs}"),
        "how": "collect_context over a synthetic 10,000-block state (b0 → ~100 → ~10,000, markdown + code with mixed scripts), unlimited budget, cl100k_base; raw: tiktoken-rs encode_ordinary of the same rendered text",
    });
    info!("context: {v}");
    v
}

/// Microseconds per durable `markdown.write` of `block`, `n` in a row.
async fn us_per_write(f: &FileHandle, block: &str, n: u64, tag: &str) -> Result<f64, EngineError> {
    let t = Instant::now();
    for i in 0..n {
        f.submit(Command::new(
            OWNER,
            "markdown.write",
            Some(block),
            json!({"markdown": format!("{tag} {i}")}),
        ))
        .await?;
    }
    Ok(t.elapsed().as_secs_f64() / n as f64 * 1e6)
}

/// One write through the owner socket (another process's path) vs the same write in-process.
fn owner_socket_phase(
    rt: &tokio::runtime::Runtime,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    let path = base.join("socket.elf");
    let owner = Engine::new(EngineConfig {
        node_id: OWNER.into(),
        ..Default::default()
    });
    let n = if plan.mode == "quick" { 300 } else { 1000 };
    let exe = std::env::current_exe()?.with_file_name("elfiee");
    let (local, remote) = rt.block_on(async {
        let f = owner.init(&path, "Bench").await?;
        let block = create_block(&f, 0).await?;
        let local = us_per_write(&f, &block, n, "local").await?;
        // A second engine in this process cannot open the file (the registry is per engine but
        // sled's lock is per process), so the remote side is a child process: `elfiee serve`
        // owns the file and this process connects to it.
        f.close().await;
        Ok::<_, EngineError>((local, block))
    })?;
    let mut child = std::process::Command::new(&exe)
        .args(["serve"])
        .env("ELFIEE_ELF", &path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} serve (build it with `cargo build --release`): {e}",
                exe.display()
            )
        })?;
    for _ in 0..500 {
        if path.join("owner.sock").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = Engine::new(EngineConfig {
        node_id: "client".into(),
        ..Default::default()
    });
    let remote_us = rt.block_on(async {
        let f = client.open(&path).await?;
        let us = us_per_write(&f, &remote, n, "remote").await?;
        f.close().await;
        Ok::<_, EngineError>(us)
    });
    let _ = child.kill();
    let _ = child.wait();
    let remote_us = remote_us?;
    let v = json!({
        "engine": round(remote_us, 1), "raw": round(local, 1), "ratio": round(remote_us / local, 2),
        "unit": "µs per durable write (lower is better)", "writes": n,
        "how": "sequential markdown.write: raw = FileHandle::submit in the owning process; engine = the same from a second process through <elf>/owner.sock (elfiee serve owns the file)",
    });
    info!("owner_socket: {v}");
    Ok(v)
}

/// MCP `tools/call` round trip for a write (`elfiee_markdown_write`) against `elfiee mcp-server`.
fn mcp_phase(base: &Path, plan: &Plan) -> Result<Value, BoxError> {
    use std::io::{BufRead, BufReader, Write};
    let exe = std::env::current_exe()?.with_file_name("elfiee");
    let path = base.join("mcp.elf");
    let run = |args: &[&str]| -> Result<Value, BoxError> {
        let out = std::process::Command::new(&exe)
            .args(args)
            .env("ELFIEE_ELF", &path)
            .output()?;
        if !out.status.success() {
            return Err(
                format!("elfiee {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into(),
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    run(&[
        "--json",
        "init",
        path.to_str().unwrap_or_default(),
        "--owner",
        "Bench",
    ])?;
    let block = run(&[
        "--json", "block", "create", "--type", "markdown", "--name", "mcp",
    ])?["block_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut child = std::process::Command::new(&exe)
        .args(["mcp-server", "--elf", path.to_str().unwrap_or_default()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    let mut rpc = |msg: Value, expect_reply: bool| -> Result<Duration, BoxError> {
        let t = Instant::now();
        writeln!(stdin, "{msg}")?;
        stdin.flush()?;
        if expect_reply {
            loop {
                line.clear();
                if stdout.read_line(&mut line)? == 0 {
                    return Err("mcp-server closed stdout".into());
                }
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                if v.get("id") == msg.get("id") {
                    if v["result"]["isError"] == true {
                        return Err(format!("tool call failed: {line}").into());
                    }
                    break;
                }
            }
        }
        Ok(t.elapsed())
    };
    rpc(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "elfiee-bench", "version": "1"}}}),
        true,
    )?;
    rpc(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    )?;
    let n = if plan.mode == "quick" { 300 } else { 1000 };
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let d = rpc(
            json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "elfiee_markdown_write", "arguments": {"block_id": block, "markdown": format!("write {i}")}}}),
            true,
        )?;
        lat.push(d.as_secs_f64() * 1e6);
    }
    drop(stdin);
    let _ = child.wait();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    let v = json!({
        "p50_us": round(pct(0.50), 0), "p99_us": round(pct(0.99), 0), "calls": n,
        "how": "tools/call elfiee_markdown_write over stdio JSON-RPC to `elfiee mcp-server` (the server owns the file; each write durable before the reply); latency from writing the request line to reading its response",
    });
    info!("mcp_write: {v}");
    Ok(v)
}

// ------------------------------------------------------------------------------------------
// project: a realistic source tree through the `elfiee` CLI

/// Seed of the generated trees (fixed, so every run measures the same bytes).
const PROJECT_SEED: u64 = 0x00E1_F1EE;
/// The "ten times larger" tree: same paths, every file ten times longer.
const BIG_FACTOR: u64 = 10;
/// The importer's default per-file limit; the big tree has files above it.
const DEFAULT_MAX_FILE: u64 = 1024 * 1024;
/// `--max-file-bytes` passed to `dir import` when a tree has files above the default
/// ([`project_gen::HARD_CAP`], 4 MiB: no generated file is larger).
const BIG_MAX_FILE: u64 = project_gen::HARD_CAP;
/// Length of every text written by `markdown write` in the write and growth steps.
const WRITE_LEN: usize = 2048;
/// The constant of the growth target: growth ≤ 2 × bytes written + this.
const GROWTH_SLACK: u64 = 8 * 1024 * 1024;
const MIB: f64 = 1024.0 * 1024.0;

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

/// Sizes of the `project` phase.
struct ProjectPlan {
    files: usize,
    bytes: u64,
    writes: usize,
    write_runs: usize,
    list_runs: usize,
    seed: u64,
}

impl ProjectPlan {
    fn new(args: &Args) -> ProjectPlan {
        let (files, bytes, writes) = if args.quick {
            (2_000, 20_000_000, 200)
        } else {
            (10_000, 100_000_000, 1_000)
        };
        ProjectPlan {
            files: args.project_files.unwrap_or(files),
            bytes: args.project_bytes.unwrap_or(bytes),
            writes: args.project_writes.unwrap_or(writes),
            // Medians of many short runs: one process run lasts ~15 ms on a shared machine.
            write_runs: 21,
            list_runs: 9,
            seed: PROJECT_SEED,
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

/// Number of the last committed event (`state-digest`'s `seq`).
fn last_seq(cli: &mut Cli, doc: &Path) -> Result<u64, BoxError> {
    let v = cli.run(Some(doc), &["--json", "state-digest"])?.json()?;
    v["seq"]
        .as_u64()
        .ok_or_else(|| format!("state-digest printed no seq: {v}").into())
}

/// Deterministic prose of exactly `len` bytes, different for every `i`.
fn write_text(i: usize, len: usize) -> String {
    let mut s = format!("# Write {i}\n\n");
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ PROJECT_SEED;
    const W: &[&str] = &[
        "the", "block", "event", "log", "sled", "write", "bench", "content", "store", "hash",
        "chain", "snapshot", "replay", "import", "folder", "sync", "rescan", "editor", "grant",
    ];
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(W[(x % W.len() as u64) as usize]);
        s.push(if x.is_multiple_of(11) { '\n' } else { ' ' });
    }
    s.truncate(len);
    s
}

/// Bytes of each top-level entry of a `.elf` folder.
fn elf_breakdown(doc: &Path) -> Value {
    let mut m = serde_json::Map::new();
    if let Ok(rd) = std::fs::read_dir(doc) {
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let n = if p.is_dir() {
                dir_size(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
            m.insert(e.file_name().to_string_lossy().into_owned(), json!(n));
        }
    }
    Value::Object(m)
}

fn gen_json(r: &project_gen::GenReport, secs: f64, factor: u64) -> Value {
    json!({
        "files": r.files, "text_bytes": r.text_bytes, "text_mib": round(r.text_bytes as f64 / MIB, 1),
        "largest_file": r.largest_file, "size_factor": factor,
        "ignored_files": r.ignored_files, "binary_files": r.binary_files, "meta_files": r.meta_paths,
        "seconds": round(secs, 2),
    })
}

/// Raw floor of an import: read every text file, blake3 it, insert the bytes into a fresh
/// sled db (key = relative path) with the engine's sled settings, one `flush`, drop the db.
fn raw_import_run(tree: &Path, paths: &[String], db: &Path) -> Result<(f64, u64), BoxError> {
    let _ = std::fs::remove_dir_all(db);
    let t = Instant::now();
    let raw = open_raw(db)?;
    let mut bytes = 0u64;
    for rel in paths {
        let b = std::fs::read(tree.join(rel))?;
        // blake3 of the bytes (through the engine's chain hash: blake3 over a 40-byte prefix
        // and the bytes; the root crate has no direct blake3 dependency).
        std::hint::black_box(codec::chain_hash(&EventHash([0; 32]), 0, &b));
        bytes += b.len() as u64;
        raw.insert(rel.as_bytes(), b)?;
    }
    raw.flush()?;
    SledSync::new(db)?.sync()?;
    drop(raw);
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(db);
    Ok((secs, bytes))
}

/// Raw floor of a rescan: stat every text file, read + blake3 the changed ones, insert them
/// into a fresh sled db, one `flush`.
fn raw_rescan_run(
    tree: &Path,
    paths: &[String],
    changed: &[String],
    db: &Path,
) -> Result<f64, BoxError> {
    let _ = std::fs::remove_dir_all(db);
    let raw = open_raw(db)?;
    let t = Instant::now();
    let mut seen = 0u64;
    for rel in paths {
        seen += std::fs::metadata(tree.join(rel))?.len();
    }
    std::hint::black_box(seen);
    for rel in changed {
        let b = std::fs::read(tree.join(rel))?;
        std::hint::black_box(codec::chain_hash(&EventHash([0; 32]), 0, &b));
        raw.insert(rel.as_bytes(), b)?;
    }
    raw.flush()?;
    SledSync::new(db)?.sync()?;
    let secs = t.elapsed().as_secs_f64();
    drop(raw);
    let _ = std::fs::remove_dir_all(db);
    Ok(secs)
}

/// Result of one `dir import` through the CLI.
struct Imported {
    run: ChildRun,
    block_id: String,
    report: Value,
}

fn cli_import(
    cli: &mut Cli,
    doc: &Path,
    tree: &Path,
    max_file: Option<u64>,
) -> Result<Imported, BoxError> {
    cli.run(None, &["init", path_str(doc)?, "--owner", "Bench"])?;
    let limit = max_file.map(|m| m.to_string());
    let mut args = vec!["--json", "dir", "import", path_str(tree)?];
    if let Some(l) = &limit {
        args.extend(["--max-file-bytes", l.as_str()]);
    }
    let run = cli.run(Some(doc), &args)?;
    let report = run.json()?;
    let block_id = report["block_id"]
        .as_str()
        .ok_or_else(|| format!("dir import printed no block_id: {report}"))?
        .to_owned();
    Ok(Imported {
        run,
        block_id,
        report,
    })
}

/// What an import brought in, beside what the generator wrote.
fn import_check(imp: &Imported, gen: &project_gen::GenReport) -> (Value, bool) {
    let files = imp.report["files"].as_u64().unwrap_or(0) as usize;
    let skipped: Vec<(String, String)> = imp.report["skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["path"].as_str().unwrap_or("").to_owned(),
                s["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let is_ignored = |p: &str| {
        gen.ignored_paths.iter().any(|i| i == p)
            || p == "build"
            || p.starts_with("build/")
            || p.ends_with(".log")
    };
    let skipped_binary = skipped
        .iter()
        .filter(|(p, _)| gen.binary_paths.contains(p))
        .count();
    let skipped_ignored = skipped.iter().filter(|(p, _)| is_ignored(p)).count();
    let skipped_text: Vec<&(String, String)> = skipped
        .iter()
        .filter(|(p, _)| gen.paths.binary_search(p).is_ok())
        .collect();
    // `.gitignore` is itself a text file an importer may keep.
    let ok = (files == gen.files || files == gen.files + gen.meta_paths.len())
        && skipped_text.is_empty();
    let v = json!({
        "imported_files": files, "generated_text_files": gen.files,
        "extra_imported": files as i64 - gen.files as i64,
        "note": "extra_imported is 0, or 1 when .gitignore itself is imported; more means ignored (build/, *.log) or binary files came in",
        "skipped": skipped.len(), "skipped_binary": skipped_binary, "binary_files": gen.binary_files,
        "skipped_ignored_entries": skipped_ignored, "ignored_files": gen.ignored_files,
        "skipped_text_files": skipped_text.len(),
        "skipped_examples": skipped.iter().take(12).map(|(p, r)| json!({"path": p, "reason": r})).collect::<Vec<_>>(),
    });
    (v, ok)
}

/// A markdown `markdown write` run; `Err` when the child fails.
/// Creates a markdown block named `name` in `doc` through the CLI; returns its id.
fn create_markdown(cli: &mut Cli, doc: &Path, name: &str) -> Result<String, BoxError> {
    let v = cli
        .run(
            Some(doc),
            &[
                "--json", "block", "create", "--type", "markdown", "--name", name,
            ],
        )?
        .json()?;
    match v["block_id"].as_str() {
        Some(id) => Ok(id.to_owned()),
        None => Err(format!("`block create` printed no block_id: {v}").into()),
    }
}

fn cli_write(cli: &mut Cli, doc: &Path, block: &str, text: &str) -> Result<ChildRun, BoxError> {
    cli.run(Some(doc), &["markdown", "write", block, "--text", text])
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

fn project_phase(base: &Path, args: &Args) -> Value {
    let pp = ProjectPlan::new(args);
    let mut out = json!({
        "spec": {"files": pp.files, "total_bytes": pp.bytes, "seed": pp.seed, "big_size_factor": BIG_FACTOR, "writes": pp.writes},
    });
    let mut targets = Targets::default();
    let started = Instant::now();
    if let Err(e) = project_steps(base, &pp, &mut out, &mut targets) {
        info!("project: stopped: {e}");
        out["error"] = json!(e.to_string());
    }
    out["seconds"] = round(started.elapsed().as_secs_f64(), 1);
    targets.summary("project");
    out["targets"] = json!(targets.0);
    out
}

/// Records `r`'s error under `out[key]["error"]` and returns `None`, or the value.
fn soft<T>(out: &mut Value, key: &str, r: Result<T, BoxError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            info!("project: {key} failed: {e}");
            if !out[key].is_object() {
                out[key] = json!({});
            }
            out[key]["error"] = json!(e.to_string());
            None
        }
    }
}

fn project_steps(
    base: &Path,
    pp: &ProjectPlan,
    out: &mut Value,
    targets: &mut Targets,
) -> Result<(), BoxError> {
    let dir = base.join("project");
    std::fs::create_dir_all(&dir)?;
    let mut cli = Cli::new(&dir)?;
    out["rss_from_spawn_server"] = json!(cli.clean_rss());

    // 1. the trees
    let spec = project_gen::Spec {
        seed: pp.seed,
        files: pp.files,
        total_bytes: pp.bytes,
        size_factor: 1,
    };
    let (small_tree, big_tree) = (dir.join("tree"), dir.join("tree-x10"));
    info!(
        "project: generating {} files, {:.1} MiB, and the ten-times-larger tree",
        pp.files,
        pp.bytes as f64 / MIB
    );
    let t = Instant::now();
    let small = project_gen::generate(&small_tree, &spec)?;
    let small_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let big_spec = project_gen::Spec {
        size_factor: BIG_FACTOR,
        ..spec
    };
    let big = project_gen::generate(&big_tree, &big_spec)?;
    let big_s = t.elapsed().as_secs_f64();
    out["generate"] = json!({
        "small": gen_json(&small, small_s, 1), "big": gen_json(&big, big_s, BIG_FACTOR),
        "how": "src/project_gen.rs: exactly `files` text files (.rs most, .ts .py .md .json .toml .yaml .txt) in nested folders, log-normal sizes (many of a few hundred bytes to a few KB, tail to ~300 KB) scaled to total_bytes; plus .gitignore (build/, *.log), ignored files under build/ and x.log, binary files with NUL bytes, none counted in text_bytes",
    });
    info!("project: generate: {}", out["generate"]);

    // Process floor: the cheapest child run of the CLI.
    let mut floor = Vec::new();
    for _ in 0..5 {
        floor.push(cli.run(None, &["--version"])?);
    }
    out["process_floor"] = json!({"command": "elfiee --version", "stats": ms_stats(&floor)});
    let floor_ms = median(&floor.iter().map(ChildRun::ms).collect::<Vec<_>>());
    let floor_rss = median(&floor.iter().map(ChildRun::rss_mib).collect::<Vec<_>>());

    // 2. raw floor of the import
    let raw_db = dir.join("raw-sled");
    let (first, bytes) = raw_import_run(&small_tree, &small.paths, &raw_db)?;
    let mut raw_runs = vec![first];
    if first < 5.0 {
        for _ in 0..2 {
            raw_runs.push(raw_import_run(&small_tree, &small.paths, &raw_db)?.0);
        }
    }
    let raw_s = median(&raw_runs);
    out["raw_import"] = json!({
        "seconds": round(raw_s, 3), "statistic": format!("median of {}", raw_runs.len()),
        "runs": raw_runs.iter().map(|s| round(*s, 3)).collect::<Vec<_>>(), "bytes": bytes,
        "mib_per_s": round(bytes as f64 / MIB / raw_s, 1),
        "how": "in-process: read each generated text file, blake3 it, insert the bytes into a fresh sled db (key = relative path, the engine's sled settings), one flush + SledSync::sync, drop; files hot in the page cache as for the engine import that follows",
    });
    info!("project: raw import: {}", out["raw_import"]);

    // 3. engine import (child process)
    let small_doc = dir.join("project.elf");
    let help = cli.run(None, &["dir", "import", "--help"])?;
    let has_max_flag = String::from_utf8_lossy(&help.stdout).contains("--max-file-bytes");
    let flag_for = |g: &project_gen::GenReport| {
        (g.largest_file > DEFAULT_MAX_FILE && has_max_flag).then_some(BIG_MAX_FILE)
    };
    info!(
        "project: importing {} through the CLI",
        small_tree.display()
    );
    let imported = soft(
        out,
        "import",
        cli_import(&mut cli, &small_doc, &small_tree, flag_for(&small)),
    );
    let import_ms = imported.as_ref().map(|i| i.run.ms());
    if let Some(imp) = &imported {
        let (check, ok) = import_check(imp, &small);
        let r = imp.run.ms() / 1000.0 / raw_s;
        out["import"] = json!({
            "wall_s": round(imp.run.ms() / 1000.0, 3), "peak_rss_mib": round(imp.run.rss_mib(), 1),
            "raw_s": round(raw_s, 3), "ratio": round(r, 3), "block_id": imp.block_id,
            "mib_per_s": round(small.text_bytes as f64 / MIB / (imp.run.ms() / 1000.0), 1),
            "check": check, "one_run": true,
            "how": "`elfiee --elf D --json dir import TREE` as a child process after `elfiee init D`; wall from spawn to reaping, peak RSS = ru_maxrss from wait4",
        });
        targets.check(
            "import: every text file, no ignored/binary",
            format!(
                "{} of {}",
                imp.report["files"].as_u64().unwrap_or(0),
                small.files
            ),
            Some(ok),
        );
        info!("project: import: {}", out["import"]);
    }
    targets.at_most(
        "import wall / raw floor",
        import_ms.map(|m| m / 1000.0 / raw_s),
        3.0,
        "x",
    );
    targets.at_most(
        "import peak RSS",
        imported.as_ref().map(|i| i.run.rss_mib()),
        128.0,
        "MiB",
    );

    // 4. .elf size
    if imported.is_some() {
        let size = dir_size(&small_doc);
        out["elf_size"] = json!({
            "elf_bytes": size, "text_bytes": small.text_bytes, "ratio": round(size as f64 / small.text_bytes as f64, 3),
            "breakdown": elf_breakdown(&small_doc),
            "how": "every file under the .elf folder (walked) right after the import vs the text bytes imported",
        });
        info!("project: .elf size: {}", out["elf_size"]);
    }
    targets.at_most(
        ".elf bytes / text bytes",
        imported
            .as_ref()
            .map(|_| out["elf_size"]["ratio"].as_f64().unwrap_or(f64::NAN)),
        1.5,
        "x",
    );

    // 5. open + list, small and ten-times-larger documents
    let big_doc = dir.join("project-x10.elf");
    info!(
        "project: importing the ten-times-larger tree ({:.0} MiB)",
        big.text_bytes as f64 / MIB
    );
    let big_imported = soft(
        out,
        "import_x10",
        cli_import(&mut cli, &big_doc, &big_tree, flag_for(&big)),
    );
    if let Some(imp) = &big_imported {
        let (check, _) = import_check(imp, &big);
        let size = dir_size(&big_doc);
        out["import_x10"] = json!({
            "wall_s": round(imp.run.ms() / 1000.0, 3), "peak_rss_mib": round(imp.run.rss_mib(), 1),
            "text_bytes": big.text_bytes, "elf_bytes": size, "elf_ratio": round(size as f64 / big.text_bytes as f64, 3),
            "max_file_bytes_flag": flag_for(&big), "max_file_bytes_flag_supported": has_max_flag,
            "check": check, "note": "not a target; the document for the big/small open + list ratio",
        });
        info!("project: import x10: {}", out["import_x10"]);
    } else {
        out["import_x10"]["max_file_bytes_flag_supported"] = json!(has_max_flag);
    }
    let mut list = json!({});
    let (mut ls, mut lb) = (Vec::new(), Vec::new());
    if imported.is_some() {
        let list_runs = (|| -> Result<(), BoxError> {
            let docs: Vec<&Path> = if big_imported.is_some() {
                vec![&small_doc, &big_doc]
            } else {
                vec![&small_doc]
            };
            for i in 0..pp.list_runs {
                // Alternate which document goes first.
                for k in 0..docs.len() {
                    let which = (i + k) % docs.len();
                    let r = cli.run(Some(docs[which]), &["--json", "block", "list"])?;
                    let side = if which == 0 { "small" } else { "big" };
                    if i == 0 {
                        list[format!("{side}_blocks")] = json!(r.json()?.as_array().map(Vec::len));
                        list[format!("{side}_stdout_bytes")] = json!(r.stdout.len());
                    }
                    if which == 0 {
                        ls.push(r);
                    } else {
                        lb.push(r);
                    }
                }
            }
            Ok(())
        })();
        soft(&mut list, "runs", list_runs);
    }
    let stat = |runs: &[ChildRun], f: fn(&ChildRun) -> f64| {
        (!runs.is_empty()).then(|| median(&runs.iter().map(f).collect::<Vec<_>>()))
    };
    let (lw, lr) = (stat(&ls, ChildRun::ms), stat(&ls, ChildRun::rss_mib));
    let (bw, br) = (stat(&lb, ChildRun::ms), stat(&lb, ChildRun::rss_mib));
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    if !ls.is_empty() {
        list["small"] = ms_stats(&ls);
        list["floor"] = json!({"wall_ms": round(floor_ms, 1), "peak_rss_mib": round(floor_rss, 1), "command": "elfiee --version"});
        list["statistic"] = json!(format!(
            "median of {} (small and big runs alternate, order swapped each round)",
            pp.list_runs
        ));
        list["how"] = json!("`elfiee --elf D --json block list` as a child process (open the document, list every block, print JSON)");
    }
    if !lb.is_empty() {
        list["big"] = ms_stats(&lb);
        list["ratio_wall"] = json!(ratio(bw, lw).map(|r| round(r, 3)));
        list["ratio_rss"] = json!(ratio(br, lr).map(|r| round(r, 3)));
    }
    info!("project: open + list: {list}");
    out["open_list"] = list;
    targets.at_most("open + list wall (imported doc)", lw, 100.0, "ms");
    targets.at_most("open + list peak RSS", lr, 64.0, "MiB");
    targets.at_most("open + list wall x10 / x1", ratio(bw, lw), 1.2, "x");
    targets.at_most("open + list RSS x10 / x1", ratio(br, lr), 1.2, "x");

    // 6. rescan
    if let Some(imp) = &imported {
        let n = ((small.files as f64) * 0.01).round().max(1.0) as usize;
        let changed = project_gen::modify(&small_tree, &small, n, pp.seed + 1)?;
        let raw_rescan = raw_rescan_run(&small_tree, &small.paths, &changed, &raw_db)?;
        let mut sync = json!({
            "modified": changed.len(), "block_id": imp.block_id,
            "raw_s": round(raw_rescan, 4),
            "raw_how": "in-process: stat every text file, read + blake3 the modified ones, insert them into a fresh sled db, one flush + SledSync::sync",
        });
        let r = (|| -> Result<(ChildRun, Value, u64, u64), BoxError> {
            let before = last_seq(&mut cli, &small_doc)?;
            let run = cli.run(Some(&small_doc), &["--json", "dir", "sync", &imp.block_id])?;
            let v = run.json()?;
            let after = last_seq(&mut cli, &small_doc)?;
            Ok((run, v, before, after))
        })();
        let mut sync_ratio = None;
        let mut counts_ok = None;
        if let Some((run, v, before, after)) = soft(&mut sync, "run", r) {
            let import_ms = import_ms.unwrap_or(f64::NAN);
            sync_ratio = Some(run.ms() / import_ms);
            let (c, a, d) = (
                v["changed"].as_u64(),
                v["added"].as_u64(),
                v["deleted"].as_u64(),
            );
            counts_ok = Some(c == Some(changed.len() as u64) && a == Some(0) && d == Some(0));
            sync["wall_s"] = round(run.ms() / 1000.0, 3);
            sync["peak_rss_mib"] = round(run.rss_mib(), 1);
            sync["import_wall_s"] = round(import_ms / 1000.0, 3);
            sync["ratio_to_import"] = round(run.ms() / import_ms, 4);
            sync["ratio_to_raw"] = round(run.ms() / 1000.0 / raw_rescan, 2);
            sync["output"] = v.clone();
            sync["events_before"] = json!(before);
            sync["events_after"] = json!(after);
            sync["events_written"] = json!(after - before);
            sync["events_beyond_changed"] =
                json!(after as i64 - before as i64 - changed.len() as i64);
            sync["how"] = json!("modify() rewrites 1% of the text files (content changed, length changed), then `elfiee --elf D --json dir sync BLOCK` as a child; events counted by `--json state-digest`'s seq before and after");
        }
        info!("project: sync: {sync}");
        out["sync"] = sync;
        targets.at_most("dir sync wall / import wall", sync_ratio, 0.2, "x");
        targets.check(
            "dir sync counts (changed = modified, 0 added/deleted)",
            match &out["sync"]["output"] {
                Value::Null => "-".to_owned(),
                v => format!(
                    "{}/{}/{} of {}",
                    v["changed"],
                    v["added"],
                    v["deleted"],
                    changed.len()
                ),
            },
            counts_ok,
        );
    }

    // 7. one CLI write: a 10-block document vs the 10,000-block one
    let ten_doc = dir.join("ten.elf");
    let mut write = json!({});
    let write_result = (|| -> Result<(Vec<ChildRun>, Vec<ChildRun>, String), BoxError> {
        cli.run(None, &["init", path_str(&ten_doc)?, "--owner", "Bench"])?;
        let ten_block = create_markdown(&mut cli, &ten_doc, "m0")?;
        for i in 1..10 {
            create_markdown(&mut cli, &ten_doc, &format!("m{i}"))?;
        }
        if imported.is_none() {
            return Err("no 10,000-block document (the import failed)".into());
        }
        let big_block = create_markdown(&mut cli, &small_doc, "bench-write")?;
        let (mut s, mut b) = (Vec::new(), Vec::new());
        for i in 0..pp.write_runs {
            let text = write_text(i, WRITE_LEN);
            // Alternate which document goes first.
            if i % 2 == 0 {
                s.push(cli_write(&mut cli, &ten_doc, &ten_block, &text)?);
                b.push(cli_write(&mut cli, &small_doc, &big_block, &text)?);
            } else {
                b.push(cli_write(&mut cli, &small_doc, &big_block, &text)?);
                s.push(cli_write(&mut cli, &ten_doc, &ten_block, &text)?);
            }
        }
        Ok((s, b, big_block))
    })();
    let mut growth_block = None;
    let (mut ww, mut wr) = (None, None);
    if let Some((s, b, block)) = soft(&mut write, "run", write_result) {
        let (sw, sr) = (stat(&s, ChildRun::ms), stat(&s, ChildRun::rss_mib));
        let (bw, br) = (stat(&b, ChildRun::ms), stat(&b, ChildRun::rss_mib));
        ww = ratio(bw, sw);
        wr = ratio(br, sr);
        write = json!({
            "ten_blocks": ms_stats(&s), "big": ms_stats(&b),
            "big_blocks": out["open_list"]["small_blocks"].as_u64().map(|n| n + 1),
            "ratio_wall": ww.map(|r| round(r, 3)), "ratio_rss": wr.map(|r| round(r, 3)),
            "floor": {"wall_ms": round(floor_ms, 1), "peak_rss_mib": round(floor_rss, 1), "command": "elfiee --version"},
            "text_bytes": WRITE_LEN, "statistic": format!("median of {} each, alternating", pp.write_runs),
            "how": "`elfiee --elf D markdown write BLOCK --text <2048 bytes>` as a child process; D = a 10-block document vs the imported 10,000-file document (one new markdown block each)",
        });
        growth_block = Some(block);
    }
    info!("project: cli write: {write}");
    out["cli_write"] = write;
    targets.at_most("markdown write wall 10k / 10 blocks", ww, 1.2, "x");
    targets.at_most("markdown write RSS 10k / 10 blocks", wr, 1.2, "x");

    // 8. growth over many writes
    let mut growth = json!({});
    let mut growth_met = None;
    let mut growth_ratio = None;
    if let Some(block) = growth_block {
        let before = dir_size(&small_doc);
        let before_parts = elf_breakdown(&small_doc);
        let t = Instant::now();
        let r = (|| -> Result<(Vec<f64>, u64), BoxError> {
            let (mut lat, mut written) = (Vec::with_capacity(pp.writes), 0u64);
            for i in 0..pp.writes {
                let text = write_text(1_000_000 + i, WRITE_LEN);
                written += text.len() as u64;
                lat.push(cli_write(&mut cli, &small_doc, &block, &text)?.ms());
                if (i + 1) % 100 == 0 {
                    info!("project: growth: {} of {} writes", i + 1, pp.writes);
                }
            }
            Ok((lat, written))
        })();
        if let Some((lat, written)) = soft(&mut growth, "run", r) {
            let after = dir_size(&small_doc);
            let g = after as i64 - before as i64;
            growth_met = Some(g <= 2 * written as i64 + GROWTH_SLACK as i64);
            growth_ratio = Some(g as f64 / written as f64);
            growth = json!({
                "writes": lat.len(), "bytes_written": written, "elf_before": before, "elf_after": after,
                "growth": g, "growth_per_written": round(g as f64 / written as f64, 3),
                "growth_minus_2x_written": g - 2 * written as i64, "constant_allowed": GROWTH_SLACK,
                "breakdown_before": before_parts, "breakdown_after": elf_breakdown(&small_doc),
                "write_ms_median": round(median(&lat), 1), "seconds": round(t.elapsed().as_secs_f64(), 1),
                "how": "sequential `elfiee --elf D markdown write BLOCK --text T` child processes on the 10,000-file document (one block, a different 2048-byte text each time); .elf folder size walked before and after",
            });
        }
    }
    info!("project: growth: {growth}");
    out["growth"] = growth;
    targets.check(
        "growth <= 2 x written + 8 MiB",
        growth_ratio
            .map(|r| format!("{r:.2} x written"))
            .unwrap_or_else(|| "-".into()),
        growth_met,
    );
    Ok(())
}
