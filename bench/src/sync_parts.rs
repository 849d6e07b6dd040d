//! The `sync-parts` phase (not in the default run; `--only sync-parts`): where a synced
//! commit's cost goes. The same 64-submitter commits on device A, step by step: unsynced, with
//! its commands recorded (what sync turns on), synced with the broker unreachable (the
//! follower and the merged state alone), synced with the broker and no receiver, then with
//! one and with two receiving devices (in this process). Each step: events per second until
//! every receiver holds A's events, the CPU (this process and nats-server) per event, and A's
//! flushes. `ELFIEE_BENCH_PARTS=3,5` runs only those steps (0-based), e.g. under a profiler.

use std::path::Path;
use std::time::{Duration, Instant};

use elfiee_sync::node::{SyncConfig, SyncNode};
use elfiee_sync::testing::NatsServer;
use serde_json::{json, Value};

use crate::common::{round, BoxError, Plan};
use crate::sync::{
    commit_many, cpu_seconds, device, engine, markdown_block, receiving_device, registry, wait_for,
    Copies,
};

/// A's setup for one step.
enum Step {
    Unsynced,
    Recording,
    Offline,
    Receivers(usize),
    /// The floor of any design that keeps a copy on each of `n` other engines in this
    /// process: A unsynced, its committed events handed in memory (no broker, no seal, no
    /// signature, no merged state) to `n` engines that append them as another device's
    /// events ([`elfiee_engine::ForeignLog::append_deferred`], made durable each time they
    /// have caught up, as ingest does).
    Copied(usize),
}

pub fn parts_phase(
    rt: &tokio::runtime::Runtime,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    if crate::sync::nats_missing() {
        return Ok(json!({"skipped": "nats-server is not installed"}));
    }
    let n: u64 = if plan.mode == "quick" { 5_000 } else { 20_000 };
    let steps = [
        ("unsynced", Step::Unsynced),
        ("recording commands", Step::Recording),
        ("synced, broker unreachable", Step::Offline),
        ("synced, no receiver", Step::Receivers(0)),
        ("synced, one receiver", Step::Receivers(1)),
        ("synced, two receivers", Step::Receivers(2)),
        (
            "floor: unsynced, copied in memory to two engines",
            Step::Copied(2),
        ),
    ];
    let mut rows = Vec::new();
    // `ELFIEE_BENCH_PARTS=4,5` runs only those steps (for profiling one of them).
    let only: Option<Vec<usize>> = std::env::var("ELFIEE_BENCH_PARTS")
        .ok()
        .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect());
    for (i, (name, step)) in steps.iter().enumerate() {
        if only.as_ref().is_some_and(|o| !o.contains(&i)) {
            continue;
        }
        let dir = base.join(format!("parts-{i}"));
        std::fs::create_dir_all(&dir)?;
        let (rate, cpu_us, nats_us, flushes) = rt.block_on(run_step(&dir, step, n))?;
        info!("sync-parts: {name}: {rate:.0} events/s, {cpu_us:.1} µs CPU per event (of it nats-server {nats_us:.1}), {flushes} flushes on A");
        rows.push(json!({
            "step": name,
            "events_per_s": round(rate, 0),
            "cpu_us_per_event": round(cpu_us, 1),
            "of_it_nats_server_us": round(nats_us, 1),
            "flushes_on_a": flushes,
        }));
    }
    Ok(json!({
        "events": n,
        "steps": rows,
        "how": "64 tasks submit markdown.write (150 bytes) on A until `events` are committed and every receiver holds them; CPU is user + system time of this process and of nats-server (a fresh one per step), per event; flushes_on_a: A's log flushes while it committed (its commit groups)",
    }))
}

/// One step: events/s and CPU µs per event.
async fn run_step(dir: &Path, step: &Step, n: u64) -> Result<(f64, f64, f64, u64), BoxError> {
    let text = "x".repeat(150);
    let server = match step {
        Step::Receivers(_) => Some(NatsServer::start()?),
        _ => None,
    };
    let nats_cpu = || server.as_ref().map_or(0.0, |s| cpu_seconds(Some(s.pid())));
    let cpu = || cpu_seconds(None) + nats_cpu();
    let (file, node, receivers) = match step {
        Step::Receivers(k) => {
            let url = server.as_ref().map(|s| s.url()).unwrap_or_default();
            let a = device(dir, "a", &url, 21, true).await?;
            let mut receivers = Vec::new();
            for r in 0..*k {
                let d = receiving_device(dir, &format!("r{r}"), &url, 22 + r as u8).await?;
                crate::sync::admit(&a.file, &d.node.node()).await?;
                receivers.push(d);
            }
            (a.file, Some(a.node), receivers)
        }
        _ => {
            let file = engine("a").init(dir.join("a.elf"), "Alice").await?;
            let node = match step {
                Step::Recording => {
                    file.foreign_log()?.record_commands(true);
                    None
                }
                // A closed port on this machine: the node syncs nothing and keeps retrying.
                Step::Offline => Some(
                    SyncNode::start(
                        file.clone(),
                        registry(),
                        SyncConfig::new("nats://127.0.0.1:9", "parts", [21; 32]),
                    )
                    .await?,
                ),
                _ => None,
            };
            (file, node, Vec::new())
        }
    };
    let copies = match step {
        Step::Copied(k) => Copies::start(dir, &file, *k).await?,
        _ => Copies::none(),
    };
    let block = markdown_block(&file, "parts").await?;
    copies
        .wait_for(file.last_seq(), Duration::from_secs(60))
        .await?;
    if let Some(node) = &node {
        let events = node.status().events;
        let all: Vec<&crate::sync::Device> = receivers.iter().collect();
        wait_for(&all, events, Duration::from_secs(60)).await?;
    }
    let syncs = || file.durability().map_or(0, |d| d.syncs);
    let (started, before, flushes) = (Instant::now(), cpu(), syncs());
    let nats_before = nats_cpu();
    commit_many(&file, &block, &text, n).await?;
    let flushes = syncs() - flushes;
    if let Some(node) = &node {
        let events = node.status().events;
        let all: Vec<&crate::sync::Device> = receivers.iter().collect();
        wait_for(&all, events, Duration::from_secs(600)).await?;
    }
    copies
        .wait_for(file.last_seq(), Duration::from_secs(600))
        .await?;
    let elapsed = started.elapsed().as_secs_f64();
    let used = cpu() - before;
    let nats_used = nats_cpu() - nats_before;
    for r in receivers {
        r.file.close().await;
    }
    copies.close().await;
    file.close().await;
    Ok((
        n as f64 / elapsed,
        used * 1e6 / n as f64,
        nats_used * 1e6 / n as f64,
        flushes,
    ))
}
