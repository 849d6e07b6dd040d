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
//! Options: `--only sequential,concurrent,big` runs a subset (for profiling); `--keep` keeps the
//! scratch directory; `RUST_LOG=elfiee_engine=trace` prints the engine's group-commit traces.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use elfiee_engine::codec::{self, event_key};
use elfiee_engine::{Engine, EngineConfig, EngineError, FileHandle};
use elfiee_model::Command;
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
    /// Run only some measurements (for profiling): comma-separated of
    /// `sequential`, `concurrent`, `big` (build + replay + open). The output then lacks the others.
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

fn main() {
    let args = Args::parse();
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
            "how": "engine: 1 submitter awaiting FileHandle::submit(markdown.write, ~150 bytes of text) in a loop for window_s; raw: the very record bytes of that run (re-sealed with codec::seal, hash checked equal), sled Tree::insert + Db::flush per event, re-fed under continuing seq keys until the raw run lasts >= raw_min_s; runs alternate engine/raw",
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
            "how": format!("engine: {tasks} tokio tasks on the multi-thread runtime, each awaiting FileHandle::submit(markdown.write on its own block) in a loop for window_s; raw: the very record bytes of that run (re-sealed with codec::seal, hash checked equal), one sled::Batch of {tasks} inserts + one Db::flush per batch on one thread, re-fed under continuing seq keys until the raw run lasts >= raw_min_s; runs alternate engine/raw"),
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
    for i in 0..plan.replay_runs {
        let (n, secs) = raw_replay_run(&big_path.join("log"))?;
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
    let (n1, s1) = raw_replay_variant(&big_path.join("log"), true, false)?;
    let (n2, s2) = raw_replay_variant(&big_path.join("log"), true, true)?;
    info!("replay diagnostics: raw decode+chain {:.0} events/s, raw decode+chain+apply {:.0} events/s", n1 as f64 / s1, n2 as f64 / s2);
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
                "raw_decode_and_chain_check": round(n1 as f64 / s1, 0),
                "raw_decode_chain_check_and_apply": round(n2 as f64 / s2, 0),
                "is": "the raw loop plus the blake3 chain check (codec::open with the previous hash), then plus elfiee_projections::apply into a State: what the engine's replay does, minus its per-record copy and iterator plumbing",
            },
            "target": "ratio >= 0.5",
            "how": "engine: elfiee_engine::replay(path) timed around the call (sled open, hash-chain check, decode, apply, final state digest); raw: sled open + iterate the events tree's event keys + codec::open(seq, bytes, None) per record (decode only, no chain check, no apply) + close; both timed from before the open to after the database is dropped; runs alternate raw/engine",
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
            "built through the engine by {} concurrent tokio tasks, each calling FileHandle::submit_all with batches of {} commands (one atomic group, one durable flush per group commit): {} core.create then markdown.write (~150 bytes of text) cycling over the blocks; closing the handle wrote the snapshot used by 'open'",
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
    let mut feed = Passes::new(records, min);
    for (k, v) in feed.by_ref() {
        tree.insert(k, v)?;
        db.flush()?;
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
    }
    Ok(feed.rate())
}

/// (events, seconds): sled open + iterate event keys + decode each record.
fn raw_replay_run(log_dir: &Path) -> Result<(u64, f64), BoxError> {
    raw_replay_variant(log_dir, false, false)
}

/// (events, seconds): sled open + iterate event keys + decode each record; with `chain` the
/// hash chain is checked too (as the engine does), with `fold` each event is applied to a
/// [`elfiee_projections::State`] as well.
fn raw_replay_variant(log_dir: &Path, chain: bool, fold: bool) -> Result<(u64, f64), BoxError> {
    let t = Instant::now();
    let db = open_raw(log_dir)?;
    let tree = db.open_tree("events")?;
    let mut n = 0u64;
    let mut bytes = 0usize;
    let mut prev = elfiee_model::EventHash::ZERO;
    let mut state = elfiee_projections::State::default();
    for r in tree.range(event_key(0)..=event_key(u64::MAX)) {
        let (k, v) = r?;
        let seq = u64::from_be_bytes(k[1..9].try_into()?);
        let e = codec::open(seq, &v, chain.then_some(&prev))?;
        prev = e.hash;
        if fold {
            elfiee_projections::apply(&mut state, &e);
        }
        bytes += e.entity.len();
        n += 1;
    }
    std::hint::black_box((bytes, &state));
    // Closing the database is part of the run, as it is inside `elfiee_engine::replay`.
    drop(tree);
    drop(db);
    Ok((n, t.elapsed().as_secs_f64()))
}

/// (ms, snapshot length): sled open + read the snapshot bytes.
fn raw_open_run(log_dir: &Path) -> Result<(f64, usize), BoxError> {
    let t = Instant::now();
    let db = open_raw(log_dir)?;
    let snap = db
        .open_tree("snapshots")?
        .get("latest")?
        .map(|v| v.to_vec())
        .ok_or("no snapshot stored")?;
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
    let db = open_raw(log_dir)?;
    let bytes = db
        .open_tree("snapshots")?
        .get("latest")?
        .ok_or("no snapshot stored")?;
    let snap: elfiee_engine::replay::Snapshot = rmp_serde::from_slice(&bytes)?;
    let tail = db
        .open_tree("events")?
        .range(event_key(0)..=event_key(u64::MAX))
        .next_back()
        .transpose()?
        .map(|(k, _)| u64::from_be_bytes(k[1..9].try_into().unwrap_or_default()))
        .unwrap_or(0);
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
