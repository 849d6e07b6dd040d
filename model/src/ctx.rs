use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Everything a handler may know about the outside world: time, node identity, a seed for new
/// ids and the capability ids that exist. The engine fills it; handlers never read the clock or
/// a random source themselves, so the same `(Command, State, Ctx)` always gives the same events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ctx {
    /// Commit time, truncated to milliseconds.
    pub now: DateTime<Utc>,
    /// This machine's node id, the first half of vector-clock keys.
    pub node_id: String,
    /// Seed from which [`Ctx::new_id`] derives ids.
    pub id_seed: [u8; 16],
    /// Ids of every registered capability (for validating grants).
    #[serde(default)]
    pub known_caps: Arc<[String]>,
}

impl Ctx {
    /// A context with the given time (truncated to ms), node id and id seed.
    pub fn new(now: DateTime<Utc>, node_id: impl Into<String>, id_seed: [u8; 16]) -> Ctx {
        let ms = now.timestamp_millis();
        Ctx {
            now: DateTime::from_timestamp_millis(ms).unwrap_or(now),
            node_id: node_id.into(),
            id_seed,
            known_caps: Arc::from(Vec::new()),
        }
    }

    /// The id seed of the `index`-th command of a batch run against a state whose last event
    /// is `last_seq`, under the fixed id base `base`: deterministic, and different for every
    /// command that can commit (each one that commits moves `last_seq`). What an engine with a
    /// fixed context (tests) and `elfiee::testkit`'s in-memory pipeline both use.
    pub fn command_seed(base: &[u8; 16], last_seq: u64, index: u32) -> [u8; 16] {
        let mut hasher = blake3::Hasher::new();
        hasher.update(base);
        hasher.update(&last_seq.to_le_bytes());
        hasher.update(&index.to_le_bytes());
        let mut seed = [0u8; 16];
        seed.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
        seed
    }

    /// The `n`-th id of this command: deterministic in `(id_seed, n)`, shaped as a UUID v4.
    pub fn new_id(&self, n: u32) -> Uuid {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.id_seed);
        hasher.update(&n.to_le_bytes());
        let mut h = [0u8; 16];
        h.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
        uuid::Builder::from_random_bytes(h).into_uuid()
    }
}
