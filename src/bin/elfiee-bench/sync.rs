//! The `sync` phase: events per second from commit on device A to applied on devices B and
//! C, through a local `nats-server`, beside raw JetStream publishing of messages of the same
//! size with message ids (one publisher, the same number in flight as the sync publisher).

use std::path::Path;
use std::time::{Duration, Instant};

use elfiee_capabilities::Registry;
use elfiee_engine::{Engine, EngineConfig, FileHandle};
use elfiee_model::Command;
use elfiee_sync::node::{SyncConfig, SyncNode};
use elfiee_sync::testing::NatsServer;
use serde_json::{json, Value};

use super::{round, BoxError, Plan};

fn registry() -> Registry {
    let mut r = Registry::builtin();
    elfiee_sync::membership::register(&mut r);
    r
}

struct Device {
    file: FileHandle,
    node: SyncNode,
}

async fn device(base: &Path, name: &str, url: &str, seed: u8, first: bool) -> Result<Device, BoxError> {
    let engine = Engine::new(EngineConfig {
        registry: registry(),
        node_id: name.into(),
        ..Default::default()
    });
    let path = base.join(format!("sync-{name}.elf"));
    let file = if first {
        engine.init(&path, "Alice").await?
    } else {
        engine.create_empty(&path).await?
    };
    let config = SyncConfig::new(url, "bench", [seed; 32]);
    let node = SyncNode::start(file.clone(), registry(), config).await?;
    Ok(Device { file, node })
}

async fn wait_for(devices: &[&Device], events: u64, within: Duration) -> Result<(), BoxError> {
    let deadline = Instant::now() + within;
    loop {
        if devices.iter().all(|d| d.node.status().events >= events) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let s: Vec<_> = devices.iter().map(|d| d.node.status()).collect();
            return Err(format!("devices did not catch up within {within:?}: {s:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub fn sync_phase(rt: &tokio::runtime::Runtime, base: &Path, plan: &Plan) -> Result<Value, BoxError> {
    if std::process::Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
    {
        info!("sync: nats-server is not installed; skipped (apt-get install nats-server)");
        return Ok(json!({"skipped": "nats-server is not installed"}));
    }
    let n: u64 = if plan.mode == "quick" { 2_000 } else { 5_000 };
    let runs = if plan.mode == "quick" { 3 } else { 5 };
    let server = NatsServer::start()?;
    let url = server.url();
    rt.block_on(async {
        let a = device(base, "a", &url, 1, true).await?;
        let b = device(base, "b", &url, 2, false).await?;
        let c = device(base, "c", &url, 3, false).await?;
        for d in [&b, &c] {
            let hex = d.node.node().to_hex();
            a.file
                .submit(Command::new("alice", "node.add", None, json!({"node_id": hex, "public_key": hex})))
                .await?;
        }
        let made = a
            .file
            .submit(Command::new("alice", "core.create", None, json!({"name": "bench", "block_type": "markdown"})))
            .await?;
        let block = made[0].entity.clone();
        let mut events = a.node.status().events;
        wait_for(&[&b, &c], events, Duration::from_secs(60)).await?;
        let text = "x".repeat(150);
        let (mut synced, mut raw) = (Vec::new(), Vec::new());
        let mut size = 0usize;
        for r in 0..runs {
            // Commit on A (64 submitters: group commit), applied on B and C.
            let started = Instant::now();
            let mut tasks = Vec::new();
            for t in 0..64u64 {
                let (file, block, text) = (a.file.clone(), block.clone(), text.clone());
                let count = n / 64 + u64::from(t < n % 64);
                tasks.push(tokio::spawn(async move {
                    for _ in 0..count {
                        file.submit(Command::new("alice", "markdown.write", Some(&block), json!({"markdown": text})))
                            .await?;
                    }
                    Ok::<_, elfiee_engine::EngineError>(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            let committed = started.elapsed().as_secs_f64();
            events += n;
            let own = a.node.status().own_events;
            while a.node.status().published < own {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let published = started.elapsed().as_secs_f64();
            wait_for(&[&b, &c], events, Duration::from_secs(300)).await?;
            let elapsed = started.elapsed().as_secs_f64();
            info!("sync run {}: committed on A after {committed:.2} s, published after {published:.2} s, applied on B and C after {elapsed:.2} s", r + 1);
            synced.push(n as f64 / elapsed);
            // The size of what the publisher sent (the last event, sealed and encoded).
            size = a.node.last_own_event_size().unwrap_or(size);
            // Raw: the same number of messages of that size, with ids, on another stream.
            raw.push(raw_publish(&url, r, n, size).await?);
            info!(
                "sync run {}: {:.0} events/s commit on A → applied on B and C; raw JetStream publish {:.0} msgs/s ({size} bytes)",
                r + 1,
                synced[r],
                raw[r]
            );
        }
        let (s, rw) = (super::median(&synced), super::median(&raw));
        let out = super::pair(
            s,
            rw,
            json!({
                "unit": "events/s (higher is better)",
                "runs": runs,
                "statistic": "median",
                "sync_runs": synced.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
                "raw_runs": raw.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
                "events_per_run": n,
                "message_bytes": size,
                "target": "ratio >= 0.5",
                "how": "sync: 64 tasks submit markdown.write (150 bytes) on device A until n events are committed; the clock stops when devices B and C (separate engines and SyncNodes in this process, one local nats-server) have every event in their merged state. raw: one client publishes n messages of the size of A's sealed events to another stream with Nats-Msg-Id, 256 in flight (as the publisher), and awaits every PubAck",
            }),
        );
        for d in [a, b, c] {
            d.file.close().await;
        }
        Ok::<_, BoxError>(out)
    })
}

/// Raw JetStream: `n` messages of `size` bytes with message ids, 256 in flight; messages/s.
async fn raw_publish(url: &str, run: usize, n: u64, size: usize) -> Result<f64, BoxError> {
    use async_nats::jetstream::{self, message::PublishMessage};
    let js = jetstream::new(async_nats::connect(url).await?);
    let name = format!("RAW{run}");
    js.create_stream(jetstream::stream::Config {
        name: name.clone(),
        subjects: vec![format!("raw{run}.>")],
        ..Default::default()
    })
    .await?;
    let payload = vec![b'x'; size];
    let started = Instant::now();
    let mut acks = std::collections::VecDeque::new();
    for i in 0..n {
        let msg = PublishMessage::build()
            .payload(payload.clone().into())
            .message_id(format!("raw:{i}"));
        acks.push_back(js.send_publish(format!("raw{run}.ev"), msg).await?);
        if acks.len() >= 256 {
            if let Some(a) = acks.pop_front() {
                a.await?;
            }
        }
    }
    for a in acks {
        a.await?;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    js.delete_stream(&name).await?;
    Ok(rate)
}
