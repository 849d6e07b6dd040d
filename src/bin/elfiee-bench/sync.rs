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

async fn device(
    base: &Path,
    name: &str,
    url: &str,
    seed: u8,
    first: bool,
) -> Result<Device, BoxError> {
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

fn nats_missing() -> bool {
    std::process::Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
}

pub fn sync_phase(
    rt: &tokio::runtime::Runtime,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    if nats_missing() {
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
        // The ceiling: the same commits on a document nobody syncs (one engine, no broker).
        let plain = {
            let engine = Engine::new(EngineConfig::default());
            let f = engine.init(base.join("sync-plain.elf"), "Alice").await?;
            let made = f
                .submit(Command::new("alice", "core.create", None, json!({"name": "p", "block_type": "markdown"})))
                .await?;
            let started = Instant::now();
            commit_many(&f, &made[0].entity, &text, n).await?;
            let rate = n as f64 / started.elapsed().as_secs_f64();
            f.close().await;
            rate
        };
        let (mut synced, mut raw) = (Vec::new(), Vec::new());
        let mut size = 0usize;
        for r in 0..runs {
            // Commit on A (64 submitters: group commit), applied on B and C.
            let started = Instant::now();
            commit_many(&a.file, &block, &text, n).await?;
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
                "unsynced_commit": round(plain, 0),
                "ceiling_ratio": round(plain / rw, 3),
                "ceiling_note": "unsynced_commit: the same 64-task commits on a document nobody syncs, in this run; even a sync path that cost nothing could not beat it, so ceiling_ratio = unsynced_commit / raw bounds the ratio on this machine",
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

/// The `sync-memory` phase (not in the default run; `--only sync-memory`): a document of 256
/// markdown blocks syncs to a fresh device, an `elfiee serve --sync` process, whose peak RSS
/// (`VmHWM`) is read when it has every event. The same document twice: with 1 MiB bodies
/// (256 MiB of content) and with 4 MiB bodies (1 GiB); `--quick`: 64 blocks, 128 KiB and
/// 512 KiB bodies.
pub fn memory_phase(
    rt: &tokio::runtime::Runtime,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    if nats_missing() {
        return Ok(json!({"skipped": "nats-server is not installed"}));
    }
    let (blocks, sizes): (u64, [usize; 2]) = if plan.mode == "quick" {
        (64, [128 << 10, 512 << 10])
    } else {
        (256, [1 << 20, 4 << 20])
    };
    let mut runs = Vec::new();
    for body in sizes {
        runs.push(memory_run(
            rt,
            &base.join(format!("mem-{body}")),
            blocks,
            body,
        )?);
    }
    let peak = |i: usize| {
        runs[i]["receiver_peak_rss_mib"]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    Ok(json!({
        "runs": runs,
        "large_over_small": round(peak(1) / peak(0), 3),
        "targets": {"peak_rss_mib_at_most": 256, "large_over_small_at_most": 1.1},
        "how": "sender: an engine with a SyncNode in this process writes the bodies (one markdown block each, distinct text) and publishes them; receiver: `elfiee sync join` then `elfiee serve --sync` as a child process; its VmHWM from /proc is read once its sync status shows every event, then it gets SIGINT",
    }))
}

fn memory_run(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    blocks: u64,
    body_bytes: usize,
) -> Result<Value, BoxError> {
    let mib = (blocks * body_bytes as u64) >> 20;
    std::fs::create_dir_all(dir)?;
    let server = NatsServer::start()?;
    let url = server.url();
    let exe = std::env::current_exe()?
        .parent()
        .map(|d| d.join("elfiee"))
        .ok_or("no folder for the elfiee binary")?;
    let started = Instant::now();
    let events = rt.block_on(async {
        let a = device(dir, "sender", &url, 7, true).await?;
        for i in 0..blocks {
            let made = a
                .file
                .submit(Command::new(
                    "alice",
                    "core.create",
                    None,
                    json!({"name": format!("b{i}"), "block_type": "markdown"}),
                ))
                .await?;
            // Text different in every block.
            let line = format!(
                "block {i} of the sync memory benchmark, {} \n",
                "x".repeat(60)
            );
            let body: String = line.repeat(body_bytes / line.len() + 1)[..body_bytes].to_owned();
            a.file
                .submit(Command::new(
                    "alice",
                    "markdown.write",
                    Some(&made[0].entity),
                    json!({"markdown": body}),
                ))
                .await?;
        }
        let own = a.node.status().own_events;
        let deadline = Instant::now() + Duration::from_secs(1800);
        while a.node.status().published < own {
            if Instant::now() > deadline {
                return Err::<u64, BoxError>(
                    "the sender did not publish everything in 30 min".into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let n = a.node.status().events;
        a.file.close().await;
        Ok(n)
    })?;
    let sent = started.elapsed().as_secs_f64();
    info!("sync-memory {mib} MiB: sender wrote and published {events} events in {sent:.1} s");
    let elf = dir.join("receiver.elf");
    let key = dir.join("receiver.key");
    let joined = std::process::Command::new(&exe)
        .args(["sync", "join"])
        .arg(&elf)
        .args(["--broker", &url, "--doc", "bench", "--key"])
        .arg(&key)
        .output()?;
    if !joined.status.success() {
        return Err(format!("sync join: {}", String::from_utf8_lossy(&joined.stderr)).into());
    }
    let t0 = Instant::now();
    let mut child = std::process::Command::new(&exe)
        .args(["serve", "--sync", &url])
        .env("ELFIEE_ELF", &elf)
        .env("ELFIEE_NODE_KEY", &key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let status_file = elf.join("sync-status.json");
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let done = std::fs::read(&status_file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v["events"].as_u64() >= Some(events));
        if done {
            break;
        }
        if Instant::now() > deadline || child.try_wait()?.is_some() {
            let _ = child.kill();
            return Err("the receiver did not get every event".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let received = t0.elapsed().as_secs_f64();
    let hwm_kib = std::fs::read_to_string(format!("/proc/{}/status", child.id()))?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .ok_or("no VmHWM for the receiver")?;
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait();
    let content = super::dir_size(&elf.join("content"));
    info!(
        "sync-memory {mib} MiB: receiver got {events} events in {received:.1} s, peak RSS {:.1} MiB",
        hwm_kib / 1024.0
    );
    Ok(json!({
        "content_mib": mib,
        "blocks": blocks,
        "body_bytes": body_bytes,
        "events": events,
        "sender_seconds": round(sent, 1),
        "receiver_seconds": round(received, 1),
        "receiver_peak_rss_mib": round(hwm_kib / 1024.0, 1),
        "receiver_content_bytes": content,
    }))
}

/// `n` markdown.writes of `text` to `block`, from 64 tasks (group commit).
async fn commit_many(file: &FileHandle, block: &str, text: &str, n: u64) -> Result<(), BoxError> {
    let mut tasks = Vec::new();
    for t in 0..64u64 {
        let (file, block, text) = (file.clone(), block.to_owned(), text.to_owned());
        let count = n / 64 + u64::from(t < n % 64);
        tasks.push(tokio::spawn(async move {
            for _ in 0..count {
                file.submit(Command::new(
                    "alice",
                    "markdown.write",
                    Some(&block),
                    json!({"markdown": text}),
                ))
                .await?;
            }
            Ok::<_, elfiee_engine::EngineError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
