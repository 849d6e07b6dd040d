//! The broker cannot read the document (issue 40, decision 0047): what a raw JetStream
//! consumer finds on the document's stream holds no plaintext of what was written; a removed
//! device's later writes are refused everywhere and it cannot read what follows its removal;
//! a device that joins later reads the whole history; a stream of issue 28's plain format
//! is still read.

mod common;

use std::time::Duration;

use async_nats::jetstream;
use common::{admit, converge, Device};
use elfiee_sync::identity::NodeKey;
use elfiee_sync::testing::NatsServer;
use futures_util::StreamExt;
use serde_json::json;

/// Every message on `doc`'s stream: subject, headers and payload, as one byte string each.
async fn raw_stream(server: &NatsServer, doc: &str) -> Vec<Vec<u8>> {
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let stream = js.get_stream(format!("ELF_{doc}")).await.unwrap();
    let c = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: format!("elf.{doc}.>"),
            ..Default::default()
        })
        .await
        .unwrap();
    let total = stream.cached_info().state.messages as usize;
    let mut messages = c.messages().await.unwrap();
    let mut out = Vec::new();
    while out.len() < total {
        let m = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .expect("the stream's messages arrive")
            .unwrap()
            .unwrap();
        let mut bytes = m.subject.as_bytes().to_vec();
        for (k, vs) in m.headers.iter().flat_map(|h| h.iter()) {
            bytes.extend_from_slice(k.to_string().as_bytes());
            for v in vs {
                bytes.extend_from_slice(v.as_str().as_bytes());
            }
        }
        bytes.extend_from_slice(&m.payload);
        out.push(bytes);
    }
    assert!(total > 0);
    out
}

fn holds(messages: &[Vec<u8>], marker: &str) -> bool {
    messages
        .iter()
        .any(|m| m.windows(marker.len()).any(|w| w == marker.as_bytes()))
}

/// The text of block `id` on `device` (its body read from the content store when it has one).
fn text(device: &Device, id: &str) -> Option<String> {
    let state = device.node.state().unwrap();
    let block = state.blocks.get(id)?;
    let resolved = device.file.resolve(block).ok()?;
    resolved.contents["markdown"].as_str().map(str::to_owned)
}

async fn until(what: &str, within: Duration, mut test: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !test() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_holds_no_plaintext_of_a_text_a_body_or_a_block_name() {
    let server = NatsServer::start().unwrap();
    let a = Device::genesis(&server, "secret", 71).await;
    let b = Device::join(&server, "secret", 72, "bob").await;
    admit(&a, &b).await;
    a.run(
        "core.create",
        None,
        json!({"name": "NAME-MARKER-7f3a", "block_type": "markdown", "block_id": "n1"}),
    )
    .await
    .unwrap();
    a.run(
        "markdown.write",
        Some("n1"),
        json!({"markdown": "TEXT-MARKER-91c2"}),
    )
    .await
    .unwrap();
    a.create_block("big").await;
    // Over the inline limit: a body in the content store, travelling as chunks.
    let body = format!("BODY-MARKER-55e0 {}", "lorem ipsum ".repeat(2000));
    a.run("markdown.write", Some("big"), json!({"markdown": body}))
        .await
        .unwrap();
    converge(&[&a, &b], Duration::from_secs(30)).await;
    // The member device reads all of it (so the markers did travel) …
    assert_eq!(text(&b, "n1").as_deref(), Some("TEXT-MARKER-91c2"));
    assert_eq!(text(&b, "big").as_deref(), Some(body.as_str()));
    assert_eq!(
        b.node.state().unwrap().blocks["n1"].name,
        "NAME-MARKER-7f3a"
    );
    assert_eq!(a.node.status().key_generation, Some(0));
    // … and the broker holds none of it in the clear.
    let raw = raw_stream(&server, "secret").await;
    for marker in [
        "NAME-MARKER-7f3a",
        "TEXT-MARKER-91c2",
        "BODY-MARKER-55e0",
        "lorem ipsum",
    ] {
        assert!(
            !holds(&raw, marker),
            "{marker} is on the broker in the clear"
        );
    }
    // Not even the body's hash (what the content store names it by) names its subject.
    let hex = blake3::hash(body.as_bytes()).to_hex().to_string();
    assert!(!holds(&raw, &hex), "the body's hash is on the broker");
}

/// After `node.remove`, the removed device's later writes are refused on every other device
/// (and counted in their status), it cannot read what is written after its removal, what it
/// wrote before stays, and a device that joins after all that reads the whole history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_device_is_refused_and_shut_out_and_a_later_device_reads_everything() {
    let server = NatsServer::start().unwrap();
    let a = Device::genesis(&server, "rm", 81).await;
    let b = Device::join(&server, "rm", 82, "bob").await;
    let c = Device::join(&server, "rm", 83, "carol").await;
    admit(&a, &b).await;
    admit(&a, &c).await;
    converge(&[&a, &b, &c], Duration::from_secs(30)).await;
    a.create_block("early").await;
    b.create_block("by-bob").await;
    b.run(
        "markdown.write",
        Some("by-bob"),
        json!({"markdown": "BOB-BEFORE"}),
    )
    .await
    .unwrap();
    converge(&[&a, &b, &c], Duration::from_secs(30)).await;

    let upto = b.node.status().own_events;
    a.run(
        "node.remove",
        None,
        json!({"node_id": b.node_hex(), "upto": upto}),
    )
    .await
    .unwrap();
    // A writes after the removal; B (not told: it cannot read the removal) writes too.
    a.create_block("after").await;
    a.run(
        "markdown.write",
        Some("after"),
        json!({"markdown": "AFTER-REMOVAL-MARKER"}),
    )
    .await
    .unwrap();
    b.run(
        "markdown.write",
        Some("by-bob"),
        json!({"markdown": "BOB-LATE"}),
    )
    .await
    .unwrap();
    converge(&[&a, &c], Duration::from_secs(30)).await;
    let bob = b.node_hex();
    until(
        "A and C refuse B's late write",
        Duration::from_secs(20),
        || {
            [&a, &c]
                .iter()
                .all(|d| d.node.status().refused_from_removed.get(&bob) >= Some(&1))
        },
    )
    .await;
    for d in [&a, &c] {
        assert_eq!(
            text(d, "by-bob").as_deref(),
            Some("BOB-BEFORE"),
            "{}",
            d.name
        );
        assert_eq!(
            text(d, "after").as_deref(),
            Some("AFTER-REMOVAL-MARKER"),
            "{}",
            d.name
        );
        assert_eq!(d.node.status().key_generation, Some(1), "{}", d.name);
    }
    assert_eq!(a.node.digest().unwrap(), c.node.digest().unwrap());

    // B never reads what followed its removal, and holds no key of the new generation.
    until(
        "B says it has no key of generation 1",
        Duration::from_secs(20),
        || {
            b.node
                .status()
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("no copy of the document key of generation 1"))
        },
    )
    .await;
    assert!(text(&b, "after").is_none());
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let stream = js.get_stream("ELF_rm").await.unwrap();
    let ring = elfiee_sync::node::device_keyring(
        &stream,
        "rm",
        &NodeKey::from_seed(b.seed),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert!(!ring.is_empty());
    assert!(ring.keys().iter().all(|k| k.gen == 0), "{ring:?}");
    assert!(!holds(
        &raw_stream(&server, "rm").await,
        "AFTER-REMOVAL-MARKER"
    ));

    // A device that joins now reads the whole history: both generations.
    let d = Device::join(&server, "rm", 84, "dave").await;
    admit(&a, &d).await;
    converge(&[&a, &c, &d], Duration::from_secs(30)).await;
    assert!(d.node.state().unwrap().blocks.contains_key("early"));
    assert_eq!(text(&d, "by-bob").as_deref(), Some("BOB-BEFORE"));
    assert_eq!(text(&d, "after").as_deref(), Some("AFTER-REMOVAL-MARKER"));
    d.create_block("from-dave").await;
    converge(&[&a, &c, &d], Duration::from_secs(30)).await;
    assert!(c.node.state().unwrap().blocks.contains_key("from-dave"));
}

/// A stream written in issue 28's plain format (written here by the old code path) is read
/// by a device of this build; the document goes on sealed from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_issue_28s_plain_format_is_read() {
    let server = NatsServer::start().unwrap();
    let mut a = Device::make(&server, "old28", 91, "alice", true, |mut c| {
        c.legacy_format = true;
        c
    })
    .await;
    a.create_block("old").await;
    a.run(
        "markdown.write",
        Some("old"),
        json!({"markdown": "OLD-PLAIN-TEXT"}),
    )
    .await
    .unwrap();
    until("A published", Duration::from_secs(20), || {
        let s = a.node.status();
        s.member && s.own_events > 0 && s.to_publish == 0
    })
    .await;
    assert!(holds(&raw_stream(&server, "old28").await, "OLD-PLAIN-TEXT"));
    assert_eq!(a.node.status().key_generation, None);

    // This build takes over the device: the old messages stay, the new ones are sealed.
    a.config.legacy_format = false;
    a.restart().await;
    let b = Device::join(&server, "old28", 92, "bob").await;
    admit(&a, &b).await;
    a.create_block("new").await;
    a.run(
        "markdown.write",
        Some("new"),
        json!({"markdown": "NEW-SEALED-TEXT"}),
    )
    .await
    .unwrap();
    converge(&[&a, &b], Duration::from_secs(30)).await;
    assert_eq!(text(&b, "old").as_deref(), Some("OLD-PLAIN-TEXT"));
    assert_eq!(text(&b, "new").as_deref(), Some("NEW-SEALED-TEXT"));
    assert!(!holds(
        &raw_stream(&server, "old28").await,
        "NEW-SEALED-TEXT"
    ));
    assert!(b.node.rejected().is_empty(), "{:?}", b.node.rejected());
}

/// A device the owner adds while it goes on writing (never a quiet second) gets its copy of
/// the key at once: the owner's publisher keeps the keys when the members change, not only
/// when it has nothing to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_added_under_continuous_writes_gets_its_key_at_once() {
    let server = NatsServer::start().unwrap();
    let a = std::sync::Arc::new(Device::genesis(&server, "busy", 81).await);
    a.create_block("w").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (a, stop) = (a.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                a.write("w", &format!("write {n}")).await;
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = Device::join(&server, "busy", 82, "bob").await;
    admit(&a, &b).await;
    // The writes go on until this holds: a copy that waited for them to stop never comes.
    until(
        "the added device holds the key and reads the writes",
        Duration::from_secs(30),
        || {
            b.node.status().key_generation.is_some()
                && text(&b, "w").is_some_and(|t| t.starts_with("write "))
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.await.unwrap();
    assert!(writes >= 10, "the owner kept writing ({writes} writes)");
    converge(&[&a, &b], Duration::from_secs(30)).await;
}
