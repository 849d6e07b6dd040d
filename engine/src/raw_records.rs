//! Event records found by their bytes, for salvage where sled cannot read its own file (issue
//! 39, F7; decision 0042).
//!
//! sled keeps values as they were given (no compression is configured), so every stored
//! event record — `hash (32) ‖ body` ([`crate::codec`]), alone under an `e` key, inside a
//! run, or in `events.pack` — lies whole somewhere in the document's files, often several
//! times (sled appends a new copy of a page at each change and frees the old one later). A
//! body is MessagePack that starts with the same ten bytes (a map of seven fields whose
//! first is `event_id`), so a scan finds every candidate, its length is the length of one
//! MessagePack value, and the hash chain tells which candidate is event `seq`: only the
//! intact record of that event can hash to its stored hash from the previous event's hash.
//! Nothing is trusted but the chain, exactly as for records sled reads.

use std::collections::HashSet;
use std::path::Path;

use elfiee_model::EventHash;

/// How every event body begins: `fixmap(7)`, then the key `event_id` as a `fixstr(8)`.
const BODY_START: &[u8] = b"\x87\xa8event_id";

/// The records found in some files, in the order they were first met.
pub struct RawRecords {
    /// `(hash, body)` of each distinct candidate.
    found: Vec<([u8; 32], Vec<u8>)>,
    /// Where the last event taken was in `found` (the next one is usually just after).
    cursor: usize,
}

impl RawRecords {
    /// Scans `files` (one missing or unreadable is skipped: it holds nothing to find).
    pub fn scan(files: &[std::path::PathBuf]) -> RawRecords {
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for file in files {
            let Ok(bytes) = std::fs::read(file) else {
                continue;
            };
            scan_bytes(&bytes, &mut seen, &mut found);
        }
        RawRecords { found, cursor: 0 }
    }

    /// The files of the document at `root` where records can be: sled's file and its blob
    /// files, and `events.pack`.
    pub fn files_of(root: &Path) -> Vec<std::path::PathBuf> {
        let log = root.join("log");
        let mut files = vec![log.join("db")];
        if let Ok(rd) = std::fs::read_dir(log.join("blobs")) {
            let mut blobs: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
            blobs.sort();
            files.extend(blobs);
        }
        files.push(root.join("events.pack"));
        files
    }

    /// Past a lost event `from`, where the chain cannot say which record comes next: the
    /// first two records found next to each other in the files whose second continues the
    /// chain from the first at a seq in `from + 2 ..= from + 1 + window` — the smallest such
    /// seq, and the first's stored hash (the second is then proven by the chain; the first is
    /// not, as the hash before it is lost). `None` when no pair does.
    pub fn bridge(&self, from: u64, window: u64) -> Option<(u64, EventHash)> {
        let mut best: Option<(u64, EventHash)> = None;
        for pair in self.found.windows(2) {
            let ((first, _), (hash, body)) = (&pair[0], &pair[1]);
            let first = EventHash(*first);
            for seq in from + 2..=from + 1 + window {
                if best.is_some_and(|(s, _)| seq >= s) {
                    break;
                }
                if crate::codec::chain_hash(&first, seq, body).0 == *hash {
                    best = Some((seq, first));
                    break;
                }
            }
        }
        best
    }

    /// The stored record (`hash ‖ body`) of event `seq`, whose predecessor's hash is `prev`,
    /// if an intact one was found.
    pub fn record(&mut self, seq: u64, prev: &EventHash) -> Option<Vec<u8>> {
        let n = self.found.len();
        // From just after the last one taken, round the whole list once.
        for step in 0..n {
            let i = (self.cursor + step) % n;
            let (hash, body) = &self.found[i];
            if crate::codec::chain_hash(prev, seq, body).0 == *hash {
                self.cursor = i + 1;
                let mut record = Vec::with_capacity(32 + body.len());
                record.extend_from_slice(hash);
                record.extend_from_slice(body);
                return Some(record);
            }
        }
        None
    }
}

/// Adds the candidates in `bytes` not seen yet.
fn scan_bytes(
    bytes: &[u8],
    seen: &mut HashSet<blake3::Hash>,
    found: &mut Vec<([u8; 32], Vec<u8>)>,
) {
    let mut from = 32;
    while from < bytes.len() {
        let Some(at) = find(&bytes[from..], BODY_START).map(|i| from + i) else {
            return;
        };
        from = at + 1;
        let Some(len) = value_len(&bytes[at..]) else {
            continue;
        };
        let record = &bytes[at - 32..at + len];
        if seen.insert(blake3::hash(record)) {
            let hash: [u8; 32] = record[..32].try_into().expect("32 bytes");
            found.push((hash, record[32..].to_vec()));
        }
    }
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// The length of the one MessagePack value at the start of `b`, if it is whole there (no
/// recursion and no allocation: a damaged length only makes it `None`).
pub(crate) fn value_len(b: &[u8]) -> Option<usize> {
    let mut at = 0usize;
    // Values still to read; each takes at least a byte, so more than are left is damage.
    let mut pending: usize = 1;
    let be = |at: usize, n: usize| -> Option<usize> {
        let s = b.get(at..at + n)?;
        Some(s.iter().fold(0usize, |v, &x| (v << 8) | x as usize))
    };
    while pending > 0 {
        pending -= 1;
        let tag = *b.get(at)?;
        at += 1;
        let (skip, children) = match tag {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * (tag as usize & 0x0f)),
            0x90..=0x9f => (0, tag as usize & 0x0f),
            0xa0..=0xbf => (tag as usize & 0x1f, 0),
            0xc4 | 0xd9 => (1 + be(at, 1)?, 0),
            0xc5 | 0xda => (2 + be(at, 2)?, 0),
            0xc6 | 0xdb => (4 + be(at, 4)?, 0),
            0xc7 => (2 + be(at, 1)?, 0),
            0xc8 => (3 + be(at, 2)?, 0),
            0xc9 => (5 + be(at, 4)?, 0),
            0xca => (4, 0),
            0xcb => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xce | 0xd2 => (4, 0),
            0xcf | 0xd3 => (8, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (2, be(at, 2)?),
            0xdd => (4, be(at, 4)?),
            0xde => (2, 2 * be(at, 2)?),
            0xdf => (4, 2 * be(at, 4)?),
            0xc1 => return None,
        };
        at = at.checked_add(skip)?;
        if at > b.len() {
            return None;
        }
        pending = pending.checked_add(children)?;
        if pending > b.len() - at {
            return None;
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfiee_model::Event;
    use serde_json::json;

    fn event(seq: u64, text: &str) -> Event {
        Event {
            seq,
            event_id: uuid::Uuid::from_u128(seq as u128),
            cmd_id: uuid::Uuid::from_u128(1000 + seq as u128),
            entity: "b".into(),
            attribute: "owner/markdown.write".into(),
            value: json!({"contents": {"markdown": text, "n": [1, -2, 3.5, null, true]}}),
            clock: [("owner".to_string(), seq)].into(),
            created_at: chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
            hash: EventHash::ZERO,
        }
    }

    #[test]
    fn value_len_measures_an_event_body_and_refuses_a_cut_one() {
        let body = crate::codec::encode_body(&event(1, "hello"));
        assert!(body.starts_with(BODY_START));
        let mut padded = body.clone();
        padded.extend_from_slice(b"trailing bytes");
        assert_eq!(value_len(&padded), Some(body.len()));
        assert_eq!(value_len(&body[..body.len() - 1]), None);
        assert_eq!(value_len(&[0xdd, 0xff, 0xff, 0xff, 0xff]), None);
    }

    #[test]
    fn the_chain_picks_intact_records_among_copies_and_damaged_ones() {
        let mut prev = EventHash::ZERO;
        let mut records = Vec::new();
        for seq in 1..=5 {
            let mut e = event(seq, &format!("text {seq}"));
            records.push(crate::codec::seal(&prev, &mut e));
            prev = e.hash;
        }
        // A file of noise, the records out of order, a damaged copy of event 3 first and its
        // intact copy later.
        let mut file = vec![0x5au8; 100];
        let mut damaged = records[2].clone();
        let n = damaged.len();
        damaged[n - 3] ^= 1;
        for r in [
            &records[1],
            &records[0],
            &damaged,
            &records[4],
            &records[3],
            &records[2],
        ] {
            file.extend_from_slice(r);
            file.extend_from_slice(&[0u8; 7]);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        std::fs::write(&path, &file).unwrap();
        let mut raw = RawRecords::scan(&[path]);
        let mut prev = EventHash::ZERO;
        for (i, want) in records.iter().enumerate() {
            let got = raw.record(i as u64 + 1, &prev).expect("found");
            assert_eq!(&got, want);
            prev = EventHash(got[..32].try_into().unwrap());
        }
        assert_eq!(raw.record(6, &prev), None);
    }
}
