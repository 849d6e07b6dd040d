//! The node's children: the supervised loops (follower, publisher, ingest) and the publisher,
//! which sends this device's sealed events and their bodies to the stream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use elfiee_model::ContentRef;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::encryption::{DocKey, Sealed};
use crate::envelope::{Envelope, Message, Outgoing, ENVELOPE_BYTES};

use super::ingest::*;
use super::inner::*;
use super::records::*;
use super::types::*;

#[derive(Clone, Copy, Debug)]
pub(super) enum Role {
    /// Folds new local events into the merged state (and wakes the publisher).
    Follower,
    Publisher,
    Ingest,
}

impl Role {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Role::Follower => "follower",
            Role::Publisher => "publisher",
            Role::Ingest => "ingest",
        }
    }
}

/// Runs one role's loop; the loop ending with an error (or a panic) fails the actor, and the
/// file actor restarts it with backoff.
pub(super) struct LoopActor;

pub(super) enum LoopMsg {
    Ended(Result<(), String>),
}

impl Actor for LoopActor {
    type Msg = LoopMsg;
    type State = tokio::task::JoinHandle<()>;
    type Arguments = (Arc<Inner>, Role);

    async fn pre_start(
        &self,
        me: ActorRef<LoopMsg>,
        (inner, role): (Arc<Inner>, Role),
    ) -> Result<Self::State, ActorProcessingErr> {
        let work = tokio::spawn(async move {
            match role {
                Role::Follower => follow(inner).await,
                Role::Publisher => publish(inner).await,
                Role::Ingest => ingest(inner).await,
            }
        });
        Ok(tokio::spawn(async move {
            let ended = match work.await {
                Ok(r) => r,
                Err(e) if e.is_panic() => Err(format!("panicked: {e}")),
                Err(e) => Err(e.to_string()),
            };
            let _ = me.cast(LoopMsg::Ended(ended));
        }))
    }

    async fn handle(
        &self,
        me: ActorRef<LoopMsg>,
        msg: LoopMsg,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LoopMsg::Ended(Ok(())) => {
                me.stop(None);
                Ok(())
            }
            LoopMsg::Ended(Err(e)) => Err(e.into()),
        }
    }

    async fn post_stop(
        &self,
        _: ActorRef<LoopMsg>,
        task: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        task.abort();
        Ok(())
    }
}

/// The follower: every committed event, local or not, joins the merged state in log order.
/// It folds the committed events it is told of as they come (with what else arrived by
/// then), reading the log only when they do not cover what is new. Another device's events
/// alone are left to ingest, which folds them as it decoded them: the follower folding them
/// too would read back what ingest kept beside them, and hold the merged state's lock while
/// ingest waits for it.
pub(super) async fn follow(inner: Arc<Inner>) -> Result<(), String> {
    use futures_util::FutureExt;
    let from = inner.lock().followed + 1;
    let mut events = inner.file.subscribe_from(from);
    // What is in the log when the follower starts is folded whatever its origin.
    let mut seen = Some(Vec::new());
    loop {
        if let Some(seen) = seen {
            inner
                .catch_up_blocking(BTreeMap::new(), seen)
                .await
                .map_err(|e| e.to_string())?;
        }
        // Shared, not copied: a batch of other devices' events alone is only looked at
        // (ingest folds them).
        let mut batch = Vec::new();
        match events.recv_shared().await {
            Some(c) => batch.push(c),
            None => return Ok(()),
        }
        while let Some(Some(c)) = events.recv_shared().now_or_never() {
            batch.push(c);
        }
        seen = batch.iter().any(|c| !c.origin.is_foreign()).then(|| {
            batch
                .into_iter()
                .map(|c| Arc::unwrap_or_clone(c).event)
                .collect()
        });
    }
}

/// `SyncPublisher`: this node's sealed events go out as envelopes (docs/EVENTS.md, "Sync"),
/// one in flight at a time. When the publisher is idle a new event goes at once, alone;
/// under load the events that pile up behind the envelope in flight go in the next one, which
/// during a burst waits a little for more ([`gather`], decision 0049).
/// Each envelope is published with the subject's last stream sequence as expected (the
/// per-node order guard): a second publisher of this node, or a message lost in between,
/// makes the broker refuse it, and the publisher looks at the subject again.
pub(super) async fn publish(inner: Arc<Inner>) -> Result<(), String> {
    let js = inner.js();
    let subject = inner.config.events_subject(&inner.node);
    let mut backoff = Backoff::new(&inner.config);
    'connect: loop {
        let mut stream = inner.stream_when_ready(&js, &mut backoff).await;
        // The document keys first: the last message on the subject may be sealed.
        if let Err(e) = inner.keep_keys(&js, &stream, true).await {
            inner.offline(e);
            backoff.wait().await;
            continue;
        }
        // Where the broker is: the checkpoint may be behind it (lost, or rolled back).
        let (on_broker, mut subject_seq) = match stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            // Only a message this node signed says how far it got; anything else there (a
            // forgery, which every receiver rejects) leaves it to the checkpoint.
            Ok(m) => (own_last_seq(&inner, &m.payload), m.sequence),
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                (0, 0)
            }
            Err(e) => {
                inner.offline(format!("cannot read the last message on {subject}: {e}"));
                backoff.wait().await;
                continue;
            }
        };
        let checkpoint = inner
            .file
            .checkpoint(&inner.checkpoint_name)
            .map_err(|e| e.to_string())?;
        let mut next = checkpoint.max(on_broker) + 1;
        if on_broker > checkpoint {
            set_checkpoint(&inner, on_broker)?;
        }
        inner.lock().release_own(next - 1);
        inner.online();
        backoff.reset();
        // The members epoch the keys were last kept at (a device just added gets its copies
        // now, not at the next quiet second, which never comes while writes go on).
        let mut kept_at = None;
        // Events in the last envelope sent: many means a burst is on.
        let mut last_len = 0;
        loop {
            let epoch = inner.lock().members_epoch;
            if kept_at != Some(epoch) {
                if let Err(e) = inner.keep_keys(&js, &stream, false).await {
                    inner.offline(e);
                    backoff.wait().await;
                    continue 'connect;
                }
                kept_at = Some(epoch);
            }
            let mut batch = next_envelope(&inner, next);
            if last_len >= BURST_EVENTS && !batch.is_empty() {
                batch = gather(&inner, next, batch).await;
            }
            if batch.is_empty() {
                // Wait for new own events (the follower wakes it when it folded some), or look
                // again now and then (membership, status).
                let woken =
                    tokio::time::timeout(Duration::from_secs(1), inner.wake_publisher.notified())
                        .await;
                if woken.is_err() {
                    inner.catch_up().map_err(|e| e.to_string())?;
                    // Devices added or removed: seal them the keys they lack, or make the
                    // generation a removal here owes.
                    if let Err(e) = inner.keep_keys(&js, &stream, false).await {
                        inner.offline(e);
                        backoff.wait().await;
                        continue 'connect;
                    }
                    // Which server leads the stream's copies now (a cluster moves it).
                    inner.look_at(&mut stream).await;
                }
                continue;
            }
            let key = inner.writing_key();
            if key.is_none() && !inner.config.legacy_format {
                // Nothing leaves in the clear: wait for this device's copy of the key (the
                // owner's device seals it once it added this one; after a removal, the
                // removing device makes a new generation).
                inner.offline(format!(
                    "{WRITE_KEY_WAIT} (sealed by the device that added it, or made after a removal)"
                ));
                backoff.wait().await;
                continue 'connect;
            }
            match publish_envelope(&inner, &js, &subject, batch, subject_seq, key.as_ref()).await {
                Ok((last, seq)) => {
                    last_len = (last + 1 - next) as usize;
                    next = last + 1;
                    subject_seq = seq;
                    inner.refresh_status(|s| {
                        s.online = true;
                        forget(s, WRITE_KEY_WAIT);
                    });
                }
                Err(why) => {
                    // An acknowledged envelope stays acknowledged (the checkpoint moved over
                    // it); the rest go again after a pause, from a fresh look at the subject.
                    inner.offline(why);
                    backoff.wait().await;
                    continue 'connect;
                }
            }
        }
    }
}

/// An envelope of at least this many events means a burst is on: the next one gathers
/// ([`gather`]).
const BURST_EVENTS: usize = 16;
/// While a burst is on, an envelope waits at most this long for more events …
const GATHER_WAIT: Duration = Duration::from_millis(2);
/// … until it holds this many.
const GATHER_EVENTS: usize = 128;

/// During a burst (the last envelope was large), waits a little for the commits that are on
/// their way to join `batch`, so the broker, every receiver's ingest and its flush handle a
/// few large envelopes rather than many small ones. A write alone after a quiet moment
/// never waits here.
async fn gather(inner: &Inner, next: u64, mut batch: Vec<Outgoing>) -> Vec<Outgoing> {
    let deadline = tokio::time::Instant::now() + GATHER_WAIT;
    let enough = GATHER_EVENTS.min(inner.config.envelope_events.max(1));
    while batch.len() < enough {
        let woken = tokio::time::timeout_at(deadline, inner.wake_publisher.notified()).await;
        let more = next_envelope(inner, next);
        // Fuller, or cut by the envelope's byte limit: take what there is.
        let grew = more.len() > batch.len();
        batch = more;
        if woken.is_err() || !grew && batch.len() >= enough {
            break;
        }
    }
    batch
}

/// The last origin seq in `payload` when it is a message this node signed (either format);
/// 0 for anything else.
fn own_last_seq(inner: &Inner, payload: &[u8]) -> u64 {
    let opened = inner.open(payload).map(|(m, _)| m);
    let mut keys = inner.keys.lock().unwrap_or_else(|p| p.into_inner());
    match opened {
        Ok(Message::Batch(env)) if env.node == inner.node && env.verify(&mut keys).is_ok() => {
            env.events.last().map_or(0, |e| e.origin.seq)
        }
        Ok(Message::Single(e))
            if e.origin.node == inner.node && e.verify_member(&mut keys).is_ok() =>
        {
            e.origin.seq
        }
        _ => 0,
    }
}

/// This node's sealed events from origin seq `next` on, as many as one envelope takes
/// ([`SyncConfig::envelope_events`], [`ENVELOPE_BYTES`]); none while this node may not
/// publish.
fn next_envelope(inner: &Inner, next: u64) -> Vec<Outgoing> {
    let core = inner.lock();
    if !core.is_member(inner.genesis().as_ref()) {
        return Vec::new();
    }
    let mut bytes = 0;
    let mut batch = Vec::new();
    for e in core
        .own_from(next)
        .take(inner.config.envelope_events.max(1))
    {
        // Its bytes and their MessagePack `bin` header.
        bytes += e.bytes.len() + 5;
        if !batch.is_empty() && bytes > ENVELOPE_BYTES {
            break;
        }
        batch.push(e.clone());
    }
    batch
}

pub(super) fn set_checkpoint(inner: &Inner, seq: u64) -> Result<(), String> {
    inner
        .file
        .set_checkpoint(&inner.checkpoint_name, seq)
        .map_err(|e| format!("cannot store the publisher's checkpoint: {e}"))
}

/// Publishes `batch` (consecutive own events) as one envelope: bodies first, then the
/// envelope, expecting `subject_seq` as the subject's last stream sequence; moves the
/// checkpoint once the broker acknowledged it. The last origin seq and the envelope's stream
/// sequence. With `key`, the envelope and the bodies are sealed with it (format 4: compressed, then encrypted).
pub(super) async fn publish_envelope(
    inner: &Inner,
    js: &jetstream::Context,
    subject: &str,
    batch: Vec<Outgoing>,
    subject_seq: u64,
    key: Option<&DocKey>,
) -> Result<(u64, u64), String> {
    for e in &batch {
        for r in &e.refs {
            publish_body(inner, js, r, key).await?;
        }
    }
    let last = batch.last().map_or(0, |e| e.seq);
    let (mut payload, message_id) = Envelope::encode_outgoing(&inner.key, &batch);
    if let Some(key) = key {
        payload = Sealed::seal(key, &inner.config.doc, &inner.node, &payload);
    }
    let msg = PublishMessage::build()
        .payload(payload.into())
        .message_id(message_id.as_str())
        .expected_last_subject_sequence(subject_seq);
    let ack = js
        .send_publish(subject.to_owned(), msg)
        .await
        .map_err(|err| format!("cannot publish: {err}"))?;
    if crash_before_puback() {
        // The envelope reaches the broker (which stores it), the checkpoint does not move.
        let _ = inner.client.flush().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        tracing::warn!("ELFIEE_TEST_CRASH_BEFORE_PUBACK: aborting before the PubAck");
        std::process::abort();
    }
    let acked = ack
        .await
        .map_err(|err| format!("no PubAck for {message_id}: {err}"))?;
    set_checkpoint(inner, last)?;
    inner.lock().release_own(last);
    tracing::trace!(
        node = %inner.node,
        events = batch.len(),
        stream_seq = acked.sequence,
        "sync: envelope published"
    );
    Ok((last, acked.sequence))
}

/// `ELFIEE_TEST_CRASH_BEFORE_PUBACK=1`: the process aborts after sending events and before
/// their PubAck (the "publisher died between commit and PubAck" test).
pub(super) fn crash_before_puback() -> bool {
    std::env::var_os("ELFIEE_TEST_CRASH_BEFORE_PUBACK").is_some_and(|v| v == "1")
}

/// Publishes a body as chunks (each chunk's message id makes a copy sent again within the
/// duplicate window a duplicate), sealed with `key` when given.
pub(super) async fn publish_body(
    inner: &Inner,
    js: &jetstream::Context,
    r: &ContentRef,
    key: Option<&DocKey>,
) -> Result<(), String> {
    let subject = inner.config.blob_subject(r, key);
    let name = subject.rsplit('.').next().unwrap_or_default().to_owned();
    let text = inner
        .file
        .content(r)
        .map_err(|e| format!("cannot read body {}: {e}", r.hash))?;
    let bytes = text.as_bytes();
    let chunks = bytes.len().div_ceil(CHUNK).max(1);
    let mut acks = Vec::with_capacity(chunks);
    for n in 0..chunks {
        let part = &bytes[(n * CHUNK).min(bytes.len())..((n + 1) * CHUNK).min(bytes.len())];
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Elf-Chunks", chunks.to_string().as_str());
        headers.insert("Elf-Chunk", n.to_string().as_str());
        let part = match key {
            Some(k) => k.encrypt(&DocKey::chunk_aad(&name, n, chunks), part),
            None => part.to_vec(),
        };
        let msg = PublishMessage::build()
            .payload(part.into())
            .headers(headers)
            .message_id(format!("{name}:{n}"));
        acks.push(
            js.send_publish(subject.clone(), msg)
                .await
                .map_err(|e| format!("cannot publish body {}: {e}", r.hash))?,
        );
    }
    for ack in acks {
        ack.await
            .map_err(|e| format!("no PubAck for body {}: {e}", r.hash))?;
    }
    Ok(())
}
