//! A replicated stream (issue 40): three `nats-server`s on 127.0.0.1 in one JetStream
//! cluster; the document's stream is created with three replicas (`SyncConfig::replicas`,
//! `serve --sync … --replicas 3`). While A commits from 64 submitters, the server leading the
//! stream is killed with SIGKILL and started again: B and C end with A's digest, every event
//! A's publisher saw acknowledged is on them, and the status names the stream's leader
//! before and after.

mod common;

use std::time::Duration;

use common::{admit, converge, Device};
use elfiee_sync::testing::NatsServer;
use serde_json::json;

/// Waits until `d`'s status names a stream leader with `replicas` copies; the leader.
async fn leader(d: &Device, replicas: usize, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let s = d.node.status();
        if let (Some(r), Some(l)) = (s.replicas, &s.leader) {
            if r == replicas {
                return l.clone();
            }
        }
        if tokio::time::Instant::now() > deadline {
            panic!("no stream leader with {replicas} replicas in the status: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_of_a_three_replica_stream_loses_no_acknowledged_write() {
    let mut servers = NatsServer::cluster(3).unwrap();
    let url = servers
        .iter()
        .map(NatsServer::url)
        .collect::<Vec<_>>()
        .join(",");
    let tune = |mut c: elfiee_sync::node::SyncConfig| {
        c.url = url.clone();
        c.replicas = 3;
        c.timeout = Duration::from_secs(5);
        c
    };
    let a = Device::make(&servers[0], "clu", 60, "alice", true, tune).await;
    let b = Device::make(&servers[1], "clu", 61, "bob", false, tune).await;
    let c = Device::make(&servers[2], "clu", 62, "carol", false, tune).await;
    admit(&a, &b).await;
    admit(&a, &c).await;
    a.create_block("doc").await;
    converge(&[&a, &b, &c], Duration::from_secs(60)).await;
    let before = leader(&a, 3, Duration::from_secs(30)).await;
    assert_eq!(leader(&b, 3, Duration::from_secs(30)).await, before);
    eprintln!("the stream's leader before: {before}");

    // 64 submitters on A; the leader is killed while they commit, and comes back.
    const EACH: usize = 40;
    let mut tasks = Vec::new();
    for t in 0..64 {
        let file = a.file.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                let cmd = elfiee_model::Command::new(
                    "alice",
                    "markdown.write",
                    Some("doc"),
                    json!({"markdown": format!("submitter {t} write {i}")}),
                );
                file.submit(cmd).await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let killed: usize = before.trim_start_matches('n').parse().unwrap();
    assert!(
        tasks.iter().any(|t| !t.is_finished()),
        "the server goes down while A commits"
    );
    servers[killed].kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    servers[killed].restart().unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let digest = converge(&[&a, &b, &c], Duration::from_secs(120)).await;
    let sa = a.node.status();
    assert_eq!(sa.published, sa.own_events, "{sa:?}");
    for d in [&b, &c] {
        let s = d.node.status();
        assert_eq!(s.digest, digest);
        assert_eq!(s.events, sa.events, "{}: {s:?}", d.name);
    }
    // Every write committed on A (64 × 40, each acknowledged by the broker) is on B and C.
    assert!(sa.own_events >= 64 * EACH as u64, "{sa:?}");
    let after = leader(&a, 3, Duration::from_secs(30)).await;
    eprintln!("the stream's leader after n{killed} was killed and restarted: {after}");
    for d in [&a, &b, &c] {
        d.assert_verifies().await;
    }
}
