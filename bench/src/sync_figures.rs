//! Issue 28's sync figures beside the throughput: how long one write takes to show on another
//! device (while nothing else happens, and while a third device commits a 64-submitter
//! burst), and how long a fresh device takes to catch up with a long document from the stream,
//! against a local replay of the same log.

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
    let watcher = tokio::spawn({
        let seen = seen.clone();
        async move {
            while let Some(e) = sub.recv().await {
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(e.cmd_id)
                    .or_insert_with(Instant::now);
            }
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
    watcher.abort();
    result
}

/// A fresh device catches up with A's document of `total` events from the stream: the seconds
/// from its start until its merged state holds every event, against A's replay of its own log
/// (`FileHandle::replay`: the hash chain, decode and fold, what `elfiee replay` does). A gets
/// more events first (64 submitters), published before the clock starts.
pub(crate) async fn catch_up(
    base: &std::path::Path,
    url: &str,
    a: &crate::sync::Device,
    total: u64,
    block: &str,
    text: &str,
) -> Result<Value, BoxError> {
    let have = a.file.last_seq();
    if total > have {
        crate::sync::commit_many(&a.file, block, text, total - have).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let s = a.node.status();
        if s.published >= s.own_events {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("A did not publish its events: {s:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let events = a.node.status().events;
    let started = Instant::now();
    let d = crate::sync::device(base, "d", url, 4, false).await?;
    crate::sync::wait_for(&[&d], events, Duration::from_secs(1800)).await?;
    let caught_up = started.elapsed().as_secs_f64();
    let same = d.node.digest()? == a.node.digest()?;
    d.file.close().await;
    if !same {
        return Err("the fresh device's merged state differs from A's".into());
    }
    // What `elfiee replay` does for a synced document: the engine's replay of the log, and
    // the merged state folded again from it (its "synced digest").
    let started = Instant::now();
    let (report, _) = a.file.replay().await?;
    let engine_replay = started.elapsed().as_secs_f64();
    let merged = elfiee_sync::node::synced_state(&a.file, crate::sync::registry())?
        .ok_or("A's document is not synced")?;
    let replay = started.elapsed().as_secs_f64();
    if merged.digest() != a.node.digest()? {
        return Err("the merged state folded from A's log differs from A's live one".into());
    }
    info!(
        "sync: catch-up of {events} events: fresh device {caught_up:.2} s, local replay {replay:.2} s (engine {engine_replay:.2} s; {} events)",
        report.events
    );
    Ok(json!({
        "unit": "s (lower is better)",
        "events": events,
        "fresh_device_s": round(caught_up, 2),
        "local_replay_s": round(replay, 3),
        "local_engine_replay_s": round(engine_replay, 3),
        "ratio": round(caught_up / replay, 2),
        "target": "ratio <= 2 (issue 28)",
        "met": caught_up / replay <= 2.0,
        "digest_equal": same,
        "how": "A's document grows to `events` (64 submitters, published); a fresh device (a new engine and SyncNode in this process) starts and is timed until its merged state holds every event; then what `elfiee replay` does for a synced document is timed on A's log: the engine's replay (FileHandle::replay, local_engine_replay_s) and the merged state folded again from the log (elfiee_sync::node::synced_state)",
    }))
}
