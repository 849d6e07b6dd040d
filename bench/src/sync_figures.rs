//! Issue 28's latency figures beside the throughput: how long one write takes to show on
//! another device (while nothing else happens, and while a third device commits a
//! 64-submitter burst). The catch-up figure is `sync::catch_up`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use elfiee_engine::FileHandle;
use elfiee_model::Command;
use serde_json::{json, Value};

use crate::common::{round, BoxError};

/// The `p` quantile (0..=1) of `v`, nearest rank; 0 for no values.
pub(crate) fn quantile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// p50, p99 and max of latencies in ms, beside their limits.
pub(crate) fn latency_figure(ms: &[f64], p50_max: f64, p99_max: f64, how: &str) -> Value {
    let (p50, p99) = (quantile(ms, 0.5), quantile(ms, 0.99));
    json!({
        "unit": "ms (lower is better)",
        "writes": ms.len(),
        "p50": round(p50, 2),
        "p99": round(p99, 2),
        "max": round(quantile(ms, 1.0), 2),
        "target": format!("p50 <= {p50_max} ms, p99 <= {p99_max} ms"),
        "met": p50 <= p50_max && p99 <= p99_max,
        "how": how,
    })
}

/// `count` writes on `writer`, one every `every` (a `markdown.write` on `block` each); for each,
/// the milliseconds from its commit (its submit answered) until a subscriber on `reader` gets
/// the event with its `cmd_id`. Waits up to `within` for the last one.
pub(crate) async fn write_latencies(
    writer: &FileHandle,
    reader: &FileHandle,
    block: &str,
    every: Duration,
    count: usize,
    within: Duration,
) -> Result<Vec<f64>, BoxError> {
    let seen: Arc<Mutex<HashMap<uuid::Uuid, Instant>>> = Arc::default();
    let mut sub = reader.subscribe();
    // The subscriber runs on a thread of its own, as a reader in another process would: on
    // the runtime the devices share it would wait for A's submitters to yield.
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = std::thread::spawn({
        let seen = seen.clone();
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let Ok(rt) = rt else { return };
            rt.block_on(async move {
                loop {
                    let e = tokio::select! {
                        e = sub.recv() => e,
                        _ = &mut stopped => None,
                    };
                    let Some(e) = e else { break };
                    seen.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(e.cmd_id)
                        .or_insert_with(|| {
                            tracing::trace!(cmd = %e.cmd_id, "latency probe seen");
                            Instant::now()
                        });
                }
            })
        }
    });
    let mut committed = Vec::with_capacity(count);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..count {
        tick.tick().await;
        let cmd = Command::new(
            "alice",
            "markdown.write",
            Some(block),
            json!({"markdown": format!("latency probe {i}")}),
        );
        let id = cmd.cmd_id;
        writer.submit(cmd).await?;
        committed.push((id, Instant::now()));
        tracing::trace!(probe = i, cmd = %id, "latency probe committed");
    }
    let deadline = Instant::now() + within;
    let result = loop {
        let got = {
            let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            committed
                .iter()
                .map(|(id, at)| seen.get(id).map(|t| t.saturating_duration_since(*at)))
                .collect::<Option<Vec<Duration>>>()
        };
        if let Some(got) = got {
            break Ok(got.iter().map(|d| d.as_secs_f64() * 1e3).collect());
        }
        if Instant::now() > deadline {
            let n = seen.lock().unwrap_or_else(|p| p.into_inner()).len();
            break Err(format!(
                "only {n} of {count} writes reached the other device within {within:?}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let _ = stop.send(());
    let _ = tokio::task::spawn_blocking(move || watcher.join()).await;
    result
}

/// Issue 40: the process path as users meet it ([`elfiee::testkit::latency`]): `elfiee
/// serve --sync --json` on A and on B (this machine's `elfiee` binary beside the bench, a
/// `nats-server` of its own), `count` writes on A 10 ms apart from `elfiee markdown write`
/// CLI calls and then from an `elfiee mcp-server`, each through A's owner socket; from the
/// write's answer until B's stream prints it. The CLI figure and the MCP one.
pub(crate) fn process_latency(
    base: &std::path::Path,
    count: usize,
) -> Result<(Value, Value), BoxError> {
    let exe = std::env::current_exe()?.with_file_name("elfiee");
    let server = elfiee_sync::testing::NatsServer::start()?;
    let dir = base.join("sync-process");
    std::fs::create_dir_all(&dir)?;
    let pair = elfiee::testkit::latency::ServedPair::start(&exe, &dir, &server.url(), "latency")?;
    let apart = Duration::from_millis(10);
    let cli = pair.cli_writes(count, apart)?;
    let mcp = pair.mcp_writes(count, apart)?;
    drop(pair);
    Ok((
        latency_figure(&cli, 3.0, 10.0, "`elfiee markdown write` CLI calls on A every 10 ms to A's `elfiee serve --sync --json` (owner socket); from the CLI's answer (its first byte of output) until B's `elfiee serve --sync --json` prints the event: two processes, one local nats-server"),
        latency_figure(&mcp, 3.0, 10.0, "the same through an `elfiee mcp-server` on A (elfiee_markdown_write tool calls); from the tool call's reply until B's stream prints the event"),
    ))
}
