//! `serve --sync … --replicas 3` on a three-server `nats-server` cluster on 127.0.0.1 (issue
//! 40): the document's stream is made with three copies, and `sync status` — as JSON and as
//! text — names them and the server that leads them. (What a server's crash does to such a
//! stream: `sync/tests/cluster.rs`.)

use std::time::{Duration, Instant};

use elfiee_sync::testing::NatsServer;
use serde_json::Value;

mod common;

#[test]
fn serve_with_replicas_makes_a_replicated_stream_and_status_names_its_leader() {
    let servers = NatsServer::cluster(3).unwrap();
    let url = servers
        .iter()
        .map(NatsServer::url)
        .collect::<Vec<_>>()
        .join(",");
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.elf");
    common::elfiee_json(&a, &["init", a.to_str().unwrap(), "--owner", "Alice"]);
    let log = dir.path().join("a.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["serve", "--sync", &url, "--doc", "clu", "--replicas", "3"])
        .env("ELFIEE_ELF", &a)
        .env("ELFIEE_NODE_KEY", dir.path().join("a.key"))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Served once its status file names it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read(a.join("sync-status.json"))
        .ok()
        .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
        .is_none_or(|v| v["served_by"].as_u64() != Some(child.id() as u64))
    {
        assert!(Instant::now() < deadline, "not served");
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let s = common::elfiee_json(&a, &["sync", "status"]);
        if s["replicas"] == 3 && s["leader"].is_string() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "no replicated stream: {s}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let leader = status["leader"].as_str().unwrap();
    assert!(["n0", "n1", "n2"].contains(&leader), "{status}");
    assert_eq!(status["broker"], Value::String(url.clone()));
    let text = common::run_elfiee(&a, &["sync", "status"], &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("stream:    3 replicas, leader {leader}")),
        "{text}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
