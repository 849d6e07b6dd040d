//! Ingest: other devices' events from the stream, their bodies fetched into the content
//! store, each batch judged (signatures, membership, order) and stored once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use elfiee_engine::ForeignLog;
use elfiee_model::ContentRef;
use futures_util::{FutureExt, StreamExt};

use crate::encryption::DocKey;
use crate::envelope::Message;
use crate::identity::{EventId, NodeId, Rejection, SyncEvent};

use super::inner::*;
use super::keys::Unopened;
use super::records::*;
use super::types::*;

/// Reads a body's chunks from the stream into the content store: chunk by chunk into a file
/// beside the document, then copied into the store, which checks the hash. Memory holds a
/// chunk at a time, whatever the body's size. `key`: the key of the envelope that named it
/// (its chunks are sealed with it), `None` for issue 28's plain format.
pub(super) async fn fetch_body(
    inner: &Inner,
    foreign: &ForeignLog,
    stream: &jetstream::stream::Stream,
    r: &ContentRef,
    key: Option<&DocKey>,
) -> Result<(), String> {
    use std::io::{Seek, Write};
    let subject = inner.config.blob_subject(r, key);
    let name = subject.rsplit('.').next().unwrap_or_default().to_owned();
    let c = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject.clone(),
            // A few chunks in flight at a time (the client would ask for 500).
            max_batch: 4,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot read body {}: {e}", r.hash))?;
    let mut messages = c
        .messages()
        .await
        .map_err(|e| format!("cannot read body {}: {e}", r.hash))?;
    let path = inner
        .file
        .path()
        .join(format!("sync-incoming-{}", r.hash.to_hex()));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let fetched = async {
        let mut next = 0usize;
        let mut total = None;
        while total.is_none_or(|t| next < t) {
            let m = tokio::time::timeout(inner.config.timeout, messages.next())
                .await
                .map_err(|_| format!("body {} is not (yet) on the broker", r.hash))?
                .ok_or_else(|| format!("body {}: the stream ended", r.hash))?
                .map_err(|e| format!("cannot read body {}: {e}", r.hash))?;
            let header = |name: &str| {
                m.headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .and_then(|v| v.as_str().parse::<usize>().ok())
            };
            let (Some(n), Some(t)) = (header("Elf-Chunk"), header("Elf-Chunks")) else {
                continue;
            };
            // Chunks come in order; a second copy of one (stored again after the duplicate
            // window) is skipped.
            if n != next {
                continue;
            }
            total = Some(t);
            let part = match key {
                Some(k) => k
                    .decrypt(&DocKey::chunk_aad(&name, n, t), &m.payload)
                    .map_err(|e| format!("body {}, chunk {n}: {e}", r.hash))?,
                None => m.payload.to_vec(),
            };
            file.write_all(&part)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            next += 1;
        }
        Ok::<(), String>(())
    }
    .await;
    let stored = fetched.and_then(|()| {
        file.rewind()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        foreign
            .put_content_from(r, std::io::BufReader::new(&file))
            .map_err(|e| format!("body {}: {e}", r.hash))
    });
    drop(file);
    let _ = std::fs::remove_file(&path);
    stored
}

/// `SyncIngest`: reads every node's event subject in stream order from its checkpoint,
/// through an ordered consumer (no acks: the checkpoint, stored with the events, says what is
/// settled, and every reconnect starts a new consumer from it).
pub(super) async fn ingest(inner: Arc<Inner>) -> Result<(), String> {
    let js = inner.js();
    let mut backoff = Backoff::new(&inner.config);
    let caught_up = Arc::new(tokio::sync::Notify::new());
    let _flusher = AbortOnDrop(tokio::spawn(make_durable(inner.clone(), caught_up.clone())));
    'connect: loop {
        let stream = inner.stream_when_ready(&js, &mut backoff).await;
        let ingested = inner
            .file
            .foreign_log()
            .map_err(SyncError::from)
            .and_then(|f| ingested(&f))
            .map_err(|e| e.to_string())?;
        let config = consumer::pull::OrderedConfig {
            filter_subject: format!("elf.{}.ev.>", inner.config.doc),
            // A copied .elf resumes where its ingest checkpoint says.
            deliver_policy: if ingested > 0 {
                consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: ingested + 1,
                }
            } else {
                consumer::DeliverPolicy::All
            },
            max_batch: inner.config.batch as i64,
            ..Default::default()
        };
        // Pulled continuously (the client keeps asking for more while the last ones are
        // stored), not one request per batch.
        let c = match stream.create_consumer(config).await {
            Ok(c) => c,
            Err(e) => {
                inner.offline(format!(
                    "cannot open a consumer on {}: {e}",
                    inner.config.stream()
                ));
                backoff.wait().await;
                continue;
            }
        };
        let mut messages = match c.messages().await {
            Ok(m) => m,
            Err(e) => {
                inner.offline(format!("cannot read {}: {e}", inner.config.stream()));
                backoff.wait().await;
                continue;
            }
        };
        let name = inner.config.stream();
        let own = inner.config.events_subject(&inner.node);
        inner.online();
        backoff.reset();
        let mut own_settled = Instant::now();
        loop {
            // A broker that goes away while nothing is sent shows here at once: reconnecting
            // recreates the consumer, so what was not stored comes again in stream order.
            let first = tokio::select! {
                m = messages.next() => m,
                () = inner.disconnected() => None,
            };
            let first = match first {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    inner.offline(format!("reading {name}: {e}"));
                    backoff.wait().await;
                    continue 'connect;
                }
                None => {
                    inner.offline(format!(
                        "lost the connection to {}; reconnecting",
                        inner.config.url
                    ));
                    backoff.wait().await;
                    continue 'connect;
                }
            };
            // The batch: what is here now, up to a limit (stored and folded together): large
            // while far behind (a catch-up), small once nearly caught up, so another
            // device's write is not held up behind a long batch.
            let behind = first.info().map_or(0, |i| i.pending);
            let limit = if behind > CATCH_UP_PENDING {
                BATCH_BYTES
            } else {
                LIVE_BATCH_BYTES
            };
            let mut bytes = first.payload.len();
            let mut batch = vec![first];
            let mut broke = None;
            while batch.len() < inner.config.batch && bytes < limit {
                match messages.next().now_or_never() {
                    Some(Some(Ok(m))) => {
                        bytes += m.payload.len();
                        batch.push(m);
                    }
                    Some(Some(Err(e))) => {
                        broke = Some(format!("reading {name}: {e}"));
                        break;
                    }
                    _ => break,
                }
            }
            let pending = batch.last().and_then(|m| m.info().ok()).map(|i| i.pending);
            // This node's own messages, and nothing else: nothing to store but how far ingest
            // got, which waits (at most a second) while more are coming.
            let own_only = batch.iter().all(|m| m.subject.as_str() == own);
            if own_only
                && pending.is_some_and(|p| p > 0)
                && own_settled.elapsed() < Duration::from_secs(1)
            {
                continue;
            }
            own_settled = Instant::now();
            if let Err(e) = store_batch(&inner, &stream, batch).await {
                inner.offline(e);
                backoff.wait().await;
                continue 'connect;
            }
            if let Some(why) = broke {
                // Stored what came before it; read on from a fresh consumer.
                inner.offline(why);
                backoff.wait().await;
                continue 'connect;
            }
            // Caught up: what was stored becomes durable beside the next batches (where
            // ingest got in this node's own messages alone is never worth a flush).
            if !own_only && pending.is_none_or(|p| p == 0) {
                caught_up.notify_one();
            }
            inner.refresh_status(|s| {
                s.online = true;
                forget(s, READ_KEY_WAIT);
                if let Some(p) = pending {
                    s.to_ingest = p;
                }
            });
        }
    }
}

/// Another device's events are stored without a flush of their own
/// ([`ForeignLog::append_deferred`]): they show (to subscribers, in the merged state) once
/// written, and a flush stall of the disk (tens of ms under a burst) does not hold them up.
/// Each time ingest has caught up, this task makes what it stored durable, beside the next
/// batches (a crash before that loses them here, with the ingest checkpoint stored with
/// them: ingest reads them again from the broker). Wakes coalesce: one flush covers
/// everything stored before it.
async fn make_durable(inner: Arc<Inner>, caught_up: Arc<tokio::sync::Notify>) {
    loop {
        caught_up.notified().await;
        let synced = match inner.file.foreign_log() {
            Ok(foreign) => foreign.sync().await,
            Err(e) => Err(e),
        };
        if let Err(e) = synced {
            // The engine poisons the file on a failed flush; the next local commit says so.
            tracing::warn!(error = %e, "sync: other devices' events not made durable");
        }
    }
}

/// Aborts the task when dropped (the ingest loop ending, or its actor stopping).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Ingest stores at most about this many payload bytes in one batch while it catches up
/// (what is already here when it looks; memory holds the batch decoded).
const BATCH_BYTES: usize = 8 << 20;

/// … and this many once nearly caught up: payload bytes as they travel, so since sealed
/// format 4 compresses envelopes (decision 0051) about 1,500 small writes of one block, tens
/// of ms to store and fold on this two-core machine (500 before).
const LIVE_BATCH_BYTES: usize = 256 << 10;

/// Messages waiting on the broker behind a batch's first one above which ingest is catching
/// up.
const CATCH_UP_PENDING: u64 = 64;

/// What to do with one fetched event.
pub(super) enum Verdict {
    /// Store it (verified, its history here).
    Store(Box<SyncEvent>),
    /// Already here (a redelivery, or this node's own).
    Skip,
    /// Forged or broken: never stored.
    Reject(SyncError),
}

/// The events of a batch to store, on top of what is stored: their ids, their chains and
/// the members their `node.add`s make.
struct Queue {
    events: Vec<SyncEvent>,
    ids: HashSet<EventId>,
    chains: HashMap<NodeId, Vec<EventId>>,
    members: BTreeMap<NodeId, [u8; 32]>,
}

impl Queue {
    fn push(&mut self, e: SyncEvent) {
        self.ids.insert(e.id);
        self.chains.entry(e.origin.node).or_default().push(e.id);
        if e.cap == "node.add" {
            if let Some(n) = e
                .value
                .get("node_id")
                .and_then(|v| v.as_str())
                .and_then(NodeId::from_hex)
            {
                // Folded (and authorized) with the batch; its events may follow in it.
                self.members.insert(n, n.0);
            }
        }

        self.events.push(e);
    }

    /// Takes back the events queued after the first `keep` (a message rejected whole).
    fn truncate(&mut self, keep: usize) {
        for e in self.events.drain(keep..) {
            self.ids.remove(&e.id);
            if let Some(chain) = self.chains.get_mut(&e.origin.node) {
                chain.pop();
            }
        }
    }
}

/// Checks, stores and acknowledges a batch of fetched messages: envelopes (one signature
/// each; one bad event rejects the envelope whole) and issue 16's single events (their
/// signatures checked in one batch).
pub(super) async fn store_batch(
    inner: &Arc<Inner>,
    stream: &jetstream::stream::Stream,
    batch: Vec<jetstream::Message>,
) -> Result<(), String> {
    tracing::trace!(messages = batch.len(), "sync: ingest batch");
    let started = std::time::Instant::now();
    // This node's own messages come back too (one consumer reads every node's subject):
    // they are skipped without decoding.
    let own = inner.config.events_subject(&inner.node);
    if batch.iter().any(|m| m.subject.as_str() != own) {
        // What the judge compares with: every event committed here (folded on a blocking
        // thread, as the follower folds: not on a runtime worker the devices' tasks share).
        inner
            .catch_up_blocking(BTreeMap::new(), Vec::new())
            .await
            .map_err(|e| e.to_string())?;
    }
    let genesis = inner.genesis();
    let mut queue = {
        let core = inner.lock();
        Queue {
            events: Vec::new(),
            ids: HashSet::new(),
            chains: HashMap::new(),
            members: crate::membership::members(core.replica.state()),
        }
    };
    // Messages sealed with a key this device lacks: its copy may have arrived since it
    // last looked; else what comes before is stored and ingest waits (and tries again).
    let mut batch = batch;
    let mut waiting = None;
    // (Only the key's name is read here: each message is opened once, below.)
    let lacks = |m: &jetstream::Message| {
        if m.subject.as_str() == own {
            return None;
        }
        inner.lacks_key(&m.payload)
    };
    if batch.iter().any(|m| lacks(m).is_some()) {
        inner.refresh_keys(stream).await?;
        if let Some((i, gen)) = batch
            .iter()
            .enumerate()
            .find_map(|(i, m)| Some((i, lacks(m)?)))
        {
            waiting = Some(format!(
                "{READ_KEY_WAIT} of generation {gen}: the owner's device seals it to each device it added (was this one removed?)"
            ));
            batch.truncate(i);
        }
        if batch.is_empty() {
            return Err(waiting.unwrap_or_default());
        }
    }
    // Everything up to the batch's last message is settled (stored, here already, or
    // refused): a restart reads on from there.
    let settled = batch
        .iter()
        .filter_map(|m| m.info().ok().map(|i| i.stream_sequence))
        .max()
        .unwrap_or(0);
    let mut keys_of = Vec::new();
    let decoded: Vec<Result<Message, Rejection>> = batch
        .iter()
        .filter(|m| m.subject.as_str() != own)
        .map(|m| match inner.open(&m.payload) {
            Ok((message, key)) => {
                keys_of.push(key);
                Ok(message)
            }
            Err(e) => {
                keys_of.push(None);
                Err(match e {
                    Unopened::Bad(why) => why,
                    // Not after the truncation above.
                    Unopened::NoKey => Rejection::Undecryptable,
                })
            }
        })
        .collect();
    // The key each queued event's bodies are sealed with (its envelope's).
    let mut body_keys: HashMap<EventId, DocKey> = HashMap::new();
    let signatures = check_signatures(inner, &decoded);
    for ((d, signature), key) in decoded.into_iter().zip(signatures).zip(keys_of) {
        let rejected = match d {
            Err(why) => Some(SyncError::Rejected {
                origin: "?".into(),
                origin_seq: 0,
                reason: why,
            }),
            Ok(msg) => {
                let keep = queue.events.len();
                let core = inner.lock();
                let mut rejected = None;
                for e in msg.into_events() {
                    match judge(&core, e, &signature, genesis.as_ref(), &queue) {
                        Verdict::Store(e) => {
                            if let Some(k) = &key {
                                body_keys.insert(e.id, k.clone());
                            }
                            queue.push(*e)
                        }
                        Verdict::Skip => {}
                        Verdict::Reject(why) => {
                            rejected = Some(why);
                            break;
                        }
                    }
                }
                if rejected.is_some() {
                    queue.truncate(keep);
                }
                rejected
            }
        };
        if let Some(err) = rejected {
            inner.reject(err);
        }
    }
    let foreign = inner
        .file
        .foreign_log()
        .map_err(|e| format!("cannot store events from the broker: {e}"))?;
    for e in &queue.events {
        for r in elfiee_projections::content::event_refs(&e.value) {
            if !foreign.has_content(&r).map_err(|e| e.to_string())? {
                fetch_body(inner, &foreign, stream, &r, body_keys.get(&e.id)).await?;
            }
        }
    }
    let events = queue
        .events
        .iter()
        .map(|e| (e.to_event(), e.kept()))
        .collect();
    let side = vec![(INGEST_SIDE.to_vec(), settled.to_be_bytes().to_vec())];
    let judged = started.elapsed();
    let stored = foreign
        .append_deferred(events, side)
        .await
        .map_err(|e| format!("cannot store events from the broker: {e}"))?;
    // The follower folds them as they are (no reading back).
    let known: BTreeMap<u64, SyncEvent> = stored.iter().map(|s| s.seq).zip(queue.events).collect();
    let count = known.len();
    let appended = started.elapsed();
    inner
        .catch_up_blocking(known, Vec::new())
        .await
        .map_err(|e| e.to_string())?;
    tracing::trace!(
        node = %inner.node,
        events = count,
        settled,
        ms = started.elapsed().as_secs_f64() * 1e3,
        judged_ms = judged.as_secs_f64() * 1e3,
        appended_ms = appended.as_secs_f64() * 1e3,
        "sync: ingest batch stored"
    );
    match waiting {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// The signature verdict of each decoded message that brings news from another node: an
/// envelope's one signature, and issue 16's single events in one batch. `Ok` for the rest.
fn check_signatures(
    inner: &Inner,
    decoded: &[Result<Message, Rejection>],
) -> Vec<Result<(), Rejection>> {
    let news = {
        let core = inner.lock();
        let new = |e: &SyncEvent| !core.ids.contains_key(&e.id) && e.origin.node != core.node;
        decoded
            .iter()
            .map(|d| d.as_ref().is_ok_and(|m| m.events().iter().any(new)))
            .collect::<Vec<bool>>()
    };
    let mut keys = inner.keys.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = vec![Ok(()); decoded.len()];
    let mut singles = Vec::new();
    for (i, d) in decoded.iter().enumerate() {
        match d {
            Ok(Message::Batch(env)) if news[i] => out[i] = env.verify(&mut keys),
            Ok(Message::Single(e)) if news[i] => singles.push((i, e.as_ref())),
            _ => {}
        }
    }
    let events: Vec<&SyncEvent> = singles.iter().map(|(_, e)| *e).collect();
    for ((i, _), r) in singles
        .iter()
        .zip(crate::identity::verify_members(&events, &mut keys))
    {
        out[*i] = r;
    }
    out
}

/// The verdict on one message, against what is stored and what this batch queued.
fn judge(
    core: &Core,
    e: SyncEvent,
    signature: &Result<(), Rejection>,
    genesis: Option<&NodeId>,
    queue: &Queue,
) -> Verdict {
    let (fresh, fresh_chains, members) = (&queue.ids, &queue.chains, &queue.members);
    if core.ids.contains_key(&e.id) || fresh.contains(&e.id) || e.origin.node == core.node {
        return Verdict::Skip;
    }
    let reject = |reason| {
        Verdict::Reject(SyncError::Rejected {
            origin: e.origin.node.to_hex(),
            origin_seq: e.origin.seq,
            reason,
        })
    };
    let node = e.origin.node;
    if Some(&node) != genesis && !members.contains_key(&node) {
        return reject(Rejection::UnknownNode(node.to_hex()));
    }
    if let Err(why) = signature {
        return reject(why.clone());
    }
    // A removed device's events after its removal are stored (another device's event may
    // name one it saw before the removal reached it) but never applied ([`crate::replica`]):
    // refused at merge, the same on every device.
    // Its place in its node's history: right after the node's last event here.
    let stored = core.chains.get(&e.origin.node).map_or(&[][..], |c| c);
    let queued = fresh_chains.get(&e.origin.node).map_or(&[][..], |c| c);
    let have = (stored.len() + queued.len()) as u64;
    let at = |seq: u64| {
        let i = seq as usize - 1;
        if i < stored.len() {
            stored.get(i)
        } else {
            queued.get(i - stored.len())
        }
    };
    if e.origin.seq == 0 {
        return reject(Rejection::BrokenPrev {
            seq: 0,
            why: "origin seqs start at 1".into(),
        });
    }
    if e.origin.seq <= have {
        // Another event already holds this place: a fork.
        return reject(Rejection::BrokenPrev {
            seq: e.origin.seq,
            why: format!(
                "the node's event {} here is {}",
                e.origin.seq,
                at(e.origin.seq).map(|i| i.to_hex()).unwrap_or_default()
            ),
        });
    }
    // Ingest reads the stream in order from where everything before is settled, and a node
    // publishes its events in order: a gap means the events before were refused.
    if e.origin.seq > have + 1 {
        return reject(Rejection::BrokenPrev {
            seq: e.origin.seq,
            why: format!("the node's event {} never arrived", have + 1),
        });
    }
    let prev_here = if have == 0 { None } else { at(have).copied() };
    if e.origin.prev != prev_here {
        return reject(Rejection::BrokenPrev {
            seq: e.origin.seq,
            why: "its prev is not the node's previous event".into(),
        });
    }
    // What it had seen came before it on the stream (its node ingested it from there).
    if let Some(d) = e
        .origin
        .deps
        .iter()
        .find(|d| !core.ids.contains_key(d) && !fresh.contains(d))
    {
        return reject(Rejection::BrokenPrev {
            seq: e.origin.seq,
            why: format!(
                "it names event {} that this device never received",
                d.to_hex()
            ),
        });
    }
    Verdict::Store(Box::new(e))
}
