//! The writer of a salvaged document: takes the records it can prove, puts a placeholder in
//! place of each lost one, and seals the chain (see the module docs of `salvage`).

use std::path::Path;

use elfiee_model::{ContentRef, EventHash};
use elfiee_projections::SALVAGE_LOST;

use super::report::{CommandSpan, Lost, Span};
use super::sources::{PackBodies, Saved};
use crate::backup::Rebuilt;
use crate::content::ContentStore;
use crate::error::EngineError;
use crate::log::{EventLog, SledEventLog};
use crate::raw_records::RawRecords;

/// How many seqs past a lost event are tried for the next one sled reads.
pub(super) const MAX_PROBES: usize = 100_000;
/// How many lost events in a row the records found by their bytes can bridge.
pub(super) const RAW_WINDOW: u64 = 64;

/// Appends recovered events (with their bodies) to the new document.
pub(super) struct Writer<'a, 'b> {
    pub(super) rebuilt: Rebuilt<'a>,
    /// Told the count of events recovered after each flush.
    pub(super) progress: &'b mut dyn FnMut(u64),
    pub(super) pending: Vec<(u64, Vec<u8>)>,
    /// Where bodies come from: the damaged store, else the backup, else the damaged pack as
    /// salvage reads it.
    pub(super) bodies_from: (&'b ContentStore, Option<&'b Saved>),
    pub(super) pack: PackBodies,
    pub(super) spans: Vec<Span>,
    /// The commands of the events taken, in seq order.
    pub(super) commands: Vec<CommandSpan>,
    /// The hash the damaged document stores for the last event taken (the chain the next
    /// must continue); `None` just past a lost event, where the next event is taken on its
    /// storage's own check (sled's checksum of its messages, a pack group's hash) and the
    /// chain holds again from the one after it.
    pub(super) last: Option<EventHash>,
    /// The stored hash of the event just refused, when the chain proved its record and only
    /// a body it refers to is lost: the event after it is still proven by the chain.
    pub(super) proven: Option<(EventHash, uuid::Uuid)>,
    /// `created_at` (ms) of the last event taken: a placeholder takes it.
    pub(super) last_at: i64,
    /// The events replaced by placeholders, with why.
    pub(super) gaps: Vec<Lost>,
    /// The hash the damaged document stores for the last event taken (kept past a lost one).
    pub(super) stored: EventHash,
    /// The command of the last event taken.
    pub(super) last_cmd: uuid::Uuid,
    /// The placeholders of the last gap whose events' commands are unknown (where in
    /// `pending`, how many) and the command before them: when the event after them has that
    /// command too, they were its events, and take its id (a command's events stay one run).
    pub(super) open_gap: Option<(usize, usize, uuid::Uuid)>,
}

impl Writer<'_, '_> {
    /// Takes one record; `Err(why)` when it cannot be proven (the caller stops there).
    pub(super) fn take(
        &mut self,
        seq: u64,
        bytes: Vec<u8>,
        source: &str,
    ) -> Result<Result<(), String>, EngineError> {
        self.proven = None;
        let (expect, prev) = self.next();
        if self
            .open_gap
            .is_some_and(|(at, n, _)| at + n > self.pending.len())
        {
            self.open_gap = None;
        }
        if seq != expect {
            return Ok(Err(format!(
                "event {expect} is missing (the next readable one is {seq})"
            )));
        }
        let e = match crate::codec::open(seq, &bytes, prev.as_ref()) {
            Ok(e) => e,
            Err(why) => return Ok(Err(format!("event {seq}: {why}"))),
        };
        let hash = EventHash(bytes[..32].try_into().unwrap_or_default());
        for r in elfiee_projections::content::event_refs(&e.value) {
            if let Err(why) = self.body(&r) {
                self.proven = Some((hash, e.cmd_id));
                return Ok(Err(format!(
                    "event {seq} refers to a body that is lost ({why})"
                )));
            }
        }
        if let Some((at, n, cmd)) = self.open_gap.take() {
            if cmd == e.cmd_id {
                let why = self.gaps.last().map(|g| g.why.clone()).unwrap_or_default();
                for i in at..at + n {
                    let seq = self.pending[i].0;
                    self.pending[i].1 = self.placeholder(seq, &why, Some(cmd));
                }
            }
        }
        self.last = Some(hash);
        self.stored = hash;
        self.last_cmd = e.cmd_id;
        self.last_at = e.created_at.timestamp_millis();
        match self.commands.last_mut() {
            Some((id, first, n)) if *id == e.cmd_id && *first + *n == seq => *n += 1,
            _ => self.commands.push((e.cmd_id, seq, 1)),
        }
        match self.spans.last_mut() {
            Some(s) if s.source == source && s.to + 1 == seq => s.to = seq,
            _ => self.spans.push(Span {
                from: seq,
                to: seq,
                source: source.into(),
            }),
        }
        self.pending.push((seq, bytes));
        if self.pending.len() >= 4096 {
            self.flush()?;
        }
        Ok(Ok(()))
    }

    pub(super) fn flush(&mut self) -> Result<(), EngineError> {
        let mut records = std::mem::take(&mut self.pending);
        // The chain is sealed again: where no event was lost before, that gives the stored
        // hashes (`take` checked them); past a lost one, new hashes over the same bodies.
        let mut prev = self.rebuilt.prev;
        for (seq, bytes) in &mut records {
            prev = crate::codec::chain_hash(&prev, *seq, &bytes[32..]);
            bytes[..32].copy_from_slice(&prev.0);
        }
        self.rebuilt
            .events(&records)
            .map_err(|why| EngineError::Storage(format!("salvage: {why}")))?;
        (self.progress)(self.rebuilt.seq);
        Ok(())
    }

    /// Stores body `r` in the new document, from the damaged store, the backup, or the
    /// damaged pack.
    pub(super) fn body(&mut self, r: &ContentRef) -> Result<(), String> {
        let from_store = self
            .bodies_from
            .0
            .get_bytes_or_why(r)
            .map_err(|why| format!("in the store: {why}"));
        let bytes = match from_store {
            Ok(b) => b,
            Err(why) => {
                let from_backup = match self.bodies_from.1 {
                    Some(s) => s.body(r).map_err(|w| format!("{why}; in the backup: {w}")),
                    None => Err(format!("{why}; no backup")),
                };
                match from_backup {
                    Ok(b) => b,
                    Err(why) => self
                        .pack
                        .get(r)
                        .map_err(|w| format!("{why}; by its hash in the pack: {w}"))?,
                }
            }
        };
        self.rebuilt.body(&r.hash.0, &bytes)
    }

    /// The seq the next event taken must have, and the hash it must chain from (`None`: just
    /// past a lost event).
    pub(super) fn next(&self) -> (u64, Option<EventHash>) {
        (self.rebuilt.seq + self.pending.len() as u64 + 1, self.last)
    }

    /// Past the event that stopped the reading (`why`): placeholders for it and every event
    /// up to the next one the damaged log holds, which is where reading resumes (`None`:
    /// nothing is held past it, or the log could not be opened).
    pub(super) fn bridge(
        &mut self,
        log: Option<&SledEventLog>,
        (raw, root): (&mut Option<RawRecords>, &Path),
        why: &str,
    ) -> Result<Option<u64>, EngineError> {
        let (from, _) = self.next();
        if let Some((hash, cmd)) = self.proven.take() {
            // Only a body is lost: the next event is still proven by the chain.
            self.lose(from, from + 1, why, Some(cmd));
            self.last = Some(hash);
            return Ok(Some(from + 1));
        }
        // The next seq sled (or the pack) reads at all, taken on its own check; a damaged
        // record or group answers an error, a lost one another seq, the end nothing.
        let mut by_sled = None;
        if let Some(log) = log {
            let mut at = from + 1;
            for _ in 0..MAX_PROBES {
                let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    log.records(at, u64::MAX).next()
                }));
                match next {
                    Ok(None) => break,
                    Ok(Some(Ok((seq, _)))) if seq >= at => {
                        by_sled = Some(seq);
                        break;
                    }
                    _ => at += 1,
                }
            }
        }
        // Two records next to each other in the log's files, the second chained to the first
        // (where sled cannot open its file, or reads nothing near): the first stands in for
        // a lost event too, as nothing proves it.
        let window = by_sled.map_or(RAW_WINDOW, |s| (s - from).min(RAW_WINDOW));
        let by_bytes = match window {
            // Sled reads the very next event: no pair can do better.
            0 | 1 => None,
            _ => raw
                .get_or_insert_with(|| RawRecords::scan(&RawRecords::files_of(root)))
                .bridge(from, window),
        };
        match (by_bytes, by_sled) {
            (Some((seq, first)), s) if s.is_none_or(|s| seq < s) => {
                self.lose(from, seq, why, None);
                self.last = Some(first);
                Ok(Some(seq))
            }
            (_, Some(seq)) => {
                self.lose(from, seq, why, None);
                self.last = None;
                Ok(Some(seq))
            }
            _ => Ok(None),
        }
    }

    /// A placeholder (kind [`SALVAGE_LOST`]) for each event `from..to`, lost for `why`, of
    /// command `cmd` when it is known.
    pub(super) fn lose(&mut self, from: u64, to: u64, why: &str, cmd: Option<uuid::Uuid>) {
        if cmd.is_none() {
            self.open_gap = Some((self.pending.len(), (to - from) as usize, self.last_cmd));
        }
        for seq in from..to {
            let bytes = self.placeholder(seq, why, cmd);
            self.pending.push((seq, bytes));
        }
        self.gaps.push(Lost {
            from,
            to: Some(to - 1),
            why: why.to_string(),
        });
    }

    /// The stored bytes of the placeholder for event `seq` (the chain is sealed at the flush).
    pub(super) fn placeholder(&self, seq: u64, why: &str, cmd: Option<uuid::Uuid>) -> Vec<u8> {
        // An id no other event has: the lost event's stored hash is unknown, the one before
        // it is not.
        let mut id = blake3::Hasher::new();
        id.update(b"elfiee salvage.lost");
        id.update(&self.stored.0);
        id.update(&seq.to_be_bytes());
        let id = uuid::Uuid::from_slice(&id.finalize().as_bytes()[..16]).unwrap_or_default();
        let mut e = elfiee_model::Event {
            seq,
            event_id: id,
            cmd_id: cmd.unwrap_or(id),
            entity: String::new(),
            attribute: format!("salvage/{SALVAGE_LOST}"),
            value: serde_json::json!({ "why": why }),
            clock: Default::default(),
            created_at: chrono::DateTime::from_timestamp_millis(self.last_at).unwrap_or_default(),
            hash: EventHash::ZERO,
        };
        crate::codec::seal(&EventHash::ZERO, &mut e)
    }

    /// Placeholders at the end are no bridge to anything: they are taken back, and returned
    /// as why the events from theirs on are lost.
    pub(super) fn trim_gap(&mut self) -> Option<String> {
        let (next, _) = self.next();
        let gap = self.gaps.last()?;
        if gap.to != Some(next - 1) {
            return None;
        }
        let n = (next - gap.from) as usize;
        let placeholders = self.pending.len().checked_sub(n)?;
        self.pending.truncate(placeholders);
        self.gaps.pop().map(|g| g.why)
    }

    /// Events of the damaged log from `from` on: as sled reads them, and where sled cannot
    /// (it cannot open its file, a record is damaged, it panics), as the log's files hold
    /// them ([`RawRecords`], scanned from the damaged document at `root` when first
    /// needed), then sled again past that; why it stopped (`None`: the log's end).
    pub(super) fn read_log(
        &mut self,
        log: Option<&SledEventLog>,
        raw: &mut Option<RawRecords>,
        root: &Path,
        from: u64,
    ) -> Result<Option<String>, EngineError> {
        let mut from = from;
        loop {
            // Where sled ends is not where the log ends when sled mended it short: the files
            // are asked for the next event in either case.
            let why = match log {
                Some(log) => self.log_from(log, from)?,
                None => Some("the log could not be opened".to_string()),
            };
            let raw = raw.get_or_insert_with(|| RawRecords::scan(&RawRecords::files_of(root)));
            let (before, _) = self.next();
            while let (seq, Some(prev)) = self.next() {
                let Some(record) = raw.record(seq, &prev) else {
                    break;
                };
                if let Err(e) = self.take(seq, record, "scan")? {
                    return Ok(Some(e));
                }
            }
            let (after, _) = self.next();
            match why {
                None if after == before => return Ok(None),
                Some(why) if after == before => {
                    return Ok(Some(format!(
                        "{why}; no intact copy of event {after} is in the log's files either"
                    )))
                }
                Some(why) if log.is_none() => {
                    return Ok(Some(format!(
                        "{why}; the log's files hold no intact copy of event {after}"
                    )))
                }
                _ => from = after,
            }
        }
    }

    /// Events from the damaged log from `from` on, while the chain holds; why it stopped
    /// (`None`: it reached the log's end).
    pub(super) fn log_from(
        &mut self,
        log: &SledEventLog,
        from: u64,
    ) -> Result<Option<String>, EngineError> {
        let mut records = log.records(from, u64::MAX);
        loop {
            let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| records.next()));
            let (seq, bytes) = match next {
                Err(_) => return Ok(Some("the log is unreadable here (sled panicked)".into())),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Ok(Some(e.to_string())),
                Ok(Some(Ok(r))) => r,
            };
            if let Err(why) = self.take(seq, bytes, "log")? {
                return Ok(Some(why));
            }
        }
    }

    /// Events from the backup after `at` up to its point; why it stopped (`None`: whole).
    pub(super) fn backup_from(
        &mut self,
        s: &Saved,
        at: u64,
    ) -> Result<Option<String>, EngineError> {
        for &(first, count, offset) in &s.event_frames {
            if first + count as u64 <= at + 1 {
                continue;
            }
            let records = match s.events_at(offset) {
                Ok(r) => r,
                Err(why) => return Ok(Some(format!("the backup: {why}"))),
            };
            for (seq, bytes) in records {
                if seq <= at || seq > s.point.seq {
                    continue;
                }
                if let Err(why) = self.take(seq, bytes, "backup")? {
                    return Ok(Some(format!("the backup: {why}")));
                }
            }
        }
        Ok(None)
    }
}
