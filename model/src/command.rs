use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{BlockId, EditorId};

/// A request to run one capability. Commands are never stored; the events they produce are.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// Idempotency key: resubmitting a committed `cmd_id` returns the original events.
    pub cmd_id: Uuid,
    pub editor_id: EditorId,
    pub cap_id: String,
    /// Target block; `None` for capabilities that target the whole file (`*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_id: Option<BlockId>,
    #[serde(default)]
    pub payload: Value,
    /// Optimistic concurrency: reject with `Conflict` if the target block changed after this seq.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_seq: Option<u64>,
}

impl Command {
    /// A command with a fresh random `cmd_id`.
    pub fn new(
        editor_id: impl Into<String>,
        cap_id: impl Into<String>,
        block_id: Option<&str>,
        payload: Value,
    ) -> Command {
        Command {
            cmd_id: Uuid::new_v4(),
            editor_id: editor_id.into(),
            cap_id: cap_id.into(),
            block_id: block_id.map(str::to_owned),
            payload,
            expected_seq: None,
        }
    }

    /// Sets `expected_seq` (builder style).
    pub fn expecting(mut self, seq: u64) -> Command {
        self.expected_seq = Some(seq);
        self
    }
}
