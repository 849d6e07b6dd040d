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
//!   every event to the [`Replica`](crate::replica::Replica), whose fold in merge order is the document's state.
//! - **`SyncPublisher`** publishes this device's sealed events to `elf.<doc>.ev.<node>` as
//!   envelopes ([`crate::envelope`]: one signature per batch), one in flight at a time, with
//!   message id `<node>:<first origin seq>-<last>` and the subject's last stream sequence as
//!   expected; their bodies go first as 256 KiB chunks on `elf.<doc>.blob.<hash>`. It moves
//!   its checkpoint (`sync.publish` in `effect_checkpoints`) after each PubAck. When it
//!   starts it reads the last message on its subject (when this node signed it), so a lost
//!   or rolled-back checkpoint never stores an event twice.
//! - **`SyncIngest`** reads every node's event subject in stream order through an ordered
//!   pull consumer (no acks) that starts after its checkpoint; every reconnect starts a new
//!   one from there. It checks each envelope (one signature; membership, `prev`), fetches
//!   the chunks of bodies it lacks, and appends a batch with its checkpoint (the stream
//!   sequence of the batch's last message). A stored id is skipped, so a message read twice
//!   is harmless. A forged envelope is refused whole and reported as
//!   [`SyncError::Rejected`]. The follower folds the events ingest appended as ingest
//!   decoded them.
//!
//! Both children keep retrying with backoff while the broker is away. The status
//! ([`SyncStatus`]) tells subscribers whether the broker is reachable and how far each side
//! is behind. Local commands never wait for the broker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use elfiee_capabilities::Registry;
use elfiee_engine::FileHandle;
use elfiee_model::EventPlace;
use elfiee_projections::State;
use ractor::{Actor, ActorCell};
use tokio::sync::watch;

use crate::identity::{EventId, Keys, NodeId, NodeKey};

mod ingest;
mod inner;
mod keys;
mod publish;
mod records;
mod types;

pub use crate::broker::BrokerAccess;
pub use inner::synced_state;
use inner::*;
pub use keys::device_keyring;
use publish::*;
use records::*;
pub use records::{
    check_broker_url, join_records, publish_checkpoint, recorded_config, valid_doc_char,
    valid_doc_name, CHUNK, PUBLISH_CHECKPOINT,
};
pub use types::{SyncConfig, SyncError, SyncStatus};

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
        mut config: SyncConfig,
    ) -> Result<SyncNode, SyncError> {
        check_broker_url(&config.url).map_err(SyncError::Engine)?;
        // Credentials leave the URL before it is recorded or shown.
        (config.url, config.access) = config
            .access
            .clone()
            .from_url(&config.url)
            .map_err(SyncError::Engine)?;
        // A broker that refuses this device says so now, once, rather than being retried.
        config
            .access
            .check(&config.url, config.timeout)
            .await
            .map_err(|r| SyncError::Refused(r.0))?;
        if !valid_doc_name(&config.doc) {
            return Err(SyncError::BadName(config.doc.clone()));
        }
        let foreign = file.foreign_log()?;
        foreign.record_commands(true);
        let key = NodeKey::from_seed(config.key_seed);
        let node = key.node();
        // Which node this file is synced as; a copy from another device adopts that node's
        // events (they are published by it) and goes on as this one.
        let mut adopted = adopted(&foreign)?;
        let mut side = Vec::new();
        let synced_before = recorded_node(&foreign)?;
        if foreign.side(IDENTITY_SIDE)?.is_none() {
            // A file synced by a build before issue 28 keeps its events' ids as that build
            // sealed them; what is written from now on carries its event id and hash.
            let from = if synced_before.is_some() {
                file.last_seq() + 1
            } else {
                1
            };
            side.push((IDENTITY_SIDE.to_vec(), from.to_be_bytes().to_vec()));
        }
        match synced_before {
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
        if foreign.side(CONFIG_SIDE)?.as_deref() != Some(&recorded[..]) {
            side.push((CONFIG_SIDE.to_vec(), recorded));
        }
        if !side.is_empty() {
            foreign.append(Vec::new(), side).await?;
        }
        let mut core = Core::new(registry, node);
        core.adopted = adopted;
        core.identity_from = identity_from(&foreign)?;
        core.catch_up(&file)?;
        // Ticks when the client connects or loses its connection (it tells at once when the
        // socket closes), for ingest to stop waiting on a fetch from a broker that is gone.
        let (tick, connection_events) = watch::channel(0u64);
        // What the broker last said against this device (a refusal after a reconnect: the
        // credentials revoked, the certificate changed), for the status.
        let broker_said: Arc<Mutex<Option<String>>> = Arc::default();
        let said = broker_said.clone();
        let client = config
            .access
            .options()
            .await
            .map_err(|r| SyncError::Refused(r.0))?
            .event_callback(move |event| {
                if matches!(
                    event,
                    async_nats::Event::Connected
                        | async_nats::Event::Disconnected
                        | async_nats::Event::Closed
                ) {
                    tick.send_modify(|n| *n += 1);
                }
                let refusal = match &event {
                    async_nats::Event::ServerError(e) => Some(e.to_string()),
                    async_nats::Event::ClientError(async_nats::ClientError::Other(e)) => {
                        Some(e.clone())
                    }
                    async_nats::Event::Connected => {
                        *said.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        None
                    }
                    _ => None,
                };
                if let Some(r) = refusal {
                    *said.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
                std::future::ready(())
            })
            .retry_on_initial_connect()
            .connection_timeout(config.timeout)
            .request_timeout(Some(config.timeout))
            .connect(crate::broker::server_addrs(&config.url).map_err(SyncError::Engine)?)
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
            key,
            wake_publisher: core.own_grew.clone(),
            core: Mutex::new(core),
            status,
            client,
            connection_events,
            broker_said,
            rejected: Mutex::new(Vec::new()),
            checkpoint_name: publish_checkpoint(&node),
            keys: Mutex::new(Keys::default()),
            keyring: Mutex::default(),
            keys_kept_for: Mutex::default(),
            writing: Mutex::default(),
            genesis: std::sync::OnceLock::new(),
        });
        inner.refresh_status(|_| {});
        // Readers of the file see the merged state.
        foreign.set_view(Some(Arc::new(MergedView(Arc::downgrade(&inner)))));
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

    /// Bytes of this node's last sealed event as it travels inside an envelope (for the
    /// benchmark).
    pub fn last_own_event_size(&self) -> Option<usize> {
        self.inner.lock().own.back().map(|e| e.bytes.len() + 3)
    }

    /// How many of this node's sealed events it holds in memory for the publisher (those the
    /// broker has not acknowledged yet, and the last one); for tests.
    #[doc(hidden)]
    pub fn own_held(&self) -> usize {
        self.inner.lock().own.len()
    }

    /// Where each of `events` (this file's, as read from it) sits: the committing node, its
    /// origin seq and hash there (the same on every device), and its local seq and hash
    /// ([`EventPlace`]); `None` for an event the merged state does not hold yet.
    pub fn places(
        &self,
        events: &[elfiee_model::Event],
    ) -> Result<Vec<Option<EventPlace>>, SyncError> {
        self.inner.places(events)
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

/// [`SyncNode::places`] for a synced file that no process is syncing now (folded from its log);
/// `None` for a file that was never synced.
pub fn event_places(
    file: &FileHandle,
    registry: Registry,
    events: &[elfiee_model::Event],
) -> Result<Option<Vec<Option<EventPlace>>>, SyncError> {
    let Some(core) = Core::from_log(file, registry)? else {
        return Ok(None);
    };
    let foreign = file.foreign_log()?;
    core.places(&foreign, events).map(Some)
}

/// The status of a synced file that no process is syncing now, from its log; with
/// `ask_broker`, the broker (at the recorded URL) is asked how much waits for this node.
/// `None` for a file that was never synced.
pub async fn offline_status(
    file: &FileHandle,
    registry: Registry,
    ask_broker: Option<Duration>,
    access: &BrokerAccess,
) -> Result<Option<SyncStatus>, SyncError> {
    let Some(core) = Core::from_log(file, registry)? else {
        return Ok(None);
    };
    let node = core.node;
    let foreign = file.foreign_log()?;
    let (broker, doc) = recorded_config(file)?.unwrap_or_default();
    let genesis = side_node(&foreign, GENESIS_SIDE)?;
    let published = file.checkpoint(&publish_checkpoint(&node))?;
    let mut status = SyncStatus {
        node: node.to_hex(),
        doc,
        broker,
        online: false,
        to_ingest: 0,
        digest: core.replica.digest(),
        rejected: Vec::new(),
        last_error: None,
        ..Default::default()
    };
    core.counts(genesis)
        .write(&mut status, published, ingested(&foreign)?);
    if let Some(wait) = ask_broker.filter(|_| !status.broker.is_empty()) {
        let asked = tokio::time::timeout(wait, async {
            let (url, access) = access.clone().from_url(&status.broker)?;
            let client = access
                .options()
                .await
                .map_err(|r| r.0)?
                .connect(crate::broker::server_addrs(&url)?)
                .await
                .map_err(|e| e.to_string())?;
            let js = jetstream::new(client);
            let mut stream = js
                .get_stream(format!("ELF_{}", status.doc))
                .await
                .map_err(|e| e.to_string())?;
            if let Ok(info) = stream.info().await {
                (status.replicas, status.leader) = crate::broker::replication(info);
            }
            // How many event messages the stream holds past the ingest checkpoint: a
            // consumer that starts there says it (and goes again at once).
            let ingested = ingested(&foreign).map_err(|e| e.to_string())?;
            let c = stream
                .create_consumer(consumer::pull::Config {
                    filter_subject: format!("elf.{}.ev.>", status.doc),
                    deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: ingested + 1,
                    },
                    ack_policy: consumer::AckPolicy::None,
                    inactive_threshold: Duration::from_secs(5),
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            let pending = c.cached_info().num_pending;
            let name = c.cached_info().name.clone();
            let _ = stream.delete_consumer(&name).await;
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
