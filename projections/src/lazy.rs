//! [`LazyMap`]: an ordered map from string keys to values whose bulk may stay encoded in an
//! immutable image (a stored snapshot) until someone reads it.
//!
//! A document of 10,000 blocks should not cost a short-lived process that writes one block
//! what it costs to decode 10,000 (issue 11: a CLI call costs what it changes). The map has
//! two layers:
//!
//! - the **base**: a sorted table of `key → encoded value` inside an [`Image`] (bytes that
//!   never change while mapped: the engine memory-maps a snapshot file it checked against its
//!   hash). Lookups binary-search the table; a value is decoded the first time it is read
//!   and kept (the decoded copy belongs to the base, so every clone of the map shares it);
//! - the **overlay**: what was inserted, changed or removed since the base was made, as a
//!   persistent ordered map (`imbl::OrdMap`, values behind `Arc`; `None` = removed from the
//!   base): a clone shares it, and a change to a clone copies only the path to the key and
//!   the value changed. The engine clones the state for each batch of several commands (a
//!   later command sees the earlier ones), so a clone must not cost the 10,000 blocks of an
//!   imported project (issue 37, "Fast": it was two thirds of a recorded hook call).
//!
//! Reading an image is reading memory: nothing here touches the disk, so a fold over a
//! `LazyMap` stays pure. Iteration, equality and serialization see one merged map in key
//! order, so the canonical encoding (and the state digest) is the same as a `BTreeMap`'s.
//!
//! Section layout (all integers little endian), produced by [`LazyMap::encode_section`]:
//! `count u64 ‖ (count + 1) record offsets u64, from the section start ‖ records`, each record
//! `key length u32 ‖ key (UTF-8) ‖ value (MessagePack, named fields)`; the last offset is the
//! section's length. Keys are strictly increasing (byte order, as `String`'s `Ord`).

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The overlay's map (see the module documentation).
type Overlay<V> = imbl::OrdMap<String, Option<Arc<V>>>;

/// Bytes that do not change for as long as they are referenced: a stored snapshot file the
/// engine checked against its CRC (read with positioned reads, so only what a lookup needs
/// is read, and nothing of the file is kept in memory), or a buffer.
pub trait Image: Send + Sync {
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buf` from `offset`; false when the bytes cannot be read.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> bool;
}

impl Image for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> bool {
        let from = offset as usize;
        match from
            .checked_add(buf.len())
            .and_then(|to| self.get(from..to))
        {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

/// What a `LazyMap` value must be able to do.
pub trait LazyValue: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> LazyValue for T {}

/// Records read together when a map is walked in order.
const CHUNK: usize = 256;
/// Key bytes read with a probe's first read (longer keys take a second).
const KEY_PROBE: usize = 64;

type Cell<V> = OnceLock<Option<Box<(Box<str>, V)>>>;

/// Cells come in pages of [`CHUNK`], made when one of theirs is first read: a process that
/// reads three blocks of 10,000 pays for three pages, not for 10,000 cells.
struct Cells<V> {
    pages: Box<[Page<V>]>,
}

/// One page of cells, made on first use.
type Page<V> = OnceLock<Box<[Cell<V>]>>;

impl<V> Cells<V> {
    fn new(count: usize) -> Cells<V> {
        Cells {
            pages: (0..count.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    fn cell(&self, i: usize) -> &Cell<V> {
        let page =
            self.pages[i / CHUNK].get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
        &page[i % CHUNK]
    }

    /// The cell of `i` if its page was made.
    fn peek(&self, i: usize) -> Option<&Cell<V>> {
        self.pages[i / CHUNK].get().map(|p| &p[i % CHUNK])
    }

    fn decoded(&self) -> usize {
        self.pages
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|p| p.iter())
            .filter(|c| c.get().is_some())
            .count()
    }
}

struct Base<V> {
    image: Arc<dyn Image>,
    /// Where the section starts in the image, and its length.
    start: u64,
    len: u64,
    count: usize,
    /// Decoded records, filled on first read (`None`: the record is damaged).
    cells: Cells<V>,
    /// Lookups so far; past [`KEYS_IN_MEMORY_AFTER`] the keys are read into `keys` at once.
    lookups: std::sync::atomic::AtomicUsize,
    keys: OnceLock<Option<KeyTable>>,
}

/// Lookups that binary-search the file; a process that looks up more blocks than this (a
/// rescan reads every file's block) reads all keys at once and searches them in memory.
const KEYS_IN_MEMORY_AFTER: usize = 64;

/// Every key of a base, in order: `bytes[ends[i - 1]..ends[i]]` is key `i`.
struct KeyTable {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl KeyTable {
    fn key(&self, i: usize) -> &[u8] {
        let from = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[from..self.ends[i] as usize]
    }
}

/// The key and encoded value of a raw record.
fn split(rec: &[u8]) -> Option<(&[u8], &[u8])> {
    let klen = u32::from_le_bytes(rec.get(..4)?.try_into().ok()?) as usize;
    let key = rec.get(4..4usize.checked_add(klen)?)?;
    Some((key, &rec[4 + klen..]))
}

fn decode<V: LazyValue>(rec: &[u8]) -> Option<(Box<str>, V)> {
    let (k, v) = split(rec)?;
    Some((
        std::str::from_utf8(k).ok()?.into(),
        rmp_serde::from_slice(v).ok()?,
    ))
}

/// Binary search over `count` sorted keys; `None` when absent or when a key cannot be read.
fn binary_search<K: AsRef<[u8]>>(
    count: usize,
    key: &str,
    key_at: impl Fn(usize) -> Option<K>,
) -> Option<usize> {
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match key_at(mid)?.as_ref().cmp(key.as_bytes()) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(mid),
        }
    }
    None
}

/// Consecutive raw records `lo..lo + offsets.len() - 1`, read at once.
struct Chunk {
    lo: usize,
    offsets: Vec<u64>,
    bytes: Vec<u8>,
}

impl Chunk {
    fn covers(&self, i: usize) -> bool {
        i >= self.lo && i + 1 < self.lo + self.offsets.len()
    }

    fn record(&self, i: usize) -> &[u8] {
        let k = i - self.lo;
        let base = self.offsets[0];
        &self.bytes[(self.offsets[k] - base) as usize..(self.offsets[k + 1] - base) as usize]
    }
}

impl<V: LazyValue> Base<V> {
    /// `n` bytes at `at` (from the section start), if they lie inside the section.
    fn read(&self, at: u64, n: usize) -> Option<Vec<u8>> {
        if at.checked_add(n as u64)? > self.len {
            return None;
        }
        let mut buf = vec![0u8; n];
        self.image.read_at(self.start + at, &mut buf).then_some(buf)
    }

    /// The `n + 1` offsets from record `i`, checked to increase and stay in the section.
    fn offsets(&self, i: usize, n: usize) -> Option<Vec<u64>> {
        let raw = self.read(8 + 8 * i as u64, 8 * (n + 1))?;
        let offs: Vec<u64> = raw
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        let table_end = 8 * (self.count as u64 + 2);
        let ok =
            offs.windows(2).all(|w| w[0] <= w[1]) && offs[0] >= table_end && offs[n] <= self.len;
        ok.then_some(offs)
    }

    fn record(&self, i: usize) -> Option<Vec<u8>> {
        let o = self.offsets(i, 1)?;
        self.read(o[0], (o[1] - o[0]) as usize)
    }

    fn key(&self, i: usize) -> Option<Vec<u8>> {
        let o = self.offsets(i, 1)?;
        let rec_len = (o[1] - o[0]) as usize;
        let head = self.read(o[0], rec_len.min(4 + KEY_PROBE))?;
        let klen = u32::from_le_bytes(head.get(..4)?.try_into().ok()?) as usize;
        if klen > rec_len - 4 {
            return None;
        }
        match head.get(4..4 + klen) {
            Some(k) => Some(k.to_vec()),
            None => self.read(o[0] + 4, klen),
        }
    }

    /// Records from `lo` on, up to [`CHUNK`] of them, in two reads.
    fn chunk(&self, lo: usize) -> Option<Chunk> {
        let n = CHUNK.min(self.count - lo);
        let offsets = self.offsets(lo, n)?;
        let bytes = self.read(offsets[0], (offsets[n] - offsets[0]) as usize)?;
        Some(Chunk { lo, offsets, bytes })
    }

    /// Every key, read a chunk at a time; `None` when a record is damaged.
    fn key_table(&self) -> Option<KeyTable> {
        let mut table = KeyTable {
            bytes: Vec::new(),
            ends: Vec::with_capacity(self.count),
        };
        let mut lo = 0;
        while lo < self.count {
            let chunk = self.chunk(lo)?;
            for i in lo..lo + chunk.offsets.len() - 1 {
                table.bytes.extend_from_slice(split(chunk.record(i))?.0);
                table.ends.push(u32::try_from(table.bytes.len()).ok()?);
            }
            lo += chunk.offsets.len() - 1;
        }
        Some(table)
    }

    /// Index of `key`; `None` when absent (or when a damaged record is in the way).
    fn find(&self, key: &str) -> Option<usize> {
        use std::sync::atomic::Ordering;
        if self.lookups.fetch_add(1, Ordering::Relaxed) >= KEYS_IN_MEMORY_AFTER {
            if let Some(table) = self.keys.get_or_init(|| self.key_table()) {
                return binary_search(self.count, key, |i| Some(table.key(i)));
            }
        }
        binary_search(self.count, key, |i| self.key(i))
    }

    fn entry(&self, i: usize) -> Option<&(Box<str>, V)> {
        self.cells
            .cell(i)
            .get_or_init(|| self.record(i).and_then(|r| decode(&r)).map(Box::new))
            .as_deref()
    }

    fn entry_from(&self, i: usize, rec: &[u8]) -> Option<&(Box<str>, V)> {
        self.cells
            .cell(i)
            .get_or_init(|| decode(rec).map(Box::new))
            .as_deref()
    }

    /// An owned copy of value `i` (the decoded one when there is one).
    fn owned(&self, i: usize) -> Option<V> {
        match self.cells.peek(i).and_then(OnceLock::get) {
            Some(e) => e.as_ref().map(|e| e.1.clone()),
            None => self.record(i).and_then(|r| decode(&r)).map(|e| e.1),
        }
    }
}

/// An ordered `String → V` map whose values may stay encoded in an [`Image`] until read; see
/// the module documentation.
pub struct LazyMap<V> {
    base: Option<Arc<Base<V>>>,
    overlay: Overlay<V>,
    len: usize,
}

impl<V> Default for LazyMap<V> {
    fn default() -> Self {
        LazyMap {
            base: None,
            overlay: Overlay::new(),
            len: 0,
        }
    }
}

impl<V: Clone> Clone for LazyMap<V> {
    fn clone(&self) -> Self {
        LazyMap {
            base: self.base.clone(),
            overlay: self.overlay.clone(),
            len: self.len,
        }
    }
}

/// Why a section cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionError(pub String);

impl fmt::Display for SectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SectionError {}

impl<V: LazyValue> LazyMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A map over the section that starts at `start` in `image`; returns it and the section's
    /// length. Checks that the record table fits; records themselves are checked when read
    /// (one that does not fit reads as absent), so this reads two words of the image.
    pub fn from_section(
        image: Arc<dyn Image>,
        start: u64,
    ) -> Result<(LazyMap<V>, u64), SectionError> {
        let bad = |why: String| SectionError(format!("section at byte {start}: {why}"));
        let avail = image
            .len()
            .checked_sub(start)
            .ok_or_else(|| bad("starts past the end".into()))?;
        let word = |at: u64| -> Result<u64, SectionError> {
            let mut b = [0u8; 8];
            (at + 8 <= avail && image.read_at(start + at, &mut b))
                .then(|| u64::from_le_bytes(b))
                .ok_or_else(|| bad(format!("truncated at byte {at}")))
        };
        let count = word(0)?;
        let table_end = count
            .checked_add(2)
            .and_then(|n| n.checked_mul(8))
            .filter(|&n| n <= avail)
            .ok_or_else(|| bad(format!("{count} records do not fit")))?;
        let len = word(8 + 8 * count)?;
        if len < table_end || len > avail {
            return Err(bad(format!("its length {len} does not fit")));
        }
        let count = count as usize;
        let base = Base {
            image,
            start,
            len,
            count,
            cells: Cells::new(count),
            lookups: Default::default(),
            keys: OnceLock::new(),
        };
        Ok((
            LazyMap {
                base: Some(Arc::new(base)),
                overlay: Overlay::new(),
                len: count,
            },
            len,
        ))
    }

    /// Appends this map as a section (see the module documentation). Values still encoded in
    /// the base are copied as they are, not decoded.
    pub fn encode_section(&self, out: &mut Vec<u8>) {
        // A damaged base record (it reads as absent) is not carried into a new image.
        let items: Vec<Item<'_, V>> = self.merged().collect();
        let start = out.len();
        out.extend_from_slice(&(items.len() as u64).to_le_bytes());
        let table = out.len();
        out.resize(table + 8 * (items.len() + 1), 0);
        let put_offset = |out: &mut Vec<u8>, n: usize| {
            let off = (out.len() - start) as u64;
            out[table + 8 * n..table + 8 * n + 8].copy_from_slice(&off.to_le_bytes());
        };
        for (n, item) in items.iter().enumerate() {
            put_offset(out, n);
            match item {
                Item::Base { rec, .. } => out.extend_from_slice(rec),
                Item::Overlay(k, v) => {
                    out.extend_from_slice(&(k.len() as u32).to_le_bytes());
                    out.extend_from_slice(k.as_bytes());
                    // Plain data into a Vec: cannot fail.
                    let _ = rmp_serde::encode::write_named(out, *v);
                }
            }
        }
        put_offset(out, items.len());
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many values are still encoded in the base (never read, never changed).
    pub fn encoded(&self) -> usize {
        self.base
            .as_ref()
            .map_or(0, |b| b.count - b.cells.decoded())
    }

    fn base_index(&self, key: &str) -> Option<(&Base<V>, usize)> {
        let base = self.base.as_deref()?;
        base.find(key).map(|i| (base, i))
    }

    pub fn contains_key(&self, key: &str) -> bool {
        match self.overlay.get(key) {
            Some(v) => v.is_some(),
            None => self.base_index(key).is_some(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        match self.overlay.get(key) {
            Some(v) => v.as_deref(),
            None => self
                .base_index(key)
                .and_then(|(b, i)| b.entry(i))
                .map(|e| &e.1),
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        // Without a base (a state built by replay) one lookup does; with one, a key not yet
        // in the overlay is copied there from the base first.
        if self.base.is_some() && !self.overlay.contains_key(key) {
            let (b, i) = self.base_index(key)?;
            let v = b.owned(i)?;
            self.overlay.insert(key.to_owned(), Some(Arc::new(v)));
        }
        self.overlay
            .get_mut(key)
            .and_then(Option::as_mut)
            .map(Arc::make_mut)
    }

    /// Sets `key` (replacing any value there).
    pub fn insert(&mut self, key: String, value: V) {
        let present = match self.overlay.get(&key) {
            Some(v) => v.is_some(),
            None => self.base.as_deref().is_some_and(|b| b.find(&key).is_some()),
        };
        if !present {
            self.len += 1;
        }
        self.overlay.insert(key, Some(Arc::new(value)));
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let in_base = self.base.as_deref().and_then(|b| Some((b, b.find(key)?)));
        let old = match self.overlay.remove(key) {
            Some(None) => {
                // Removed before: keep the tombstone.
                self.overlay.insert(key.to_owned(), None);
                return None;
            }
            Some(Some(v)) => Some(Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone())),
            None => in_base?.0.owned(in_base?.1),
        };
        if in_base.is_some() {
            self.overlay.insert(key.to_owned(), None);
        }
        self.len -= 1;
        old
    }

    fn merged(&self) -> Merged<'_, V> {
        Merged {
            base: self.base.as_deref(),
            next: 0,
            chunk: None,
            overlay: self.overlay.iter().peekable(),
        }
    }

    /// Entries in key order (base values are decoded as they are reached).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> + '_ {
        self.merged().filter_map(|item| match item {
            Item::Base { base, i, rec, .. } => base.entry_from(i, &rec).map(|e| (&*e.0, &e.1)),
            Item::Overlay(k, v) => Some((k.as_str(), v)),
        })
    }

    /// Keys in order, without decoding any value.
    pub fn keys(&self) -> impl Iterator<Item = String> + '_ {
        self.merged().map(|item| match item {
            Item::Base { rec, .. } => split(&rec)
                .and_then(|(k, _)| String::from_utf8(k.to_vec()).ok())
                .unwrap_or_default(),
            Item::Overlay(k, _) => k.clone(),
        })
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// Every value seen as a `T`, in key order, keeping nothing decoded: a base record still
    /// encoded is decoded straight into `T` (its fields `T` lacks are skipped, so a listing
    /// of 10,000 blocks does not build 10,000 blocks), a decoded or changed value goes
    /// through `from_value`. `T` must read the value's named MessagePack fields.
    pub fn view<'s, T: DeserializeOwned + 's>(
        &'s self,
        from_value: impl Fn(&V) -> T + 's,
    ) -> impl Iterator<Item = T> + 's {
        self.merged().filter_map(move |item| match item {
            Item::Base { base, i, rec } => match base.cells.peek(i).and_then(OnceLock::get) {
                Some(decoded) => decoded.as_ref().map(|e| from_value(&e.1)),
                None => split(&rec).and_then(|(_, v)| rmp_serde::from_slice(v).ok()),
            },
            Item::Overlay(_, v) => Some(from_value(v)),
        })
    }
}

enum Item<'a, V> {
    /// Record `i` of the base, raw (a record that splits into key and value).
    Base {
        base: &'a Base<V>,
        i: usize,
        rec: Vec<u8>,
    },
    Overlay(&'a String, &'a V),
}

/// The base's records and the overlay's entries merged in key order; the overlay wins, and
/// its tombstones hide base records. Base records are read a chunk at a time; a damaged one
/// is skipped.
struct Merged<'a, V> {
    base: Option<&'a Base<V>>,
    next: usize,
    chunk: Option<Chunk>,
    overlay: std::iter::Peekable<
        imbl::ordmap::Iter<'a, String, Option<Arc<V>>, imbl::shared_ptr::DefaultSharedPtr>,
    >,
}

impl<V: LazyValue> Merged<'_, V> {
    /// The raw record at the base cursor, skipping damaged ones.
    fn base_record(&mut self) -> Option<Vec<u8>> {
        let base = self.base?;
        while self.next < base.count {
            let i = self.next;
            if !self.chunk.as_ref().is_some_and(|c| c.covers(i)) {
                self.chunk = base.chunk(i);
            }
            let rec = match &self.chunk {
                Some(c) => Some(c.record(i).to_vec()),
                None => base.record(i),
            };
            if rec.as_deref().and_then(split).is_some() {
                return rec;
            }
            self.next += 1;
        }
        None
    }
}

impl<'a, V: LazyValue> Iterator for Merged<'a, V> {
    type Item = Item<'a, V>;

    fn next(&mut self) -> Option<Item<'a, V>> {
        loop {
            let from_base = self.base_record();
            let base_key = from_base.as_deref().and_then(split).map(|(k, _)| k);
            let over = self.overlay.peek().map(|&(k, v)| (k, v));
            let base_first = match (base_key, over) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(bk), Some((k, _))) => bk < k.as_bytes(),
            };
            let shadowed = base_key.is_some_and(|bk| over.is_some_and(|(k, _)| bk == k.as_bytes()));
            if base_first {
                self.next += 1;
                return Some(Item::Base {
                    base: self.base?,
                    i: self.next - 1,
                    rec: from_base?,
                });
            }
            let (k, v) = over?;
            if shadowed {
                self.next += 1; // the overlay's entry replaces this base record
            }
            self.overlay.next();
            if let Some(v) = v {
                return Some(Item::Overlay(k, &**v));
            }
        }
    }
}

impl<V: LazyValue + PartialEq> PartialEq for LazyMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<V: LazyValue + fmt::Debug> fmt::Debug for LazyMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: LazyValue> FromIterator<(String, V)> for LazyMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let overlay: Overlay<V> = iter
            .into_iter()
            .map(|(k, v)| (k, Some(Arc::new(v))))
            .collect();
        LazyMap {
            base: None,
            len: overlay.len(),
            overlay,
        }
    }
}

impl<V: LazyValue, Q: AsRef<str> + ?Sized> std::ops::Index<&Q> for LazyMap<V> {
    type Output = V;

    /// Panics when the key is absent, like `BTreeMap`'s (for tests and known keys).
    fn index(&self, key: &Q) -> &V {
        self.get(key.as_ref()).expect("no entry for key")
    }
}

impl<V: LazyValue> Serialize for LazyMap<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.len))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de, V: LazyValue> Deserialize<'de> for LazyMap<V> {
    /// Decodes a map by collecting its entries and building the tree in one pass (an encoded
    /// map is in key order, so this is linear).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<V>(PhantomData<V>);
        impl<'de, V: LazyValue> serde::de::Visitor<'de> for Entries<V> {
            type Value = Vec<(String, V)>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(kv) = m.next_entry()? {
                    out.push(kv);
                }
                Ok(out)
            }
        }
        let entries = d.deserialize_map(Entries(PhantomData))?;
        Ok(entries.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn image_of(m: &LazyMap<String>) -> (LazyMap<String>, u64) {
        let mut bytes = vec![7u8; 3]; // a prefix, so sections need not start at 0
        m.encode_section(&mut bytes);
        let written = bytes.len() as u64 - 3;
        let (lazy, len) = LazyMap::from_section(Arc::new(bytes), 3).unwrap();
        assert_eq!(len, written);
        (lazy, len)
    }

    #[test]
    fn a_section_reads_back_without_decoding_until_asked() {
        let m: LazyMap<String> = (0..100)
            .map(|i| (format!("k{i:03}"), format!("v{i}")))
            .collect();
        let (lazy, _) = image_of(&m);
        assert_eq!(lazy.len(), 100);
        assert_eq!(lazy.encoded(), 100);
        assert!(lazy.contains_key("k042"));
        assert!(!lazy.contains_key("k100"));
        assert_eq!(lazy.encoded(), 100, "contains_key decodes nothing");
        assert_eq!(lazy.get("k042").map(String::as_str), Some("v42"));
        assert_eq!(lazy.encoded(), 99);
        assert_eq!(lazy, m);
        assert_eq!(
            rmp_serde::to_vec_named(&lazy).unwrap(),
            rmp_serde::to_vec_named(&m).unwrap()
        );
    }

    #[test]
    fn a_view_reads_part_of_each_value_and_keeps_nothing_decoded() {
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        struct Full {
            name: String,
            body: Vec<u32>,
        }
        #[derive(Debug, PartialEq, Deserialize)]
        struct Name {
            name: String,
        }
        let m: LazyMap<Full> = (0..600)
            .map(|i| {
                let v = Full {
                    name: format!("n{i}"),
                    body: vec![i; 50],
                };
                (format!("k{i:04}"), v)
            })
            .collect();
        let mut bytes = Vec::new();
        m.encode_section(&mut bytes);
        let (mut lazy, _) = LazyMap::<Full>::from_section(Arc::new(bytes), 0).unwrap();
        // One value decoded, one changed, one removed, one added: all seen the same way.
        assert!(lazy.get("k0003").is_some());
        lazy.get_mut("k0010").unwrap().name = "changed".into();
        lazy.remove("k0020");
        lazy.insert(
            "k0005x".into(),
            Full {
                name: "added".into(),
                body: vec![],
            },
        );
        let encoded = lazy.encoded();
        let names: Vec<String> = lazy
            .view(|v: &Full| Name {
                name: v.name.clone(),
            })
            .map(|n| n.name)
            .collect();
        let expected: Vec<String> = lazy.values().map(|v| v.name.clone()).collect();
        assert_eq!(names.len(), 600);
        assert_eq!(names, expected);
        assert!(names.contains(&"changed".to_owned()) && names.contains(&"added".to_owned()));
        assert!(!names.contains(&"n20".to_owned()));
        assert!(
            encoded > 590,
            "the view decoded nothing into the map: {encoded} left"
        );
    }

    #[test]
    fn many_lookups_switch_to_keys_in_memory_with_the_same_answers() {
        let m: LazyMap<String> = (0..1000)
            .map(|i| (format!("k{i:04}"), format!("v{i}")))
            .collect();
        let (lazy, _) = image_of(&m);
        for round in 0..3 {
            for i in (0..1100).step_by(7) {
                let key = format!("k{i:04}");
                assert_eq!(lazy.get(&key), m.get(&key), "round {round}, {key}");
                assert_eq!(lazy.contains_key(&key), i < 1000);
            }
        }
        assert!(lazy.base.as_ref().unwrap().keys.get().is_some());
    }

    #[test]
    fn damaged_tables_are_refused_not_panicked_on() {
        let m: LazyMap<String> = (0..5).map(|i| (format!("k{i}"), "v".into())).collect();
        let mut bytes = Vec::new();
        m.encode_section(&mut bytes);
        for cut in 0..bytes.len() {
            let short = bytes[..cut].to_vec();
            assert!(LazyMap::<String>::from_section(Arc::new(short), 0).is_err());
        }
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(LazyMap::<String>::from_section(Arc::new(huge), 0).is_err());
        // A damaged record inside a table that fits: found when read, as absent, never a
        // panic; a new image leaves it out.
        for (at, value) in [(8, u64::MAX), (8, 0), (16, 3)] {
            let mut damaged = bytes.clone();
            damaged[at..at + 8].copy_from_slice(&value.to_le_bytes());
            let (lazy, _) = LazyMap::<String>::from_section(Arc::new(damaged), 0).unwrap();
            assert_eq!(lazy.get("k0"), None, "damage at {at}");
            assert_eq!(
                lazy.get("k4").map(String::as_str),
                Some("v"),
                "damage at {at}"
            );
            let _ = lazy.keys().count();
            assert!(lazy.iter().count() < 5);
            let mut again = Vec::new();
            lazy.encode_section(&mut again);
            let (copy, _) = LazyMap::<String>::from_section(Arc::new(again), 0).unwrap();
            assert_eq!(copy.get("k4").map(String::as_str), Some("v"));
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u8),
        Remove(u8),
        Mutate(u8),
        Rebase,
        /// Keep a clone aside (with the model's), then edit either the clone or the original.
        Fork,
        /// Go on with the last clone kept aside (the current map is kept aside instead).
        Switch,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..40, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            (0u8..40).prop_map(Op::Remove),
            (0u8..40).prop_map(Op::Mutate),
            Just(Op::Rebase),
            Just(Op::Fork),
            Just(Op::Switch),
        ]
    }

    proptest! {
        /// Any sequence of edits, with the map re-based on its own encoding now and then, and
        /// cloned (clones share the overlay) with edits on either side, behaves exactly like a
        /// BTreeMap, and each clone like its own.
        #[test]
        fn behaves_like_a_btreemap(ops in proptest::collection::vec(op(), 0..120)) {
            let mut lazy: LazyMap<String> = LazyMap::new();
            let mut model: BTreeMap<String, String> = BTreeMap::new();
            let mut aside: Vec<(LazyMap<String>, BTreeMap<String, String>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        lazy.insert(format!("k{k:02}"), format!("v{v}"));
                        model.insert(format!("k{k:02}"), format!("v{v}"));
                    }
                    Op::Remove(k) => {
                        let key = format!("k{k:02}");
                        prop_assert_eq!(lazy.remove(&key), model.remove(&key));
                    }
                    Op::Mutate(k) => {
                        let key = format!("k{k:02}");
                        if let Some(v) = lazy.get_mut(&key) { v.push('!'); }
                        if let Some(v) = model.get_mut(&key) { v.push('!'); }
                    }
                    Op::Rebase => lazy = image_of(&lazy).0,
                    Op::Fork => aside.push((lazy.clone(), model.clone())),
                    Op::Switch => {
                        if let Some((l, m)) = aside.pop() {
                            aside.push((std::mem::replace(&mut lazy, l), std::mem::replace(&mut model, m)));
                        }
                    }
                }
                prop_assert_eq!(lazy.len(), model.len());
                let got: Vec<(String, String)> =
                    lazy.iter().map(|(k, v)| (k.to_owned(), v.clone())).collect();
                let want: Vec<(String, String)> = model.clone().into_iter().collect();
                prop_assert_eq!(got, want);
                let keys: Vec<String> = lazy.keys().collect();
                prop_assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
                for k in 0..40u8 {
                    let key = format!("k{k:02}");
                    prop_assert_eq!(lazy.get(&key), model.get(&key));
                    prop_assert_eq!(lazy.contains_key(&key), model.contains_key(&key));
                }
            }
            for (l, m) in aside {
                prop_assert_eq!(l.len(), m.len());
                let got: Vec<(String, String)> =
                    l.iter().map(|(k, v)| (k.to_owned(), v.clone())).collect();
                prop_assert_eq!(got, m.into_iter().collect::<Vec<_>>());
            }
        }
    }
}
