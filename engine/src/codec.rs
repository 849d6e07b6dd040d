//! Stored form of an event (see docs/EVENTS.md):
//!
//! ```text
//! key   = b'e' ‖ seq (u64 big-endian)
//! value = hash (32 bytes) ‖ body (MessagePack, named fields)
//! hash  = blake3(prev_hash ‖ seq (u64 BE) ‖ body)     prev_hash of seq 1 = 32 zero bytes
//! ```
//! `body` holds every event field except `seq` (the key) and `hash` (the prefix).

use std::collections::BTreeMap;

use elfiee_model::{Event, EventHash};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

#[derive(Serialize)]
struct BodyRef<'a> {
    event_id: &'a Uuid,
    cmd_id: &'a Uuid,
    entity: &'a str,
    attribute: &'a str,
    value: &'a Value,
    clock: &'a BTreeMap<String, u64>,
    created_at: i64,
}

#[derive(Deserialize)]
struct Body {
    event_id: Uuid,
    cmd_id: Uuid,
    entity: String,
    attribute: String,
    value: Value,
    clock: BTreeMap<String, u64>,
    created_at: i64,
}

/// The event's body bytes.
pub fn encode_body(e: &Event) -> Vec<u8> {
    let body = BodyRef {
        event_id: &e.event_id,
        cmd_id: &e.cmd_id,
        entity: &e.entity,
        attribute: &e.attribute,
        value: &e.value,
        clock: &e.clock,
        created_at: e.created_at.timestamp_millis(),
    };
    // Plain data into a Vec: cannot fail.
    rmp_serde::to_vec_named(&body).unwrap_or_default()
}

/// `blake3(prev ‖ seq ‖ body)`.
pub fn chain_hash(prev: &EventHash, seq: u64, body: &[u8]) -> EventHash {
    let mut h = blake3::Hasher::new();
    h.update(&prev.0);
    h.update(&seq.to_be_bytes());
    h.update(body);
    EventHash(*h.finalize().as_bytes())
}

/// Sets `e.hash` from the chain and returns the stored value bytes.
pub fn seal(prev: &EventHash, e: &mut Event) -> Vec<u8> {
    let body = encode_body(e);
    e.hash = chain_hash(prev, e.seq, &body);
    let mut out = Vec::with_capacity(32 + body.len());
    out.extend_from_slice(&e.hash.0);
    out.extend_from_slice(&body);
    out
}

/// Decodes a stored value. With `prev = Some(..)` the hash chain is checked too.
pub fn open(seq: u64, stored: &[u8], prev: Option<&EventHash>) -> Result<Event, String> {
    if stored.len() < 33 {
        return Err(format!(
            "record is {} bytes, too short to hold a hash and a body",
            stored.len()
        ));
    }
    let (hash, body) = stored.split_at(32);
    let hash = EventHash(hash.try_into().map_err(|_| "bad hash length".to_string())?);
    if let Some(prev) = prev {
        let expect = chain_hash(prev, seq, body);
        if expect != hash {
            return Err(format!(
                "hash chain broken (stored {}, computed {})",
                &hash.to_hex()[..12],
                &expect.to_hex()[..12]
            ));
        }
    }
    let b: Body = rmp_serde::from_slice(body).map_err(|e| format!("body does not decode: {e}"))?;
    let created_at =
        chrono::DateTime::from_timestamp_millis(b.created_at).ok_or("created_at out of range")?;
    Ok(Event {
        seq,
        event_id: b.event_id,
        cmd_id: b.cmd_id,
        entity: b.entity,
        attribute: b.attribute,
        value: b.value,
        clock: b.clock,
        created_at,
        hash,
    })
}

/// The key of the event at `seq` in the log's `events` tree.
pub fn event_key(seq: u64) -> [u8; 9] {
    seq_key(b'e', seq)
}

/// A key of the `events` tree: a prefix byte, then a seq (big-endian, so keys sort by seq).
pub fn seq_key(prefix: u8, seq: u64) -> [u8; 9] {
    let mut k = [prefix; 9];
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The seq of a key made by [`seq_key`] (`None` for a key too short).
pub fn key_seq(k: &[u8]) -> Option<u64> {
    k.get(1..9)?.try_into().ok().map(u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64) -> Event {
        Event {
            seq,
            event_id: Uuid::from_u128(seq as u128),
            cmd_id: Uuid::from_u128(7),
            entity: "b".into(),
            attribute: "alice/markdown.write".into(),
            value: json!({"contents": {"markdown": "héllo", "n": -3, "f": 1.5, "list": [1, null, true]}}),
            clock: [("n:alice".to_string(), seq)].into(),
            created_at: chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap(),
            hash: EventHash::ZERO,
        }
    }

    #[test]
    fn seal_then_open_round_trips_and_checks_the_chain() {
        let mut a = ev(1);
        let sa = seal(&EventHash::ZERO, &mut a);
        let mut b = ev(2);
        let sb = seal(&a.hash, &mut b);
        assert_eq!(open(1, &sa, Some(&EventHash::ZERO)).unwrap(), a);
        assert_eq!(open(2, &sb, Some(&a.hash)).unwrap(), b);
        assert!(open(2, &sb, Some(&EventHash::ZERO))
            .unwrap_err()
            .contains("chain"));
        assert!(
            open(3, &sb, Some(&a.hash)).is_err(),
            "seq is part of the hash"
        );
        let mut flipped = sb.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(open(2, &flipped, Some(&a.hash)).is_err());
        assert!(open(2, &sb[..10], None).is_err());
    }
}
