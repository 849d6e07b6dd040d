//! Three devices as a user runs them: `elfiee serve --sync` processes on three `.elf` files,
//! CLI commands through their owner sockets, one `nats-server` on 127.0.0.1 (each device
//! reaches it through a relay the test can cut). Seeded random commands, partitions, heals
//! and SIGKILLs of the serving processes; after the last heal every device has every
//! acknowledged write, all merged digests are equal, equal to a fresh device that only
//! reads the stream, `replay` gives that digest and `verify` passes everywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use elfiee::testkit::serve::{self, serve_synced};
use elfiee_sync::testing::{NatsServer, Relay};
use serde_json::Value;

mod common;

fn elfiee(elf: &Path, args: &[&str]) -> Output {
    common::run_elfiee(elf, args, &[])
}

fn ok_json(out: Output) -> Value {
    common::success_json(&[], &out)
}

/// A small deterministic generator (xorshift), so a failing seed can be run again.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

struct Device {
    name: String,
    editor: String,
    elf: PathBuf,
    key: PathBuf,
    relay: Relay,
    serve: Option<Child>,
    doc: String,
    log: PathBuf,
    /// Commands that were acknowledged here: (kind, marker) to find in every log.
    acked: Vec<(String, String)>,
}

impl Device {
    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["--json", "--as", self.editor.as_str()];
        all.extend_from_slice(args);
        elfiee(&self.elf, &all)
    }

    /// Starts `serve --sync` (with `env` set), once the status file names this process.
    fn start(&mut self, env: &[(&str, &str)]) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfiee"));
        cmd.envs(env.iter().copied());
        self.serve = Some(serve_synced(
            cmd,
            &self.elf,
            &self.key,
            &self.relay.url(),
            &self.doc,
            &self.log,
            Duration::from_secs(10),
        ));
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.serve.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// Ctrl-C, as a user stops it.
    fn stop(&mut self) {
        if let Some(mut c) = self.serve.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if c.try_wait().unwrap().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
            panic!("{} did not stop on SIGINT", self.name);
        }
    }

    fn status(&self) -> Value {
        ok_json(elfiee(&self.elf, &["--json", "sync", "status"]))
    }

    fn events(&self) -> Vec<Value> {
        ok_json(elfiee(&self.elf, &["--json", "log"]))
            .as_array()
            .unwrap()
            .clone()
    }

    /// This device's node id (from its key).
    fn node_id(&self) -> String {
        let args = [
            "--json",
            "sync",
            "node-id",
            "--key",
            self.key.to_str().unwrap(),
        ];
        ok_json(elfiee(&self.elf, &args))["node_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Cluster {
    _server: NatsServer,
    dir: tempfile::TempDir,
    devices: Vec<Device>,
}

impl Cluster {
    /// [`converge`] over every device, within 30 s; the digest.
    fn converge(&self) -> String {
        let all: Vec<&Device> = self.devices.iter().collect();
        converge(&all, Duration::from_secs(30))
    }
}

async fn cluster(server: NatsServer, doc: &str) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut devices = Vec::new();
    for (name, editor) in [("a", "alice"), ("b", "bob"), ("c", "carol")] {
        devices.push(Device {
            name: name.into(),
            editor: editor.into(),
            elf: dir.path().join(format!("{name}.elf")),
            key: dir.path().join(format!("{name}.key")),
            relay: Relay::start(server.addr()).await.unwrap(),
            serve: None,
            doc: doc.into(),
            log: dir.path().join(format!("{name}.serve.log")),
            acked: Vec::new(),
        });
    }
    let a = &devices[0];
    ok_json(elfiee(
        &a.elf,
        &[
            "--json",
            "init",
            a.elf.to_str().unwrap(),
            "--owner",
            "Alice",
        ],
    ));
    for d in &devices[1..] {
        ok_json(elfiee(
            &d.elf,
            &[
                "--json",
                "sync",
                "join",
                d.elf.to_str().unwrap(),
                "--broker",
                &d.relay.url(),
                "--doc",
                doc,
                "--key",
                d.key.to_str().unwrap(),
            ],
        ));
        let node = d.node_id();
        ok_json(elfiee(
            &a.elf,
            &["--json", "sync", "add-node", &node, "--name", &d.name],
        ));
        ok_json(elfiee(
            &a.elf,
            &[
                "--json", "editor", "create", "--name", &d.editor, "--id", &d.editor,
            ],
        ));
        for cap in ["core.create", "markdown.write", "core.link", "core.delete"] {
            ok_json(elfiee(&a.elf, &["--json", "grant", &d.editor, cap, "*"]));
        }
    }
    for d in &mut devices {
        d.start(&[]);
    }
    Cluster {
        _server: server,
        dir,
        devices,
    }
}

/// Waits until every device's merged digest and event count agree with nothing left to
/// publish on every device that is a member; returns the digest.
fn converge(devices: &[&Device], within: Duration) -> String {
    let logs: Vec<&Path> = devices.iter().map(|d| d.log.as_path()).collect();
    serve::converge(
        || devices.iter().map(|d| d.status()).collect(),
        |x| x["to_publish"] == 0 || x["member"] == false,
        &logs,
        within,
        Duration::from_millis(200),
    )
}

/// `elfiee sync remove-node` (issue 40): the owner only; the removed device's later writes
/// are refused at merge on the others (named in `sync status`), it cannot read what is
/// written after, and what it wrote before stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_removes_a_device_from_the_command_line() {
    let server = NatsServer::start().unwrap();
    let c = cluster(server, "rmcli").await;
    let (a, b, carol) = (&c.devices[0], &c.devices[1], &c.devices[2]);
    let create = |d: &Device, name: &str| {
        ok_json(d.run(&["block", "create", "--name", name, "--type", "markdown"]))
    };
    c.converge();
    create(b, "b-before");
    c.converge();
    let bob = b.node_id();
    // Not the owner, even with the right to grant on the whole document: refused, naming why.
    ok_json(a.run(&["grant", "carol", "core.grant", "*"]));
    c.converge();
    let refused = carol.run(&["sync", "remove-node", &bob]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stdout).to_string()
        + &String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("only the file owner removes devices"),
        "{said}"
    );
    let removed = ok_json(a.run(&["sync", "remove-node", &bob]));
    assert_eq!(removed["events"], 1, "{removed}");
    assert!(removed["upto"].as_u64().unwrap() >= 1, "{removed}");
    create(a, "a-after-removal");
    create(b, "b-after-removal");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = carol.status();
        let shows = |d: &Device, marker: &str| marker_in(&d.events(), "core.create", marker);
        if s["refused_from_removed"][&bob].as_u64() >= Some(1) && shows(carol, "a-after-removal") {
            break;
        }
        assert!(Instant::now() < deadline, "carol: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = elfiee(&carol.elf, &["sync", "status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("refused events from removed node {bob}: 1")),
        "{text}"
    );
    // What B wrote before stays in the merged state; what it wrote after is not in it.
    let names = |d: &Device| ok_json(d.run(&["block", "list"])).to_string();
    assert!(names(carol).contains("b-before"));
    assert!(!names(carol).contains("b-after-removal"));
    let on_a = names(a);
    assert!(
        on_a.contains("b-before") && !on_a.contains("b-after-removal"),
        "{on_a}\n{}",
        a.status()
    );
    // B cannot read what followed its removal.
    std::thread::sleep(Duration::from_secs(2));
    assert!(!marker_in(&b.events(), "core.create", "a-after-removal"));
}

fn marker_in(events: &[Value], kind: &str, marker: &str) -> bool {
    events.iter().any(|e| {
        e["attribute"].as_str().is_some_and(|a| a.ends_with(kind))
            && e["value"].to_string().contains(marker)
    })
}

/// One seeded run: random commands on random devices, partitions, heals and SIGKILLs.
async fn seeded_run(seed: u64, steps: usize) {
    let server = NatsServer::start().unwrap();
    let mut c = cluster(server, &format!("s{seed}")).await;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut blocks: Vec<String> = Vec::new();
    let (mut kills, mut cuts) = (0, 0);
    for i in 0..steps {
        let d = rng.below(3);
        match rng.below(10) {
            0..=2 => {
                let name = format!("s{seed}-n{i}");
                let out =
                    c.devices[d].run(&["block", "create", "--type", "markdown", "--name", &name]);
                if out.status.success() {
                    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                    blocks.push(v["block_id"].as_str().unwrap().to_owned());
                    c.devices[d].acked.push(("core.create".into(), name));
                }
            }
            3 | 4 if !blocks.is_empty() => {
                let b = blocks[rng.below(blocks.len())].clone();
                let text = format!("s{seed}-w{i}");
                let out = c.devices[d].run(&["markdown", "write", &b, "--text", &text]);
                if out.status.success() {
                    c.devices[d].acked.push(("markdown.write".into(), text));
                }
            }
            5 if blocks.len() >= 2 => {
                let (x, y) = (
                    blocks[rng.below(blocks.len())].clone(),
                    blocks[rng.below(blocks.len())].clone(),
                );
                let out = c.devices[d].run(&["block", "link", &x, &y, "--relation", "reference"]);
                if out.status.success() {
                    c.devices[d].acked.push(("core.link".into(), y));
                }
            }
            6 if !blocks.is_empty() => {
                let b = blocks[rng.below(blocks.len())].clone();
                if c.devices[d].run(&["block", "delete", &b]).status.success() {
                    c.devices[d]
                        .acked
                        .push(("core.delete".into(), String::new()));
                }
            }
            7 => {
                // The owner grants or revokes carol's right to write.
                let verb = if rng.below(2) == 0 { "grant" } else { "revoke" };
                if c.devices[0]
                    .run(&[verb, "carol", "markdown.write", "*"])
                    .status
                    .success()
                {
                    c.devices[0]
                        .acked
                        .push((format!("core.{verb}"), "carol".into()));
                }
            }
            8 => {
                if rng.below(2) == 0 {
                    cuts += 1;
                    c.devices[d].relay.cut();
                } else {
                    c.devices[d].relay.restore();
                }
            }
            _ => {
                // SIGKILL the serving process; the next commands on this device run in
                // their own process (which takes the file over), until it serves again.
                if c.devices[d].serve.is_some() {
                    kills += 1;
                    c.devices[d].kill();
                } else {
                    c.devices[d].start(&[]);
                }
            }
        }
    }
    for d in &mut c.devices {
        d.relay.restore();
        if d.serve.is_none() {
            d.start(&[]);
        }
    }
    let all: Vec<&Device> = c.devices.iter().collect();
    let digest = converge(&all, Duration::from_secs(60));
    // What a CLI call reads through each serving process is the merged state.
    for d in &c.devices {
        let shown = ok_json(elfiee(&d.elf, &["--json", "state-digest"]));
        assert_eq!(
            shown["state_digest"].as_str(),
            Some(digest.as_str()),
            "seed {seed}: {}",
            d.name
        );
    }
    // Every acknowledged write is on every device.
    let logs: Vec<Vec<Value>> = c.devices.iter().map(|d| d.events()).collect();
    let acked: usize = c.devices.iter().map(|d| d.acked.len()).sum();
    eprintln!(
        "seed {seed}: {acked} acknowledged commands, {cuts} cuts, {kills} SIGKILLs, {} events",
        logs[0].len()
    );
    assert!(acked > 0);
    for d in &c.devices {
        for (kind, marker) in &d.acked {
            for (log, other) in logs.iter().zip(&c.devices) {
                assert!(
                    marker_in(log, kind, marker),
                    "seed {seed}: {kind} '{marker}' acknowledged on {} is missing on {}",
                    d.name,
                    other.name
                );
            }
        }
    }
    // Each device stores each event once.
    for (log, d) in logs.iter().zip(&c.devices) {
        let ids: BTreeSet<&str> = log
            .iter()
            .map(|e| e["event_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids.len(),
            log.len(),
            "seed {seed}: {} stores an event twice",
            d.name
        );
    }
    // A fresh device that reads the stream (once the owner added it: only an added device
    // gets the document key) ends with the same state.
    let mut fresh = Device {
        name: "d".into(),
        editor: String::new(),
        elf: c.dir.path().join("d.elf"),
        key: c.dir.path().join("d.key"),
        relay: Relay::start(c._server.addr()).await.unwrap(),
        serve: None,
        doc: format!("s{seed}"),
        log: c.dir.path().join("d.serve.log"),
        acked: Vec::new(),
    };
    ok_json(elfiee(
        &fresh.elf,
        &[
            "--json",
            "sync",
            "join",
            fresh.elf.to_str().unwrap(),
            "--broker",
            &fresh.relay.url(),
            "--doc",
            &fresh.doc,
            "--key",
            fresh.key.to_str().unwrap(),
        ],
    ));
    let fresh_node = fresh.node_id();
    ok_json(c.devices[0].run(&["sync", "add-node", &fresh_node, "--name", "d"]));
    let digest = c.converge();
    fresh.start(&[]);
    let mut with_fresh: Vec<&Device> = c.devices.iter().collect();
    with_fresh.push(&fresh);
    assert_eq!(converge(&with_fresh, Duration::from_secs(60)), digest);
    fresh.stop();
    // Stopped: `replay` gives the synced digest and `verify` passes on every device.
    for d in c.devices.iter_mut().chain(std::iter::once(&mut fresh)) {
        d.stop();
        let r = ok_json(elfiee(&d.elf, &["--json", "replay"]));
        assert_eq!(
            r["synced_digest"].as_str(),
            Some(digest.as_str()),
            "seed {seed}: {}",
            d.name
        );
        let v = ok_json(elfiee(&d.elf, &["--json", "verify"]));
        assert_eq!(v["ok"], true, "seed {seed}: {}: {v}", d.name);
    }
}

fn seeds() -> std::ops::Range<u64> {
    let n = std::env::var("ELFIEE_SYNC_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    0..n
}

/// Seeds `part`, `part + 4`, … (four tests, so the runner can spread them).
async fn seeds_of_part(part: u64) {
    for seed in seeds().filter(|s| s % 4 == part) {
        let started = Instant::now();
        seeded_run(seed, 40).await;
        eprintln!("seed {seed}: {:.1} s", started.elapsed().as_secs_f64());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_serving_devices_converge_through_partitions_and_sigkills_part_0() {
    seeds_of_part(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_serving_devices_converge_through_partitions_and_sigkills_part_1() {
    seeds_of_part(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_serving_devices_converge_through_partitions_and_sigkills_part_2() {
    seeds_of_part(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_serving_devices_converge_through_partitions_and_sigkills_part_3() {
    seeds_of_part(3).await;
}

/// A publisher that dies after sending events and before their PubAck loses nothing: the
/// write acknowledged locally reaches every device once the device serves again, and is
/// stored once everywhere: the envelope the broker stored is found on restart (the
/// checkpoint, which never moved over it, is behind), never sent again, never stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_killed_between_commit_and_puback_loses_no_acknowledged_write() {
    let server = NatsServer::start().unwrap();
    let mut c = cluster(server, "crash").await;
    c.converge();
    let b = &mut c.devices[1];
    b.kill();
    // Acknowledged by CLI processes that own the file for one command each: five writes
    // that the publisher sends in one envelope.
    for i in 0..5 {
        let made = b.run(&[
            "block",
            "create",
            "--type",
            "markdown",
            "--name",
            &format!("written-before-the-crash-{i}"),
        ]);
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    // Serving again, the publisher sends them and the process aborts before the PubAck.
    let log = std::fs::File::create(c.dir.path().join("crash.log")).unwrap();
    let mut crashing = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["serve", "--sync", &b.relay.url(), "--doc", "crash"])
        .env("ELFIEE_ELF", &b.elf)
        .env("ELFIEE_NODE_KEY", &b.key)
        .env("ELFIEE_TEST_CRASH_BEFORE_PUBACK", "1")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = crashing.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the publisher never reached its crash point"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "it aborted");
    let said = std::fs::read_to_string(c.dir.path().join("crash.log")).unwrap();
    assert!(said.contains("ELFIEE_TEST_CRASH_BEFORE_PUBACK"), "{said}");
    // The broker stored the event; the publisher's checkpoint did not move past it.
    let node = b.node_id();
    let before = b.status();
    assert!(before["to_publish"].as_u64().unwrap() >= 1, "{before}");
    let js = async_nats::jetstream::new(async_nats::connect(c._server.url()).await.unwrap());
    let stream = js.get_stream("ELF_crash").await.unwrap();
    let last = stream
        .get_last_raw_message_by_subject(&format!("elf.crash.ev.{node}"))
        .await
        .unwrap();
    // Sealed with the document key: opened with B's copy of it.
    let seed = std::fs::read_to_string(&b.key).unwrap();
    let seed = elfiee_model::EventHash::from_hex(seed.trim()).unwrap();
    let ring = elfiee_sync::node::device_keyring(
        &stream,
        "crash",
        &elfiee_sync::identity::NodeKey::from_seed(seed.0),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let last = ring.open_message("crash", &last.payload).unwrap();
    let sent: Vec<String> = last.events().iter().map(|e| e.value.to_string()).collect();
    assert!(sent.len() >= 5, "one envelope holds the batch: {sent:?}");
    for i in 0..5 {
        let marker = format!("written-before-the-crash-{i}");
        assert!(sent.iter().any(|v| v.contains(&marker)), "{sent:?}");
    }
    b.start(&[]);
    c.converge();
    for d in &c.devices {
        let log = d.events();
        for i in 0..5 {
            assert!(
                marker_in(
                    &log,
                    "core.create",
                    &format!("written-before-the-crash-{i}")
                ),
                "missing on {}",
                d.name
            );
        }
        let ids: BTreeSet<&str> = log
            .iter()
            .map(|e| e["event_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), log.len(), "{} stores an event twice", d.name);
    }
}

/// One event, one identity (issue 28): every device's `log --json` (through its serving
/// process, and as the file's owner once stopped) shows each event under the event id it was
/// committed with and the same origin (node, origin seq, origin hash); the local seq and hash
/// are marked local and match the device's own log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_device_shows_an_event_under_one_identity() {
    let server = NatsServer::start().unwrap();
    let mut c = cluster(server, "ident").await;
    // B knows its editor once A's grants arrived.
    c.converge();
    for (i, d) in c.devices.iter().enumerate().take(2) {
        let name = format!("from-{}", d.name);
        let made = ok_json(d.run(&["block", "create", "--type", "markdown", "--name", &name]));
        let id = made["block_id"].as_str().unwrap();
        ok_json(d.run(&["markdown", "write", id, "--text", &format!("text {i}")]));
    }
    c.converge();
    // Read each log through its serving process, then as its owner (stopped): the same
    // events, each with where it sits.
    let mut shown: Vec<BTreeMap<String, Value>> = Vec::new();
    for d in &mut c.devices {
        let served = d.events();
        d.stop();
        let log = d.events();
        assert_eq!(served, log, "{}: served and held logs differ", d.name);
        let mut by_id = BTreeMap::new();
        for e in log {
            let place = &e["sync"];
            assert_eq!(place["local_seq"], e["seq"], "{}: {e}", d.name);
            assert_eq!(place["local_hash"], e["hash"], "{}: {e}", d.name);
            assert!(
                place["origin_node"].as_str().is_some_and(|n| n.len() == 64),
                "{e}"
            );
            by_id.insert(e["event_id"].as_str().unwrap().to_owned(), e);
        }
        shown.push(by_id);
    }
    let ids: Vec<BTreeSet<&String>> = shown.iter().map(|m| m.keys().collect()).collect();
    assert!(
        ids.iter().all(|i| *i == ids[0]),
        "every device holds the same event ids"
    );
    let origin = |e: &Value| {
        let p = &e["sync"];
        (
            p["origin_node"].clone(),
            p["origin_seq"].clone(),
            p["origin_hash"].clone(),
            e["cmd_id"].clone(),
        )
    };
    let nodes: Vec<String> = c.devices.iter().map(Device::node_id).collect();
    let mut written_elsewhere = 0;
    for (id, e) in &shown[0] {
        for other in &shown[1..] {
            assert_eq!(origin(e), origin(&other[id]), "event {id}");
        }
        // On the device that committed it, the origin hash is its local hash.
        let node = e["sync"]["origin_node"].as_str().unwrap();
        for ((d, m), d_node) in c.devices.iter().zip(&shown).zip(&nodes) {
            if d_node == node {
                assert_eq!(m[id]["sync"]["origin_hash"], m[id]["hash"], "event {id}");
            } else if d.name == "a" {
                written_elsewhere += 1;
            }
        }
    }
    assert!(
        written_elsewhere >= 2,
        "B's events are on A under B's identity"
    );
}

/// A terminal command runs on the device that asked for it, once: the other devices receive
/// the request and its output as events and run nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_terminal_execute_runs_nothing_locally() {
    let server = NatsServer::start().unwrap();
    let c = cluster(server, "term").await;
    let a = &c.devices[0];
    let made = ok_json(a.run(&["terminal", "create", "--name", "sh"]));
    let term = made["block_id"].as_str().unwrap().to_owned();
    let ran = c.dir.path().join("ran.txt");
    let script = format!("echo ran >> {}", ran.display());
    let out = a.run(&["terminal", "run", &term, "--", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.converge();
    // Give the other devices' effects time to (wrongly) pick the request up.
    std::thread::sleep(Duration::from_millis(1500));
    c.converge();
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "ran\n",
        "the command ran once"
    );
    for d in &c.devices {
        let log = d.events();
        let outputs = log
            .iter()
            .filter(|e| {
                e["attribute"]
                    .as_str()
                    .is_some_and(|a| a.ends_with("/terminal.output"))
            })
            .count();
        assert_eq!(outputs, 1, "{} holds the one output, recorded on a", d.name);
    }
}

/// The bounded-memory run of `elfiee-bench --only sync-memory` on a small document: a fresh
/// `serve --sync` device receives 16 blocks of 512 KiB bodies (two chunks each) and holds
/// them whole, with a peak RSS far under the 256 MiB bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_device_receives_large_bodies_in_bounded_memory() {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(server.addr()).await.unwrap();
    let mut sender = Device {
        name: "a".into(),
        editor: "alice".into(),
        elf: dir.path().join("a.elf"),
        key: dir.path().join("a.key"),
        relay,
        serve: None,
        doc: "mem".into(),
        log: dir.path().join("a.serve.log"),
        acked: Vec::new(),
    };
    ok_json(elfiee(
        &sender.elf,
        &[
            "--json",
            "init",
            sender.elf.to_str().unwrap(),
            "--owner",
            "Alice",
        ],
    ));
    sender.start(&[]);
    let mut bodies = Vec::new();
    for i in 0..16 {
        let made = ok_json(sender.run(&[
            "block",
            "create",
            "--type",
            "markdown",
            "--name",
            &format!("b{i}"),
        ]));
        let id = made["block_id"].as_str().unwrap().to_owned();
        let line = format!("block {i}: {}\n", "y".repeat(50));
        let body = line.repeat(512 * 1024 / line.len());
        let file = dir.path().join(format!("body-{i}.md"));
        std::fs::write(&file, &body).unwrap();
        ok_json(sender.run(&["markdown", "write", &id, "--file", file.to_str().unwrap()]));
        bodies.push((id, body));
    }
    let mut receiver = Device {
        name: "r".into(),
        editor: String::new(),
        elf: dir.path().join("r.elf"),
        key: dir.path().join("r.key"),
        relay: Relay::start(server.addr()).await.unwrap(),
        serve: None,
        doc: "mem".into(),
        log: dir.path().join("r.serve.log"),
        acked: Vec::new(),
    };
    ok_json(elfiee(
        &receiver.elf,
        &[
            "--json",
            "sync",
            "join",
            receiver.elf.to_str().unwrap(),
            "--broker",
            &receiver.relay.url(),
            "--doc",
            "mem",
            "--key",
            receiver.key.to_str().unwrap(),
        ],
    ));
    let node = receiver.node_id();
    ok_json(sender.run(&["sync", "add-node", &node]));
    receiver.start(&[]);
    converge(&[&sender, &receiver], Duration::from_secs(60));
    let pid = receiver.serve.as_ref().unwrap().id();
    let hwm_kib: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(hwm_kib < 256 * 1024, "receiver peak RSS {hwm_kib} KiB");
    receiver.stop();
    for (id, body) in &bodies {
        let out = ok_json(elfiee(
            &receiver.elf,
            &["--json", "--as", "alice", "block", "show", id],
        ));
        assert_eq!(
            out["contents"]["markdown"].as_str(),
            Some(body.as_str()),
            "block {id}"
        );
    }
}

/// A device that joined and has not received the document yet says so, and what to do.
#[test]
fn a_joined_document_not_yet_received_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("b.elf");
    let key = dir.path().join("b.key");
    ok_json(elfiee(
        &elf,
        &[
            "--json",
            "sync",
            "join",
            elf.to_str().unwrap(),
            "--broker",
            "nats://127.0.0.1:1",
            "--doc",
            "team",
            "--key",
            key.to_str().unwrap(),
        ],
    ));
    let out = elfiee(&elf, &["block", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has not arrived from the broker yet"), "{err}");
    assert!(err.contains("elfiee serve --sync"), "{err}");
    // Status works offline and says the broker cannot be reached.
    let status = elfiee(&elf, &["--json", "sync", "status"]);
    let v: Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
    assert_eq!(
        v["online"],
        false,
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(v["doc"], "team");
}

#[test]
fn a_broker_address_that_is_not_nats_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("a.elf");
    let key = dir.path().join("a.key");
    let key = key.to_str().unwrap();
    ok_json(elfiee(
        &elf,
        &["--json", "init", elf.to_str().unwrap(), "--owner", "alice"],
    ));
    let before = ok_json(elfiee(&elf, &["--json", "log"]));
    for bad in ["", "http://127.0.0.1:4222", "nats://127.0.0.1:x", "nats://"] {
        let out = elfiee(&elf, &["serve", "--sync", bad, "--key", key]);
        assert_eq!(out.status.code(), Some(2), "serve --sync '{bad}'");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("nats://HOST:PORT"),
            "serve --sync '{bad}': {err}"
        );
        let joined = dir.path().join("joined.elf");
        let out = elfiee(
            &joined,
            &[
                "sync",
                "join",
                joined.to_str().unwrap(),
                "--broker",
                bad,
                "--doc",
                "team",
                "--key",
                key,
            ],
        );
        assert_eq!(out.status.code(), Some(2), "sync join --broker '{bad}'");
        assert!(
            !joined.exists(),
            "sync join --broker '{bad}' made a document"
        );
    }
    // Nothing was recorded in the document: no config, no events.
    assert_eq!(ok_json(elfiee(&elf, &["--json", "log"])), before);
    let status = elfiee(&elf, &["--json", "sync", "status"]);
    assert_ne!(
        status.status.code(),
        Some(0),
        "a document never synced has no sync status"
    );
}
