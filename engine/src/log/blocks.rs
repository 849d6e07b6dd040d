//! Reading the log in seq order across its three shapes (single keys, runs in sled, groups in
//! `events.pack`), one [`Block`] at a time: the records of a run or a group stay in the one
//! buffer they were read in, so a reader that only looks at them (a backup) copies nothing
//! per event. [`EventLog::records`](super::EventLog::records) is these blocks, one owned record
//! at a time.

use std::collections::VecDeque;
use std::ops::Range;

use super::{run_count, seq_of_key, split_spans, GroupEntry, SledEventLog};
use crate::codec::event_key;
use crate::error::EngineError;

/// Stored records `(seq, hash ‖ body)` of consecutive seqs, sharing one buffer.
pub struct Block {
    first: u64,
    buf: Buf,
    spans: Vec<Range<usize>>,
}

/// The buffer a block was read in: a sled value (a single event or a run) or a group read
/// from `events.pack`.
enum Buf {
    Sled(sled::IVec),
    Pack(Vec<u8>),
}

impl Block {
    /// `spans` (records of seqs `first..`, as positions in `buf`) cut to `from..=to`.
    fn new(first: u64, buf: Buf, mut spans: Vec<Range<usize>>, from: u64, to: u64) -> Block {
        let skip = from.saturating_sub(first).min(spans.len() as u64) as usize;
        let first = first + skip as u64;
        spans.drain(..skip);
        let keep = (to.saturating_add(1).saturating_sub(first)).min(spans.len() as u64) as usize;
        spans.truncate(keep);
        Block { first, buf, spans }
    }

    /// The seq of the first record.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Its records, in seq order.
    pub fn records(&self) -> impl ExactSizeIterator<Item = (u64, &[u8])> + '_ {
        (0..self.spans.len()).map(|i| self.record(i).expect("in range"))
    }

    /// Its `i`th record.
    fn record(&self, i: usize) -> Option<(u64, &[u8])> {
        let buf: &[u8] = match &self.buf {
            Buf::Sled(v) => v,
            Buf::Pack(v) => v,
        };
        let span = self.spans.get(i)?;
        Some((self.first + i as u64, &buf[span.clone()]))
    }
}

/// Run keys and values in seq order (see [`SledEventLog::runs_overlapping`]).
pub(super) type RunIter =
    std::iter::Peekable<Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>>>;

/// The blocks of `from..=to`: single events (sled keys), groups and runs merged in seq
/// order; a group or a run is read when the merge reaches it.
pub struct Blocks<'a> {
    log: &'a SledEventLog,
    from: u64,
    to: u64,
    singles: std::iter::Peekable<sled::Iter>,
    groups: VecDeque<GroupEntry>,
    runs: RunIter,
    /// An error found before the first block (reported once, then nothing).
    failed: Option<EngineError>,
}

/// Which source holds the next record.
enum Next {
    Single,
    Group,
    Run,
}

/// The seq of the next key of `keys`; 0 for an error or a bad key, so it is reported first.
fn peek_seq<I>(keys: &mut std::iter::Peekable<I>) -> Option<u64>
where
    I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
{
    match keys.peek()? {
        Ok((k, _)) => Some(seq_of_key(k).unwrap_or(0)),
        Err(_) => Some(0),
    }
}

/// No runs (what is left to read after a damaged one).
fn no_runs() -> RunIter {
    let none: Box<dyn Iterator<Item = _>> = Box::new(std::iter::empty());
    none.peekable()
}

impl<'a> Blocks<'a> {
    pub(super) fn new(log: &'a SledEventLog, from: u64, to: u64) -> Blocks<'a> {
        let (groups, failed) = match log.groups_overlapping(from, to) {
            Ok(g) => (g, None),
            Err(e) => (VecDeque::new(), Some(e)),
        };
        Blocks {
            log,
            from,
            to,
            singles: log.events.range(event_key(from)..=event_key(to)).peekable(),
            groups,
            runs: log.runs_overlapping(from, to),
            failed,
        }
    }

    /// The source whose next record has the lowest seq.
    fn next_source(&mut self) -> Option<Next> {
        [
            (peek_seq(&mut self.singles), Next::Single),
            (self.groups.front().map(|g| g.first), Next::Group),
            (peek_seq(&mut self.runs), Next::Run),
        ]
        .into_iter()
        .filter_map(|(seq, which)| seq.map(|s| (s, which)))
        .min_by_key(|(seq, _)| *seq)
        .map(|(_, which)| which)
    }

    /// The next block, empty when a run or group holds nothing in the range.
    fn read(&mut self, next: Next) -> Result<Block, EngineError> {
        let (from, to) = (self.from, self.to);
        match next {
            Next::Single => {
                let (k, v) = self.singles.next().expect("peeked")?;
                let spans = vec![0..v.len()];
                Ok(Block::new(seq_of_key(&k)?, Buf::Sled(v), spans, from, to))
            }
            Next::Group => {
                let g = self.groups.pop_front().expect("peeked");
                let buf = self.log.pack.read(&g)?;
                let spans = split_spans(g.first, g.count, &buf, "group")?;
                Ok(Block::new(g.first, Buf::Pack(buf), spans, from, to))
            }
            Next::Run => {
                let (k, v) = self.runs.next().expect("peeked")?;
                let first = seq_of_key(&k)?;
                let count = run_count(&v).ok_or_else(|| EngineError::Corrupt {
                    seq: first,
                    reason: format!("a run record of {} bytes has no event count", v.len()),
                })?;
                let spans = split_spans(first, count, &v[4..], "run")?
                    .into_iter()
                    .map(|s| s.start + 4..s.end + 4)
                    .collect();
                Ok(Block::new(first, Buf::Sled(v), spans, from, to))
            }
        }
    }
}

impl Iterator for Blocks<'_> {
    type Item = Result<Block, EngineError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.failed.take() {
            // Nothing is read after it.
            self.singles = self.log.events.range(event_key(1)..event_key(1)).peekable();
            self.runs = no_runs();
            return Some(Err(e));
        }
        loop {
            let next = self.next_source()?;
            let single = matches!(next, Next::Single);
            match self.read(next) {
                Ok(b) if b.is_empty() => continue,
                Ok(b) => return Some(Ok(b)),
                Err(e) => {
                    if !single {
                        // No later group or run is read; single events after it still come
                        // (and `read_events` reports the gap the damaged one left).
                        self.groups.clear();
                        self.runs = no_runs();
                    }
                    return Some(Err(e));
                }
            }
        }
    }
}

/// [`Blocks`] one owned record at a time (what [`EventLog::records`](super::EventLog::records)
/// yields).
pub(super) struct Owned<'a> {
    pub blocks: Blocks<'a>,
    pub current: Option<(Block, usize)>,
}

impl Iterator for Owned<'_> {
    type Item = Result<(u64, Vec<u8>), EngineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((block, i)) = &mut self.current {
                if let Some((seq, r)) = block.record(*i) {
                    *i += 1;
                    return Some(Ok((seq, r.to_vec())));
                }
            }
            match self.blocks.next()? {
                Ok(b) => self.current = Some((b, 0)),
                Err(e) => {
                    self.current = None;
                    return Some(Err(e));
                }
            }
        }
    }
}
