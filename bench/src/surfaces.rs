//! The `context`, `socket` and `mcp` phases: context collection, writes through the owner
//! socket, and writes through `elfiee mcp-server`.

use crate::common::*;

/// Context collection + token counting over a 10,000-block state vs tiktoken-rs alone on the
/// same text.
pub(crate) fn context_phase(plan: &Plan) -> Value {
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
        collect.push(ms_since(t));
        tokens = ctx.total_tokens;
        let text = ctx.to_markdown();
        let t = Instant::now();
        std::hint::black_box(tokenizer().encode_ordinary(&text).len());
        alone.push(ms_since(t));
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
pub(crate) async fn us_per_write(
    f: &FileHandle,
    block: &str,
    n: u64,
    tag: &str,
) -> Result<f64, EngineError> {
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
pub(crate) fn owner_socket_phase(
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
pub(crate) fn mcp_phase(base: &Path, plan: &Plan) -> Result<Value, BoxError> {
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
