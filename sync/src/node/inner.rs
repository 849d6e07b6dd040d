//! What the node's handle and its two children share: the merged state and what the
//! follower remembers ([`Core`]), and [`Inner`] (the file, the broker client, the status).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self};
use elfiee_capabilities::Registry;
use elfiee_engine::FileHandle;
use elfiee_model::{Event, EventPlace};
use elfiee_projections::State;
use tokio::sync::{watch, Notify};

use crate::envelope::Outgoing;
use crate::identity::{EventId, Keys, NodeId, NodeKey, Origin, SyncEvent};
use crate::replica::Replica;

use super::records::*;
use super::types::*;

/// The merged state and what the follower remembers.
pub(super) struct Core {
    pub(super) replica: Replica,
    /// This node. Its events are sealed without a signature: the publisher signs each
    /// envelope (see [`crate::envelope`]).
    pub(super) node: NodeId,
    /// Last local seq folded in.
    pub(super) followed: u64,
    /// This node's sealed events as the publisher sends them, from origin seq
    /// `own_released + 1` on: the ones the broker acknowledged are let go
    /// ([`Core::release_own`]), so a long-running device does not keep every event it ever
    /// wrote.
    pub(super) own: std::collections::VecDeque<Outgoing>,
    /// How many of this node's first sealed events were let go (all acknowledged).
    pub(super) own_released: u64,
    /// Per node, its events' ids by origin seq - 1 (stored or about to be); the last of
    /// another node's is its head (what the next own event depends on).
    pub(super) chains: BTreeMap<NodeId, Vec<EventId>>,
    /// Event id → local seq.
    pub(super) ids: HashMap<EventId, u64>,
    /// By local seq - 1: the node that committed the event and its origin seq there.
    pub(super) located: Vec<(NodeId, u64)>,
    /// The first local seq whose own events are sealed with their event id and hash
    /// ([`IDENTITY_SIDE`]).
    pub(super) identity_from: u64,
    /// Nodes this file was synced as before it came to this one (a copied `.elf`): the local
    /// events up to each `through` seq are that node's.
    pub(super) adopted: Vec<(NodeId, u64)>,
    /// Signalled each time an own event joins `own`, whoever folded it: the follower, or a
    /// reader of the merged view (an owner-socket client's first copy of the state, `serve
    /// --json`'s notes) that caught the books up first. The publisher waits on it
    /// ([`Inner::wake_publisher`] is the same `Notify`); tying the wake to the follower alone
    /// left those events to the publisher's one-second poll (issue 40).
    pub(super) own_grew: Arc<Notify>,
    /// Counts the `node.add`s and `node.remove`s folded: who holds the document may have
    /// changed, so the keys are kept again ([`Inner::writing_key`]'s cache, the publisher's
    /// sealing of copies to a device just added, without waiting for a quiet moment).
    pub(super) members_epoch: u64,
}

impl Core {
    pub(super) fn new(registry: Registry, node: NodeId) -> Core {
        Core {
            replica: Replica::new(registry),
            node,
            followed: 0,
            own: Default::default(),
            own_released: 0,
            chains: BTreeMap::new(),
            ids: HashMap::new(),
            located: Vec::new(),
            identity_from: 1,
            adopted: Vec::new(),
            own_grew: Arc::new(Notify::new()),
            members_epoch: 0,
        }
    }

    /// The follower a fresh node over `file`'s log would be, caught up: the node the file
    /// records, its adopted nodes, no key (ids and merge order do not depend on signatures).
    /// `None` for a file that was never synced.
    pub(super) fn from_log(
        file: &FileHandle,
        registry: Registry,
    ) -> Result<Option<Core>, SyncError> {
        let foreign = file.foreign_log()?;
        let Some(node) = recorded_node(&foreign)? else {
            return Ok(None);
        };
        let mut core = Core::new(registry, node);
        core.adopted = adopted(&foreign)?;
        core.identity_from = identity_from(&foreign)?;
        core.catch_up(file)?;
        Ok(Some(core))
    }

    /// The merged state as a fresh node over `file`'s log would fold it (for `replay`).
    pub fn replay(file: &FileHandle, registry: Registry) -> Result<Option<State>, SyncError> {
        Ok(Core::from_log(file, registry)?.map(|core| core.replica.state().clone()))
    }

    /// This node's events sealed so far (released or not).
    pub(super) fn own_count(&self) -> u64 {
        self.own_released + self.own.len() as u64
    }

    /// Lets go of this node's sealed events up to origin seq `acked` (the broker has them:
    /// the publisher never sends them again), but the last one (its size is a figure of the
    /// bench).
    pub(super) fn release_own(&mut self, acked: u64) {
        while self.own_released < acked && self.own.len() > 1 {
            self.own.pop_front();
            self.own_released += 1;
        }
    }

    /// This node's sealed events from origin seq `from` on, as the publisher sends them
    /// (from the first one held when `from` was let go: those the broker acknowledged).
    pub(super) fn own_from(&self, from: u64) -> impl Iterator<Item = &Outgoing> {
        let skip = from.saturating_sub(1).saturating_sub(self.own_released) as usize;
        self.own.iter().skip(skip)
    }

    /// Whether this node may publish: it is the document's first node (`genesis`), or the
    /// merged state's members list names it.
    pub(super) fn is_member(&self, genesis: Option<&NodeId>) -> bool {
        crate::membership::current(self.replica.state(), genesis).contains(&self.node)
    }

    /// Per removed node, its events after its removal: stored, refused at merge.
    pub(super) fn refused(&self) -> BTreeMap<NodeId, u64> {
        self.replica.refused()
    }

    /// What the status counts of this follower ([`Counts`]); `genesis` is the document's
    /// first node.
    pub(super) fn counts(&self, genesis: Option<NodeId>) -> Counts {
        Counts {
            own: self.own_count(),
            events: self.replica.len() as u64,
            member: self.is_member(genesis.as_ref()),
            removed: crate::membership::removed(self.replica.state()).contains_key(&self.node),
            refused: self.refused(),
            genesis,
        }
    }

    /// Folds the log's events after `followed` into the merged state.
    pub(super) fn catch_up(&mut self, file: &FileHandle) -> Result<bool, SyncError> {
        self.catch_up_from(file, BTreeMap::new(), Vec::new())
    }

    /// [`Core::catch_up`], told the foreign events just appended (`known`, by local seq) and
    /// committed events (`seen`, in seq order), which need not be read back and decoded; when
    /// they cover everything new, the log is not read for the events.
    pub(super) fn catch_up_from(
        &mut self,
        file: &FileHandle,
        mut known: BTreeMap<u64, SyncEvent>,
        mut seen: Vec<Event>,
    ) -> Result<bool, SyncError> {
        known.retain(|seq, _| *seq > self.followed);
        seen.retain(|e| e.seq > self.followed);
        // The committed events the follower was told of, when they follow on from what it
        // folded: they are folded alone (the ones committed since come to it next), so the
        // log is not read back for them.
        let told = seen.first().is_some_and(|e| e.seq == self.followed + 1)
            && seen.windows(2).all(|w| w[1].seq == w[0].seq + 1);
        let last = match seen.last() {
            Some(e) if told => e.seq,
            _ => file.last_seq(),
        };
        if last <= self.followed {
            return Ok(false);
        }
        let covered = told && seen.len() as u64 == last - self.followed;
        let mut batch = Vec::new();
        if known.len() as u64 == last - self.followed {
            for (seq, sealed) in known {
                self.follow(seq, sealed, None, &mut batch);
            }
        } else {
            // The events, then what is kept beside them, by range: no storage read per event.
            let foreign = file.foreign_log()?;
            let events = if covered {
                seen
            } else {
                file.events(self.followed + 1)?
            };
            let (from, to) = match (events.first(), events.last()) {
                (Some(f), Some(l)) => (f.seq, l.seq),
                _ => return Ok(false),
            };
            let mut origins: BTreeMap<u64, Vec<u8>> =
                foreign.origins(from, to)?.into_iter().collect();
            let mut commands = foreign.commands(from, to)?;
            for e in events {
                let (sealed, bytes) = match (known.remove(&e.seq), origins.remove(&e.seq)) {
                    (Some(s), _) => (s, None),
                    (None, Some(bytes)) => {
                        let kept = SyncEvent::from_kept(&bytes, &e).map_err(|r| {
                            SyncError::Engine(format!("the origin kept with event {}: {r}", e.seq))
                        })?;
                        (kept, None)
                    }
                    (None, None) => {
                        let command = commands.remove(&e.seq);
                        let (sealed, bytes) = self.seal_own(&e, command);
                        (sealed, Some(bytes))
                    }
                };
                self.follow(e.seq, sealed, bytes, &mut batch);
            }
        }
        // One fold for the lot (one rollback at most when some sort before applied ones).
        let first = batch.first().map_or(0, |e| self.ids[&e.id]);
        if let Err(why) = self.replica.add_many(batch) {
            // Ingest stores an event only after what it names, so this is a damaged log.
            return Err(SyncError::Engine(format!(
                "the log's events {first}..={} cannot join the merge: {why:?}",
                self.followed
            )));
        }
        Ok(true)
    }

    /// Takes local event `seq`, sealed, into the follower's books and `batch`; another node's
    /// becomes that node's head (what the next own event depends on). `bytes`: the bytes its
    /// id hashes, when the sealer has them (this node's events are kept as the publisher
    /// sends them).
    pub(super) fn follow(
        &mut self,
        seq: u64,
        sealed: SyncEvent,
        bytes: Option<Vec<u8>>,
        batch: &mut Vec<SyncEvent>,
    ) {
        self.chains
            .entry(sealed.origin.node)
            .or_default()
            .push(sealed.id);
        self.ids.insert(sealed.id, seq);
        self.located.push((sealed.origin.node, sealed.origin.seq));
        if sealed.cap.starts_with("node.") {
            self.members_epoch += 1;
            self.own_grew.notify_one();
        }
        if sealed.origin.node == self.node {
            self.own.push_back(Outgoing::of(&sealed, bytes));
            // A permit is kept when the publisher is not waiting yet: no wake is lost.
            self.own_grew.notify_one();
        }
        batch.push(sealed);
        self.followed = seq;
    }

    /// Where each of `events` (local events this follower has folded) sits: its origin
    /// (committing node, origin seq, its hash there) and its local seq and hash. The hashes
    /// of other devices' events come from what the log keeps beside them (one range read).
    pub(super) fn places(
        &self,
        foreign: &elfiee_engine::ForeignLog,
        events: &[Event],
    ) -> Result<Vec<Option<EventPlace>>, SyncError> {
        let (Some(from), Some(to)) = (
            events.iter().map(|e| e.seq).min(),
            events.iter().map(|e| e.seq).max(),
        ) else {
            return Ok(Vec::new());
        };
        let kept: HashMap<u64, Vec<u8>> = foreign.origins(from, to)?.into_iter().collect();
        Ok(events
            .iter()
            .map(|e| {
                let (node, origin_seq) = *self.located.get((e.seq as usize).checked_sub(1)?)?;
                let origin_hash = match kept.get(&e.seq) {
                    Some(bytes) => SyncEvent::from_kept(bytes, e).ok()?.hash,
                    None => Some(e.hash),
                };
                Some(EventPlace {
                    origin_node: node.to_hex(),
                    origin_seq,
                    origin_hash,
                    local_seq: e.seq,
                    local_hash: e.hash,
                })
            })
            .collect())
    }

    /// Seals an event written on this device (see the module docs) with the command it
    /// came from (`None` for events from before the file recorded commands: the event's kind
    /// on its entity): by this node, or by the node the file was synced as before it was
    /// copied here (that node published it).
    pub(super) fn seal_own(
        &self,
        e: &Event,
        command: Option<(String, Option<String>)>,
    ) -> (SyncEvent, Vec<u8>) {
        let (cap, target) =
            command.unwrap_or_else(|| (e.cap_id().to_owned(), Some(e.entity.clone())));
        let author = self
            .adopted
            .iter()
            .find(|(_, through)| e.seq <= *through)
            .map_or(self.node, |(n, _)| *n);
        let chain = self.chains.get(&author).map_or(&[][..], |c| c);
        let origin = Origin {
            node: author,
            seq: chain.len() as u64 + 1,
            prev: chain.last().copied(),
            // The other nodes' heads, in node order.
            deps: self
                .chains
                .iter()
                .filter(|(n, _)| **n != author && **n != self.node)
                .filter_map(|(_, chain)| chain.last().copied())
                .collect(),
        };
        let (mut sealed, mut bytes) = SyncEvent::sealed(origin, cap, target, e);
        if e.seq < self.identity_from {
            // Sealed (and published) by a build before issue 28: its id as that build made it.
            (sealed.event_id, sealed.hash) = (None, None);
            bytes = sealed.set_id();
        }
        (sealed, bytes)
    }
}

/// What the status counts of a follower's books (taken under its lock, written into the
/// status after).
pub(super) struct Counts {
    /// Own events sealed.
    own: u64,
    /// Events in the merged state.
    events: u64,
    member: bool,
    removed: bool,
    /// Per removed node, its events the merged state refused.
    refused: BTreeMap<NodeId, u64>,
    genesis: Option<NodeId>,
}

impl Counts {
    /// Writes the counts into `s`, with the publisher's checkpoint (`published`: the last own
    /// origin seq the broker acknowledged) and the ingest checkpoint.
    pub(super) fn write(&self, s: &mut SyncStatus, published: u64, ingested: u64) {
        s.own_events = self.own;
        s.published = published.min(self.own);
        s.to_publish = self.own.saturating_sub(published);
        s.ingested = ingested;
        s.events = self.events;
        s.member = self.member;
        s.removed = self.removed;
        s.genesis = self.genesis.map(|g| g.to_hex());
        s.refused_from_removed = self.refused.iter().map(|(n, k)| (n.to_hex(), *k)).collect();
    }
}

/// What the writing key depends on: the members epoch, whether the genesis is known, and how
/// many keys the device holds ([`Inner::writing_key`]).
pub(super) type WritingStamp = (u64, bool, usize);

/// Shared by the handle and the two children.
pub(super) struct Inner {
    pub(super) file: FileHandle,
    pub(super) config: SyncConfig,
    pub(super) node: NodeId,
    /// This node's key: the publisher signs envelopes with it.
    pub(super) key: NodeKey,
    pub(super) core: Mutex<Core>,
    /// New own events to publish ([`Core::own_grew`]), or a new member list.
    pub(super) wake_publisher: Arc<Notify>,
    pub(super) status: watch::Sender<SyncStatus>,
    pub(super) client: async_nats::Client,
    /// Changes when the client connects or loses its connection.
    pub(super) connection_events: watch::Receiver<u64>,
    /// What the broker or the client last reported against this connection (an
    /// authorization violation, a TLS failure), cleared on connect; added to offline reasons.
    pub(super) broker_said: Arc<Mutex<Option<String>>>,
    /// Events ingest refused, newest last (at most 100 kept).
    pub(super) rejected: Mutex<Vec<SyncError>>,
    /// The publisher's checkpoint ([`publish_checkpoint`]).
    pub(super) checkpoint_name: String,
    /// Members' decoded keys.
    pub(super) keys: Mutex<Keys>,
    /// The document keys this device holds (decision 0047).
    pub(super) keyring: Mutex<crate::encryption::Keyring>,
    /// What the keys were last kept for ([`KeptFor`]).
    pub(super) keys_kept_for: Mutex<KeptFor>,
    /// The key [`Inner::writing_key`] found, and for which members epoch, genesis and
    /// number of keys held.
    pub(super) writing: Mutex<Option<(WritingStamp, Option<crate::encryption::DocKey>)>>,
    /// The document's first node, once known ([`Inner::genesis`]).
    pub(super) genesis: std::sync::OnceLock<NodeId>,
}

impl Inner {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn catch_up(&self) -> Result<(), SyncError> {
        self.catch_up_from(BTreeMap::new(), Vec::new())
    }

    /// [`Core::catch_up_from`]; when it moved, wakes the publisher and refreshes the status.
    pub(super) fn catch_up_from(
        &self,
        known: BTreeMap<u64, SyncEvent>,
        seen: Vec<Event>,
    ) -> Result<(), SyncError> {
        let moved = self.lock().catch_up_from(&self.file, known, seen)?;
        if moved {
            self.wake_publisher.notify_one();
            self.refresh_status(|_| {});
        }
        Ok(())
    }

    /// Where each of `events` sits ([`Core::places`]), the merged state caught up first.
    pub(super) fn places(&self, events: &[Event]) -> Result<Vec<Option<EventPlace>>, SyncError> {
        let foreign = self.file.foreign_log()?;
        let mut core = self.lock();
        core.catch_up(&self.file)?;
        core.places(&foreign, events)
    }

    /// [`Inner::catch_up_from`] on a blocking thread: a long fold does not hold up the
    /// runtime's workers (the document's submitters run there).
    pub(super) async fn catch_up_blocking(
        self: &Arc<Self>,
        known: BTreeMap<u64, SyncEvent>,
        seen: Vec<Event>,
    ) -> Result<(), SyncError> {
        let inner = self.clone();
        tokio::task::spawn_blocking(move || inner.catch_up_from(known, seen))
            .await
            .map_err(|e| SyncError::Engine(format!("the merged state's fold failed: {e}")))?
    }

    /// Recomputes the counts in the status, applies `change`, and tells subscribers when
    /// something moved.
    pub(super) fn refresh_status(&self, change: impl FnOnce(&mut SyncStatus)) {
        let counts = {
            let core = self.lock();
            core.counts(self.genesis())
        };
        let published = self.file.checkpoint(&self.checkpoint_name).unwrap_or(0);
        let ingested = self
            .file
            .foreign_log()
            .map_err(SyncError::from)
            .and_then(|f| ingested(&f))
            .unwrap_or(0);
        let key_generation = self.writing_key().map(|k| k.gen);
        self.status.send_if_modified(|s| {
            let before = s.clone();
            counts.write(s, published, ingested);
            s.key_generation = key_generation;
            change(s);
            *s != before
        });
    }

    /// The document's first node, once the log records it (it never changes after: kept
    /// here, not read from storage at every status refresh and every batch).
    pub(super) fn genesis(&self) -> Option<NodeId> {
        if let Some(g) = self.genesis.get() {
            return Some(*g);
        }
        let foreign = self.file.foreign_log().ok()?;
        let g = side_node(&foreign, GENESIS_SIDE).ok().flatten()?;
        Some(*self.genesis.get_or_init(|| g))
    }

    pub(super) fn js(&self) -> jetstream::Context {
        jetstream::context::ContextBuilder::new()
            .timeout(self.config.timeout)
            .build(self.client.clone())
    }

    /// Returns once the client is not connected (at once if it is not now). The client
    /// queues its event before it updates its state, so the state is looked at again after
    /// each event and every second.
    pub(super) async fn disconnected(&self) {
        let mut events = self.connection_events.clone();
        while self.client.connection_state() == async_nats::connection::State::Connected {
            let _ = tokio::time::timeout(Duration::from_secs(1), events.changed()).await;
        }
    }

    /// Records a message ingest refused (the list and the status keep the newest 100).
    pub(super) fn reject(&self, err: SyncError) {
        tracing::warn!(error = %err, "sync: rejected a message from the broker");

        {
            let mut list = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
            list.push(err.clone());
            let n = list.len();
            if n > 100 {
                list.drain(..n - 100);
            }
        }
        self.refresh_status(|s| {
            s.rejected.push(err.to_string());
            let n = s.rejected.len();
            if n > 100 {
                s.rejected.drain(..n - 100);
            }
        });
    }

    pub(super) fn offline(&self, mut why: String) {
        if let Some(said) = self
            .broker_said
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            why = if said.contains("authorization") {
                format!("the broker refuses this device ({said}): were its credentials removed or changed? {why}")
            } else {
                format!("{why} (the broker: {said})")
            };
        }
        tracing::debug!(node = %self.node, error = %why, "sync: broker unreachable; retrying");
        self.refresh_status(|s| {
            s.online = false;
            s.last_error = Some(why);
        });
    }

    pub(super) fn online(&self) {
        self.refresh_status(|s| s.online = true);
    }

    /// The document's stream, waiting (status offline, with backoff) until the broker and the
    /// stream are there.
    pub(super) async fn stream_when_ready(
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
    pub(super) async fn stream(
        &self,
        js: &jetstream::Context,
    ) -> Result<jetstream::stream::Stream, String> {
        let name = self.config.stream();
        let mut stream = match js.get_stream(&name).await {
            Ok(s) => s,
            Err(e)
                if matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) =>
            {
                let founder = {
                    let core = self.lock();
                    core.own_count() > 0 && core.own_count() == core.replica.len() as u64
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
                    num_replicas: self.config.replicas.max(1),
                    description: Some(format!("elfiee genesis={}", self.node.to_hex())),
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("cannot create the stream {name}: {e}"))?
            }
            Err(e) => return Err(format!("cannot reach the stream {name}: {e}")),
        };
        self.look_at(&mut stream).await;
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

impl Inner {
    /// Asks the broker for the stream's replicas and cluster leader, into the status.
    pub(super) async fn look_at(&self, stream: &mut jetstream::stream::Stream) {
        if let Ok(info) = stream.info().await {
            let (replicas, leader) = crate::broker::replication(info);
            self.refresh_status(|s| {
                s.replicas = replicas;
                s.leader = leader;
            });
        }
    }
}

/// What the publisher says while this device lacks a key to write with.
pub(super) const WRITE_KEY_WAIT: &str = "waiting for this device's copy of the document key";
/// What ingest says while a message is sealed with a key this device lacks.
pub(super) const READ_KEY_WAIT: &str = "this device holds no copy of the document key";

/// Clears `last_error` when it is `said` (what it waited for came).
pub(super) fn forget(s: &mut SyncStatus, said: &str) {
    if s.last_error.as_deref().is_some_and(|e| e.starts_with(said)) {
        s.last_error = None;
    }
}

/// The merged state as the file's readers' view ([`elfiee_engine::ForeignLog::set_view`]).
pub(super) struct MergedView(pub(super) std::sync::Weak<Inner>);

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

    /// Where each event sits (`{"sync": EventPlace}`), for the events the merged state holds.
    fn notes(&self, events: &[Event]) -> Vec<Option<serde_json::Value>> {
        let none = || vec![None; events.len()];
        let Some(inner) = self.0.upgrade() else {
            return none();
        };
        match inner.places(events) {
            Ok(places) => places
                .into_iter()
                .map(|p| p.map(|p| serde_json::json!({ "sync": p })))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "sync: cannot tell where events sit");
                none()
            }
        }
    }
}

/// The merged state of a synced file, folded from its log alone (what `elfiee replay` shows
/// for it); `None` for a file that was never synced.
pub fn synced_state(file: &FileHandle, registry: Registry) -> Result<Option<State>, SyncError> {
    Core::replay(file, registry)
}
