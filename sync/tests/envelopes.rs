//! The wire formats as a receiver meets them (issue 28): issue 16's single events are still
//! read, an envelope with one forged event is refused whole while valid ones flow, and
//! envelopes whose batches overlap (a publisher that crashed and cut its batches anew) store
//! each event once.
//!
//! The sender is a member node `D` that no device runs: the test seals its events itself.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use common::{converge, Device};
use elfiee_model::Event;
use elfiee_sync::envelope::Envelope;
use elfiee_sync::identity::{EventId, NodeKey, Origin, SyncEvent};
use elfiee_sync::testing::NatsServer;
use serde_json::json;

/// D's events 1..=n: alice creates block `d<k>` (alice owns the document, so CBAC at merge
/// lets them in), each after the one before, the first after `seen` (A's head then: D's
/// events merge after the document's start).
fn d_chain(key: &NodeKey, template: &Event, n: u64, seen: EventId) -> Vec<SyncEvent> {
    let mut prev: Option<EventId> = None;
    (1..=n)
        .map(|seq| {
            let mut e = template.clone();
            e.event_id = uuid::Uuid::from_u128(0xd000 + seq as u128);
            e.cmd_id = uuid::Uuid::from_u128(0xdc00 + seq as u128);
            e.entity = format!("d{seq}");
            e.value["name"] = json!(format!("from D {seq}"));
            e.value["block_id"] = json!(format!("d{seq}"));
            let origin = Origin {
                node: key.node(),
                seq,
                prev,
                deps: vec![seen],
            };
            // Signed one by one: what issue 16's format carries.
            let s = SyncEvent::seal_parts(Some(key), origin, "core.create".into(), None, &e);
            prev = Some(s.id);
            s
        })
        .collect()
}

async fn publish(js: &jetstream::Context, subject: &str, id: &str, payload: Vec<u8>) {
    js.send_publish(
        subject.to_owned(),
        PublishMessage::build()
            .payload(payload.into())
            .message_id(id),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

/// Waits until `check` holds on every device.
async fn until(devices: &[&Device], what: &str, check: impl Fn(&Device) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !devices.iter().all(|d| check(d)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {what}: {:?}",
            devices.iter().map(|d| d.node.status()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn has_block(d: &Device, id: &str) -> bool {
    d.node.state().unwrap().blocks.contains_key(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_singles_are_read_a_forged_envelope_is_refused_whole_and_overlapping_ones_store_each_event_once(
) {
    let server = NatsServer::start().unwrap();
    let a = Device::genesis(&server, "wire", 51).await;
    let b = Device::join(&server, "wire", 52, "bob").await;
    common::admit(&a, &b).await;
    let d_key = NodeKey::from_seed([77; 32]);
    let d_hex = d_key.node().to_hex();
    a.run(
        "node.add",
        None,
        json!({"node_id": d_hex, "public_key": d_hex, "name": "d"}),
    )
    .await
    .unwrap();
    let template = a
        .run(
            "core.create",
            None,
            json!({"name": "first", "block_type": "markdown"}),
        )
        .await
        .unwrap()
        .remove(0);
    converge(&[&a, &b], Duration::from_secs(20)).await;
    let ids = a.node.event_ids().unwrap();
    let head = *ids.iter().max_by_key(|id| a.node.local_seq(id)).unwrap();
    let chain = d_chain(&d_key, &template, 7, head);
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let subject = format!("elf.wire.ev.{d_hex}");

    // Issue 16's format: one event a message, each with its own signature.
    for e in &chain[..2] {
        publish(
            &js,
            &subject,
            &format!("{d_hex}:{}", e.origin.seq),
            e.encode(),
        )
        .await;
    }
    until(&[&a, &b], "the single events stored", |d| {
        has_block(d, "d1") && has_block(d, "d2")
    })
    .await;

    // An envelope of D's events 3..=5 with the middle one changed after sealing.
    let mut forged = Envelope::seal(&d_key, chain[2..5].to_vec());
    forged.events[1].value["name"] = json!("forged");
    publish(&js, &subject, "forged", forged.encode()).await;
    until(&[&a, &b], "the forged envelope reported", |d| {
        d.node
            .rejected()
            .iter()
            .any(|r| r.to_string().contains(&d_hex))
    })
    .await;
    for d in [&a, &b] {
        let blocks = d.node.state().unwrap().blocks;
        assert!(
            !["d3", "d4", "d5"].iter().any(|b| blocks.contains_key(b)),
            "{}: nothing of the forged envelope is stored",
            d.name
        );
    }

    // The same events, unaltered: stored.
    let valid = Envelope::seal(&d_key, chain[2..5].to_vec());
    publish(&js, &subject, &valid.message_id(), valid.encode()).await;
    until(&[&a, &b], "the valid envelope stored", |d| {
        has_block(d, "d5")
    })
    .await;

    // Batches cut anew after a crash: 4..=7 overlaps what arrived; 6 and 7 are new.
    let overlapping = Envelope::seal(&d_key, chain[3..7].to_vec());
    publish(
        &js,
        &subject,
        &overlapping.message_id(),
        overlapping.encode(),
    )
    .await;
    until(&[&a, &b], "the overlapping envelope stored", |d| {
        has_block(d, "d7")
    })
    .await;

    // Valid writes of the devices still flow; every device stores each event once.
    b.create_block("after").await;
    converge(&[&a, &b], Duration::from_secs(20)).await;
    for d in [&a, &b] {
        assert!(has_block(d, "after"));
        let log = d.file.events(1).unwrap();
        assert_eq!(log.len() as u64, d.node.status().events, "{}", d.name);
        let ids: BTreeSet<_> = log.iter().map(|e| e.event_id).collect();
        assert_eq!(ids.len(), log.len(), "{} stores an event twice", d.name);
        // D's events show under the event ids they were committed with.
        for k in 1..=7u128 {
            assert!(
                ids.contains(&uuid::Uuid::from_u128(0xd000 + k)),
                "{}",
                d.name
            );
        }
        d.assert_verifies().await;
    }
}

/// Alice creates markdown block `id` on `file`; its event.
async fn create_block(file: &elfiee_engine::FileHandle, id: &str) -> Event {
    file.submit(elfiee_model::Command::new(
        "alice",
        "core.create",
        None,
        json!({"name": id, "block_type": "markdown", "block_id": id}),
    ))
    .await
    .unwrap()
    .remove(0)
}

/// A document synced by a build before issue 28 keeps its events' ids: the events it had
/// when this build first synced it are sealed as that build sealed them (no event id or hash
/// in the id), so the devices that hold them under those ids still accept what follows;
/// what is written from then on travels under the event id it was committed with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_synced_by_an_older_build_keeps_its_event_ids() {
    use elfiee_engine::{Engine, EngineConfig};
    use elfiee_sync::node::SyncNode;

    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = || {
        Engine::new(EngineConfig {
            registry: common::registry(),
            ..Default::default()
        })
    };
    let a_path = dir.path().join("a.elf");
    let a_file = engine().init(&a_path, "Alice").await.unwrap();
    let early = create_block(&a_file, "early").await;
    // What an older build leaves: a synced file without the identity record, its events
    // sealed the old way. The record says so from here on.
    let from = a_file.last_seq() + 1;
    a_file
        .foreign_log()
        .unwrap()
        .append(
            Vec::new(),
            vec![(b"sync.identity_from".to_vec(), from.to_be_bytes().to_vec())],
        )
        .await
        .unwrap();
    let a_config = common::config(&server.url(), "old", [61; 32]);
    let a = SyncNode::start(a_file.clone(), common::registry(), a_config.clone())
        .await
        .unwrap();
    let b_file = engine()
        .create_empty(dir.path().join("b.elf"))
        .await
        .unwrap();
    let b = SyncNode::start(
        b_file.clone(),
        common::registry(),
        common::config(&server.url(), "old", [62; 32]),
    )
    .await
    .unwrap();
    // B reads the document once the owner added it (it gets the key).
    let b_node = b.node().to_hex();
    a_file
        .submit(elfiee_model::Command::new(
            "alice",
            "node.add",
            None,
            serde_json::json!({"node_id": b_node, "public_key": b_node}),
        ))
        .await
        .unwrap();
    let same = |a: &SyncNode, b: &SyncNode| {
        a.digest().unwrap() == b.digest().unwrap()
            && a.status().events == b.status().events
            && a.status().to_publish == 0
    };
    let wait = |a: SyncNode, b: SyncNode| async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !same(&a, &b) {
            assert!(tokio::time::Instant::now() < deadline, "{:?}", b.status());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    wait(a.clone(), b.clone()).await;
    let on_b = |seq_on_a: &elfiee_model::Event| {
        b_file
            .events(1)
            .unwrap()
            .into_iter()
            .find(|e| e.cmd_id == seq_on_a.cmd_id)
            .unwrap()
    };
    // The early event: under the first 16 bytes of its old-style id, not A's event id.
    assert_ne!(on_b(&early).event_id, early.event_id);
    // A new event: under A's event id.
    let new = create_block(&a_file, "new").await;
    wait(a.clone(), b.clone()).await;
    assert_eq!(on_b(&new).event_id, new.event_id);
    // A restarted A seals its events again the same way: B takes what follows.
    a_file.close().await;
    let a_file = engine().open(&a_path).await.unwrap();
    let a = SyncNode::start(a_file.clone(), common::registry(), a_config)
        .await
        .unwrap();
    create_block(&a_file, "later").await;
    wait(a.clone(), b.clone()).await;
    assert!(b.state().unwrap().blocks.contains_key("later"));
    assert!(b.rejected().is_empty(), "{:?}", b.rejected());
    a_file.close().await;
    b_file.close().await;
}

/// What the broker acknowledged is let go: after 500 writes have reached another device, the
/// writing device holds one sealed event for its publisher, not 500; a restart seals its
/// history again and lets it go the same way, and the devices still converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_lets_go_of_what_the_broker_acknowledged() {
    let server = NatsServer::start().unwrap();
    let mut a = Device::genesis(&server, "released", 91).await;
    let b = Device::join(&server, "released", 92, "bob").await;
    common::admit(&a, &b).await;
    a.create_block("w").await;
    for n in 0..500 {
        a.write("w", &format!("write {n}")).await;
    }
    converge(&[&a, &b], Duration::from_secs(60)).await;
    assert!(a.node.status().own_events > 500);
    assert_eq!(a.node.own_held(), 1, "acknowledged events are let go");
    a.restart().await;
    a.write("w", "after").await;
    converge(&[&a, &b], Duration::from_secs(60)).await;
    assert_eq!(a.node.own_held(), 1, "and again after a restart");
}
