//! Devices for the broker tests: each is an engine with its own `.elf` in a temporary folder,
//! synced through its own relay to one `nats-server` (so a test can cut it off).

#![allow(dead_code)]

use std::time::Duration;

use elfiee_capabilities::Registry;
use elfiee_engine::{Engine, EngineConfig, FileHandle};
use elfiee_model::Command;
use elfiee_sync::node::{SyncConfig, SyncNode};
use elfiee_sync::testing::{NatsServer, Relay};
use serde_json::{json, Value};

pub fn registry() -> Registry {
    let mut r = Registry::builtin();
    elfiee_sync::membership::register(&mut r);
    r
}

pub struct Device {
    pub name: String,
    pub seed: [u8; 32],
    pub editor: String,
    pub engine: Engine,
    pub file: FileHandle,
    pub node: SyncNode,
    pub relay: Relay,
    pub path: std::path::PathBuf,
    pub config: SyncConfig,
    _dir: tempfile::TempDir,
}

pub fn config(url: &str, doc: &str, seed: [u8; 32]) -> SyncConfig {
    let mut c = SyncConfig::new(url, doc, seed);
    c.backoff = Duration::from_millis(50);
    c.max_backoff = Duration::from_millis(500);
    c.timeout = Duration::from_secs(2);
    c
}

impl Device {
    /// The document's first device: `alice` owns it.
    pub async fn genesis(server: &NatsServer, doc: &str, seed: u8) -> Device {
        Device::make(server, doc, seed, "alice", true, |c| c).await
    }

    /// A device that joins with an empty file; its user is `editor`.
    pub async fn join(server: &NatsServer, doc: &str, seed: u8, editor: &str) -> Device {
        Device::make(server, doc, seed, editor, false, |c| c).await
    }

    pub async fn make(
        server: &NatsServer,
        doc: &str,
        seed: u8,
        editor: &str,
        first: bool,
        tune: impl FnOnce(SyncConfig) -> SyncConfig,
    ) -> Device {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{editor}.elf"));
        let engine = Engine::new(EngineConfig {
            registry: registry(),
            ..Default::default()
        });
        let file = if first {
            engine.init(&path, "Alice").await.unwrap()
        } else {
            engine.create_empty(&path).await.unwrap()
        };
        let relay = Relay::start(server.addr()).await.unwrap();
        let seed = [seed; 32];
        let config = tune(config(&relay.url(), doc, seed));
        let node = SyncNode::start(file.clone(), registry(), config.clone())
            .await
            .unwrap();
        Device {
            name: editor.to_owned(),
            seed,
            editor: editor.to_owned(),
            engine,
            file,
            node,
            relay,
            path,
            config,
            _dir: dir,
        }
    }

    /// Closes the file (its sync children stop with it) and opens it again with sync on.
    pub async fn restart(&mut self) {
        self.file.close().await;
        self.engine = Engine::new(EngineConfig {
            registry: registry(),
            ..Default::default()
        });
        self.file = self.engine.open(&self.path).await.unwrap();
        self.node = SyncNode::start(self.file.clone(), registry(), self.config.clone())
            .await
            .unwrap();
    }

    pub async fn run(
        &self,
        cap: &str,
        block: Option<&str>,
        payload: Value,
    ) -> Result<Vec<elfiee_model::Event>, String> {
        self.file
            .submit(Command::new(&self.editor, cap, block, payload))
            .await
            .map_err(|e| e.to_string())
    }

    /// This device's editor writes `text` into markdown block `block`.
    pub async fn write(&self, block: &str, text: &str) {
        self.run("markdown.write", Some(block), json!({ "markdown": text }))
            .await
            .unwrap();
    }

    /// This device's editor creates markdown block `id` (named `id` too).
    pub async fn create_block(&self, id: &str) -> Vec<elfiee_model::Event> {
        self.run(
            "core.create",
            None,
            json!({"name": id, "block_type": "markdown", "block_id": id}),
        )
        .await
        .unwrap()
    }

    pub fn node_hex(&self) -> String {
        self.node.node().to_hex()
    }

    /// Checks the device's document verifies.
    pub async fn assert_verifies(&self) {
        let report = self.file.verify().await.unwrap();
        assert!(report.ok, "{report:?}");
    }
}

/// The owner (on `owner`) adds `device`'s node and makes its editor, with rights to create
/// and write blocks everywhere.
pub async fn admit(owner: &Device, device: &Device) {
    let hex = device.node_hex();
    owner
        .run(
            "node.add",
            None,
            json!({"node_id": hex, "public_key": hex, "name": device.name}),
        )
        .await
        .unwrap();
    owner
        .run(
            "editor.create",
            None,
            json!({"name": device.editor, "editor_id": device.editor}),
        )
        .await
        .unwrap();
    for cap in ["core.create", "markdown.write", "core.link", "core.delete"] {
        owner
            .run(
                "core.grant",
                None,
                json!({"editor_id": device.editor, "cap_id": cap}),
            )
            .await
            .unwrap();
    }
}

/// Waits until every device holds the same merged state with nothing left to publish or
/// ingest; returns the digest.
pub async fn converge(devices: &[&Device], within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let digests: Vec<String> = devices.iter().map(|d| d.node.digest().unwrap()).collect();
        let statuses: Vec<_> = devices.iter().map(|d| d.node.status()).collect();
        let counts: Vec<u64> = statuses.iter().map(|s| s.events).collect();
        let settled = statuses.iter().all(|s| s.to_publish == 0 || !s.member);
        if digests.iter().all(|d| *d == digests[0])
            && counts.iter().all(|c| *c == counts[0])
            && settled
        {
            return digests[0].clone();
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "no convergence within {within:?}:\n{}",
                statuses
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Alice's document `doc` on its first device and on the devices of bob and carol, both
/// admitted (node seeds `seed`, `seed + 1`, `seed + 2`).
pub async fn three_devices(server: &NatsServer, doc: &str, seed: u8) -> (Device, Device, Device) {
    let a = Device::genesis(server, doc, seed).await;
    let b = Device::join(server, doc, seed + 1, "bob").await;
    let c = Device::join(server, doc, seed + 2, "carol").await;
    admit(&a, &b).await;
    admit(&a, &c).await;
    (a, b, c)
}

/// Every ordered pair of distinct indexes below `n`: who delivers to whom when a partition
/// heals.
pub fn ordered_pairs(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |a| (0..n).filter(move |b| *b != a).map(move |b| (a, b)))
}
