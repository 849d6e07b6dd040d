//! How another device's events are kept in the log (the storage half of [`crate::foreign`]):
//! the side records beside the events, written in the same atomic batch (see
//! [`crate::log::side_key`]):
//! - `m‖first_seq` — the commands of a submission (capability and target each, with their
//!   event counts), while the file records them;
//! - `o‖first_seq` — the events of one foreign append (`first_seq` on, each from another
//!   device) and the bytes their sender keeps with each (its origin): a list as a run holds
//!   its records (`count ‖ (len ‖ bytes)*`), one record per append;
//! - `f‖seq` — one such event and its origin bytes, as builds before issue 28 wrote them
//!   (one record per event; still read);
//! - `x‖key` — whatever sync keeps beside them (a checkpoint, an id map).

use std::collections::{BTreeMap, HashSet};

use elfiee_model::Command;

use crate::error::EngineError;
use crate::log::{side_key, SideRecord, SledEventLog};

const COMMANDS: u8 = b'm';
const FOREIGN: u8 = b'f';
const ORIGINS: u8 = b'o';
const SIDE: u8 = b'x';

/// The key of the origin record of foreign event `seq` (the format of older builds).
fn origin_key(seq: u64) -> Vec<u8> {
    side_key(FOREIGN, &seq.to_be_bytes())
}

fn origins_key(first_seq: u64) -> Vec<u8> {
    side_key(ORIGINS, &first_seq.to_be_bytes())
}

/// The `o‖first_seq` record of one foreign append: each event's origin bytes, in seq order.
pub(crate) fn origins_record(
    first_seq: u64,
    origins: &[Vec<u8>],
) -> Result<(Vec<u8>, Vec<u8>), EngineError> {
    Ok((origins_key(first_seq), crate::log::encode_list(origins)?))
}

/// The `prefix‖first_seq` records that may cover seqs in `from..=to` (records that each
/// hold several events from their first seq on): the one that starts at or before `from`,
/// then those that start inside the range (two range scans).
fn overlapping(
    log: &SledEventLog,
    prefix: u8,
    from: u64,
    to: u64,
) -> Result<Vec<SideRecord>, EngineError> {
    let key = |seq: u64| side_key(prefix, &seq.to_be_bytes());
    let mut records: Vec<SideRecord> = log.side_before(&key(0), &key(from))?.into_iter().collect();
    if from < to {
        records.extend(log.side_records(&key(from + 1), &key(to))?);
    }
    Ok(records)
}

/// The foreign events in `from..=to` with their origin bytes, in seq order: the `o‖` records
/// that overlap the range (the one that starts at or before `from`, then a range scan) and
/// older builds' `f‖seq` records.
pub(crate) fn origins(
    log: &SledEventLog,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, Vec<u8>)>, EngineError> {
    let mut out = Vec::new();
    for (key, value) in overlapping(log, ORIGINS, from, to)? {
        let first = crate::codec::key_seq(&key).unwrap_or(u64::MAX);
        for (seq, bytes) in crate::log::decode_list(first, &value)? {
            if (from..=to).contains(&seq) {
                out.push((seq, bytes.to_vec()));
            }
        }
    }
    for (key, value) in log.side_records(&origin_key(from), &origin_key(to))? {
        if let Some(seq) = crate::codec::key_seq(&key) {
            out.push((seq, value));
        }
    }
    out.sort_by_key(|(seq, _)| *seq);
    Ok(out)
}

/// Every side record kept for the events `from..=to` (the `m‖`, `o‖` and `f‖` records that
/// start in the range: they are written once, with their events, and never change), for a
/// backup.
pub(crate) fn records_of(
    log: &SledEventLog,
    from: u64,
    to: u64,
) -> Result<Vec<SideRecord>, EngineError> {
    let mut out = Vec::new();
    if from > to {
        return Ok(out);
    }
    for prefix in [COMMANDS, ORIGINS, FOREIGN] {
        let key = |seq: u64| side_key(prefix, &seq.to_be_bytes());
        out.extend(log.side_records(&key(from), &key(to))?);
    }
    Ok(out)
}

/// The seq a side record belongs to: `Some(Some(seq))` for the records of events (`m‖`,
/// `o‖`, `f‖`: the first seq they cover), `Some(None)` for sync's own (`x‖`), `None` for a key
/// that is no side record.
pub(crate) fn record_seq(key: &[u8]) -> Option<Option<u64>> {
    match key.first()? {
        &COMMANDS | &ORIGINS | &FOREIGN => Some(Some(crate::codec::key_seq(key)?)),
        &SIDE => Some(None),
        _ => None,
    }
}

/// Every `x‖` record (what sync keeps beside the events; they change), for a backup: read
/// while nothing is being written, so they match the events up to the log's tail.
pub(crate) fn current_records(log: &SledEventLog) -> Result<Vec<SideRecord>, EngineError> {
    log.side_prefix(&[SIDE])
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
    Ok(commands_in(log, seq, seq)?.remove(&seq))
}

/// The seqs in `from..=to` that came from another device: one range scan of each kind of
/// origin record, whatever the length of the range.
pub(crate) fn foreign_seqs(
    log: &SledEventLog,
    from: u64,
    to: u64,
) -> Result<HashSet<u64>, EngineError> {
    Ok(origins(log, from, to)?
        .into_iter()
        .map(|(seq, _)| seq)
        .collect())
}

/// The commands (capability, target) of the local events in `from..=to` that recorded one,
/// by seq: the `m‖` record that starts at or before `from`, then a range scan.
pub(crate) fn commands_in(
    log: &SledEventLog,
    from: u64,
    to: u64,
) -> Result<BTreeMap<u64, (String, Option<String>)>, EngineError> {
    let mut out = BTreeMap::new();
    for (key, bytes) in overlapping(log, COMMANDS, from, to)? {
        let mut at = crate::codec::key_seq(&key).unwrap_or(u64::MAX);
        for (count, cap, target) in decode_commands(&bytes)? {
            for seq in at..at.saturating_add(count) {
                if (from..=to).contains(&seq) {
                    out.insert(seq, (cap.clone(), target.clone()));
                }
            }
            at = at.saturating_add(count);
        }
    }
    Ok(out)
}

/// A command record's list: (event count, capability, target) per command.
type CommandList = Vec<(u64, String, Option<String>)>;

fn decode_commands(bytes: &[u8]) -> Result<CommandList, EngineError> {
    rmp_serde::from_slice(bytes)
        .map_err(|e| EngineError::Storage(format!("a command record does not decode: {e}")))
}

/// Merges the `m‖` records of consecutive submissions (one commit group) into one record,
/// so a group writes one command record, not one per submission. Other records pass as
/// they are.
pub(crate) fn merge_command_records(side: Vec<SideRecord>) -> Result<Vec<SideRecord>, EngineError> {
    let mut out = Vec::with_capacity(side.len());
    // The merged record so far: its first seq, the seq after it, its list.
    let mut open: Option<(u64, u64, CommandList)> = None;
    let close = |open: Option<(u64, u64, CommandList)>, out: &mut Vec<SideRecord>| {
        if let Some((first, _, list)) = open {
            // Plain data into a Vec: cannot fail.
            let bytes = rmp_serde::to_vec(&list).unwrap_or_default();
            out.push((side_key(COMMANDS, &first.to_be_bytes()), bytes));
        }
    };
    for (key, value) in side {
        let first = (key.first() == Some(&COMMANDS))
            .then(|| crate::codec::key_seq(&key))
            .flatten();
        let Some(first) = first else {
            out.push((key, value));
            continue;
        };
        let list = decode_commands(&value)?;
        let count: u64 = list.iter().map(|(n, _, _)| n).sum();
        match &mut open {
            Some((_, end, merged)) if *end == first => {
                merged.extend(list);
                *end = first + count;
            }
            _ => {
                close(open.take(), &mut out);
                open = Some((first, first + count, list));
            }
        }
    }
    close(open, &mut out);
    Ok(out)
}
