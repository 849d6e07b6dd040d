//! One device's side of a synced document: the merged state over the local log, and the two
//! supervised children of the file actor that move events through JetStream.
//!
//! - **The local log** keeps arrival order. This device's commands commit through the engine
//!   as always (with their command recorded beside them, [`elfiee_engine::ForeignLog::record_commands`]);
//!   another device's events are appended by ingest ([`elfiee_engine::ForeignLog::append`], the engine's
//!   seam for them) with
//!   their origin kept beside them, the ingest checkpoint in the same atomic batch. `verify`
//!   holds: it is one hash chain.
//! - **The follower** ([`SyncNode`]'s `catch_up`) reads the log in seq order. It seals each
//!   of this device's events: origin seq, the previous own event's id, and as `deps` the
//!   latest event of every other node before it in the log. That makes the seal a function of
//!   the log alone, so it is the same after a restart, and `replay` rebuilds it. It then adds
//!   every event to the [`Replica`], whose fold in merge order is the document's state.
//! - **`SyncPublisher`** publishes this device's sealed events to `elf.<doc>.ev.<node>`, with
//!   message id `<node>:<origin_seq>` and their bodies first as 256 KiB chunks on
//!   `elf.<doc>.blob.<hash>`. It moves its checkpoint (`sync.publish` in
//!   `effect_checkpoints`) after each PubAck. When it starts it reads the last message on its
//!   subject, so a lost or rolled-back checkpoint never stores an event twice.
//! - **`SyncIngest`** reads a durable pull consumer named after the node. It checks each
//!   event (signature, membership, hash, `prev`), fetches the chunks of bodies it lacks,
//!   appends a batch with its checkpoint, then acks the batch's last message (the consumer
//!   acks all up to it). A stored id is skipped, so redelivery is harmless. A forged event is
//!   terminated (`AckKind::Term`) and reported as [`SyncError::Rejected`]. The follower
//!   folds the events ingest appended as ingest decoded them.
//!
//! Both children keep retrying with backoff while the broker is away. The status
//! ([`SyncStatus`]) tells subscribers whether the broker is reachable and how far each side
//! is behind. Local commands never wait for the broker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, message::PublishMessage, AckKind};
use elfiee_capabilities::Registry;
use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{ContentRef, Event};
use elfiee_projections::State;
use futures_util::StreamExt;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};
use serde::Serialize;
use tokio::sync::{watch, Notify};

use crate::identity::{EventId, Keys, NodeId, NodeKey, Origin, Rejection, SyncEvent};
use crate::replica::Replica;

mod ingest;
mod publish;

use ingest::*;
use publish::*;

/// Bodies travel in chunks of this many bytes (the server's default payload limit is 1 MiB).
pub const CHUNK: usize = 256 * 1024;

/// The publisher's checkpoint (the last origin seq the broker acknowledged), per node: see
/// [`publish_checkpoint`].
pub const PUBLISH_CHECKPOINT: &str = "sync.publish";
/// Side record: the last stream sequence ingest stored (written with the events).
const INGEST_SIDE: &[u8] = b"sync.ingest";
/// Side record: the document's first node (the one whose stream it is).
const GENESIS_SIDE: &[u8] = b"sync.genesis";

/// Side record: the node this file is synced as.
const NODE_SIDE: &[u8] = b"sync.node";
/// Side record: earlier nodes of a copied file and the last local seq each wrote.
const ADOPTED_SIDE: &[u8] = b"sync.adopted";
/// Side record: the broker and the document name last used (JSON).
const CONFIG_SIDE: &[u8] = b"sync.config";

/// The node id a side record holds (`NODE_SIDE`: this device's, `GENESIS_SIDE`: the
/// stream's first).
fn side_node(file: &FileHandle, key: &[u8]) -> Result<Option<NodeId>, SyncError> {
    Ok(file
        .foreign_log()?
        .side(key)?
        .and_then(|b| b.try_into().ok())
        .map(NodeId))
}

fn recorded_node(file: &FileHandle) -> Result<Option<NodeId>, SyncError> {
    side_node(file, NODE_SIDE)
}

/// The ingest checkpoint: the stream sequence up to which every message is settled.
fn ingested(file: &FileHandle) -> Result<u64, SyncError> {
    Ok(file
        .foreign_log()?
        .side(INGEST_SIDE)?
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0))
}

fn adopted(file: &FileHandle) -> Result<Vec<(NodeId, u64)>, SyncError> {
    Ok(file
        .foreign_log()?
        .side(ADOPTED_SIDE)?
        .and_then(|b| rmp_serde::from_slice(&b).ok())
        .unwrap_or_default())
}

/// The merged state of a synced file, folded from its log alone (what `elfiee replay` shows
/// for it); `None` for a file that was never synced.
pub fn synced_state(file: &FileHandle, registry: Registry) -> Result<Option<State>, SyncError> {
    Core::replay(file, registry)
}

/// The side records a device that joins a document starts with (its node, the broker and
/// the document's name), for [`elfiee_engine::ForeignLog::append`] on an empty file.
pub fn join_records(node: &NodeId, url: &str, doc: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (NODE_SIDE.to_vec(), node.0.to_vec()),
        (CONFIG_SIDE.to_vec(), config_record(url, doc)),
    ]
}

/// The `sync.config` side record: the broker and the document's name, as JSON.
fn config_record(url: &str, doc: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"url": url, "doc": doc})).unwrap_or_default()
}

/// The broker URL and document name a file was last synced with (`None`: never).
pub fn recorded_config(file: &FileHandle) -> Result<Option<(String, String)>, SyncError> {
    Ok(file
        .foreign_log()?
        .side(CONFIG_SIDE)?
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .map(|v| {
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (text("url"), text("doc"))
        }))
}

/// Checks a broker address before anything is recorded or started: a NATS URL with a host
/// (`nats://HOST:PORT`; a bare `HOST[:PORT]` means `nats://`, port 4222).
pub fn check_broker_url(url: &str) -> Result<(), String> {
    let hint = "give the broker as nats://HOST:PORT, e.g. nats://127.0.0.1:4222";
    let addr = url
        .parse::<async_nats::ServerAddr>()
        .map_err(|e| format!("'{url}' is not a NATS broker address ({e}); {hint}"))?;
    if addr.into_inner().host_str().is_none_or(str::is_empty) {
        return Err(format!("'{url}' names no host; {hint}"));
    }
    Ok(())
}

/// Whether `doc` may name a document on the broker: letters, digits, `-` and `_`.
pub fn valid_doc_name(doc: &str) -> bool {
    !doc.is_empty() && doc.chars().all(valid_doc_char)
}

/// A character a document name may hold.
pub fn valid_doc_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// The publisher's checkpoint name for a node (a copied file's earlier node has its own).
pub fn publish_checkpoint(node: &NodeId) -> String {
    format!("{PUBLISH_CHECKPOINT}.{}", &node.to_hex()[..16])
}

/// How to reach the broker, and as whom.
#[derive(Clone)]
pub struct SyncConfig {
    /// `nats://HOST:PORT`.
    pub url: String,
    /// The document's name on the broker: stream `ELF_<doc>`, subjects `elf.<doc>.…`.
    /// Letters, digits, `-` and `_`.
    pub doc: String,
    /// This device's key seed (32 bytes; see [`NodeKey::from_seed`]).
    pub key_seed: [u8; 32],
    /// The stream's duplicate window (when this node creates the stream).
    pub duplicate_window: Duration,
    /// Most messages ingest fetches and stores in one batch.
    pub batch: usize,
    /// Most events the publisher has in flight (published, not yet acknowledged).
    pub in_flight: usize,
    /// First pause after the broker failed; doubles up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// How long a request to the broker may take.
    pub timeout: Duration,
}

impl SyncConfig {
    pub fn new(url: impl Into<String>, doc: impl Into<String>, key_seed: [u8; 32]) -> SyncConfig {
        SyncConfig {
            url: url.into(),
            doc: doc.into(),
            key_seed,
            duplicate_window: Duration::from_secs(120),
            batch: 512,
            in_flight: 256,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
        }
    }

    fn stream(&self) -> String {
        format!("ELF_{}", self.doc)
    }

    fn events_subject(&self, node: &NodeId) -> String {
        format!("elf.{}.ev.{}", self.doc, node.to_hex())
    }

    fn blob_subject(&self, r: &ContentRef) -> String {
        format!("elf.{}.blob.{}", self.doc, r.hash.to_hex())
    }
}

/// What went wrong in sync. None of it is an error of a local command.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SyncError {
    #[error("event {origin}:{origin_seq} from the broker was rejected: {reason}")]
    Rejected {
        origin: String,
        origin_seq: u64,
        reason: Rejection,
    },
    #[error("the document name '{0}' may only hold letters, digits, '-' and '_'")]
    BadName(String),
    #[error("{0}")]
    Engine(String),
}

impl From<EngineError> for SyncError {
    fn from(e: EngineError) -> SyncError {
        SyncError::Engine(e.to_string())
    }
}

/// How far this device is in step with the broker.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SyncStatus {
    /// This device's node id.
    pub node: String,
    pub doc: String,
    pub broker: String,
    /// The broker answered the last request.
    pub online: bool,
    /// The document's first node, once known.
    pub genesis: Option<String>,
    /// This node may publish (it is the first node, or the owner added it).
    pub member: bool,
    /// This device's own events, sealed.
    pub own_events: u64,
    /// Own events the broker acknowledged.
    pub published: u64,
    /// Own events not yet acknowledged.
    pub to_publish: u64,
    /// Stream sequence of the last message ingest stored.
    pub ingested: u64,
    /// Messages on the consumer not yet delivered to ingest (as of its last look).
    pub to_ingest: u64,
    /// Events in the merged state (every node's).
    pub events: u64,
    /// The merged state's digest.
    pub digest: String,
    /// Events ingest refused, newest last (at most 100 kept).
    pub rejected: Vec<String>,
    pub last_error: Option<String>,
}

/// The merged state and what the follower remembers.
struct Core {
    replica: Replica,
    /// This node, and its key when this is the live node (`replay` seals without one).
    node: NodeId,
    key: Option<NodeKey>,
    /// Last local seq folded in.
    followed: u64,
    /// This node's sealed events, by origin seq - 1.
    own: Vec<SyncEvent>,
    /// Per other node, its latest event in log order.
    heads: BTreeMap<NodeId, EventId>,
    /// Per node, its events' ids by origin seq - 1 (stored or about to be).
    chains: HashMap<NodeId, Vec<EventId>>,
    /// Event id → local seq.
    ids: HashMap<EventId, u64>,
    /// Nodes this file was synced as before it came to this one (a copied `.elf`): the local
    /// events up to each `through` seq are that node's.
    adopted: Vec<(NodeId, u64)>,
}

impl Core {
    fn new(registry: Registry, node: NodeId, key: Option<NodeKey>) -> Core {
        Core {
            replica: Replica::new(registry),
            node,
            key,
            followed: 0,
            own: Vec::new(),
            heads: BTreeMap::new(),
            chains: HashMap::new(),
            ids: HashMap::new(),
            adopted: Vec::new(),
        }
    }

    /// The merged state as a fresh node over `file`'s log would fold it (for `replay`: no key
    /// needed, ids and merge order do not depend on signatures).
    pub fn replay(file: &FileHandle, registry: Registry) -> Result<Option<State>, SyncError> {
        let Some(node) = recorded_node(file)? else {
            return Ok(None);
        };
        let mut core = Core::new(registry, node, None);
        core.adopted = adopted(file)?;
        core.catch_up(file)?;
        Ok(Some(core.replica.state().clone()))
    }

    /// Folds the log's events after `followed` into the merged state.
    fn catch_up(&mut self, file: &FileHandle) -> Result<bool, SyncError> {
        self.catch_up_with(file, BTreeMap::new())
    }

    /// [`Core::catch_up`] told the foreign events just appended (by local seq), which then
    /// need not be read back and decoded; when they are all that is new, the log is not read.
    fn catch_up_with(
        &mut self,
        file: &FileHandle,
        mut known: BTreeMap<u64, SyncEvent>,
    ) -> Result<bool, SyncError> {
        let last = file.last_seq();
        if last <= self.followed {
            return Ok(false);
        }
        known.retain(|seq, _| *seq > self.followed);
        let mut batch = Vec::new();
        if known.len() as u64 == last - self.followed {
            for (seq, sealed) in known {
                self.follow(seq, sealed, &mut batch);
            }
        } else {
            for e in file.events(self.followed + 1)? {
                let sealed = match known.remove(&e.seq) {
                    Some(s) => s,
                    None => self.read_sealed(file, &e)?,
                };
                self.follow(e.seq, sealed, &mut batch);
            }
        }
        // One fold for the lot (one rollback at most when some sort before applied ones).
        if let Err(why) = self.replica.add_many(&batch) {
            // Ingest stores an event only after what it names, so this is a damaged log.
            return Err(SyncError::Engine(format!(
                "the log's events {}..={} cannot join the merge: {why:?}",
                batch.first().map_or(0, |e| self.ids[&e.id]),
                self.followed
            )));
        }
        Ok(true)
    }

    /// Takes local event `seq`, sealed, into the follower's books and `batch`; another node's
    /// becomes that node's head (what the next own event depends on).
    fn follow(&mut self, seq: u64, sealed: SyncEvent, batch: &mut Vec<SyncEvent>) {
        if sealed.origin.node != self.node {
            self.heads.insert(sealed.origin.node, sealed.id);
        }
        self.chains
            .entry(sealed.origin.node)
            .or_default()
            .push(sealed.id);
        self.ids.insert(sealed.id, seq);
        if sealed.origin.node == self.node {
            self.own.push(sealed.clone());
        }
        batch.push(sealed);
        self.followed = seq;
    }

    /// The sealed form of local event `e` as read from the log: the origin kept with a
    /// foreign one, else sealed here (by this node, or by the node a copied file adopted).
    fn read_sealed(&self, file: &FileHandle, e: &Event) -> Result<SyncEvent, SyncError> {
        let seq = e.seq;
        match file.foreign_log()?.origin(seq)? {
            Some(bytes) => SyncEvent::decode(&bytes)
                .map_err(|r| SyncError::Engine(format!("the origin kept with event {seq}: {r}"))),
            None => {
                let author = self
                    .adopted
                    .iter()
                    .find(|(_, through)| seq <= *through)
                    .map_or(self.node, |(n, _)| *n);
                self.seal(file, e, author)
            }
        }
    }

    /// Seals an event written on this device (see the module docs): by this node, or by the
    /// node the file was synced as before it was copied here (`author`, unsigned: that node
    /// published it).
    fn seal(&self, file: &FileHandle, e: &Event, author: NodeId) -> Result<SyncEvent, SyncError> {
        // Events from before the file recorded commands: the event's kind on its entity.
        let (cap, target) = file
            .foreign_log()?
            .command_of(e.seq)?
            .unwrap_or_else(|| (e.cap_id().to_owned(), Some(e.entity.clone())));
        let chain = self.chains.get(&author).map_or(&[][..], |c| c);
        let origin = Origin {
            node: author,
            seq: chain.len() as u64 + 1,
            prev: chain.last().copied(),
            deps: self
                .heads
                .iter()
                .filter(|(n, _)| **n != author)
                .map(|(_, id)| *id)
                .collect(),
        };
        let key = self.key.as_ref().filter(|_| author == self.node);
        Ok(SyncEvent::seal_parts(key, origin, cap, target, e))
    }
}

/// Shared by the handle and the two children.
struct Inner {
    file: FileHandle,
    config: SyncConfig,
    node: NodeId,
    core: Mutex<Core>,
    /// New own events to publish, or a new member list.
    wake_publisher: Notify,
    status: watch::Sender<SyncStatus>,
    client: async_nats::Client,
    /// Changes when the client connects or loses its connection.
    connection_events: watch::Receiver<u64>,
    /// Events ingest refused, newest last (at most 100 kept).
    rejected: Mutex<Vec<SyncError>>,
    /// The publisher's checkpoint ([`publish_checkpoint`]).
    checkpoint_name: String,
    /// Members' decoded keys.
    keys: Mutex<Keys>,
}

/// A document synced on this device. Cloning gives another handle to the same node.
#[derive(Clone)]
pub struct SyncNode {
    inner: Arc<Inner>,
}

impl SyncNode {
    /// Turns sync on for an open file (this process must own it): rebuilds the merged state
    /// from the log, then starts `SyncPublisher` and `SyncIngest` under the file actor. The
    /// broker need not be reachable.
    pub async fn start(
        file: FileHandle,
        registry: Registry,
        config: SyncConfig,
    ) -> Result<SyncNode, SyncError> {
        check_broker_url(&config.url).map_err(SyncError::Engine)?;
        if !valid_doc_name(&config.doc) {
            return Err(SyncError::BadName(config.doc.clone()));
        }
        file.foreign_log()?.record_commands(true);
        let key = NodeKey::from_seed(config.key_seed);
        let node = key.node();
        // Which node this file is synced as; a copy from another device adopts that node's
        // events (they are published by it) and goes on as this one.
        let mut adopted = adopted(&file)?;
        let mut side = Vec::new();
        match recorded_node(&file)? {
            Some(n) if n == node => {}
            earlier => {
                if let Some(n) = earlier {
                    adopted.retain(|(a, _)| *a != node);
                    adopted.push((n, file.last_seq()));
                    side.push((
                        ADOPTED_SIDE.to_vec(),
                        rmp_serde::to_vec(&adopted).unwrap_or_default(),
                    ));
                }
                side.push((NODE_SIDE.to_vec(), node.0.to_vec()));
            }
        }
        let recorded = config_record(&config.url, &config.doc);
        if file.foreign_log()?.side(CONFIG_SIDE)?.as_deref() != Some(&recorded[..]) {
            side.push((CONFIG_SIDE.to_vec(), recorded));
        }
        if !side.is_empty() {
            file.foreign_log()?.append(Vec::new(), side).await?;
        }
        let mut core = Core::new(registry, node, Some(key));
        core.adopted = adopted;
        core.catch_up(&file)?;
        // Ticks when the client connects or loses its connection (it tells at once when the
        // socket closes), for ingest to stop waiting on a fetch from a broker that is gone.
        let (tick, connection_events) = watch::channel(0u64);
        let client = async_nats::ConnectOptions::new()
            .event_callback(move |event| {
                if matches!(
                    event,
                    async_nats::Event::Connected
                        | async_nats::Event::Disconnected
                        | async_nats::Event::Closed
                ) {
                    tick.send_modify(|n| *n += 1);
                }
                std::future::ready(())
            })
            .retry_on_initial_connect()
            .connection_timeout(config.timeout)
            .request_timeout(Some(config.timeout))
            .connect(config.url.as_str())
            .await
            .map_err(|e| SyncError::Engine(format!("cannot use the broker URL: {e}")))?;
        let (status, _) = watch::channel(SyncStatus {
            node: node.to_hex(),
            doc: config.doc.clone(),
            broker: config.url.clone(),
            ..Default::default()
        });
        let inner = Arc::new(Inner {
            file: file.clone(),
            config,
            node,
            core: Mutex::new(core),
            wake_publisher: Notify::new(),
            status,
            client,
            connection_events,
            rejected: Mutex::new(Vec::new()),
            checkpoint_name: publish_checkpoint(&node),
            keys: Mutex::new(Keys::default()),
        });
        inner.refresh_status(|_| {});
        // Readers of the file see the merged state.
        file.foreign_log()?
            .set_view(Some(Arc::new(MergedView(Arc::downgrade(&inner)))));
        for role in [Role::Follower, Role::Publisher, Role::Ingest] {
            let inner = inner.clone();
            let spec = elfiee_engine::tree::ChildSpec {
                name: format!("sync:{}", role.name()),
                start: Arc::new(move |supervisor: ActorCell| {
                    let inner = inner.clone();
                    Box::pin(async move {
                        Actor::spawn_linked(None, LoopActor, (inner, role), supervisor)
                            .await
                            .map(|(a, _)| a.get_cell())
                            .map_err(|e| e.to_string())
                    })
                }),
                restart: elfiee_engine::tree::RestartPolicy {
                    max_failures: u32::MAX,
                    ..Default::default()
                },
            };
            file.supervise(spec).await?;
        }
        Ok(SyncNode { inner })
    }

    pub fn node(&self) -> NodeId {
        self.inner.node
    }

    pub fn file(&self) -> &FileHandle {
        &self.inner.file
    }

    /// The merged state (every node's events folded in merge order), up to date with the
    /// local log.
    pub fn state(&self) -> Result<State, SyncError> {
        let mut core = self.inner.lock();
        core.catch_up(&self.inner.file)?;
        Ok(core.replica.state().clone())
    }

    /// The merged state's digest: equal on every node holding the same events.
    pub fn digest(&self) -> Result<String, SyncError> {
        let mut core = self.inner.lock();
        core.catch_up(&self.inner.file)?;
        Ok(core.replica.digest())
    }

    /// Ids of every event in the merged state (every node's).
    pub fn event_ids(&self) -> Result<Vec<EventId>, SyncError> {
        let mut core = self.inner.lock();
        core.catch_up(&self.inner.file)?;
        Ok(core.ids.keys().copied().collect())
    }

    /// Bytes of this node's last sealed event as it travels (for the benchmark).
    pub fn last_own_event_size(&self) -> Option<usize> {
        self.inner.lock().own.last().map(|e| e.encode().len())
    }

    /// The local seq of an event, by its id.
    pub fn local_seq(&self, id: &EventId) -> Option<u64> {
        self.inner.lock().ids.get(id).copied()
    }

    /// The status now, with the merged state's digest (subscribers get it without).
    pub fn status(&self) -> SyncStatus {
        let _ = self.inner.catch_up();
        self.inner.refresh_status(|_| {});
        let mut s = self.inner.status.borrow().clone();
        s.digest = self.inner.lock().replica.digest();
        s
    }

    /// Events from the broker that were refused (forged or broken), newest last.
    pub fn rejected(&self) -> Vec<SyncError> {
        self.inner
            .rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Status changes (online, offline, behind by n).
    pub fn subscribe(&self) -> watch::Receiver<SyncStatus> {
        self.inner.status.subscribe()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn catch_up(&self) -> Result<(), SyncError> {
        self.catch_up_with(BTreeMap::new())
    }

    fn catch_up_with(&self, known: BTreeMap<u64, SyncEvent>) -> Result<(), SyncError> {
        let moved = self.lock().catch_up_with(&self.file, known)?;
        if moved {
            self.wake_publisher.notify_one();
            self.refresh_status(|_| {});
        }
        Ok(())
    }

    /// Recomputes the counts in the status, applies `change`, and tells subscribers when
    /// something moved.
    fn refresh_status(&self, change: impl FnOnce(&mut SyncStatus)) {
        let (own, events, member, genesis) = {
            let core = self.lock();
            let genesis = self.genesis();
            (
                core.own.len() as u64,
                core.replica.len() as u64,
                self.is_member(core.replica.state(), genesis.as_ref()),
                genesis,
            )
        };
        let published = self.file.checkpoint(&self.checkpoint_name).unwrap_or(0);
        let ingested = ingested(&self.file).unwrap_or(0);
        self.status.send_if_modified(|s| {
            let before = s.clone();
            s.own_events = own;
            s.published = published.min(own);
            s.to_publish = own.saturating_sub(published);
            s.ingested = ingested;
            s.events = events;
            s.member = member;
            s.genesis = genesis.map(|g| g.to_hex());
            change(s);
            *s != before
        });
    }

    fn genesis(&self) -> Option<NodeId> {
        side_node(&self.file, GENESIS_SIDE).ok().flatten()
    }

    fn is_member(&self, state: &State, genesis: Option<&NodeId>) -> bool {
        genesis == Some(&self.node) || crate::membership::members(state).contains_key(&self.node)
    }

    fn js(&self) -> jetstream::Context {
        jetstream::context::ContextBuilder::new()
            .timeout(self.config.timeout)
            .build(self.client.clone())
    }

    /// Returns once the client is not connected (at once if it is not now). The client
    /// queues its event before it updates its state, so the state is looked at again after
    /// each event and every second.
    async fn disconnected(&self) {
        let mut events = self.connection_events.clone();
        while self.client.connection_state() == async_nats::connection::State::Connected {
            let _ = tokio::time::timeout(Duration::from_secs(1), events.changed()).await;
        }
    }

    fn offline(&self, why: String) {
        tracing::debug!(node = %self.node, error = %why, "sync: broker unreachable; retrying");
        self.refresh_status(|s| {
            s.online = false;
            s.last_error = Some(why);
        });
    }

    fn online(&self) {
        self.refresh_status(|s| s.online = true);
    }

    /// The document's stream, waiting (status offline, with backoff) until the broker and the
    /// stream are there.
    async fn stream_when_ready(
        &self,
        js: &jetstream::Context,
        backoff: &mut Backoff,
    ) -> jetstream::stream::Stream {
        loop {
            match self.stream(js).await {
                Ok(s) => return s,
                Err(e) => {
                    self.offline(e);
                    backoff.wait().await;
                }
            }
        }
    }

    /// The document's stream, made by the first node (a document with events of its own and
    /// none from elsewhere), which records itself as the genesis in the stream's description.
    /// A node that joins waits until the stream exists and records its genesis.
    async fn stream(&self, js: &jetstream::Context) -> Result<jetstream::stream::Stream, String> {
        let name = self.config.stream();
        let mut stream = match js.get_stream(&name).await {
            Ok(s) => s,
            Err(e)
                if matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) =>
            {
                let founder = {
                    let core = self.lock();
                    !core.own.is_empty() && core.own.len() == core.replica.len()
                };
                if !founder {
                    return Err(format!(
                        "the document's stream {name} does not exist yet; waiting for its first device"
                    ));
                }
                js.get_or_create_stream(jetstream::stream::Config {
                    name: name.clone(),
                    subjects: vec![format!("elf.{}.>", self.config.doc)],
                    duplicate_window: self.config.duplicate_window,
                    description: Some(format!("elfiee genesis={}", self.node.to_hex())),
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("cannot create the stream {name}: {e}"))?
            }
            Err(e) => return Err(format!("cannot reach the stream {name}: {e}")),
        };
        if self.genesis().is_none() {
            let info = stream.info().await.map_err(|e| e.to_string())?;
            let genesis = info
                .config
                .description
                .as_deref()
                .and_then(|d| d.strip_prefix("elfiee genesis="))
                .and_then(NodeId::from_hex)
                .ok_or_else(|| format!("the stream {name} does not name its first device"))?;
            self.file
                .foreign_log()
                .map_err(|e| e.to_string())?
                .append(
                    Vec::new(),
                    vec![(GENESIS_SIDE.to_vec(), genesis.0.to_vec())],
                )
                .await
                .map_err(|e| e.to_string())?;
            self.wake_publisher.notify_one();
        }
        Ok(stream)
    }
}

/// The merged state as the file's readers' view ([`elfiee_engine::ForeignLog::set_view`]).
struct MergedView(std::sync::Weak<Inner>);

impl elfiee_engine::StateView for MergedView {
    fn view(&self, f: &mut dyn FnMut(&State)) {
        if let Some(inner) = self.0.upgrade() {
            let mut core = inner.lock();
            if let Err(e) = core.catch_up(&inner.file) {
                tracing::warn!(error = %e, "sync: the merged state could not catch up");
            }
            f(core.replica.state());
        }
    }
}

/// The status of a synced file that no process is syncing now, from its log; with
/// `ask_broker`, the broker (at the recorded URL) is asked how much waits for this node.
/// `None` for a file that was never synced.
pub async fn offline_status(
    file: &FileHandle,
    registry: Registry,
    ask_broker: Option<Duration>,
) -> Result<Option<SyncStatus>, SyncError> {
    let Some(node) = recorded_node(file)? else {
        return Ok(None);
    };
    let mut core = Core::new(registry, node, None);
    core.adopted = adopted(file)?;
    core.catch_up(file)?;
    let (broker, doc) = recorded_config(file)?.unwrap_or_default();
    let genesis = side_node(file, GENESIS_SIDE)?;
    let own = core.own.len() as u64;
    let published = file.checkpoint(&publish_checkpoint(&node))?;
    let mut status = SyncStatus {
        node: node.to_hex(),
        doc,
        broker,
        online: false,
        genesis: genesis.map(|g| g.to_hex()),
        member: genesis == Some(node)
            || crate::membership::members(core.replica.state()).contains_key(&node),
        own_events: own,
        published: published.min(own),
        to_publish: own.saturating_sub(published),
        ingested: ingested(file)?,
        to_ingest: 0,
        events: core.replica.len() as u64,
        digest: core.replica.digest(),
        rejected: Vec::new(),
        last_error: None,
    };
    if let Some(wait) = ask_broker.filter(|_| !status.broker.is_empty()) {
        let asked = tokio::time::timeout(wait, async {
            let client = async_nats::connect(status.broker.as_str())
                .await
                .map_err(|e| e.to_string())?;
            let js = jetstream::new(client);
            let stream = js
                .get_stream(format!("ELF_{}", status.doc))
                .await
                .map_err(|e| e.to_string())?;
            let name = format!("node-{}", &node.to_hex()[..32]);
            let pending = match stream.get_consumer::<consumer::pull::Config>(&name).await {
                Ok(mut c) => c.info().await.map_err(|e| e.to_string())?.num_pending,
                // Never ingested: everything on the stream waits.
                Err(_) => {
                    stream
                        .get_info()
                        .await
                        .map_err(|e| e.to_string())?
                        .state
                        .messages
                }
            };
            Ok::<u64, String>(pending)
        })
        .await;
        match asked {
            Ok(Ok(pending)) => {
                status.online = true;
                status.to_ingest = pending;
            }
            Ok(Err(e)) => status.last_error = Some(format!("the broker: {e}")),
            Err(_) => {
                status.last_error = Some(format!("the broker did not answer within {wait:?}"))
            }
        }
    }
    Ok(Some(status))
}
