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

use crate::common::{round, BoxError, Plan};

pub(crate) fn registry() -> Registry {
    let mut r = Registry::builtin();
    elfiee_sync::membership::register(&mut r);
    r
}

/// An engine with the sync phases' registry; `node_id` names the device in its events.
pub(crate) fn engine(node_id: &str) -> Engine {
    Engine::new(EngineConfig {
        registry: registry(),
        node_id: node_id.into(),
        ..Default::default()
    })
}

/// Waits (polling every few ms) until `done`; false when `within` passed first.
pub(crate) async fn until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

pub(crate) struct Device {
    pub(crate) file: FileHandle,
    pub(crate) node: SyncNode,
    /// The runtime its tasks run on, when not the caller's ([`receiving_device`]).
    _runtime: Option<OwnRuntime>,
}

/// A tokio runtime of its own (two workers, like the shared one), shut down in the
/// background when dropped (allowed inside async code).
pub(crate) struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl OwnRuntime {
    pub(crate) fn new() -> Result<OwnRuntime, BoxError> {
        Ok(OwnRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?,
        )))
    }

    /// Runs `work` on this runtime: whatever it spawns (an engine's actors, a sync node's
    /// loops) runs there too.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = Result<T, String>> + Send + 'static,
    ) -> Result<T, BoxError> {
        let rt = self.0.as_ref().ok_or("the runtime is shut down")?;
        Ok(rt.spawn(work).await??)
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A device that joins the document (B, C, a fresh one), started on a runtime of its own, as
/// a device in another process runs on its own scheduler: the 64 submitters on A, on the
/// caller's runtime, then cannot hold up its ingest between their awaits (the OS shares the
/// cores between the devices' threads instead).
pub(crate) async fn receiving_device(
    base: &Path,
    name: &str,
    url: &str,
    seed: u8,
) -> Result<Device, BoxError> {
    let runtime = OwnRuntime::new()?;
    let (base, name, url) = (base.to_owned(), name.to_owned(), url.to_owned());
    let mut d = runtime
        .run(async move {
            device(&base, &name, &url, seed, false)
                .await
                .map_err(|e| e.to_string())
        })
        .await?;
    d._runtime = Some(runtime);
    Ok(d)
}

/// The owner (alice, on `owner`) adds `node`: it may write, and it gets the document key
/// (only a device that was added reads the document).
pub(crate) async fn admit(
    owner: &FileHandle,
    node: &elfiee_sync::identity::NodeId,
) -> Result<(), BoxError> {
    let hex = node.to_hex();
    owner
        .submit(Command::new(
            "alice",
            "node.add",
            None,
            json!({"node_id": hex, "public_key": hex}),
        ))
        .await?;
    Ok(())
}

pub(crate) async fn device(
    base: &Path,
    name: &str,
    url: &str,
    seed: u8,
    first: bool,
) -> Result<Device, BoxError> {
    let engine = engine(name);
    let path = base.join(format!("sync-{name}.elf"));
    let file = if first {
        engine.init(&path, "Alice").await?
    } else {
        engine.create_empty(&path).await?
    };
    let config = SyncConfig::new(url, "bench", [seed; 32]);
    let node = SyncNode::start(file.clone(), registry(), config).await?;
    Ok(Device {
        file,
        node,
        _runtime: None,
    })
}

pub(crate) async fn wait_for(
    devices: &[&Device],
    events: u64,
    within: Duration,
) -> Result<(), BoxError> {
    if until(within, || {
        // The status as subscribers get it (no catch-up, no digest of the merged state: the
        // floor's copies are watched by an atomic read, so polling must not cost the synced
        // side a fold or a hash either).
        devices
            .iter()
            .all(|d| d.node.subscribe().borrow().events >= events)
    })
    .await
    {
        return Ok(());
    }
    let s: Vec<_> = devices.iter().map(|d| d.node.status()).collect();
    Err(format!("devices did not catch up within {within:?}: {s:?}").into())
}

pub(crate) fn nats_missing() -> bool {
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
        let b = receiving_device(base, "b", &url, 2).await?;
        let c = receiving_device(base, "c", &url, 3).await?;
        for d in [&b, &c] {
            admit(&a.file, &d.node.node()).await?;
        }
        let block = markdown_block(&a.file, "bench").await?;
        let mut events = a.node.status().events;
        wait_for(&[&b, &c], events, Duration::from_secs(60)).await?;
        let text = "x".repeat(150);
        // The ceiling: the same commits on a document nobody syncs (one engine, no broker),
        // `runs` times (the median). And the floor of any sync design in this process: the
        // same commits while two more engines here store a copy of each event, handed over
        // in memory (no broker, no seal, no signature, no merged state).
        let (plain, plain_cpu_us) = unsynced_runs(base, "sync-plain", 0, &text, n, runs).await?;
        let (floor, floor_cpu_us) = unsynced_runs(base, "sync-floor", 2, &text, n, runs).await?;
        // However well a design kept both cores busy, the floor's CPU per event caps it.
        let floor_cap = crate::common::cpus() as f64 * 1e6 / floor_cpu_us;
        info!("sync: unsynced commit {plain:.0} events/s ({plain_cpu_us:.1} µs CPU an event); with two in-memory copies (the floor) {floor:.0} events/s = {:.3} of it ({floor_cpu_us:.1} µs CPU an event: with every core busy at most {floor_cap:.0} events/s = {:.3})", floor / plain, floor_cap / plain);
        let (mut synced, mut raw) = (Vec::new(), Vec::new());
        let (mut cpu_per_event, mut busy) = (Vec::new(), Vec::new());
        let mut nats_per_event = Vec::new();
        let mut size = 0usize;
        let first_timed = a.file.last_seq() + 1;
        let all_cpu = || cpu_seconds(None) + cpu_seconds(Some(server.pid()));
        for r in 0..runs {
            // Commit on A (64 submitters: group commit), applied on B and C.
            let (started, cpu) = (Instant::now(), all_cpu());
            let nats = cpu_seconds(Some(server.pid()));
            commit_many(&a.file, &block, &text, n).await?;
            let committed = started.elapsed().as_secs_f64();
            events += n;
            let own = a.node.status().own_events;
            while a.node.subscribe().borrow().published < own {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let published = started.elapsed().as_secs_f64();
            wait_for(&[&b, &c], events, Duration::from_secs(300)).await?;
            let elapsed = started.elapsed().as_secs_f64();
            let used = all_cpu() - cpu;
            nats_per_event.push((cpu_seconds(Some(server.pid())) - nats) * 1e6 / n as f64);
            cpu_per_event.push(used * 1e6 / n as f64);
            busy.push(used / elapsed);
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
        let (s, rw) = (crate::common::median(&synced), crate::common::median(&raw));
        // What issue 16's per-event design made every event cost (A signs it, B and C each
        // verify it), kept beside the figures for comparison: envelopes now sign once a batch.
        let timed = a.file.events(first_timed)?;
        let (sign_us, verify_us) = crypto_cost(&timed);
        let (encrypt_us, decrypt_us) = encryption_cost(&timed);
        let setup = a.file.events(1)?;
        let (decode_us, merge_us) = merge_cost(&setup[..(first_timed - 1) as usize], &timed);
        // A bound that leaves out the broker and everything B and C do but verify: the cores
        // spent on A's commit (as measured unsynced) and on the signatures.
        let floor_us = plain_cpu_us + sign_us + 2.0 * verify_us;
        let bound = crate::common::cpus() as f64 * 1e6 / floor_us;
        info!(
            "sync: CPU per event: synced {:.0} µs (cores busy {:.2}), unsynced commit {plain_cpu_us:.0} µs, sign {sign_us:.1} µs, batch verify {verify_us:.1} µs, encrypt {encrypt_us:.2} µs, decrypt {decrypt_us:.2} µs; bound {bound:.0} events/s = {:.3} of raw",
            crate::common::median(&cpu_per_event),
            crate::common::median(&busy),
            bound / rw
        );
        let out = crate::common::pair(
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
                "floor_two_copies": round(floor, 0),
                "ceiling_ratio": round(plain / rw, 3),
                "ceiling_note": "unsynced_commit: the same 64-task commits on a document nobody syncs, in this run; even a sync path that cost nothing could not beat it, so ceiling_ratio = unsynced_commit / raw bounds the ratio on this machine",
                "cpu_us_per_event": {
                    "synced": round(crate::common::median(&cpu_per_event), 1),
                    "synced_runs": cpu_per_event.iter().map(|c| round(*c, 1)).collect::<Vec<_>>(),
                    "cores_busy": round(crate::common::median(&busy), 2),
                    "of_it_nats_server": round(crate::common::median(&nats_per_event), 1),
                    "unsynced_commit": round(plain_cpu_us, 1),
                    "sign": round(sign_us, 1),
                    "batch_verify": round(verify_us, 1),
                    "encrypt": round(encrypt_us, 2),
                    "decrypt": round(decrypt_us, 2),
                    "encryption_note": "encrypt: sealing A's envelopes (256 of the runs' events each) with the document key, XChaCha20-Poly1305 (decision 0047), per event; decrypt: opening them, as each receiver does; one thread, best of three",
                },
                "cpu_bound_events_per_s": round(bound, 0),
                "cpu_bound_ratio": round(bound / rw, 3),
                "cpu_bound_note": "CPU time (user + system) of this process and of nats-server per synced event (of_it_nats_server: the broker's part), and the cores that kept busy; the bound (issue 16's per-event signatures; envelopes sign once a batch) divides the machine's cores by a floor of what each event must cost here: A's commit (the unsynced commit's CPU per event, measured above), one Ed25519 signature and two batch verifications (B and C), timed on the events of the runs. It leaves out the broker, B's and C's storage and the merge fold, so the real ceiling is lower still",
                "message_bytes": size,
                "target": "ratio >= 0.5",
                "how": "sync: 64 tasks submit markdown.write (150 bytes) on device A until n events are committed; the clock stops when devices B and C (separate engines and SyncNodes in this process, one local nats-server) have every event in their merged state. raw: one client publishes n messages of the size of A's sealed events to another stream with Nats-Msg-Id, 256 in flight, and awaits every PubAck (the sync publisher sends envelopes, one in flight)",
            }),
        );
        let mut out = out;
        let quick = plan.mode == "quick";
        // Latency: one write every 10 ms on A, until a subscriber on B has it.
        let quiet = crate::sync_figures::write_latencies(
            &a.file,
            &b.file,
            &block,
            Duration::from_millis(10),
            if quick { 200 } else { 1_000 },
            Duration::from_secs(120),
        )
        .await?;
        // The same single writes on C while A commits a burst from 64 submitters.
        let (burst, loaded) = tokio::join!(
            commit_many(&a.file, &block, &text, n),
            crate::sync_figures::write_latencies(
                &c.file,
                &b.file,
                &block,
                Duration::from_millis(10),
                100,
                Duration::from_secs(300),
            )
        );
        burst?;
        let loaded = loaded?;
        out["latency"] = crate::sync_figures::latency_figure(
            &quiet,
            3.0,
            10.0,
            "one markdown.write on A every 10 ms; from its submit answered on A (durable) until a subscriber on B (FileHandle::subscribe) gets the event with its cmd_id",
        );
        out["latency_under_burst"] = crate::sync_figures::latency_figure(
            &loaded,
            50.0,
            50.0,
            &format!("one markdown.write on C every 10 ms (100 of them) while A commits {n} from 64 submitters; from C's submit answered until B's subscriber has it (the target is on p99 only)"),
        );
        out["vs_unsynced_commit"] = json!({
            "ratio": round(s / plain, 3),
            "target": "ratio >= 0.8 (issue 28)",
            "met": s / plain >= 0.8,
            "floor_ratio": round(floor / plain, 3),
            "floor_cpu_us_per_event": round(floor_cpu_us, 1),
            "floor_cpu_cap_ratio": round(floor_cap / plain, 3),
            "floor_note": "floor_ratio: the same commits while two more engines in this process store a copy of each event handed over in memory (no broker, seal, signature or merged state: what B and C must do at the least), over the unsynced commit; no sync design that stores the events on B and C in this process can do better here. floor_cpu_cap_ratio: the cores divided by the floor's CPU per event (this process), over the unsynced commit: what the floor would reach with every core busy all the time",
        });
        // Issue 40, item 6: against the floor, and the least CPU any design that merges on
        // every device through this broker pays here (measured parts, a lower bound).
        let synced_cpu = crate::common::median(&cpu_per_event);
        let nats_us = crate::common::median(&nats_per_event);
        let merging_us = floor_cpu_us
            + nats_us
            + encrypt_us
            + 3.0 * merge_us
            + 2.0 * (decrypt_us + decode_us);
        out["vs_floor"] = json!({
            "ratio": round(s / floor, 3),
            "target": "ratio >= 0.8 (issue 40)",
            "met": s / floor >= 0.8,
            "cpu_ratio": round(synced_cpu / floor_cpu_us, 2),
            "cpu_target": "cpu_ratio <= 1.5 (issue 40)",
            "cpu_met": synced_cpu / floor_cpu_us <= 1.5,
            "decode_us_per_event": round(decode_us, 2),
            "merge_us_per_event": round(merge_us, 2),
            "merging_bound_cpu_us_per_event": round(merging_us, 1),
            "merging_bound_cpu_ratio": round(merging_us / floor_cpu_us, 2),
            "merging_bound_note": "the least CPU per event of any design that sends A's events through this broker and merges them on every device, from parts measured in this run: the floor's CPU, nats-server's CPU per synced event, sealing A's envelopes, three merged-state folds (merge_us: Replica::add_many, 128 events at a time, on the runs' events: merge index, authorization at merge, fold) and two receivers' opening and decoding (decrypt + decode_us: Message::decode of 256-event envelopes); one thread, best of three. It leaves out recording commands, signatures, ingest's checks, the books and every hand-off, so the real least is higher",
        });
        info!(
            "sync: against the floor: {:.3} of its events/s, CPU {synced_cpu:.0} µs = {:.2} × the floor's {floor_cpu_us:.0} µs; decode {decode_us:.2} µs, merge {merge_us:.2} µs an event; the least a merging design pays here {merging_us:.1} µs = {:.2} × the floor's",
            s / floor,
            synced_cpu / floor_cpu_us,
            merging_us / floor_cpu_us
        );
        info!("sync: latency {} / under a burst {}", out["latency"], out["latency_under_burst"]);
        // The path users meet: other processes writing to a serving device (issue 40).
        let (cli, mcp) = tokio::task::block_in_place(|| {
            crate::sync_figures::process_latency(base, if quick { 100 } else { 300 })
        })?;
        info!("sync: process latency: CLI writes {cli} / MCP writes {mcp}");
        out["latency_process"] = cli;
        out["latency_mcp"] = mcp;
        for d in [b, c] {
            d.file.close().await;
        }
        out["catch_up"] =
            catch_up(base, &url, &a, if quick { 20_000 } else { 200_000 }, &block, &text)
                .await?;
        a.file.close().await;
        Ok::<_, BoxError>(out)
    })
}

/// CPU seconds (user + system) of this process, or of the process `pid`, from `/proc`.
pub(crate) fn cpu_seconds(pid: Option<u32>) -> f64 {
    stat_seconds(pid, false)
}

/// CPU seconds (user + system) of the children this process has waited for, from `/proc`.
pub(crate) fn children_cpu_seconds() -> f64 {
    stat_seconds(None, true)
}

/// utime + stime (or, with `children`, cutime + cstime) of `/proc/{pid or self}/stat`.
fn stat_seconds(pid: Option<u32>, children: bool) -> f64 {
    let path = pid.map_or("/proc/self/stat".to_owned(), |p| format!("/proc/{p}/stat"));
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // After the command name (which may hold spaces) come the fields from `state` on;
    // utime and stime are fields 14 and 15 of the line, cutime and cstime 16 and 17.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf reads a constant of the system; no memory is shared.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let first = if children { 13 } else { 11 };
    (ticks(first) + ticks(first + 1)) / hz
}

/// `events` as `key`'s node's consecutive events (origin seq 1, 2, …, each `prev` the id
/// `seal` gave the one before).
fn chain<T>(
    key: &elfiee_sync::identity::NodeKey,
    events: &[elfiee_model::Event],
    mut seal: impl FnMut(
        elfiee_sync::identity::Origin,
        &elfiee_model::Event,
    ) -> (elfiee_sync::identity::EventId, T),
) -> Vec<T> {
    let mut prev = None;
    (1..)
        .zip(events)
        .map(|(seq, e)| {
            let origin = elfiee_sync::identity::Origin {
                node: key.node(),
                seq,
                prev,
                deps: Vec::new(),
            };
            let (id, out) = seal(origin, e);
            prev = Some(id);
            out
        })
        .collect()
}

/// Microseconds per event to seal (hash and sign) the events as A's follower does, and to
/// check them in batches of 256 as B's and C's ingest do; one thread, best of three.
fn crypto_cost(events: &[elfiee_model::Event]) -> (f64, f64) {
    use elfiee_sync::identity::{verify_members, Keys, NodeKey, SyncEvent};
    let key = NodeKey::from_seed([9; 32]);
    let n = events.len().max(1) as f64;
    let (mut sign, mut verify) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let started = Instant::now();
        let sealed: Vec<SyncEvent> = chain(&key, events, |origin, e| {
            let s = SyncEvent::seal_parts(
                Some(&key),
                origin,
                "markdown.write".into(),
                Some(e.entity.clone()),
                e,
            );
            (s.id, s)
        });
        sign = sign.min(started.elapsed().as_secs_f64() * 1e6 / n);
        let started = Instant::now();
        let mut keys = Keys::default();
        for chunk in sealed.chunks(256) {
            let refs: Vec<&SyncEvent> = chunk.iter().collect();
            let checked = verify_members(&refs, &mut keys);
            assert!(
                checked.iter().all(|c| c.is_ok()),
                "the bench's own events verify"
            );
        }
        verify = verify.min(started.elapsed().as_secs_f64() * 1e6 / n);
    }
    (sign, verify)
}

/// Microseconds per event to seal A's envelopes (256 events each, as the publisher sends
/// them) with the document key and to open them, as each receiver does; one thread, best of
/// three.
fn encryption_cost(events: &[elfiee_model::Event]) -> (f64, f64) {
    use elfiee_sync::encryption::{DocKey, Sealed};
    use elfiee_sync::envelope::{Envelope, Outgoing};
    use elfiee_sync::identity::{NodeKey, SyncEvent};
    let key = NodeKey::from_seed([9; 32]);
    let doc_key = DocKey::generate(0, key.node());
    let outgoing: Vec<Outgoing> = chain(&key, events, |origin, e| {
        let (s, bytes) =
            SyncEvent::sealed(origin, "markdown.write".into(), Some(e.entity.clone()), e);
        (s.id, Outgoing::of(&s, Some(bytes)))
    });
    let envelopes: Vec<Vec<u8>> = outgoing
        .chunks(256)
        .map(|c| Envelope::encode_outgoing(&key, c).0)
        .collect();
    let n = events.len().max(1) as f64;
    let (mut encrypt, mut decrypt) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let started = Instant::now();
        let sealed: Vec<Vec<u8>> = envelopes
            .iter()
            .map(|e| Sealed::seal(&doc_key, "bench", &key.node(), e))
            .collect();
        encrypt = encrypt.min(started.elapsed().as_secs_f64() * 1e6 / n);
        let started = Instant::now();
        for s in &sealed {
            let opened = Sealed::read(s).map(|s| s.open(&doc_key, "bench"));
            assert!(
                opened.is_some_and(|o| o.is_ok()),
                "the bench's own envelopes open"
            );
        }
        decrypt = decrypt.min(started.elapsed().as_secs_f64() * 1e6 / n);
    }
    (encrypt, decrypt)
}

/// Microseconds per event that every merging design pays on each device beyond the floor's
/// copy, on the runs' events (one thread, best of three): decoding A's envelopes (256
/// events each) into events, as each receiver does after opening them, and adding them to a
/// merged state ([`elfiee_sync::replica::Replica::add_many`], 128 at a time: the merge
/// index, the authorization at merge, the fold), as each of A, B and C does. `setup`: the
/// document's events before them (folded first, untimed: the block and grants they need).
fn merge_cost(setup: &[elfiee_model::Event], events: &[elfiee_model::Event]) -> (f64, f64) {
    use elfiee_sync::envelope::{Envelope, Message, Outgoing};
    use elfiee_sync::identity::{NodeKey, SyncEvent};
    use elfiee_sync::replica::Replica;
    let key = NodeKey::from_seed([9; 32]);
    let all: Vec<elfiee_model::Event> = setup.iter().chain(events).cloned().collect();
    let sealed: Vec<SyncEvent> = chain(&key, &all, |origin, e| {
        let (s, _) = SyncEvent::sealed(origin, e.cap_id().to_owned(), Some(e.entity.clone()), e);
        (s.id, s)
    });
    let (before, timed) = sealed.split_at(setup.len());
    let envelopes: Vec<Vec<u8>> = timed
        .chunks(256)
        .map(|c| {
            let out: Vec<Outgoing> = c.iter().map(|s| Outgoing::of(s, None)).collect();
            Envelope::encode_outgoing(&key, &out).0
        })
        .collect();
    let n = events.len().max(1) as f64;
    let (mut decode, mut merge) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let started = Instant::now();
        let mut decoded = 0;
        for e in &envelopes {
            let m = Message::decode(e).expect("the bench's own envelopes decode");
            decoded += m.into_events().len();
        }
        decode = decode.min(started.elapsed().as_secs_f64() * 1e6 / n);
        assert_eq!(decoded, timed.len(), "every event decoded");
        let mut replica = Replica::new(registry());
        replica
            .add_many(before.to_vec())
            .expect("the document's events merge");
        let batches: Vec<Vec<SyncEvent>> = timed.chunks(128).map(<[_]>::to_vec).collect();
        let started = Instant::now();
        for b in batches {
            replica.add_many(b).expect("the runs' events merge");
        }
        merge = merge.min(started.elapsed().as_secs_f64() * 1e6 / n);
        assert_eq!(replica.len(), all.len(), "every event merged");
    }
    (decode, merge)
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
    // The receiver's key first: the sender adds it, and seals it the document key.
    let key = dir.join("receiver.key");
    let receiver = elfiee_sync::identity::NodeKey::generate();
    std::fs::write(&key, elfiee_model::EventHash(receiver.seed()).to_hex())?;
    let started = Instant::now();
    let events = rt.block_on(async {
        let a = device(dir, "sender", &url, 7, true).await?;
        admit(&a.file, &receiver.node()).await?;
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
        // The publisher seals the key to the receiver when it is idle (each second).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        a.file.close().await;
        Ok(n)
    })?;
    let sent = started.elapsed().as_secs_f64();
    info!("sync-memory {mib} MiB: sender wrote and published {events} events in {sent:.1} s");
    let elf = dir.join("receiver.elf");
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
    let content = crate::common::dir_size(&elf.join("content"));
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

/// Commits on a fresh unsynced document named `name`, with `copies` in-memory copies
/// ([`Copies`]): `n` events `runs` times; the median events/s (until the
/// copies hold them) and the median CPU µs per event.
async fn unsynced_runs(
    base: &Path,
    name: &str,
    copies: usize,
    text: &str,
    n: u64,
    runs: usize,
) -> Result<(f64, f64), BoxError> {
    let f = engine(name)
        .init(base.join(format!("{name}.elf")), "Alice")
        .await?;
    let dir = base.join(name);
    std::fs::create_dir_all(&dir)?;
    let copies = Copies::start(&dir, &f, copies).await?;
    let block = markdown_block(&f, "p").await?;
    copies
        .wait_for(f.last_seq(), Duration::from_secs(60))
        .await?;
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (started, cpu) = (Instant::now(), cpu_seconds(None));
        commit_many(&f, &block, text, n).await?;
        copies
            .wait_for(f.last_seq(), Duration::from_secs(300))
            .await?;
        rates.push(n as f64 / started.elapsed().as_secs_f64());
        cpus.push((cpu_seconds(None) - cpu) * 1e6 / n as f64);
    }
    copies.close().await;
    f.close().await;
    Ok((crate::common::median(&rates), crate::common::median(&cpus)))
}

/// `n` markdown.writes of `text` to `block`, from 64 tasks (group commit).
pub(crate) async fn commit_many(
    file: &FileHandle,
    block: &str,
    text: &str,
    n: u64,
) -> Result<(), BoxError> {
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

/// Alice creates a markdown block named `name` in `file`; its id.
pub(crate) async fn markdown_block(file: &FileHandle, name: &str) -> Result<String, BoxError> {
    let made = file
        .submit(Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": name, "block_type": "markdown"}),
        ))
        .await?;
    Ok(made[0].entity.clone())
}

/// A fresh device catches up with A's document of `total` events from the stream: the seconds
/// from its start until its merged state holds every event, against A's replay of its own log
/// (`FileHandle::replay`: the hash chain, decode and fold, what `elfiee replay` does). A gets
/// more events first (64 submitters), published before the clock starts.
pub(crate) async fn catch_up(
    base: &std::path::Path,
    url: &str,
    a: &Device,
    total: u64,
    block: &str,
    text: &str,
) -> Result<Value, BoxError> {
    let have = a.file.last_seq();
    if total > have {
        commit_many(&a.file, block, text, total - have).await?;
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
    let d = receiving_device(base, "d", url, 4).await?;
    admit(&a.file, &d.node.node()).await?;
    wait_for(&[&d], events, Duration::from_secs(1800)).await?;
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
    let merged = elfiee_sync::node::synced_state(&a.file, registry())?
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

/// Engines that hold a copy of every event a source file commits: the floor of any sync
/// design in this process (the floor beside the sync throughput, and a step of
/// `sync-parts`).
pub(crate) struct Copies(Vec<(elfiee_engine::FileHandle, OwnRuntime)>);

impl Copies {
    /// No copies (waiting for them returns at once).
    pub(crate) fn none() -> Copies {
        Copies(Vec::new())
    }

    /// `k` fresh engines beside `source`, each on a runtime of its own (as a receiving
    /// device runs, [`receiving_device`]) and fed every event `source` commits from now on,
    /// in the batches its subscription has ready.
    pub(crate) async fn start(
        dir: &Path,
        source: &elfiee_engine::FileHandle,
        k: usize,
    ) -> Result<Copies, BoxError> {
        let mut out = Vec::new();
        for i in 0..k {
            let runtime = OwnRuntime::new()?;
            let path = dir.join(format!("copy-{i}.elf"));
            let events = source.subscribe_from(1);
            let copy = runtime.run(copy_of(path, events)).await?;
            out.push((copy, runtime));
        }
        Ok(Copies(out))
    }

    /// Waits until every copy holds `last` events.
    pub(crate) async fn wait_for(&self, last: u64, within: Duration) -> Result<(), BoxError> {
        if until(within, || self.0.iter().all(|(f, _)| f.last_seq() >= last)).await {
            return Ok(());
        }
        Err(format!("the in-memory copies did not catch up within {within:?}").into())
    }

    pub(crate) async fn close(self) {
        for (f, _runtime) in self.0 {
            f.close().await;
        }
    }
}

/// A fresh engine at `path` that appends every event `events` brings as another device's
/// (on the runtime this runs on).
async fn copy_of(
    path: std::path::PathBuf,
    mut events: elfiee_engine::Subscription,
) -> Result<elfiee_engine::FileHandle, String> {
    use futures_util::FutureExt;
    let copy = engine("copy")
        .create_empty(path)
        .await
        .map_err(|e| e.to_string())?;
    let foreign = copy.foreign_log().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Some(first) = events.recv().await {
            let mut batch = vec![(first, Vec::new())];
            while let Some(Some(e)) = events.recv().now_or_never() {
                batch.push((e, Vec::new()));
            }
            if foreign.append_deferred(batch, Vec::new()).await.is_err() {
                return;
            }
            // Nothing more was ready: caught up, so made durable, as ingest makes what it
            // stored. (Flushing less often, or never, was measured slower: the copies then
            // take smaller batches and more of the cores A commits on.)
            if foreign.sync().await.is_err() {
                return;
            }
        }
    });
    Ok(copy)
}
