//! How to reach the broker ([`SyncConfig`]), what can go wrong ([`SyncError`]) and what a
//! device tells about its sync ([`SyncStatus`]).

use std::time::Duration;

use elfiee_engine::EngineError;
use elfiee_model::ContentRef;
use serde::Serialize;

use crate::broker::BrokerAccess;
use crate::encryption::DocKey;
use crate::identity::{NodeId, Rejection};

/// How to reach the broker, and as whom.
#[derive(Clone)]
pub struct SyncConfig {
    /// `nats://HOST:PORT` or `tls://HOST:PORT` (credentials in it move to `access` when the
    /// node starts, so they are neither recorded nor shown).
    pub url: String,
    /// TLS and credentials for the broker ([`BrokerAccess`]); kept in memory only.
    pub access: BrokerAccess,
    /// Copies of the document's stream the broker keeps (JetStream replicas: 1, or up to the
    /// cluster's size), when this node creates the stream; an existing stream keeps its own.
    pub replicas: usize,
    /// The document's name on the broker: stream `ELF_<doc>`, subjects `elf.<doc>.…`.
    /// Letters, digits, `-` and `_`.
    pub doc: String,
    /// This device's key seed (32 bytes; see [`NodeKey::from_seed`](crate::identity::NodeKey::from_seed)).
    pub key_seed: [u8; 32],
    /// The stream's duplicate window (when this node creates the stream).
    pub duplicate_window: Duration,
    /// Most messages ingest fetches and stores in one batch.
    pub batch: usize,
    /// Most events in one envelope (the publisher has one envelope in flight at a time;
    /// an envelope also stays under [`crate::envelope::ENVELOPE_BYTES`]). A receiver stores
    /// and folds an envelope whole before what follows it in the stream, so a large one
    /// holds up every other device's writes behind it: 256 events take a receiver a few ms
    /// (an envelope of 1,215 took 50 ms under a burst, where 4,096 were allowed).
    pub envelope_events: usize,
    /// First pause after the broker failed; doubles up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// How long a request to the broker may take.
    pub timeout: Duration,
    /// Writes issue 28's plain format (no encryption, no document keys): only for tests
    /// that need a stream of that format to read.
    #[doc(hidden)]
    pub legacy_format: bool,
}

impl SyncConfig {
    pub fn new(url: impl Into<String>, doc: impl Into<String>, key_seed: [u8; 32]) -> SyncConfig {
        SyncConfig {
            url: url.into(),
            access: BrokerAccess::default(),
            replicas: 1,
            doc: doc.into(),
            key_seed,
            duplicate_window: Duration::from_secs(120),
            batch: 256,
            envelope_events: 256,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            legacy_format: false,
        }
    }

    pub(super) fn stream(&self) -> String {
        format!("ELF_{}", self.doc)
    }

    pub(super) fn events_subject(&self, node: &NodeId) -> String {
        format!("elf.{}.ev.{}", self.doc, node.to_hex())
    }

    /// A body's subject: under the name `key` gives it ([`DocKey::blob_name`]), or its
    /// hash in issue 28's plain format.
    pub(super) fn blob_subject(&self, r: &ContentRef, key: Option<&DocKey>) -> String {
        match key {
            Some(k) => format!("elf.{}.blob.{}", self.doc, k.blob_name(&r.hash)),
            None => format!("elf.{}.blob.{}", self.doc, r.hash.to_hex()),
        }
    }

    /// Where `node`'s copies of the document keys are.
    pub(super) fn key_subject(&self, node: &NodeId) -> String {
        format!("elf.{}.key.{}", self.doc, node.to_hex())
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
    /// The broker would not have this device (credentials, TLS): one line naming the cause.
    /// Not retried: the same settings would be refused again.
    #[error("{0}")]
    Refused(String),
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
    /// Copies of the document's stream the broker keeps (as of the last look at it).
    pub replicas: Option<usize>,
    /// The broker server that leads the stream's copies in a cluster (`None` on a single
    /// server without clustering, or before the first look).
    pub leader: Option<String>,
    /// The generation of the document key this device writes with (`None`: none yet, or a
    /// stream of issue 28's plain format).
    pub key_generation: Option<u32>,
    /// This device was removed from the document (its later events are refused everywhere).
    pub removed: bool,
    /// Per removed node, how many of its events written after its removal were refused at
    /// merge (stored, never applied).
    pub refused_from_removed: std::collections::BTreeMap<String, u64>,
}

/// What the device's document keys were last kept for (`node/keys.rs`): the devices holding
/// the document, the removals, and the keys held. Keeping them again is needed only when
/// this changes.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct KeptFor {
    pub(super) current: Vec<NodeId>,
    pub(super) removals: usize,
    pub(super) keys: usize,
}

/// A pause that doubles per failure in a row.
pub(super) struct Backoff {
    next: Duration,
    first: Duration,
    max: Duration,
}

impl Backoff {
    pub(super) fn new(c: &SyncConfig) -> Backoff {
        Backoff {
            next: c.backoff,
            first: c.backoff,
            max: c.max_backoff,
        }
    }

    pub(super) async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }

    pub(super) fn reset(&mut self) {
        self.next = self.first;
    }
}
