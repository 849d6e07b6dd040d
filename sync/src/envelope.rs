//! The wire format of events between devices (issue 28): an **envelope** carries a batch of
//! one node's consecutive events with one signature, over the ids of all of them, instead of
//! one signature per event (format 1, issue 16; still read).
//!
//! Format 2, MessagePack with named fields:
//! `{v: 2, node: <32 bytes>, events: [<bytes>…], sig: <64 bytes>}`. Each event travels as the
//! bytes its id hashes ([`SyncEvent::hashed_bytes`]: origin and change), so its id is the
//! blake3 of what arrived and nothing is encoded again to check it. `sig` is the node's
//! Ed25519 signature over [`Envelope::signed_hash`]: blake3 of
//! `"elfiee envelope 2" ‖ node ‖ count (u32 LE) ‖ each id`. A receiver checks that every
//! event is the envelope node's and that they follow each other (origin seq + 1, `prev` the
//! previous id), and the one signature; any failure rejects the whole envelope. The message
//! id names the node and the first and last origin seq, so a re-sent envelope is a
//! duplicate; a crash may make batch boundaries differ, so a receiver still stores each event
//! id once (it skips the ids it holds).

use serde::{Deserialize, Serialize};

use crate::identity::{sig_bytes, EventId, Keys, NodeId, NodeKey, Rejection, SyncEvent};

/// The format an envelope says it is.
pub const ENVELOPE_VERSION: u8 = 2;

/// An envelope holds events up to this many bytes (each event's bytes and `bin` header), under
/// the server's default payload limit of 1 MiB; one larger event travels alone.
pub const ENVELOPE_BYTES: usize = 768 * 1024;

/// A batch of one node's consecutive events and the node's one signature over their ids.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub v: u8,
    pub node: NodeId,
    /// The events, their ids set (by the sealer, or from the bytes that arrived), their own
    /// signatures zero.
    pub events: Vec<SyncEvent>,
    pub sig: [u8; 64],
}

/// An envelope as it is written.
#[derive(Serialize)]
struct WireOut<'a> {
    v: u8,
    node: &'a NodeId,
    events: Vec<Bin<'a>>,
    #[serde(with = "sig_bytes")]
    sig: [u8; 64],
}

/// An envelope as it is read.
#[derive(Deserialize)]
struct WireIn {
    v: u8,
    node: NodeId,
    events: Vec<elfiee_model::RawBytes>,
    #[serde(with = "sig_bytes")]
    sig: [u8; 64],
}

/// Bytes written as MessagePack `bin`.
struct Bin<'a>(&'a [u8]);

impl Serialize for Bin<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

/// One of this node's events as the publisher keeps it once the follower sealed it: what an
/// envelope needs of it, not the event itself.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub id: EventId,
    /// Its origin seq.
    pub seq: u64,
    /// The bytes its id hashes ([`SyncEvent::hashed_bytes`]), as an envelope carries them.
    pub bytes: std::sync::Arc<[u8]>,
    /// The bodies it names (published before it).
    pub refs: Vec<elfiee_model::ContentRef>,
}

impl Outgoing {
    /// `e` (one of this node's sealed events) as the publisher keeps it; `bytes` are the
    /// bytes its id hashes when the sealer has them, else they are encoded here.
    pub fn of(e: &SyncEvent, bytes: Option<Vec<u8>>) -> Outgoing {
        Outgoing {
            id: e.id,
            seq: e.origin.seq,
            bytes: bytes.unwrap_or_else(|| e.hashed_bytes()).into(),
            refs: elfiee_projections::content::event_refs(&e.value),
        }
    }
}

/// What one message on an event subject holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Format 2: a signed batch.
    Batch(Envelope),
    /// Format 1 (issue 16): one event with its own signature.
    Single(Box<SyncEvent>),
}

impl Envelope {
    /// Seals consecutive own events of `key`'s node (their ids already set; their own
    /// signatures are cleared, the envelope's covers them).
    pub fn seal(key: &NodeKey, mut events: Vec<SyncEvent>) -> Envelope {
        for e in &mut events {
            e.sig = [0; 64];
        }
        let node = key.node();
        let sig = key.sign(&Self::signed_hash(&node, &events));
        Envelope {
            v: ENVELOPE_VERSION,
            node,
            events,
            sig,
        }
    }

    /// What the signature covers (see the module docs).
    pub fn signed_hash(node: &NodeId, events: &[SyncEvent]) -> [u8; 32] {
        signed_hash_of(node, events.iter().map(|e| &e.id))
    }

    /// The wire form of an envelope of `events` (this node's consecutive events, as the
    /// publisher keeps them) signed with `key`, and its message id: the same bytes and id as
    /// [`Envelope::seal`], [`Envelope::encode`] and [`Envelope::message_id`] give for those
    /// events, with no event encoded again.
    pub fn encode_outgoing(key: &NodeKey, events: &[Outgoing]) -> (Vec<u8>, String) {
        let node = key.node();
        let sig = key.sign(&signed_hash_of(&node, events.iter().map(|e| &e.id)));
        let bytes = wire_form(
            ENVELOPE_VERSION,
            &node,
            &sig,
            events.iter().map(|e| &e.bytes[..]).collect(),
        );
        let seq = |e: Option<&Outgoing>| e.map_or(0, |e| e.seq);
        let id = message_id(&node, seq(events.first()), seq(events.last()));
        (bytes, id)
    }

    /// `<node>:<first origin seq>-<last origin seq>`: the same batch sent again is a
    /// duplicate to the broker.
    pub fn message_id(&self) -> String {
        let seq = |e: Option<&SyncEvent>| e.map_or(0, |e| e.origin.seq);
        message_id(
            &self.node,
            seq(self.events.first()),
            seq(self.events.last()),
        )
    }

    /// Checks the whole envelope: the version, that every event is the node's and follows
    /// the one before it, and the one signature over the ids (`keys`: the members' decoded
    /// keys; whether the node is a member is the caller's to check). The ids themselves are
    /// the hashes of the bytes that arrived ([`Envelope::decode`]).
    pub fn verify(&self, keys: &mut Keys) -> Result<(), Rejection> {
        if self.v != ENVELOPE_VERSION {
            return Err(Rejection::Malformed(format!(
                "an envelope of format {} (this program reads {ENVELOPE_VERSION})",
                self.v
            )));
        }
        if self.events.is_empty() {
            return Err(Rejection::Malformed("an envelope without events".into()));
        }
        let mut before: Option<&SyncEvent> = None;
        for e in &self.events {
            if e.origin.node != self.node {
                return Err(Rejection::BadSignature(e.origin.node.to_hex()));
            }
            if let Some(b) = before {
                if e.origin.seq != b.origin.seq + 1 || e.origin.prev != Some(b.id) {
                    return Err(Rejection::BrokenPrev {
                        seq: e.origin.seq,
                        why: "the envelope's events do not follow each other".into(),
                    });
                }
            }
            before = Some(e);
        }
        let key = keys.key_of(self.node)?;
        let sig = ed25519_dalek::Signature::from_bytes(&self.sig);
        ed25519_dalek::Verifier::verify(&key, &Self::signed_hash(&self.node, &self.events), &sig)
            .map_err(|_| Rejection::BadSignature(self.node.to_hex()))
    }

    /// The wire form (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let events: Vec<Vec<u8>> = self.events.iter().map(|e| e.hashed_bytes()).collect();
        wire_form(
            self.v,
            &self.node,
            &self.sig,
            events.iter().map(|b| &b[..]).collect(),
        )
    }

    /// Reads the wire form: each event's id is the blake3 of its bytes.
    pub fn decode(bytes: &[u8]) -> Result<Envelope, Rejection> {
        let wire: WireIn =
            rmp_serde::from_slice(bytes).map_err(|e| Rejection::Malformed(e.to_string()))?;
        let events = wire
            .events
            .iter()
            .map(|b| SyncEvent::from_hashed(&b.0))
            .collect::<Result<_, _>>()?;
        Ok(Envelope {
            v: wire.v,
            node: wire.node,
            events,
            sig: wire.sig,
        })
    }
}

/// blake3 of `"elfiee envelope 2" ‖ node ‖ count (u32 LE) ‖ each id`.
fn signed_hash_of<'a>(node: &NodeId, ids: impl ExactSizeIterator<Item = &'a EventId>) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"elfiee envelope 2");
    h.update(&node.0);
    h.update(&(ids.len() as u32).to_le_bytes());
    for id in ids {
        h.update(&id.0);
    }
    *h.finalize().as_bytes()
}

/// The message id of an envelope of `node`'s events `first..=last` (origin seqs).
fn message_id(node: &NodeId, first: u64, last: u64) -> String {
    format!("{}:{first}-{last}", node.to_hex())
}

/// An envelope's wire form (MessagePack, named fields), each event as its bytes.
fn wire_form(v: u8, node: &NodeId, sig: &[u8; 64], events: Vec<&[u8]>) -> Vec<u8> {
    let wire = WireOut {
        v,
        node,
        events: events.into_iter().map(Bin).collect(),
        sig: *sig,
    };
    // Plain data into a Vec: cannot fail.
    rmp_serde::to_vec_named(&wire).unwrap_or_default()
}

impl Message {
    /// Reads a message of either format.
    pub fn decode(bytes: &[u8]) -> Result<Message, Rejection> {
        match Envelope::decode(bytes) {
            Ok(env) => Ok(Message::Batch(env)),
            Err(as_envelope) => SyncEvent::decode(bytes)
                .map(|e| Message::Single(Box::new(e)))
                .map_err(|_| {
                    Rejection::Malformed(format!("neither an envelope nor an event: {as_envelope}"))
                }),
        }
    }

    /// The events it carries, in order, taken out.
    pub fn into_events(self) -> Vec<SyncEvent> {
        match self {
            Message::Batch(env) => env.events,
            Message::Single(e) => vec![*e],
        }
    }

    /// The events it carries, in order.
    pub fn events(&self) -> &[SyncEvent] {
        match self {
            Message::Batch(env) => &env.events,
            Message::Single(e) => std::slice::from_ref(e.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{EventId, Origin};
    use elfiee_model::{Event, EventHash};
    use serde_json::json;

    /// `n` consecutive events of `key`'s node, each sealed with its own signature (format 1).
    fn chain(key: &NodeKey, n: u64) -> Vec<SyncEvent> {
        let mut prev: Option<EventId> = None;
        (1..=n)
            .map(|seq| {
                let e = Event {
                    seq,
                    event_id: uuid::Uuid::nil(),
                    cmd_id: uuid::Uuid::from_u128(seq as u128),
                    entity: "b1".into(),
                    attribute: "alice/markdown.write".into(),
                    value: json!({"contents": {"markdown": format!("v{seq}")}}),
                    clock: Default::default(),
                    created_at: chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
                    hash: EventHash::ZERO,
                };
                let origin = Origin {
                    node: key.node(),
                    seq,
                    prev,
                    deps: vec![],
                };
                let s = SyncEvent::seal_parts(
                    Some(key),
                    origin,
                    "markdown.write".into(),
                    Some("b1".into()),
                    &e,
                );
                prev = Some(s.id);
                s
            })
            .collect()
    }

    #[test]
    fn the_publishers_envelope_is_the_sealed_one_byte_for_byte() {
        let key = NodeKey::from_seed([3; 32]);
        let events = chain(&key, 7);
        let outgoing: Vec<Outgoing> = events.iter().map(|e| Outgoing::of(e, None)).collect();
        let (bytes, id) = Envelope::encode_outgoing(&key, &outgoing);
        let sealed = Envelope::seal(&key, events);
        assert_eq!(bytes, sealed.encode());
        assert_eq!(id, sealed.message_id());
        let read = Envelope::decode(&bytes).unwrap();
        read.verify(&mut Keys::default()).unwrap();
        assert_eq!(read.events.len(), 7);
    }

    #[test]
    fn an_envelope_verifies_survives_the_wire_and_names_its_batch() {
        let key = NodeKey::from_seed([1; 32]);
        let env = Envelope::seal(&key, chain(&key, 5));
        env.verify(&mut Keys::default()).unwrap();
        assert!(
            env.events.iter().all(|e| e.sig == [0; 64]),
            "one signature for all"
        );
        let back = match Message::decode(&env.encode()).unwrap() {
            Message::Batch(b) => b,
            other => panic!("read as {other:?}"),
        };
        assert_eq!(back, env);
        back.verify(&mut Keys::default()).unwrap();
        assert_eq!(env.message_id(), format!("{}:1-5", key.node().to_hex()));
    }

    /// The envelope as a receiver reads it.
    fn wire(env: &Envelope) -> Envelope {
        Envelope::decode(&env.encode()).unwrap()
    }

    #[test]
    fn one_bad_event_rejects_the_whole_envelope_with_the_reason() {
        let key = NodeKey::from_seed([1; 32]);
        let other = NodeKey::from_seed([2; 32]);
        let env = Envelope::seal(&key, chain(&key, 4));
        let mut keys = Keys::default();
        wire(&env).verify(&mut keys).unwrap();
        // A change altered after sealing: its id (the hash of what arrives) is no longer
        // the one signed.
        let mut altered = env.clone();
        altered.events[2].value = json!({"contents": {"markdown": "forged"}});
        assert!(matches!(
            wire(&altered).verify(&mut keys),
            Err(Rejection::BrokenPrev { .. }) | Err(Rejection::BadSignature(_))
        ));
        let mut last = env.clone();
        let n = last.events.len() - 1;
        last.events[n].value = json!({"n": 1});
        assert!(matches!(
            wire(&last).verify(&mut keys),
            Err(Rejection::BadSignature(_))
        ));
        // A byte changed on the wire, wherever it is: never accepted.
        let bytes = env.encode();
        for at in (0..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[at] ^= 0x20;
            if let Ok(Message::Batch(e)) = Message::decode(&b) {
                if e != env {
                    assert!(e.verify(&mut keys).is_err(), "byte {at} changed, accepted");
                }
            }
        }
        // Another node's event slipped in.
        let mut mixed = env.clone();
        mixed.events[1] = chain(&other, 2).remove(1);
        assert!(matches!(
            wire(&mixed).verify(&mut keys),
            Err(Rejection::BadSignature(_))
        ));
        // Signed by another member while naming this node.
        let mut claimed = Envelope::seal(&other, chain(&key, 2));
        claimed.node = key.node();
        assert!(matches!(
            wire(&claimed).verify(&mut keys),
            Err(Rejection::BadSignature(_))
        ));
        // A gap inside the batch, signed.
        let mut gap = Envelope::seal(&key, chain(&key, 4));
        gap.events.remove(1);
        gap.sig = key.sign(&Envelope::signed_hash(&gap.node, &gap.events));
        assert!(matches!(
            wire(&gap).verify(&mut keys),
            Err(Rejection::BrokenPrev { .. })
        ));
        // A format this program does not know, and an empty batch.
        let mut newer = env.clone();
        newer.v = 3;
        assert!(
            matches!(wire(&newer).verify(&mut keys), Err(Rejection::Malformed(m)) if m.contains('3'))
        );
        let empty = Envelope::seal(&key, Vec::new());
        assert!(matches!(
            wire(&empty).verify(&mut keys),
            Err(Rejection::Malformed(_))
        ));
    }

    #[test]
    fn format_1_messages_are_still_read() {
        let key = NodeKey::from_seed([1; 32]);
        let single = chain(&key, 1).remove(0);
        match Message::decode(&single.encode()).unwrap() {
            Message::Single(e) => {
                assert_eq!(*e, single);
                e.verify_member(&mut Keys::default()).unwrap();
            }
            other => panic!("read as {other:?}"),
        }
        assert!(matches!(
            Message::decode(b"\x01\x02"),
            Err(Rejection::Malformed(_))
        ));
    }
}
