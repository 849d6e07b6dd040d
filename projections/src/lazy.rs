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
//! - the **overlay**: what was inserted, changed or removed since the base was made, as an
//!   ordinary `BTreeMap` (`None` = removed from the base).
//!
//! Reading an image is reading memory: nothing here touches the disk, so a fold over a
//! `LazyMap` stays pure. Iteration, equality and serialization see one merged map in key
//! order, so the canonical encoding (and the state digest) is the same as a `BTreeMap`'s.
//!
//! Section layout (all integers little endian), produced by [`LazyMap::encode_section`]:
//! `count u64 ‖ (count + 1) record offsets u64, from the section start ‖ records`, each record
//! `key length u32 ‖ key (UTF-8) ‖ value (MessagePack, named fields)`; the last offset is the
//! section's length. Keys are strictly increasing (byte order, as `String`'s `Ord`).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Bytes that do not change for as long as they are referenced (a memory-mapped snapshot, or
/// a buffer).
pub trait Image: Send + Sync {
    fn bytes(&self) -> &[u8];
}

impl Image for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// What a `LazyMap` value must be able to do.
pub trait LazyValue: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> LazyValue for T {}

struct Base<V> {
    image: Arc<dyn Image>,
    /// Where the section starts in the image.
    start: usize,
    count: usize,
    /// Decoded values, filled on first read (`None`: the record does not decode).
    cells: Box<[OnceLock<Option<Box<V>>>]>,
}

impl<V: LazyValue> Base<V> {
    fn section(&self) -> &[u8] {
        &self.image.bytes()[self.start..]
    }

    fn offset(&self, i: usize) -> usize {
        let at = 8 + 8 * i;
        let b = &self.section()[at..at + 8];
        u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize
    }

    /// The key and encoded value of record `i` (checked at load to lie inside the section).
    fn record(&self, i: usize) -> (&[u8], &[u8]) {
        let (from, to) = (self.offset(i), self.offset(i + 1));
        let rec = &self.section()[from..to];
        let klen = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes")) as usize;
        (&rec[4..4 + klen], &rec[4 + klen..])
    }

    fn key(&self, i: usize) -> &str {
        std::str::from_utf8(self.record(i).0).unwrap_or("")
    }

    fn find(&self, key: &str) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.record(mid).0.cmp(key.as_bytes()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    fn decode(&self, i: usize) -> Option<V> {
        rmp_serde::from_slice(self.record(i).1).ok()
    }

    fn value(&self, i: usize) -> Option<&V> {
        self.cells[i]
            .get_or_init(|| self.decode(i).map(Box::new))
            .as_deref()
    }

    /// An owned copy of value `i` (the decoded one when there is one).
    fn owned(&self, i: usize) -> Option<V> {
        match self.cells[i].get() {
            Some(v) => v.as_deref().cloned(),
            None => self.decode(i),
        }
    }
}

/// An ordered `String → V` map whose values may stay encoded in an [`Image`] until read; see
/// the module documentation.
pub struct LazyMap<V> {
    base: Option<Arc<Base<V>>>,
    overlay: BTreeMap<String, Option<V>>,
    len: usize,
}

impl<V> Default for LazyMap<V> {
    fn default() -> Self {
        LazyMap {
            base: None,
            overlay: BTreeMap::new(),
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
    /// length. Checks the table (offsets increasing, inside the image, records long enough for
    /// their keys) without reading any value.
    pub fn from_section(
        image: Arc<dyn Image>,
        start: usize,
    ) -> Result<(LazyMap<V>, usize), SectionError> {
        let bad = |why: String| SectionError(format!("section at byte {start}: {why}"));
        let bytes = image.bytes();
        let section = bytes
            .get(start..)
            .ok_or_else(|| bad("starts past the end".into()))?;
        let word = |at: usize| -> Result<u64, SectionError> {
            section
                .get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .ok_or_else(|| bad(format!("truncated at byte {at}")))
        };
        let count = word(0)?;
        let table_end = count
            .checked_add(2)
            .and_then(|n| n.checked_mul(8))
            .filter(|&n| n <= section.len() as u64)
            .ok_or_else(|| bad(format!("{count} records do not fit")))?
            as usize;
        let count = count as usize;
        let mut prev = table_end;
        for i in 0..=count {
            let off = word(8 + 8 * i)? as usize;
            if off < prev || off > section.len() {
                return Err(bad(format!("record {i} is out of order or out of bounds")));
            }
            prev = off;
        }
        let base = Base {
            image: image.clone(),
            start,
            count,
            cells: (0..count).map(|_| OnceLock::new()).collect(),
        };
        // A record must hold its key length and key: checked lazily would mean a panic on a
        // damaged image, so check the lengths (four bytes each) now.
        for i in 0..count {
            let (from, to) = (base.offset(i), base.offset(i + 1));
            let rec = &section[from..to];
            let ok = rec.len() >= 4 && {
                let klen = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes")) as usize;
                rec.len() - 4 >= klen
            };
            if !ok {
                return Err(bad(format!("record {i} is shorter than its key")));
            }
        }
        let len = base.offset(count);
        Ok((
            LazyMap {
                base: Some(Arc::new(base)),
                overlay: BTreeMap::new(),
                len: count,
            },
            len,
        ))
    }

    /// Appends this map as a section (see the module documentation). Values still encoded in
    /// the base are copied as they are, not decoded.
    pub fn encode_section(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&(self.len as u64).to_le_bytes());
        let table = out.len();
        out.resize(table + 8 * (self.len + 1), 0);
        let mut n = 0;
        let put_offset = |out: &mut Vec<u8>, n: usize| {
            let off = (out.len() - start) as u64;
            out[table + 8 * n..table + 8 * n + 8].copy_from_slice(&off.to_le_bytes());
        };
        for item in self.merged() {
            put_offset(out, n);
            n += 1;
            match item {
                Item::Base(base, i) => {
                    let (from, to) = (base.offset(i), base.offset(i + 1));
                    out.extend_from_slice(&base.section()[from..to]);
                }
                Item::Overlay(k, v) => {
                    out.extend_from_slice(&(k.len() as u32).to_le_bytes());
                    out.extend_from_slice(k.as_bytes());
                    // Plain data into a Vec: cannot fail.
                    let _ = rmp_serde::encode::write_named(out, v);
                }
            }
        }
        debug_assert_eq!(n, self.len);
        put_offset(out, n);
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
            .map_or(0, |b| b.cells.iter().filter(|c| c.get().is_none()).count())
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
            Some(v) => v.as_ref(),
            None => self.base_index(key).and_then(|(b, i)| b.value(i)),
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        if !self.overlay.contains_key(key) {
            let (b, i) = self.base_index(key)?;
            let v = b.owned(i)?;
            self.overlay.insert(key.to_owned(), Some(v));
        }
        self.overlay.get_mut(key).and_then(Option::as_mut)
    }

    /// Sets `key` (replacing any value there).
    pub fn insert(&mut self, key: String, value: V) {
        if !self.contains_key(&key) {
            self.len += 1;
        }
        self.overlay.insert(key, Some(value));
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let in_base = self.base_index(key).is_some();
        let old = match self.overlay.remove(key) {
            Some(None) => {
                // Removed before: keep the tombstone.
                self.overlay.insert(key.to_owned(), None);
                return None;
            }
            Some(Some(v)) => Some(v),
            None if in_base => self.base_index(key).and_then(|(b, i)| b.owned(i)),
            None => return None,
        };
        if in_base {
            self.overlay.insert(key.to_owned(), None);
        }
        self.len -= 1;
        old
    }

    fn merged(&self) -> Merged<'_, V> {
        Merged {
            base: self.base.as_deref(),
            next: 0,
            overlay: self.overlay.iter().peekable(),
        }
    }

    /// Entries in key order (base values are decoded as they are reached).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> + '_ {
        self.merged().filter_map(|item| match item {
            Item::Base(b, i) => b.value(i).map(|v| (b.key(i), v)),
            Item::Overlay(k, v) => Some((k.as_str(), v)),
        })
    }

    /// Keys in order, without decoding any value.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.merged().map(|item| match item {
            Item::Base(b, i) => b.key(i),
            Item::Overlay(k, _) => k.as_str(),
        })
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

enum Item<'a, V> {
    Base(&'a Base<V>, usize),
    Overlay(&'a String, &'a V),
}

/// The base's records and the overlay's entries merged in key order; the overlay wins, and
/// its tombstones hide base records.
struct Merged<'a, V> {
    base: Option<&'a Base<V>>,
    next: usize,
    overlay: std::iter::Peekable<std::collections::btree_map::Iter<'a, String, Option<V>>>,
}

impl<'a, V: LazyValue> Iterator for Merged<'a, V> {
    type Item = Item<'a, V>;

    fn next(&mut self) -> Option<Item<'a, V>> {
        loop {
            let base = self.base.filter(|b| self.next < b.count);
            let base_key = base.map(|b| b.record(self.next).0);
            let over = self.overlay.peek().map(|&(k, v)| (k, v));
            let base_first = match (base_key, over) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(bk), Some((k, _))) => bk < k.as_bytes(),
            };
            if base_first {
                self.next += 1;
                return base.map(|b| Item::Base(b, self.next - 1));
            }
            let (k, v) = over?;
            if base_key == Some(k.as_bytes()) {
                self.next += 1; // shadowed by the overlay
            }
            self.overlay.next();
            if let Some(v) = v {
                return Some(Item::Overlay(k, v));
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
        let overlay: BTreeMap<String, Option<V>> =
            iter.into_iter().map(|(k, v)| (k, Some(v))).collect();
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

    fn image_of(m: &LazyMap<String>) -> (LazyMap<String>, usize) {
        let mut bytes = vec![7u8; 3]; // a prefix, so sections need not start at 0
        m.encode_section(&mut bytes);
        let written = bytes.len() - 3;
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
    fn damaged_tables_are_refused_not_panicked_on() {
        let m: LazyMap<String> = (0..5).map(|i| (format!("k{i}"), "v".into())).collect();
        let mut bytes = Vec::new();
        m.encode_section(&mut bytes);
        for cut in 0..bytes.len() {
            let short = bytes[..cut].to_vec();
            assert!(LazyMap::<String>::from_section(Arc::new(short), 0).is_err());
        }
        let mut swapped = bytes.clone();
        swapped[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(LazyMap::<String>::from_section(Arc::new(swapped), 0).is_err());
        let mut huge = bytes;
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(LazyMap::<String>::from_section(Arc::new(huge), 0).is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u8),
        Remove(u8),
        Mutate(u8),
        Rebase,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..40, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            (0u8..40).prop_map(Op::Remove),
            (0u8..40).prop_map(Op::Mutate),
            Just(Op::Rebase),
        ]
    }

    proptest! {
        /// Any sequence of edits, with the map re-based on its own encoding now and then,
        /// behaves exactly like a BTreeMap.
        #[test]
        fn behaves_like_a_btreemap(ops in proptest::collection::vec(op(), 0..120)) {
            let mut lazy: LazyMap<String> = LazyMap::new();
            let mut model: BTreeMap<String, String> = BTreeMap::new();
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
                }
                prop_assert_eq!(lazy.len(), model.len());
                let got: Vec<(String, String)> =
                    lazy.iter().map(|(k, v)| (k.to_owned(), v.clone())).collect();
                let want: Vec<(String, String)> = model.clone().into_iter().collect();
                prop_assert_eq!(got, want);
                let keys: Vec<&str> = lazy.keys().collect();
                prop_assert_eq!(keys, model.keys().map(String::as_str).collect::<Vec<_>>());
                for k in 0..40u8 {
                    let key = format!("k{k:02}");
                    prop_assert_eq!(lazy.get(&key), model.get(&key));
                    prop_assert_eq!(lazy.contains_key(&key), model.contains_key(&key));
                }
            }
        }
    }
}
