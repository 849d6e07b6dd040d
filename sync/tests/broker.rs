//! The JetStream features the sync design relies on, against the broker CI runs (Debian's
//! nats-server 2.9.10, started per test on 127.0.0.1): message-id deduplication and why its
//! window is not enough on its own, the last message on a subject, expected last subject
//! sequence, a durable pull consumer with explicit ack, redelivery after a lost ack,
//! termination, and a client that rides out a partition.

use std::time::Duration;

use async_nats::jetstream::{
    self, consumer, context::PublishErrorKind, message::PublishMessage, AckKind,
};
use elfiee_sync::testing::{NatsServer, Relay};
use futures_util::StreamExt;

const SUBJECT: &str = "elf.doc.ev.n1";

/// Up to five messages from the pull consumer `c`, waiting 2 s at most.
async fn fetch_five(c: &consumer::PullConsumer) -> consumer::pull::Batch {
    c.fetch()
        .max_messages(5)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap()
}

async fn stream(js: &jetstream::Context, window: Duration) -> jetstream::stream::Stream {
    js.create_stream(jetstream::stream::Config {
        name: "ELF_doc".into(),
        subjects: vec!["elf.doc.>".into()],
        duplicate_window: window,
        ..Default::default()
    })
    .await
    .expect("create the stream")
}

/// Publishes `body` with the message id `id` and waits for the stream's acknowledgement.
async fn try_publish(
    js: &jetstream::Context,
    id: &str,
    body: &str,
) -> Result<jetstream::publish::PublishAck, jetstream::context::PublishError> {
    js.send_publish(
        SUBJECT,
        PublishMessage::build()
            .payload(body.to_owned().into())
            .message_id(id),
    )
    .await?
    .await
}

async fn publish(js: &jetstream::Context, id: &str, body: &str) -> jetstream::publish::PublishAck {
    try_publish(js, id, body).await.expect("publish")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_ids_deduplicate_within_the_window_and_the_last_message_survives_it() {
    let server = NatsServer::start().unwrap();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let mut s = stream(&js, Duration::from_secs(1)).await;

    let first = publish(&js, "n1:1", "event 1").await;
    assert!(!first.duplicate);
    let again = publish(&js, "n1:1", "event 1").await;
    assert!(
        again.duplicate,
        "a second publish with the same id inside the window is not stored"
    );
    assert_eq!(again.sequence, first.sequence);
    assert_eq!(s.info().await.unwrap().state.messages, 1);

    // Outside the window the same id is stored again: a publisher that restarts after it
    // must look at the last message on its subject instead of trusting the window.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late = publish(&js, "n1:1", "event 1").await;
    assert!(!late.duplicate);
    assert_eq!(s.info().await.unwrap().state.messages, 2);
    let last = s.get_last_raw_message_by_subject(SUBJECT).await.unwrap();
    assert_eq!(last.sequence, late.sequence);
    assert_eq!(&last.payload[..], b"event 1");
    assert_eq!(
        last.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some("n1:1")
    );

    // Expected last subject sequence: a publisher whose idea of the subject is stale is
    // refused, one that is current goes through.
    let expecting = |seq: u64| {
        let js = js.clone();
        async move {
            js.send_publish(
                SUBJECT,
                PublishMessage::build()
                    .payload("event 2".into())
                    .message_id("n1:2")
                    .expected_last_subject_sequence(seq),
            )
            .await
            .unwrap()
            .await
        }
    };
    let stale = expecting(first.sequence).await.unwrap_err();
    assert_eq!(stale.kind(), PublishErrorKind::WrongLastSequence, "{stale}");
    let current = expecting(late.sequence).await.unwrap();
    assert!(!current.duplicate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_pull_consumer_redelivers_what_was_not_acked_and_drops_what_was_terminated() {
    let server = NatsServer::start().unwrap();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let s = stream(&js, Duration::from_secs(120)).await;
    for i in 1..=5 {
        publish(&js, &format!("n1:{i}"), &format!("event {i}")).await;
    }
    let config = consumer::pull::Config {
        durable_name: Some("n2".into()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(1),
        ..Default::default()
    };
    let c = s
        .get_or_create_consumer("n2", config.clone())
        .await
        .unwrap();
    let mut got = fetch_five(&c).await;
    let mut seen = Vec::new();
    while let Some(m) = got.next().await {
        let m = m.unwrap();
        let body = String::from_utf8(m.payload.to_vec()).unwrap();
        match body.as_str() {
            "event 3" => {} // lost: no ack
            "event 4" => m.ack_with(AckKind::Term).await.unwrap(),
            _ => m.ack().await.unwrap(),
        }
        seen.push(body);
    }
    assert_eq!(
        seen,
        ["event 1", "event 2", "event 3", "event 4", "event 5"]
    );
    drop(c);

    // A new handle on the same durable consumer (a restarted ingest): only the unacked
    // message comes again, after the ack wait; the terminated one never does.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let c = s.get_or_create_consumer("n2", config).await.unwrap();
    let mut again = fetch_five(&c).await;
    let mut redelivered = Vec::new();
    while let Some(m) = again.next().await {
        let m = m.unwrap();
        redelivered.push(String::from_utf8(m.payload.to_vec()).unwrap());
        m.ack().await.unwrap();
    }
    assert_eq!(redelivered, ["event 3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_behind_a_cut_relay_fails_to_publish_then_recovers_when_it_heals() {
    let server = NatsServer::start().unwrap();
    let relay = Relay::start(server.addr()).await.unwrap();
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(relay.url())
        .await
        .unwrap();
    let js = jetstream::context::ContextBuilder::new()
        .timeout(Duration::from_millis(500))
        .build(client.clone());
    let _s = stream(&js, Duration::from_secs(120)).await;
    publish(&js, "n1:1", "before").await;

    relay.cut();
    let during = try_publish(&js, "n1:2", "during").await;
    assert!(
        during.is_err(),
        "a publish across a partition is not acknowledged"
    );

    relay.restore();
    // The client reconnects by itself; the publisher retries the same id until acked.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let ack = loop {
        let tried = try_publish(&js, "n1:2", "during").await;
        match tried {
            Ok(ack) => break ack,
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no ack 20 s after the partition healed: {e}"),
        }
    };
    // Stored once, whether or not the first try reached the server before the cut.
    let direct = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let mut s = direct.get_stream("ELF_doc").await.unwrap();
    assert_eq!(s.info().await.unwrap().state.messages, 2, "{ack:?}");
}

#[test]
fn a_killed_broker_comes_back_with_its_messages() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut server = NatsServer::start().unwrap();
    rt.block_on(async {
        let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
        stream(&js, Duration::from_secs(120)).await;
        publish(&js, "n1:1", "kept").await;
    });
    server.restart().unwrap();
    rt.block_on(async {
        let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
        let s = js.get_stream("ELF_doc").await.unwrap();
        let last = s.get_last_raw_message_by_subject(SUBJECT).await.unwrap();
        assert_eq!(&last.payload[..], b"kept");
    });
}
