//! Devices syncing one document through a real `nats-server` (started per test on
//! 127.0.0.1): they converge, survive partitions and restarts, and refuse forged events.

mod common;

use std::time::Duration;

use common::{converge, three_devices, Device};
use elfiee_sync::testing::NatsServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_devices_share_one_document() {
    let server = NatsServer::start().unwrap();
    let (a, b, c) = three_devices(&server, "doc", 1).await;
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
        d.assert_verifies().await;
    }
}

/// The partition case: A and B write one block while cut off, and A revokes B's
/// grant. After the heal every device shows the same winner, lists the loser in the block's
/// `conflicts` (and keeps it in its log), and flags the same writes `unauthorized`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_heals_to_one_winner_the_same_conflicts_and_the_same_flags() {
    let server = NatsServer::start().unwrap();
    let (a, b, c) = three_devices(&server, "part", 11).await;
    a.create_block("x").await;
    converge(&[&a, &b, &c], Duration::from_secs(20)).await;

    a.relay.cut();
    b.relay.cut();
    let write = |text: &str| json!({"markdown": text});
    a.run("markdown.write", Some("x"), write("from A"))
        .await
        .unwrap();
    a.run(
        "core.revoke",
        None,
        json!({"editor_id": "bob", "cap_id": "markdown.write"}),
    )
    .await
    .expect("local commands never wait for the broker");
    for t in ["B one", "B two", "B three"] {
        b.run("markdown.write", Some("x"), write(t)).await.unwrap();
    }
    assert_eq!(
        b.node.state().unwrap().blocks["x"].contents["markdown"],
        "B three",
        "cut off, B sees its own writes"
    );
    assert!(!a.node.status().online || a.node.status().to_publish > 0);
    let b_writes: Vec<String> = b
        .file
        .events(1)
        .unwrap()
        .iter()
        .filter(|e| e.cap_id() == "markdown.write")
        .map(|e| e.cmd_id.to_string())
        .collect();
    assert_eq!(b_writes.len(), 3);

    a.relay.restore();
    b.relay.restore();
    let digest = converge(&[&a, &b, &c], Duration::from_secs(30)).await;
    let states: Vec<_> = [&a, &b, &c]
        .iter()
        .map(|d| d.node.state().unwrap())
        .collect();
    for s in &states {
        assert_eq!(s.digest(), digest);
    }
    // What readers of each file see is the merged state, the same everywhere.
    for d in [&a, &b, &c] {
        assert_eq!(d.file.state_digest(), digest, "{}", d.name);
        assert_eq!(
            d.file.block("x").unwrap().contents,
            states[0].blocks["x"].contents
        );
    }
    let x = &states[2].blocks["x"];
    let conflicts = x.metadata.custom["conflicts"].as_array().unwrap();
    assert!(!conflicts.is_empty(), "the concurrent writes are listed");
    let unauthorized = states[2].extensions["sync"]["unauthorized"]
        .as_array()
        .unwrap();
    assert!(
        !unauthorized.is_empty(),
        "B's writes after the revoke in merge order are flagged"
    );
    for s in &states {
        assert_eq!(s.extensions["sync"], states[0].extensions["sync"]);
        assert_eq!(s.blocks["x"].metadata.custom, x.metadata.custom);
    }
    // The loser stays in every log: each of B's writes is in C's history of the block.
    let c_cmds: Vec<String> = c
        .file
        .events(1)
        .unwrap()
        .iter()
        .filter(|e| e.entity == "x")
        .map(|e| e.cmd_id.to_string())
        .collect();
    for w in &b_writes {
        assert!(c_cmds.contains(w), "B's write {w} is in C's log");
    }
    // The text shown is the last winner's.
    let winner = conflicts.last().unwrap()["winner"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.node.event_ids().unwrap();
    let id = ids.iter().find(|i| i.to_hex() == winner).unwrap();
    let seq = c.node.local_seq(id).unwrap();
    let event = &c.file.events(seq).unwrap()[0];
    assert_eq!(event.value["contents"]["markdown"], x.contents["markdown"]);
}

/// Forged events (a bad signature; another member's key claiming B's origin; a node nobody
/// added; a changed body) are terminated and reported; the state is unchanged and valid
/// events still flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_events_are_rejected_and_valid_ones_still_flow() {
    use async_nats::jetstream::{self, message::PublishMessage};
    use elfiee_sync::identity::{NodeKey, Origin, SyncEvent};
    use elfiee_sync::node::SyncError;

    let server = NatsServer::start().unwrap();
    let (a, b, c) = three_devices(&server, "forge", 21).await;
    let before = converge(&[&a, &b, &c], Duration::from_secs(20)).await;

    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let template = b.file.events(1).unwrap().pop().unwrap();
    let forge = |key: &NodeKey, node: elfiee_sync::identity::NodeId, seq: u64| {
        let origin = Origin {
            node,
            seq,
            prev: None,
            deps: vec![],
        };
        SyncEvent::seal_parts(Some(key), origin, "core.create".into(), None, &template)
    };
    let b_node = b.node.node();
    let c_key = NodeKey::from_seed(c.seed);
    // C's key, B's origin.
    let mut claimed = forge(&c_key, c.node.node(), 1);
    claimed.origin.node = b_node;
    claimed.id = claimed.id_of();
    let sig = forge(&c_key, b_node, 1);
    claimed.sig = sig.sig;
    // B's origin with a signature of garbage.
    let mut garbage = forge(&c_key, b_node, 1);
    garbage.sig = [7; 64];
    // A node nobody added.
    let stranger = NodeKey::from_seed([99; 32]);
    let unknown = forge(&stranger, stranger.node(), 1);
    // A changed body under a valid signature.
    let mut changed = forge(&c_key, c.node.node(), 1);
    changed.value = json!({"changed": true});
    for (i, e) in [&claimed, &garbage, &unknown, &changed].iter().enumerate() {
        js.send_publish(
            format!("elf.forge.ev.{}", e.origin.node),
            PublishMessage::build()
                .payload(e.encode().into())
                .message_id(format!("forged:{i}")),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    // Every device that is not the claimed origin reports each one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while a.node.rejected().len() < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            a.node.rejected()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reasons: Vec<String> = a.node.rejected().iter().map(|e| e.to_string()).collect();
    assert!(
        matches!(&a.node.rejected()[0], SyncError::Rejected { origin, origin_seq: 1, .. } if *origin == b_node.to_hex())
    );
    assert!(
        reasons.iter().filter(|r| r.contains("signature")).count() >= 2,
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("not a member")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("does not hash")),
        "{reasons:?}"
    );
    assert_eq!(
        a.node.digest().unwrap(),
        before,
        "nothing forged was stored"
    );
    // Valid events still flow.
    b.create_block("after").await;
    converge(&[&a, &b, &c], Duration::from_secs(20)).await;
    assert!(a.node.state().unwrap().blocks.contains_key("after"));
}

/// With a 1 s duplicate window and the publisher's checkpoint rolled back, a restarted
/// publisher stores nothing twice (it reads the last message on its subject first), and
/// every device stores each event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_checkpoint_outside_the_duplicate_window_stores_nothing_twice() {
    use async_nats::jetstream;
    use elfiee_sync::node::publish_checkpoint;
    use futures_util::StreamExt;

    let server = NatsServer::start().unwrap();
    let mut a = Device::make(&server, "dup", 31, "alice", true, |mut c| {
        c.duplicate_window = Duration::from_secs(1);
        c
    })
    .await;
    let b = Device::join(&server, "dup", 32, "bob").await;
    // Only a device the owner added reads the document (it gets the key).
    common::admit(&a, &b).await;
    for i in 0..5 {
        a.run(
            "core.create",
            None,
            json!({"name": format!("b{i}"), "block_type": "markdown"}),
        )
        .await
        .unwrap();
    }
    converge(&[&a, &b], Duration::from_secs(20)).await;
    let published = a.node.status().published;
    assert!(published >= 6);

    a.file
        .set_checkpoint(&publish_checkpoint(&a.node.node()), 0)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.restart().await;
    a.run(
        "core.create",
        None,
        json!({"name": "after", "block_type": "markdown"}),
    )
    .await
    .unwrap();
    converge(&[&a, &b], Duration::from_secs(20)).await;
    assert_eq!(a.node.status().published, published + 1);

    // The stream holds each of A's events once.
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let stream = js.get_stream("ELF_dup").await.unwrap();
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: format!("elf.dup.ev.{}", a.node_hex()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut seqs = Vec::new();
    // A's envelopes are sealed: opened with A's copies of the document key.
    let ring = elfiee_sync::node::device_keyring(
        &stream,
        "dup",
        &elfiee_sync::identity::NodeKey::from_seed(a.seed),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    while let Ok(Some(Ok(m))) =
        tokio::time::timeout(Duration::from_millis(500), messages.next()).await
    {
        let message = ring.open_message("dup", &m.payload).unwrap();
        seqs.extend(message.events().iter().map(|e| e.origin.seq));
    }
    let unique: std::collections::BTreeSet<_> = seqs.iter().collect();
    assert_eq!(seqs.len(), unique.len(), "{seqs:?}");
    assert_eq!(seqs.len() as u64, published + 1);
    // Each device's log holds each event once.
    for d in [&a, &b] {
        assert_eq!(d.file.last_seq(), d.node.status().events, "{}", d.name);
    }
}

/// Bodies travel before the events that name them, in 256 KiB chunks: a fresh device gets
/// a multi-chunk body whole and checked against its hash, and an empty one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_travel_in_chunks_to_a_fresh_device() {
    let server = NatsServer::start().unwrap();
    let a = Device::genesis(&server, "bodies", 41).await;
    a.create_block("big").await;
    a.create_block("small").await;
    // 600 KiB: three chunks; line breaks and multi-byte characters across chunk borders.
    let big: String = (0..600 * 1024 / 8)
        .map(|i| if i % 7 == 0 { "é line\n" } else { "abcdefg\n" })
        .collect();
    a.run("markdown.write", Some("big"), json!({"markdown": big}))
        .await
        .unwrap();
    a.run("markdown.write", Some("small"), json!({"markdown": ""}))
        .await
        .unwrap();
    let b = Device::join(&server, "bodies", 42, "bob").await;
    common::admit(&a, &b).await;
    converge(&[&a, &b], Duration::from_secs(30)).await;
    let state = b.node.state().unwrap();
    let got = b.file.resolve(&state.blocks["big"]).unwrap();
    assert_eq!(got.contents["markdown"].as_str().unwrap(), big);
    let small = b.file.resolve(&state.blocks["small"]).unwrap();
    assert_eq!(small.contents["markdown"], "");
    b.assert_verifies().await;
}

/// A broker that goes away while the device sends nothing shows in its status (not only once
/// a publish times out), and coming back shows too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_device_shows_the_broker_going_away_and_coming_back() {
    let server = NatsServer::start().unwrap();
    let a = Device::genesis(&server, "idle", 21).await;
    converge(&[&a], Duration::from_secs(20)).await;
    status_until(&a, "online", |s| s.online, Duration::from_secs(20)).await;
    a.relay.cut();
    // Nothing is committed: only ingest's own contact with the broker can notice.
    status_until(&a, "offline", |s| !s.online, Duration::from_secs(5)).await;
    let status = a.node.status();
    assert!(status.last_error.is_some(), "{status:?}");
    a.relay.restore();
    status_until(&a, "online again", |s| s.online, Duration::from_secs(30)).await;
    a.create_block("after").await;
    status_until(
        &a,
        "published",
        |s| s.to_publish == 0,
        Duration::from_secs(20),
    )
    .await;
}

/// Waits until `device`'s sync status passes `test` (`what` names it in the failure).
async fn status_until(
    device: &Device,
    what: &str,
    test: impl Fn(&elfiee_sync::node::SyncStatus) -> bool,
    within: Duration,
) {
    let deadline = tokio::time::Instant::now() + within;
    while !test(&device.node.status()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {what} within {within:?}: {:?}",
            device.node.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Another device's events are stored without a flush each (they show before the disk has
/// them), and once ingest has caught up they are made durable with no local commit on the
/// receiver: a receiver that only reads ends with its whole log synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_makes_what_it_ingested_durable_once_caught_up() {
    let server = NatsServer::start().unwrap();
    let (a, b, _c) = three_devices(&server, "durable", 7).await;
    converge(&[&a, &b], Duration::from_secs(20)).await;
    for i in 0..40 {
        a.create_block(&format!("n{i}")).await;
    }
    converge(&[&a, &b], Duration::from_secs(20)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let d = b.file.durability().unwrap();
        if d.synced_seq >= b.file.last_seq() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "B's log up to {} never became durable: {d:?}",
            b.file.last_seq()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
