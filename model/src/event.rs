use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use uuid::Uuid;

/// A committed fact, in EAVT form: `entity` (a block or editor id), `attribute`
/// (`"<editor_id>/<cap_id>"`), `value` (JSON), plus a vector clock and a commit time.
///
/// `seq` numbers events from 1 without gaps; `hash` chains them:
/// `hash = blake3(prev_hash ‖ seq (u64 BE) ‖ stored bytes)`; see docs/EVENTS.md.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub event_id: Uuid,
    pub cmd_id: Uuid,
    pub entity: String,
    pub attribute: String,
    pub value: Value,
    /// Vector clock: `"<node_id>:<editor_id>"` → count.
    pub clock: BTreeMap<String, u64>,
    #[serde(with = "chrono::serde::ts_milliseconds")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub created_at: DateTime<Utc>,
    #[cfg_attr(feature = "ts", ts(type = "string"))]
    pub hash: EventHash,
}

/// Where a synced document's event sits, as a device shows it beside the event (issue 28):
/// the `origin_*` fields name it the same on every device that holds it (with the event's
/// `event_id`), the `local_*` fields are this device's log (the event's own `seq` and
/// `hash`).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPlace {
    /// The node (device) that committed it: its key, 64 hex characters.
    pub origin_node: String,
    /// Its place in that node's own events: 1, 2, 3, …
    pub origin_seq: u64,
    /// Its hash in the committing node's log; `None` for an event that came through a build
    /// from before issue 28, which did not carry it.
    #[cfg_attr(feature = "ts", ts(type = "string | null"))]
    pub origin_hash: Option<EventHash>,
    pub local_seq: u64,
    #[cfg_attr(feature = "ts", ts(type = "string"))]
    pub local_hash: EventHash,
}

impl Event {
    /// The editor half of `attribute`.
    pub fn editor_id(&self) -> &str {
        self.attribute.split_once('/').map(|(e, _)| e).unwrap_or("")
    }

    /// The capability half of `attribute` (what kind of change this event is).
    pub fn cap_id(&self) -> &str {
        self.attribute
            .split_once('/')
            .map(|(_, c)| c)
            .unwrap_or(&self.attribute)
    }
}

/// What a handler returns: the entity, the kind of change, and its value. The pipeline turns
/// drafts into [`Event`]s (ids, attribute, clock, time from `Ctx`; seq and hash at commit).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDraft {
    pub entity: String,
    /// Capability id naming the change (`core.create`, `core.unlink`, …).
    pub kind: String,
    pub value: Value,
}

impl EventDraft {
    pub fn new(entity: impl Into<String>, kind: impl Into<String>, value: Value) -> EventDraft {
        EventDraft {
            entity: entity.into(),
            kind: kind.into(),
            value,
        }
    }
}

/// A 32-byte blake3 hash, shown as lowercase hex in JSON.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct EventHash(pub [u8; 32]);

impl EventHash {
    pub const ZERO: EventHash = EventHash([0; 32]);

    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        s
    }

    pub fn from_hex(s: &str) -> Option<EventHash> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let nib = |c: u8| -> Option<u8> {
            match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                b'A'..=b'F' => Some(c - b'A' + 10),
                _ => None,
            }
        };
        let mut out = [0u8; 32];
        for i in 0..32 {
            out[i] = (nib(bytes[2 * i])? << 4) | nib(bytes[2 * i + 1])?;
        }
        Some(EventHash(out))
    }
}

impl std::fmt::Debug for EventHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EventHash({})", &self.to_hex()[..16])
    }
}

impl std::fmt::Display for EventHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for EventHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_hex())
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for EventHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            EventHash::from_hex(&s).ok_or_else(|| D::Error::custom("expected 64 hex characters"))
        } else {
            let b: serde_bytes_compat::Bytes = Deserialize::deserialize(d)?;
            let arr: [u8; 32] =
                b.0.as_slice()
                    .try_into()
                    .map_err(|_| D::Error::custom("expected 32 bytes"))?;
            Ok(EventHash(arr))
        }
    }
}

pub mod serde_bytes_compat {
    //! Byte strings from MessagePack `bin` or a sequence of numbers (what rmp produces for
    //! both forms); also used for signatures by `elfiee-sync`.
    use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

    /// Accepts either a byte string or a sequence of u8 (what rmp produces for both forms).
    pub struct Bytes(pub Vec<u8>);

    impl<'de> Deserialize<'de> for Bytes {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Bytes;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                    Ok(Bytes(v.to_vec()))
                }
                fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
                    Ok(Bytes(v))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
                    let mut out = Vec::new();
                    while let Some(b) = seq.next_element::<u8>()? {
                        out.push(b);
                    }
                    Ok(Bytes(out))
                }
            }
            d.deserialize_bytes(V)
        }
    }
}
