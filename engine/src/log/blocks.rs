//! Reading the log in seq order across its three shapes (single keys, runs in sled, groups in
//! `events.pack`), one [`Block`] at a time: the records of a run or a group stay in the one
//! buffer they were read in, so a reader that only looks at them (a backup) copies nothing
//! per event. [`EventLog::records`](super::EventLog::records) is these blocks, one owned record
//! at a time.

use std::collections::VecDeque;
use std::ops::Range;

use crate::codec;
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

    /// Whether it holds no record.
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

/// Where the groups' records are (`events.pack`).
pub(super) trait GroupBytes {
    /// The bytes of a group's records, checked against its blake3.
    fn group_bytes(&self, g: &GroupEntry) -> Result<Vec<u8>, EngineError>;
}

/// Run keys and values in seq order (the run that reaches into a range first).
pub(super) type RunIter =
    std::iter::Peekable<Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>>>;

/// The blocks of `from..=to`: single events (sled keys), groups and runs merged in seq
/// order; a group or a run is read when the merge reaches it.
pub struct Blocks<'a> {
    pack: &'a dyn GroupBytes,
    from: u64,
    to: u64,
    singles: std::iter::Peekable<sled::Iter>,
    groups: VecDeque<GroupEntry>,
    runs: RunIter,
    /// An error found before the first block (reported once, then nothing).
    failed: Option<EngineError>,
    done: bool,
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
pub(super) fn no_runs() -> RunIter {
    let none: Box<dyn Iterator<Item = _>> = Box::new(std::iter::empty());
    none.peekable()
}

impl<'a> Blocks<'a> {
    /// The blocks of `from..=to` from the sources that hold them: the single events' keys, the
    /// groups and the runs that overlap the range, in seq order.
    pub(super) fn new(
        singles: sled::Iter,
        groups: Result<VecDeque<GroupEntry>, EngineError>,
        runs: RunIter,
        pack: &'a dyn GroupBytes,
        (from, to): (u64, u64),
    ) -> Blocks<'a> {
        let (groups, failed) = match groups {
            Ok(g) => (g, None),
            Err(e) => (VecDeque::new(), Some(e)),
        };
        Blocks {
            pack,
            from,
            to,
            singles: singles.peekable(),
            groups,
            runs,
            failed,
            done: false,
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
                let spans = std::iter::once(0..v.len()).collect();
                Ok(Block::new(seq_of_key(&k)?, Buf::Sled(v), spans, from, to))
            }
            Next::Group => {
                let g = self.groups.pop_front().expect("peeked");
                let buf = self.pack.group_bytes(&g)?;
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
        if self.done {
            return None;
        }
        if let Some(e) = self.failed.take() {
            // Nothing is read after it.
            self.done = true;
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

/// What a group key points at: `count (u32) ‖ offset (u64) ‖ len (u64) ‖ blake3 (32) ‖ last
/// event's hash (32)`, all little-endian, 84 bytes.
/// (Public for tools and the benchmark's raw floor, which read the storage without the engine.)
#[derive(Debug, Clone, Copy)]
pub struct GroupEntry {
    /// The seq of the group's first event (the key it is stored under).
    pub first: u64,
    /// How many events the group holds (seqs `first..first + count`).
    pub count: u32,
    /// Where the group's bytes start in `events.pack` ...
    pub offset: u64,
    /// ... and how many there are.
    pub len: u64,
    /// blake3 of those bytes, checked when they are read.
    pub blake3: [u8; 32],
    /// The hash of the group's last event (the chain's head after it).
    pub last_hash: [u8; 32],
}

impl GroupEntry {
    const LEN: usize = 84;

    /// Seq of the group's last event.
    pub fn last(&self) -> u64 {
        self.first + u64::from(self.count) - 1
    }

    pub(super) fn encode(&self) -> [u8; Self::LEN] {
        let mut v = [0u8; Self::LEN];
        v[..4].copy_from_slice(&self.count.to_le_bytes());
        v[4..12].copy_from_slice(&self.offset.to_le_bytes());
        v[12..20].copy_from_slice(&self.len.to_le_bytes());
        v[20..52].copy_from_slice(&self.blake3);
        v[52..].copy_from_slice(&self.last_hash);
        v
    }

    /// Parses a `g` key and its value.
    pub fn decode(key: &[u8], v: &[u8]) -> Result<GroupEntry, EngineError> {
        let first =
            codec::key_seq(key).ok_or_else(|| EngineError::Storage("bad group key".into()))?;
        let bad = || EngineError::Corrupt {
            seq: first,
            reason: format!("group record is {} bytes, not {}", v.len(), Self::LEN),
        };
        if v.len() != Self::LEN {
            return Err(bad());
        }
        let u64_at = |i: usize| u64::from_le_bytes(v[i..i + 8].try_into().expect("8 bytes"));
        let entry = GroupEntry {
            first,
            count: u32::from_le_bytes(v[..4].try_into().expect("4 bytes")),
            offset: u64_at(4),
            len: u64_at(12),
            blake3: v[20..52].try_into().expect("32 bytes"),
            last_hash: v[52..].try_into().expect("32 bytes"),
        };
        if entry.count == 0 {
            return Err(bad());
        }
        Ok(entry)
    }
}

/// The count of events a run value holds, from its first 4 bytes (`None`: too short or 0).
pub(super) fn run_count(v: &[u8]) -> Option<u32> {
    v.get(..4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .filter(|c| *c > 0)
}

pub(super) fn seq_of_key(k: &[u8]) -> Result<u64, EngineError> {
    codec::key_seq(k).ok_or_else(|| EngineError::Storage("bad event key".into()))
}

/// Where the records `len (u32 LE) ‖ record` of events `first..first + count` lie in `buf`
/// (nothing after them).
pub(super) fn split_spans(
    first: u64,
    count: u32,
    buf: &[u8],
    what: &str,
) -> Result<Vec<std::ops::Range<usize>>, EngineError> {
    let corrupt = |reason: String| EngineError::Corrupt { seq: first, reason };
    // A damaged count must not reserve memory it cannot back: each event takes 4 bytes or more.
    let mut out = Vec::with_capacity((count as usize).min(buf.len() / 4));
    let mut pos = 0usize;
    for seq in first..first + u64::from(count) {
        let n = buf
            .get(pos..pos + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or_else(|| corrupt(format!("{what} ends before event {seq}")))?;
        if buf.len() - (pos + 4) < n {
            return Err(corrupt(format!("{what} ends inside event {seq}")));
        }
        out.push(pos + 4..pos + 4 + n);
        pos += 4 + n;
    }
    if pos != buf.len() {
        return Err(corrupt(format!("{what} has bytes after its last event")));
    }
    Ok(out)
}
