//! Devices syncing one document through a real `nats-server` (started per test on
//! 127.0.0.1): they converge, survive partitions and restarts, and refuse forged events.

mod common;

use std::time::Duration;

use common::{admit, converge, Device};
use elfiee_sync::testing::NatsServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_devices_share_one_document() {
    let server = NatsServer::start().unwrap();
    let a = Device::genesis(&server, "doc", 1).await;
    let b = Device::join(&server, "doc", 2, "bob").await;
    let c = Device::join(&server, "doc", 3, "carol").await;
    admit(&a, &b).await;
    admit(&a, &c).await;
    converge(&[&a, &b, &c], Duration::from_secs(20)).await;
    let made = b
        .run(
            "core.create",
            None,
            json!({"name": "from bob", "block_type": "markdown", "block_id": "n1"}),
        )
        .await
        .unwrap();
    assert_eq!(made.len(), 1);
    let digest = converge(&[&a, &b, &c], Duration::from_secs(20)).await;
    c.run(
        "markdown.write",
        Some("n1"),
        json!({"markdown": "carol was here"}),
    )
    .await
    .unwrap();
    let digest2 = converge(&[&a, &b, &c], Duration::from_secs(20)).await;
    assert_ne!(digest, digest2);
    let state = a.node.state().unwrap();
    assert_eq!(state.blocks["n1"].contents["markdown"], "carol was here");
    for d in [&a, &b, &c] {
        let report = d.file.verify().await.unwrap();
        assert!(report.ok, "{report:?}");
    }
}
