//! What the phases of `elfiee-bench` share: the run's settings ([`Args`], [`Plan`]), the
//! engine-side commands, statistics and JSON helpers, child processes and the targets table.

pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
pub(crate) use std::sync::Arc;
pub(crate) use std::time::{Duration, Instant};

pub(crate) use clap::Parser;
pub(crate) use elfiee_bench::project_gen;
pub(crate) use elfiee_engine::codec::{self, event_key};
pub(crate) use elfiee_engine::log::SledSync;
pub(crate) use elfiee_engine::{Engine, EngineConfig, EngineError, FileHandle};
pub(crate) use elfiee_model::{Command, EventHash};
pub(crate) use serde_json::{json, Value};

pub(crate) const OWNER: &str = "bench";

#[derive(Parser, Debug)]
#[command(
    name = "elfiee-bench",
    about = "Elfiee engine vs raw sled, in one run; prints one JSON object"
)]
pub(crate) struct Args {
    /// Smaller sizes (200,000-event log, shorter windows): finishes in well under a minute.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Concurrent submitters for the concurrent measurement.
    #[arg(long, default_value_t = 64)]
    pub(crate) tasks: usize,
    /// Keep the temporary directory (printed on stderr) instead of deleting it.
    #[arg(long)]
    pub(crate) keep: bool,
    /// Run only some measurements (for profiling): comma-separated of `sequential`,
    /// `concurrent`, `big` (build + replay + open), `context`, `socket`, `mcp`, `project`,
    /// `graph`, `sync`, `checkpoint`, `backup`, `hooks` (and, never in the default run,
    /// `sync-memory`, `sync-parts`). The output then lacks the others.
    #[arg(long, alias = "phases", value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// `hooks` phase: timed tool calls per series (default 200; 50 with --quick).
    #[arg(long)]
    pub(crate) hook_calls: Option<usize>,
    /// Commands per `submit_all` group when building the big log (default 1024).
    #[arg(long)]
    pub(crate) build_batch: Option<usize>,
    /// Concurrent tasks building the big log (default 8).
    #[arg(long)]
    pub(crate) build_tasks: Option<usize>,
    /// Events in the big log (default 1,000,000; 200,000 with --quick).
    #[arg(long)]
    pub(crate) big_events: Option<u64>,
    /// `project` phase: text files in the generated tree (default 10,000; 2,000 with --quick).
    #[arg(long)]
    pub(crate) project_files: Option<usize>,
    /// `project` phase: total text bytes of the generated tree (default 100,000,000;
    /// 20,000,000 with --quick); the ten-times-larger tree holds ten times as much.
    #[arg(long)]
    pub(crate) project_bytes: Option<u64>,
    /// `project` phase: CLI writes in the growth step (default 1,000; 200 with --quick).
    #[arg(long)]
    pub(crate) project_writes: Option<usize>,
    /// Internal: run as the project phase's spawn server (see `spawn_server`).
    #[arg(long, hide = true)]
    pub(crate) spawn_server: bool,
}

impl Args {
    pub(crate) fn wants(&self, what: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == what)
    }
}

/// Sizes and time windows of one run.
pub(crate) struct Plan {
    pub(crate) mode: &'static str,
    pub(crate) seq_window: Duration,
    pub(crate) conc_window: Duration,
    pub(crate) warmup: Duration,
    /// Shortest raw write measurement (the engine's records are re-fed until it has passed).
    pub(crate) raw_min: Duration,
    pub(crate) big_events: u64,
    pub(crate) big_blocks: usize,
    pub(crate) build_tasks: usize,
    pub(crate) build_batch: usize,
    pub(crate) commit_runs: usize,
    pub(crate) replay_runs: usize,
    pub(crate) open_runs: usize,
}

impl Plan {
    pub(crate) fn new(quick: bool) -> Plan {
        let ms = Duration::from_millis;
        let (mode, seq, conc, warmup, raw_min, big_events) = if quick {
            ("quick", 800, 800, 200, 500, 200_000)
        } else {
            ("full", 1000, 1200, 300, 1000, 1_000_000)
        };
        Plan {
            mode,
            seq_window: ms(seq),
            conc_window: ms(conc),
            warmup: ms(warmup),
            raw_min: ms(raw_min),
            big_events,
            big_blocks: 1_000,
            build_tasks: 8,
            build_batch: 1024,
            // Five alternating engine/raw runs: the median of five resists the machine's
            // run-to-run swings better than the median of three.
            commit_runs: 5,
            replay_runs: 3,
            open_runs: 5,
        }
    }
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Called with each record (seq, stored bytes) of a raw layout read.
pub(crate) type RecordSink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), BoxError> + 'a;

pub(crate) fn text(i: u64) -> String {
    format!(
        "## Entry {i}\n\nThe quick brown fox jumps over the lazy dog while the log keeps every keystroke; \
         this is line {i:010} of the benchmark."
    )
}

pub(crate) fn write_cmd(block: &str, i: u64) -> Command {
    Command::new(
        OWNER,
        "markdown.write",
        Some(block),
        json!({ "markdown": text(i) }),
    )
}

pub(crate) fn create_cmd(i: usize) -> Command {
    Command::new(
        OWNER,
        "core.create",
        None,
        json!({ "name": format!("doc-{i}"), "block_type": "markdown" }),
    )
}

pub(crate) async fn create_block(f: &FileHandle, i: usize) -> Result<String, EngineError> {
    let ev = f.submit(create_cmd(i)).await?;
    Ok(ev[0].entity.clone())
}

pub(crate) fn retry_locked<T>(
    mut f: impl FnMut() -> Result<T, EngineError>,
) -> Result<T, EngineError> {
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
// helpers

/// A measurement beside its raw floor; with a `"target": "ratio >= x"` (or `<=`) in `extra`,
/// also whether the ratio meets it and by how much (`margin`: the ratio over the limit, minus
/// one, so a figure right on its target shows 0.0).
pub(crate) fn pair(engine: f64, raw: f64, mut extra: Value) -> Value {
    let ratio = engine / raw;
    extra["engine"] = round(engine, 1);
    extra["raw"] = round(raw, 1);
    extra["ratio"] = round(ratio, 3);
    let target = extra["target"].as_str().and_then(|t| {
        let (op, limit) = t.strip_prefix("ratio ")?.split_once(' ')?;
        Some((op == ">=", limit.parse::<f64>().ok()?))
    });
    if let Some((at_least, limit)) = target {
        let margin = if at_least {
            ratio / limit
        } else {
            limit / ratio
        } - 1.0;
        extra["met"] = json!(margin >= 0.0);
        extra["margin"] = round(margin, 3);
    }
    extra
}

pub(crate) fn round(x: f64, digits: i32) -> Value {
    let p = 10f64.powi(digits);
    json!((x * p).round() / p)
}

/// Milliseconds since `t`.
pub(crate) fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub(crate) fn avg_len(records: &[([u8; 9], Vec<u8>)]) -> Value {
    let total: usize = records.iter().map(|(_, v)| v.len()).sum();
    round(total as f64 / records.len().max(1) as f64, 0)
}

pub(crate) fn check_count(what: &str, got: u64, want: u64) -> Result<(), BoxError> {
    if got != want {
        return Err(format!("{what} saw {got} events, the log holds {want}").into());
    }
    Ok(())
}

pub(crate) fn cpu_model() -> String {
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

pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub(crate) fn dir_size(p: &Path) -> u64 {
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
pub(crate) struct ChildRun {
    pub(crate) wall: Duration,
    /// `ru_maxrss` of the child from `wait4` (KiB on Linux).
    pub(crate) peak_rss_kib: u64,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) status: std::process::ExitStatus,
}

impl ChildRun {
    pub(crate) fn ms(&self) -> f64 {
        self.wall.as_secs_f64() * 1000.0
    }

    pub(crate) fn rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }

    /// `Err` with the tail of stderr unless the child exited 0.
    pub(crate) fn ok(self, what: &str) -> Result<ChildRun, BoxError> {
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

    pub(crate) fn json(&self) -> Result<Value, BoxError> {
        Ok(serde_json::from_slice(&self.stdout)?)
    }
}

/// Waits for `child` (spawned at `t0`) with `wait4`: wall time from `t0` to the reaping, peak
/// RSS (`ru_maxrss`, KiB), exit status. Whatever pipes the caller holds must be drained by then.
pub(crate) fn reap(
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
pub(crate) fn run_child(cmd: &mut std::process::Command) -> std::io::Result<ChildRun> {
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
pub(crate) fn spawn_server() -> Result<(), BoxError> {
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
pub(crate) struct Cli {
    pub(crate) exe: PathBuf,
    pub(crate) server: Option<(
        std::process::Child,
        std::process::ChildStdin,
        std::io::BufReader<std::process::ChildStdout>,
    )>,
    pub(crate) out: PathBuf,
    pub(crate) err: PathBuf,
}

impl Cli {
    pub(crate) fn new(dir: &Path) -> Result<Cli, BoxError> {
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
    pub(crate) fn clean_rss(&self) -> bool {
        self.server.is_some()
    }

    pub(crate) fn spawn(&mut self, args: &[String]) -> Result<ChildRun, BoxError> {
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
    pub(crate) fn run(&mut self, doc: Option<&Path>, args: &[&str]) -> Result<ChildRun, BoxError> {
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
pub(crate) struct Targets(pub(crate) Vec<Value>);

impl Targets {
    /// `value ≤ limit`.
    pub(crate) fn at_most(&mut self, name: &str, value: Option<f64>, limit: f64, unit: &str) {
        self.0.push(json!({
            "name": name, "value": value.map(|v| round(v, 3)), "target": format!("<= {limit} {unit}").trim_end().to_owned(),
            "met": value.map(|v| v <= limit),
        }));
    }

    /// A yes/no check; `None` when it could not be made.
    pub(crate) fn check(&mut self, name: &str, what: String, met: Option<bool>) {
        self.0
            .push(json!({"name": name, "value": what, "target": "yes", "met": met}));
    }

    pub(crate) fn summary(&self, phase: &str) {
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

pub(crate) fn path_str(p: &Path) -> Result<&str, BoxError> {
    p.to_str()
        .ok_or_else(|| format!("non-UTF-8 path {}", p.display()).into())
}

pub(crate) fn ms_stats(runs: &[ChildRun]) -> Value {
    let w: Vec<f64> = runs.iter().map(ChildRun::ms).collect();
    let r: Vec<f64> = runs.iter().map(ChildRun::rss_mib).collect();
    json!({
        "wall_ms": round(median(&w), 1), "wall_ms_min": round(w.iter().copied().fold(f64::INFINITY, f64::min), 1),
        "wall_ms_max": round(w.iter().copied().fold(0.0, f64::max), 1),
        "peak_rss_mib": round(median(&r), 1), "peak_rss_mib_max": round(r.iter().copied().fold(0.0, f64::max), 1),
        "runs": runs.len(),
    })
}
