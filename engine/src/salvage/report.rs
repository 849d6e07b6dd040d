//! What a salvage reports: the ranges recovered and lost.

use serde::{Deserialize, Serialize};

/// Events recovered from one source.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Span {
    /// The first event of the span ...
    pub from: u64,
    /// ... and its last.
    pub to: u64,
    /// `"log"` (read through sled), `"scan"` (found by its bytes in the log's files where
    /// sled could not read them) or `"backup"`.
    pub source: String,
}

/// Events not recovered: `from` to `to` (`None`: to an end nothing in the document knows).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lost {
    /// The first event lost.
    pub from: u64,
    /// The last one, when something still says where the document ended.
    pub to: Option<u64>,
    /// Why they could not be recovered, in words (where each was looked for, what was
    /// found).
    pub why: String,
}

/// A command of the recovered events: its id, first seq and number of events.
pub(super) type CommandSpan = (uuid::Uuid, u64, u64);
