//! The process path of a write as users meet it (issue 40): device A and device B each run
//! `elfiee --json serve --sync URL`; writes on A come from other processes — `elfiee markdown
//! write` CLI calls, or an `elfiee mcp-server` — through A's owner socket; the latency of each
//! is the time from its answer (the first byte the CLI prints, the MCP server's reply) until
//! B's stream prints the event. `tests/sync_latency.rs` asserts loose bounds with it and
//! `elfiee-bench --only sync` reports the figures (`latency_process`, `latency_mcp`).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A child process whose stdout lines are read on a thread, each with when it arrived.
/// Killed when dropped.
struct Lines {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl Lines {
    fn spawn(mut cmd: Command) -> Result<Lines, String> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Ok(Lines {
            child,
            stdin,
            lines,
        })
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two serving devices on one document (see the module docs): A with one markdown block,
/// B a member, both with the same merged digest.
pub struct ServedPair {
    exe: PathBuf,
    dir: PathBuf,
    a: PathBuf,
    block: String,
    _a_stream: Lines,
    b_stream: Lines,
}

impl ServedPair {
    /// Sets the pair up in `dir` (the caller's temporary folder) with the binary `exe` (an
    /// `elfiee::cli` binary) on the broker `url`, the document named `doc`.
    pub fn start(exe: &Path, dir: &Path, url: &str, doc: &str) -> Result<ServedPair, String> {
        let (a, b) = (dir.join("a.elf"), dir.join("b.elf"));
        let (a_key, b_key) = (dir.join("a.key"), dir.join("b.key"));
        let run = |elf: &Path, args: &[&str]| cli_json(exe, elf, args);
        run(&a, &["init", path_str(&a)?, "--owner", "Alice"])?;
        let joined = run(
            &b,
            &[
                "sync",
                "join",
                path_str(&b)?,
                "--broker",
                url,
                "--doc",
                doc,
                "--key",
                path_str(&b_key)?,
            ],
        )?;
        let node = joined["node_id"]
            .as_str()
            .ok_or("join printed no node id")?;
        run(&a, &["sync", "add-node", node, "--name", "b"])?;
        let made = run(
            &a,
            &["block", "create", "--type", "markdown", "--name", "n"],
        )?;
        let block = made["block_id"].as_str().ok_or("no block id")?.to_owned();
        // Both devices as the issue found them: each prints its events (`serve --json`).
        let a_stream = serve_json(exe, &a, &a_key, url, doc, &dir.join("a.serve.log"))?;
        let b_stream = serve_json(exe, &b, &b_key, url, doc, &dir.join("b.serve.log"))?;
        let pair = ServedPair {
            exe: exe.to_owned(),
            dir: dir.to_owned(),
            a,
            block,
            _a_stream: a_stream,
            b_stream,
        };
        pair.settle(&b, Duration::from_secs(30))?;
        Ok(pair)
    }

    /// Waits until A and B show the same merged digest with nothing left to publish.
    fn settle(&self, b: &Path, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            let a = cli_json(&self.exe, &self.a, &["sync", "status"])?;
            let b = cli_json(&self.exe, b, &["sync", "status"])?;
            let settled = |s: &Value| s["to_publish"] == 0 && s["online"] == true;
            if a["digest"] == b["digest"] && a["events"] == b["events"] && settled(&a) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "A and B did not converge within {within:?}: {a} / {b}; B's log: {}",
                    self.log("b")
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self, device: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{device}.serve.log"))).unwrap_or_default()
    }

    /// `count` `elfiee markdown write` calls on A, `apart` after each answer; the latency of
    /// each (ms) from its answer to B's line.
    pub fn cli_writes(&self, count: usize, apart: Duration) -> Result<Vec<f64>, String> {
        let mut answered = Vec::with_capacity(count);
        for i in 0..count {
            let text = marker("cli", i);
            let args = ["--json", "markdown", "write", &self.block, "--text", &text];
            answered.push(answered_at(&self.exe, &self.a, &args)?);
            std::thread::sleep(apart);
        }
        self.latencies(&answered, |i| marker("cli", i))
    }

    /// `count` `elfiee_markdown_write` tool calls to an `elfiee mcp-server` on A, `apart`
    /// after each reply; the latency of each (ms) from its reply to B's line.
    pub fn mcp_writes(&self, count: usize, apart: Duration) -> Result<Vec<f64>, String> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("mcp-server")
            .env("ELFIEE_ELF", &self.a)
            .env_remove("RUST_LOG")
            .stderr(Stdio::null());
        let mut mcp = Lines::spawn(cmd)?;
        let hello = json!({"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "latency", "version": "1"}});
        rpc(&mut mcp, 0, "initialize", hello)?;
        send(
            &mut mcp,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )?;
        let mut answered = Vec::with_capacity(count);
        for i in 0..count {
            let args = json!({"block_id": self.block, "markdown": marker("mcp", i)});
            let call = json!({"name": "elfiee_markdown_write", "arguments": args});
            let (at, reply) = rpc(&mut mcp, i as u64 + 1, "tools/call", call)?;
            if reply["result"]["isError"] == json!(true) || reply.get("error").is_some() {
                return Err(format!("the MCP write failed: {reply}"));
            }
            answered.push(at);
            std::thread::sleep(apart);
        }
        self.latencies(&answered, |i| marker("mcp", i))
    }

    /// For each write (`answered[i]`, its marker `mark(i)`), the ms from its answer to the
    /// first line on B's stream carrying the marker (0 when B printed it first); an error
    /// when one has not arrived within 30 s.
    fn latencies(
        &self,
        answered: &[Instant],
        mark: impl Fn(usize) -> String,
    ) -> Result<Vec<f64>, String> {
        let mut arrived: Vec<Option<Instant>> = vec![None; answered.len()];
        let deadline = Instant::now() + Duration::from_secs(30);
        while arrived.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((at, line)) = self.b_stream.lines.recv_timeout(left) else {
                let missing: Vec<usize> = (0..answered.len())
                    .filter(|i| arrived[*i].is_none())
                    .collect();
                return Err(format!(
                    "B's stream never showed writes {missing:?}; B's log: {}",
                    self.log("b")
                ));
            };
            for (i, slot) in arrived.iter_mut().enumerate() {
                if slot.is_none() && line.contains(&mark(i)) {
                    *slot = Some(at);
                }
            }
        }
        Ok(answered
            .iter()
            .zip(arrived)
            .map(|(w, b)| b.map_or(0.0, |b| b.saturating_duration_since(*w).as_secs_f64() * 1e3))
            .collect())
    }
}

/// Text no other write holds (a marker to find on B's stream).
fn marker(how: &str, i: usize) -> String {
    format!("{how}-latency-marker-{i}-")
}

fn path_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()))
}

/// `exe --json ARGS` on `elf`; its JSON, or an error with its stderr.
fn cli_json(exe: &Path, elf: &Path, args: &[&str]) -> Result<Value, String> {
    let out = Command::new(exe)
        .arg("--json")
        .args(args)
        .env("ELFIEE_ELF", elf)
        .env_remove("RUST_LOG")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{args:?}: stdout is not JSON: {e}"))
}

/// Runs `exe ARGS` on `elf`; when its first byte of output arrived (its answer), once it
/// exited successfully.
fn answered_at(exe: &Path, elf: &Path, args: &[&str]) -> Result<Instant, String> {
    let mut child = Command::new(exe)
        .args(args)
        .env("ELFIEE_ELF", elf)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut first = [0u8; 1];
    let read = stdout.read(&mut first);
    let at = Instant::now();
    let mut rest = Vec::new();
    let _ = stdout.read_to_end(&mut rest);
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() || !matches!(read, Ok(1)) {
        return Err(format!(
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(at)
}

/// `exe --json serve --sync URL --doc DOC` on `elf` with the node key `key`, stderr to `log`,
/// its stdout read line by line, once its status file names it.
fn serve_json(
    exe: &Path,
    elf: &Path,
    key: &Path,
    url: &str,
    doc: &str,
    log: &Path,
) -> Result<Lines, String> {
    let mut cmd = Command::new(exe);
    cmd.args(["--json", "serve", "--sync", url, "--doc", doc])
        .env("ELFIEE_ELF", elf)
        .env("ELFIEE_NODE_KEY", key)
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?);
    let lines = Lines::spawn(cmd)?;
    let status = elf.join("sync-status.json");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let served = std::fs::read(&status)
            .ok()
            .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
            .is_some_and(|v| v["served_by"].as_u64() == Some(lines.child.id() as u64));
        if served {
            return Ok(lines);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "{} did not start serving within 10 s: {}",
        elf.display(),
        std::fs::read_to_string(log).unwrap_or_default()
    ))
}

fn send(server: &mut Lines, msg: &Value) -> Result<(), String> {
    let stdin = server.stdin.as_mut().ok_or("no stdin")?;
    writeln!(stdin, "{msg}")
        .and_then(|()| stdin.flush())
        .map_err(|e| format!("the MCP server's stdin: {e}"))
}

/// Sends a JSON-RPC request; when its reply arrived, and the reply.
fn rpc(
    server: &mut Lines,
    id: u64,
    method: &str,
    params: Value,
) -> Result<(Instant, Value), String> {
    send(
        server,
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )?;
    loop {
        let (at, line) = server
            .lines
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| format!("the MCP server did not answer {method}"))?;
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        if v["id"] == json!(id) {
            return Ok((at, v));
        }
    }
}

/// (p50, p99, max) of `ms`, nearest rank.
pub fn percentiles(ms: &[f64]) -> (f64, f64, f64) {
    let mut s = ms.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len().max(1));
        s.get(rank - 1).copied().unwrap_or(0.0)
    };
    (at(0.5), at(0.99), at(1.0))
}
