//! How another device's events are kept in the log (the storage half of [`crate::foreign`]):
//! the side records beside the events, written in the same atomic batch (see
//! [`crate::log::side_key`]):
//! - `m‖first_seq` — the commands of a submission (capability and target each, with their
//!   event counts), while the file records them;
//! - `f‖seq` — an event that came from another device, and the bytes its sender keeps with
//!   it (its origin);
//! - `x‖key` — whatever sync keeps beside them (a checkpoint, an id map).

use std::collections::HashSet;

use elfiee_model::Command;

use crate::error::EngineError;
use crate::log::{side_key, SledEventLog};

const COMMANDS: u8 = b'm';
const FOREIGN: u8 = b'f';
const SIDE: u8 = b'x';

/// The key of the origin record of foreign event `seq`.
pub(crate) fn origin_key(seq: u64) -> Vec<u8> {
    side_key(FOREIGN, &seq.to_be_bytes())
}

/// The key under which a side record `key` of sync is stored.
pub(crate) fn side_record_key(key: &[u8]) -> Vec<u8> {
    side_key(SIDE, key)
}

/// The `m‖first_seq` record of a submission: each command's event count, capability and
/// target.
pub(crate) fn commands_record(
    first_seq: u64,
    cmds: &[Command],
    counts: &[u64],
) -> (Vec<u8>, Vec<u8>) {
    let list: Vec<(u64, &str, Option<&str>)> = cmds
        .iter()
        .zip(counts)
        .map(|(c, n)| (*n, c.cap_id.as_str(), c.block_id.as_deref()))
        .collect();
    // Plain data into a Vec: cannot fail.
    let bytes = rmp_serde::to_vec(&list).unwrap_or_default();
    (side_key(COMMANDS, &first_seq.to_be_bytes()), bytes)
}

/// The command (capability, target) event `seq` came from, from the `m‖` records.
pub(crate) fn command_of(
    log: &SledEventLog,
    seq: u64,
) -> Result<Option<(String, Option<String>)>, EngineError> {
    let found = log.side_before(
        &side_key(COMMANDS, &0u64.to_be_bytes()),
        &side_key(COMMANDS, &seq.to_be_bytes()),
    )?;
    let Some((key, bytes)) = found else {
        return Ok(None);
    };
    let first = crate::codec::key_seq(&key).unwrap_or(u64::MAX);
    let list: Vec<(u64, String, Option<String>)> = rmp_serde::from_slice(&bytes)
        .map_err(|e| EngineError::Storage(format!("a command record does not decode: {e}")))?;
    let mut at = first;
    for (count, cap, target) in list {
        if seq < at + count {
            return Ok((seq >= at).then_some((cap, target)));
        }
        at += count;
    }
    Ok(None)
}

/// The seqs in `from..=to` that came from another device: one range scan of their `f‖`
/// records (keys only), whatever the length of the range.
pub(crate) fn foreign_seqs(
    log: &SledEventLog,
    from: u64,
    to: u64,
) -> Result<HashSet<u64>, EngineError> {
    Ok(log
        .side_keys(&origin_key(from), &origin_key(to))?
        .iter()
        .filter_map(|k| crate::codec::key_seq(k))
        .collect())
}
