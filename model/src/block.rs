use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{BlockId, EditorId};

/// A block: the unit of content in a `.elf` document.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub block_id: BlockId,
    pub name: String,
    /// `markdown`, `code`, `directory`, `terminal`, `agent`, or any extension type.
    pub block_type: String,
    /// Type-specific content, e.g. `{"markdown": "..."}` or `{"text": "...", "language": "rust"}`.
    /// In the engine's state a large body (see [`ContentRef`]) is not here but in
    /// `content_refs`; reads through the engine put it back.
    pub contents: Value,
    /// Bodies kept out of the state: `contents` key → reference into the document's content
    /// store. Empty in every block the engine hands out to readers (they are resolved).
    #[serde(default, skip_serializing_if = "ContentRefs::is_empty")]
    #[cfg_attr(feature = "ts", ts(type = "{ [key in string]?: ContentRef }"))]
    pub content_refs: ContentRefs,
    /// Outgoing relations: relation name (`reference`, `implement`) → target block ids, in link order.
    #[serde(default)]
    pub children: BTreeMap<String, Vec<BlockId>>,
    pub owner: EditorId,
    pub metadata: BlockMetadata,
}

/// Where a block body lives when it is not in the state: the blake3 hash of its UTF-8 bytes in
/// the document's content store, and its length. Content-addressed, so it is immutable: a
/// reference read from any earlier state still finds its bytes (time travel).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentRef {
    /// blake3 of the body's bytes: 64 lowercase hex characters in JSON, 32 bytes in the
    /// binary encodings (snapshots, the state digest).
    #[cfg_attr(feature = "ts", ts(type = "string"))]
    pub hash: crate::EventHash,
    /// Length of the body in bytes.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub len: u64,
}

/// The bodies of one block kept in the content store: `contents` key → reference. A block has
/// at most a few, so they are a small sorted list rather than a tree (a tree node costs some
/// 700 bytes per block, and a document of 10,000 blocks decodes them all when it opens); it
/// encodes exactly as a map in key order, like a `BTreeMap`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentRefs(Vec<(String, ContentRef)>);

impl ContentRefs {
    pub fn get(&self, key: &str) -> Option<&ContentRef> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// Sets the reference of `key` (replacing one there).
    pub fn insert(&mut self, key: String, r: ContentRef) {
        match self.find(&key) {
            Ok(i) => self.0[i].1 = r,
            Err(i) => self.0.insert(i, (key, r)),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<ContentRef> {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `(key, reference)` in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &ContentRef)> {
        self.0.iter().map(|(k, r)| (k, r))
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }
}

impl IntoIterator for ContentRefs {
    type Item = (String, ContentRef);
    type IntoIter = std::vec::IntoIter<(String, ContentRef)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a ContentRefs {
    type Item = (&'a String, &'a ContentRef);
    type IntoIter = Box<dyn Iterator<Item = (&'a String, &'a ContentRef)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl Serialize for ContentRefs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, r) in &self.0 {
            m.serialize_entry(k, r)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for ContentRefs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, ContentRef>::deserialize(d)?;
        Ok(ContentRefs(map.into_iter().collect()))
    }
}

/// Descriptive data about a block; timestamps come from the committing event.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(with = "chrono::serde::ts_milliseconds")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub created_at: DateTime<Utc>,
    #[serde(with = "chrono::serde::ts_milliseconds")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub custom: BTreeMap<String, Value>,
}

/// A relation between two blocks. Links form a directed acyclic graph.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The source block refers to the target (context, citation).
    Reference,
    /// The source block implements the target (code implements a requirement).
    Implement,
}

impl Relation {
    pub const ALL: [Relation; 2] = [Relation::Reference, Relation::Implement];

    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Reference => "reference",
            Relation::Implement => "implement",
        }
    }

    /// Parses `reference` or `implement`.
    pub fn parse(s: &str) -> Option<Relation> {
        Relation::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An identity that issues commands.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Editor {
    pub editor_id: EditorId,
    pub name: String,
    pub editor_type: EditorType,
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EditorType {
    #[default]
    Human,
    Agent,
}

/// A capability grant: `editor_id` (or `*`) may run `cap_id` on `block_id` (or `*`).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Grant {
    pub editor_id: EditorId,
    pub cap_id: String,
    pub block_id: BlockId,
}

impl Grant {
    pub fn new(
        editor_id: impl Into<String>,
        cap_id: impl Into<String>,
        block_id: impl Into<String>,
    ) -> Self {
        Grant {
            editor_id: editor_id.into(),
            cap_id: cap_id.into(),
            block_id: block_id.into(),
        }
    }
}
