//! Event identity across devices: who wrote an event (the node's Ed25519 key), where it sits
//! in that node's own history (`origin_seq`, `prev`), what it had seen of the others
//! (`deps`), an id that hashes all of that with the change itself — independent of any
//! device's local `seq` — and the node's signature over the id.

use std::fmt;

use chrono::{DateTime, Utc};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use elfiee_model::{Command, Event, EventHash};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A node (device): its Ed25519 public key. Shown as 64 hex characters, which is also how it
/// appears in subjects (`elf.<doc>.ev.<node>`) and message ids (`<node>:<origin_seq>`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub [u8; 32]);

impl NodeId {
    pub fn to_hex(&self) -> String {
        EventHash(self.0).to_hex()
    }

    /// The node of 64 lower-case hex characters (how `node.add` names it).
    pub fn from_hex(hex: &str) -> Option<NodeId> {
        EventHash::from_hex(hex)
            .map(|h| NodeId(h.0))
            .filter(|n| n.to_hex() == hex)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", &self.to_hex()[..12])
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// An event's id: blake3 of its origin and its change (see [`SyncEvent::id_of`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventId(pub [u8; 32]);

impl EventId {
    pub fn to_hex(&self) -> String {
        EventHash(self.0).to_hex()
    }

    /// The local event id (a UUID) of the event with this id: its first 16 bytes.
    pub fn uuid(&self) -> uuid::Uuid {
        let mut b = [0u8; 16];
        b.copy_from_slice(&self.0[..16]);
        uuid::Builder::from_random_bytes(b).into_uuid()
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId({})", &self.to_hex()[..12])
    }
}

/// A node's signing key.
pub struct NodeKey(SigningKey);

impl NodeKey {
    /// A new random key.
    pub fn generate() -> NodeKey {
        let mut seed = [0u8; 32];
        seed[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        seed[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        NodeKey::from_seed(seed)
    }

    /// The key of a 32-byte secret seed (what a node keeps on disk).
    pub fn from_seed(seed: [u8; 32]) -> NodeKey {
        NodeKey(SigningKey::from_bytes(&seed))
    }

    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub fn node(&self) -> NodeId {
        NodeId(self.0.verifying_key().to_bytes())
    }
}

/// Where an event sits in its node's history and what it had seen of the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub node: NodeId,
    /// 1, 2, 3, … per node, without gaps.
    pub seq: u64,
    /// The id of the node's previous own event (`None` for its first).
    pub prev: Option<EventId>,
    /// The ids of the other nodes' latest events the node had applied, sorted.
    pub deps: Vec<EventId>,
}

/// An event as it travels between nodes: its origin, the change, its id and signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncEvent {
    pub origin: Origin,
    /// The command this event came from: its capability and target block (`None`: the whole
    /// file). Every node authorizes the command against its merged state with these.
    pub cap: String,
    pub target: Option<String>,
    pub cmd_id: uuid::Uuid,
    pub entity: String,
    /// `"<editor_id>/<kind>"`, as in a local event.
    pub attribute: String,
    pub value: Value,
    pub clock: BTreeMap<String, u64>,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    /// The event id and chain hash it was committed with on its node: every device shows
    /// the event under them (issue 28). `None` in events sealed before issue 28, whose ids
    /// (which hash these fields only when present) stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<EventHash>,
    pub id: EventId,
    #[serde(with = "sig_bytes")]
    pub sig: [u8; 64],
}

/// [`Kept`] as it is written, borrowed from the event (the same bytes, no copies).
#[derive(Serialize)]
struct KeptRef<'a> {
    origin: &'a Origin,
    cap: &'a str,
    target: &'a Option<String>,
    id: &'a EventId,
    #[serde(skip_serializing_if = "is_none")]
    event_id: &'a Option<uuid::Uuid>,
    #[serde(skip_serializing_if = "is_none")]
    hash: &'a Option<EventHash>,
}

/// What a device keeps beside another device's event in its log: what the local event
/// does not hold (the change itself is stored once, as the local event). Older builds kept
/// the whole [`SyncEvent`] there; it reads as this too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    pub origin: Origin,
    pub cap: String,
    pub target: Option<String>,
    pub id: EventId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<EventHash>,
}

/// Decoded public keys of nodes (a node's id is its key), for [`SyncEvent::verify_member`].
#[derive(Default)]
pub struct Keys(std::collections::HashMap<NodeId, VerifyingKey>);

impl Keys {
    /// The decoded key of `node` (decoded once, then kept).
    pub(crate) fn key_of(&mut self, node: NodeId) -> Result<VerifyingKey, Rejection> {
        if let Some(k) = self.0.get(&node) {
            return Ok(*k);
        }
        let k = VerifyingKey::from_bytes(&node.0)
            .map_err(|_| Rejection::BadSignature(node.to_hex()))?;
        self.0.insert(node, k);
        Ok(k)
    }
}

impl NodeKey {
    /// The node's signature over `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }

    /// The node's X25519 key-agreement secret: the scalar of its Ed25519 key (what libsodium's
    /// `crypto_sign_ed25519_sk_to_curve25519` gives), so it lives where the signing key does
    /// and its public half is the node id's Montgomery form ([`NodeId::agreement_key`]).
    pub(crate) fn agreement_secret(&self) -> x25519_dalek::StaticSecret {
        x25519_dalek::StaticSecret::from(self.0.to_scalar_bytes())
    }
}

impl NodeId {
    /// The node's X25519 public key: its Ed25519 key in Montgomery form (`None` for bytes
    /// that are no Ed25519 key).
    pub fn agreement_key(&self) -> Option<x25519_dalek::PublicKey> {
        let key = VerifyingKey::from_bytes(&self.0).ok()?;
        Some(x25519_dalek::PublicKey::from(
            key.to_montgomery().to_bytes(),
        ))
    }
}

/// Why an event from another node is not stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("its signature does not verify with the key of node {0}")]
    BadSignature(String),
    #[error("node {0} is not a member of this document (no node.add for it)")]
    UnknownNode(String),
    #[error("its id does not hash its contents (stored {stored}, computed {computed})")]
    WrongHash { stored: String, computed: String },
    #[error("it does not follow the node's previous event (origin_seq {seq}: {why})")]
    BrokenPrev { seq: u64, why: String },
    #[error("it does not decode: {0}")]
    Malformed(String),
    #[error(
        "it does not decrypt with the document key it names (altered, or not sealed by a member)"
    )]
    Undecryptable,
}

/// The bytes an id hashes: everything but the id and the signature, in a fixed encoding.
#[derive(Serialize)]
struct Hashed<'a> {
    origin: &'a Origin,
    cap: &'a str,
    target: &'a Option<String>,
    cmd_id: &'a uuid::Uuid,
    entity: &'a str,
    attribute: &'a str,
    value: &'a Value,
    clock: &'a BTreeMap<String, u64>,
    created_at: i64,
    #[serde(skip_serializing_if = "is_none")]
    event_id: &'a Option<uuid::Uuid>,
    #[serde(skip_serializing_if = "is_none")]
    hash: &'a Option<EventHash>,
}

fn is_none<T>(o: &&Option<T>) -> bool {
    o.is_none()
}

/// [`Hashed`] read back.
#[derive(Deserialize)]
struct HashedOwned {
    origin: Origin,
    cap: String,
    target: Option<String>,
    cmd_id: uuid::Uuid,
    entity: String,
    attribute: String,
    value: Value,
    clock: BTreeMap<String, u64>,
    created_at: i64,
    #[serde(default)]
    event_id: Option<uuid::Uuid>,
    #[serde(default)]
    hash: Option<EventHash>,
}

impl SyncEvent {
    /// Seals a locally committed event of `cmd` (for its capability and target): its origin,
    /// its id, the node's signature.
    pub fn seal(key: &NodeKey, origin: Origin, cmd: &Command, event: &Event) -> SyncEvent {
        SyncEvent::seal_parts(
            Some(key),
            origin,
            cmd.cap_id.clone(),
            cmd.block_id.clone(),
            event,
        )
    }

    /// Seals an event of a command given by its capability and target. Without a key the
    /// signature stays zero (a replay computes ids and merge order, which need none).
    pub fn seal_parts(
        key: Option<&NodeKey>,
        origin: Origin,
        cap: String,
        target: Option<String>,
        event: &Event,
    ) -> SyncEvent {
        let (mut e, _) = SyncEvent::sealed(origin, cap, target, event);
        if let Some(key) = key {
            e.sig = key.0.sign(&e.id.0).to_bytes();
        }
        e
    }

    /// [`SyncEvent::seal_parts`] without a signature (an envelope's covers it), and the bytes
    /// its id hashes, which the envelope carries.
    pub fn sealed(
        origin: Origin,
        cap: String,
        target: Option<String>,
        event: &Event,
    ) -> (SyncEvent, Vec<u8>) {
        let mut e = SyncEvent {
            origin,
            cap,
            target,
            cmd_id: event.cmd_id,
            entity: event.entity.clone(),
            attribute: event.attribute.clone(),
            value: event.value.clone(),
            clock: event.clock.clone(),
            created_at: event.created_at.timestamp_millis(),
            event_id: Some(event.event_id),
            hash: Some(event.hash),
            id: EventId([0; 32]),
            sig: [0; 64],
        };
        let bytes = e.set_id();
        (e, bytes)
    }

    /// Sets the id of an event sealed without one (its [`SyncEvent::hashed_bytes`] hashed)
    /// and gives back those bytes: what an envelope carries, so the publisher need not
    /// encode the event again.
    pub fn set_id(&mut self) -> Vec<u8> {
        let bytes = self.hashed_bytes();
        self.id = EventId(*blake3::hash(&bytes).as_bytes());
        bytes
    }

    /// The bytes its id hashes: the origin and the change (MessagePack, named fields; see
    /// `Hashed`). An envelope carries each event as these bytes.
    pub fn hashed_bytes(&self) -> Vec<u8> {
        let hashed = Hashed {
            origin: &self.origin,
            cap: &self.cap,
            target: &self.target,
            cmd_id: &self.cmd_id,
            entity: &self.entity,
            attribute: &self.attribute,
            value: &self.value,
            clock: &self.clock,
            created_at: self.created_at,
            event_id: &self.event_id,
            hash: &self.hash,
        };
        // Plain data into a Vec: cannot fail.
        rmp_serde::to_vec_named(&hashed).unwrap_or_default()
    }

    /// blake3 of [`SyncEvent::hashed_bytes`].
    pub fn id_of(&self) -> EventId {
        EventId(*blake3::hash(&self.hashed_bytes()).as_bytes())
    }

    /// The event carried as `bytes` ([`SyncEvent::hashed_bytes`], as an envelope holds it):
    /// its id is their blake3, so nothing is encoded again to check it; no signature of its
    /// own (the envelope's covers it).
    pub fn from_hashed(bytes: &[u8]) -> Result<SyncEvent, Rejection> {
        let h: HashedOwned =
            rmp_serde::from_slice(bytes).map_err(|e| Rejection::Malformed(e.to_string()))?;
        Ok(SyncEvent {
            origin: h.origin,
            cap: h.cap,
            target: h.target,
            cmd_id: h.cmd_id,
            entity: h.entity,
            attribute: h.attribute,
            value: h.value,
            clock: h.clock,
            created_at: h.created_at,
            event_id: h.event_id,
            hash: h.hash,
            id: EventId(*blake3::hash(bytes).as_bytes()),
            sig: [0; 64],
        })
    }

    /// Checks the id against the contents and the signature against the node's key
    /// (`key_of`: the document's members). `prev` is checked by whoever knows the node's
    /// history ([`crate::merge::MergeIndex::insert`]).
    pub fn verify(&self, key_of: impl Fn(&NodeId) -> Option<[u8; 32]>) -> Result<(), Rejection> {
        let node = self.origin.node;
        let key = key_of(&node).ok_or_else(|| Rejection::UnknownNode(node.to_hex()))?;
        if key != node.0 {
            return Err(Rejection::BadSignature(node.to_hex()));
        }
        self.verify_member(&mut Keys::default())
    }

    /// [`SyncEvent::verify`] for an event whose node is known to be a member, with the
    /// members' decoded keys kept in `keys` (decoding a key costs about as much as checking
    /// a signature).
    pub fn verify_member(&self, keys: &mut Keys) -> Result<(), Rejection> {
        let node = self.origin.node;
        let computed = self.id_of();
        if computed != self.id {
            return Err(Rejection::WrongHash {
                stored: self.id.to_hex(),
                computed: computed.to_hex(),
            });
        }
        let key = match keys.0.get(&node) {
            Some(k) => *k,
            None => {
                let k = VerifyingKey::from_bytes(&node.0)
                    .map_err(|_| Rejection::BadSignature(node.to_hex()))?;
                keys.0.insert(node, k);
                k
            }
        };
        key.verify(&self.id.0, &Signature::from_bytes(&self.sig))
            .map_err(|_| Rejection::BadSignature(node.to_hex()))
    }

    /// The local event for this one (`seq` and `hash` are the local log's to set), under
    /// the event id it was committed with (for an event sealed before issue 28, the first
    /// 16 bytes of its id).
    pub fn to_event(&self) -> Event {
        self.local(
            self.entity.clone(),
            self.attribute.clone(),
            self.value.clone(),
            self.clock.clone(),
        )
    }

    /// [`SyncEvent::to_event`] without copying, and the command (capability, target).
    pub fn into_parts(mut self) -> (Event, (String, Option<String>)) {
        let (entity, attribute) = (
            std::mem::take(&mut self.entity),
            std::mem::take(&mut self.attribute),
        );
        let (value, clock) = (self.value.take(), std::mem::take(&mut self.clock));
        let event = self.local(entity, attribute, value, clock);
        (event, (self.cap, self.target))
    }

    /// The local event of this one, with its change (given: copied or moved out).
    fn local(
        &self,
        entity: String,
        attribute: String,
        value: Value,
        clock: BTreeMap<String, u64>,
    ) -> Event {
        Event {
            seq: 0,
            event_id: self.event_id.unwrap_or_else(|| self.id.uuid()),
            cmd_id: self.cmd_id,
            entity,
            attribute,
            value,
            clock,
            created_at: DateTime::<Utc>::from_timestamp_millis(self.created_at).unwrap_or_default(),
            hash: EventHash::ZERO,
        }
    }

    /// What the local log keeps beside this event ([`Kept`], MessagePack).
    pub fn kept(&self) -> Vec<u8> {
        let kept = KeptRef {
            origin: &self.origin,
            cap: &self.cap,
            target: &self.target,
            id: &self.id,
            event_id: &self.event_id,
            hash: &self.hash,
        };
        // Plain data into a Vec: cannot fail.
        rmp_serde::to_vec_named(&kept).unwrap_or_default()
    }

    /// The event again from what the log keeps beside it ([`SyncEvent::kept`], or a whole
    /// event as older builds kept it) and the local event. The kept id is taken as it is:
    /// it was checked (or computed from the bytes that arrived) when the event was stored.
    /// No signature (the envelope's was checked when it arrived).
    pub fn from_kept(bytes: &[u8], local: &Event) -> Result<SyncEvent, Rejection> {
        let k: Kept =
            rmp_serde::from_slice(bytes).map_err(|e| Rejection::Malformed(e.to_string()))?;
        Ok(SyncEvent {
            origin: k.origin,
            cap: k.cap,
            target: k.target,
            cmd_id: local.cmd_id,
            entity: local.entity.clone(),
            attribute: local.attribute.clone(),
            value: local.value.clone(),
            clock: local.clock.clone(),
            created_at: local.created_at.timestamp_millis(),
            event_id: k.event_id,
            hash: k.hash,
            id: k.id,
            sig: [0; 64],
        })
    }

    /// The wire form (MessagePack).
    pub fn encode(&self) -> Vec<u8> {
        // Plain data into a Vec: cannot fail.
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<SyncEvent, Rejection> {
        rmp_serde::from_slice(bytes).map_err(|e| Rejection::Malformed(e.to_string()))
    }
}

/// [`SyncEvent::verify_member`] for many events at once: ids checked one by one, the
/// signatures in one batch (about twice as fast as one by one); when the batch fails, each
/// is checked alone to say which.
pub fn verify_members(events: &[&SyncEvent], keys: &mut Keys) -> Vec<Result<(), Rejection>> {
    let mut out: Vec<Result<(), Rejection>> = Vec::with_capacity(events.len());
    let mut batch = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let node = e.origin.node;
        let computed = e.id_of();
        if computed != e.id {
            out.push(Err(Rejection::WrongHash {
                stored: e.id.to_hex(),
                computed: computed.to_hex(),
            }));
            continue;
        }
        let key = match keys.0.get(&node) {
            Some(k) => *k,
            None => match VerifyingKey::from_bytes(&node.0) {
                Ok(k) => {
                    keys.0.insert(node, k);
                    k
                }
                Err(_) => {
                    out.push(Err(Rejection::BadSignature(node.to_hex())));
                    continue;
                }
            },
        };
        out.push(Ok(()));
        batch.push((i, key));
    }
    if batch.is_empty() {
        return out;
    }
    let messages: Vec<&[u8]> = batch.iter().map(|(i, _)| &events[*i].id.0[..]).collect();
    let signatures: Vec<Signature> = batch
        .iter()
        .map(|(i, _)| Signature::from_bytes(&events[*i].sig))
        .collect();
    let verifying: Vec<VerifyingKey> = batch.iter().map(|(_, k)| *k).collect();
    if ed25519_dalek::verify_batch(&messages, &signatures, &verifying).is_err() {
        for ((i, key), sig) in batch.iter().zip(&signatures) {
            if key.verify(&events[*i].id.0, sig).is_err() {
                out[*i] = Err(Rejection::BadSignature(events[*i].origin.node.to_hex()));
            }
        }
    }
    out
}

pub(crate) mod sig_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(sig: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(sig)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 64], D::Error> {
        let v = elfiee_model::RawBytes::deserialize(d)?;
        v.0.try_into()
            .map_err(|_| serde::de::Error::custom("a signature is 64 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(value: Value) -> Event {
        Event {
            seq: 7,
            event_id: uuid::Uuid::nil(),
            cmd_id: uuid::Uuid::from_u128(42),
            entity: "b1".into(),
            attribute: "alice/markdown.write".into(),
            value,
            clock: [("n:alice".to_string(), 3)].into(),
            created_at: DateTime::from_timestamp_millis(1_700_000_000_123).unwrap(),
            hash: elfiee_model::EventHash::ZERO,
        }
    }

    fn cmd() -> Command {
        Command::new("alice", "markdown.write", Some("b1"), json!({}))
    }

    fn origin(key: &NodeKey) -> Origin {
        Origin {
            node: key.node(),
            seq: 1,
            prev: None,
            deps: vec![],
        }
    }

    #[test]
    fn a_sealed_event_verifies_survives_the_wire_and_keeps_its_change() {
        let key = NodeKey::from_seed([1; 32]);
        let e = event(json!({"contents": {"markdown": "# hi"}}));
        let s = SyncEvent::seal(&key, origin(&key), &cmd(), &e);
        let members = |n: &NodeId| (*n == key.node()).then_some(key.node().0);
        s.verify(members).unwrap();
        let back = SyncEvent::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        back.verify(members).unwrap();
        let local = back.to_event();
        assert_eq!(
            (local.entity.clone(), local.value.clone(), local.created_at),
            (e.entity.clone(), e.value.clone(), e.created_at)
        );
        // Every device shows it under the event id it was committed with.
        assert_eq!(local.event_id, e.event_id);
        assert_eq!((s.event_id, s.hash), (Some(e.event_id), Some(e.hash)));
        // What a log keeps beside it gives it back, checked against its id; so does the whole
        // event, as older builds kept it.
        let mut stored = local.clone();
        stored.hash = EventHash([5; 32]);
        let mut unsigned = s.clone();
        unsigned.sig = [0; 64];
        assert_eq!(SyncEvent::from_kept(&s.kept(), &stored).unwrap(), unsigned);
        // Written borrowed, as the owned form writes it (what older builds read).
        let owned = Kept {
            origin: s.origin.clone(),
            cap: s.cap.clone(),
            target: s.target.clone(),
            id: s.id,
            event_id: s.event_id,
            hash: s.hash,
        };
        assert_eq!(s.kept(), rmp_serde::to_vec_named(&owned).unwrap());
        let (into, command) = s.clone().into_parts();
        assert_eq!(
            (into, command),
            (local.clone(), (s.cap.clone(), s.target.clone()))
        );
        assert_eq!(
            SyncEvent::from_kept(&s.encode(), &stored).unwrap(),
            unsigned
        );
        // An envelope carries it as the bytes its id hashes.
        let carried = SyncEvent::from_hashed(&s.hashed_bytes()).unwrap();
        assert_eq!(carried, unsigned);
        // An event sealed before issue 28 (no event id or hash in it) keeps its id, and shows
        // under the first 16 bytes of it.
        let mut old = s.clone();
        (old.event_id, old.hash) = (None, None);
        old.id = old.id_of();
        assert_ne!(old.id, s.id);
        let owned = Kept {
            origin: old.origin.clone(),
            cap: old.cap.clone(),
            target: old.target.clone(),
            id: old.id,
            event_id: None,
            hash: None,
        };
        assert_eq!(old.kept(), rmp_serde::to_vec_named(&owned).unwrap());
        let back = SyncEvent::decode(&old.encode()).unwrap();
        assert_eq!(back.id_of(), old.id);
        assert_eq!(back.to_event().event_id, old.id.uuid());
        // The id does not depend on the local seq.
        let mut elsewhere = e.clone();
        elsewhere.seq = 99;
        assert_eq!(
            SyncEvent::seal(&key, origin(&key), &cmd(), &elsewhere).id,
            s.id
        );
    }

    #[test]
    fn forged_events_are_rejected_with_the_reason() {
        let key = NodeKey::from_seed([1; 32]);
        let other = NodeKey::from_seed([2; 32]);
        let members = |n: &NodeId| [key.node(), other.node()].contains(n).then_some(n.0);
        let s = SyncEvent::seal(&key, origin(&key), &cmd(), &event(json!({"n": 1})));
        // The change altered after signing: the id no longer hashes it.
        let mut altered = s.clone();
        altered.value = json!({"n": 2});
        assert!(matches!(
            altered.verify(members),
            Err(Rejection::WrongHash { .. })
        ));
        // Id recomputed by the forger, but the signature is the original's.
        altered.id = altered.id_of();
        assert!(matches!(
            altered.verify(members),
            Err(Rejection::BadSignature(_))
        ));
        // Signed by another member while claiming this node's origin.
        let mut claimed = SyncEvent::seal(&other, origin(&key), &cmd(), &event(json!({"n": 1})));
        claimed.origin.node = key.node();
        claimed.id = claimed.id_of();
        claimed.sig = other.0.sign(&claimed.id.0).to_bytes();
        assert!(matches!(
            claimed.verify(members),
            Err(Rejection::BadSignature(_))
        ));
        // A node nobody added.
        let stranger = NodeKey::from_seed([3; 32]);
        let s = SyncEvent::seal(&stranger, origin(&stranger), &cmd(), &event(json!({})));
        assert!(matches!(s.verify(members), Err(Rejection::UnknownNode(_))));
        assert!(matches!(
            SyncEvent::decode(b"\x01\x02"),
            Err(Rejection::Malformed(_))
        ));
    }
}
