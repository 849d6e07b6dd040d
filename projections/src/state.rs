use std::collections::{BTreeMap, BTreeSet};

use elfiee_model::{Block, Editor, EditorId, Grant, WILDCARD};
use serde::{Deserialize, Serialize};

use crate::graph::RelationGraph;

/// Everything the log says, folded: blocks, editors, grants, clocks and the relation graph.
///
/// All collections are ordered maps so that the canonical encoding (and so [`State::digest`])
/// depends only on content, never on insertion order or hashing seeds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The editor created by `elf.init`; holds every capability on `*`.
    pub file_owner: Option<EditorId>,
    #[serde(deserialize_with = "bulk_map")]
    pub blocks: BTreeMap<String, Block>,
    pub editors: BTreeMap<EditorId, Editor>,
    pub grants: BTreeSet<Grant>,
    /// Vector clock: `"<node_id>:<editor_id>"` → number of events by that editor on that node.
    pub clocks: BTreeMap<String, u64>,
    /// Seq of the last event that touched each block (for optimistic concurrency).
    #[serde(deserialize_with = "bulk_map")]
    pub block_seq: BTreeMap<String, u64>,
    /// Reverse index of block relations.
    pub graph: RelationGraph,
    /// Seq of the last applied event (0 for an empty log).
    pub last_seq: u64,
    /// Free-form projection data owned by extensions (agents, proposals, …), keyed by namespace.
    #[serde(default)]
    pub extensions: BTreeMap<String, serde_json::Value>,
}

/// Decodes a map by collecting its entries first and building the tree in one pass (the
/// encoding is in key order, so this is linear), instead of one insert per entry: opening a
/// document with many blocks is dominated by decoding its snapshot.
fn bulk_map<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct Entries<V>(std::marker::PhantomData<V>);
    impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Entries<V> {
        type Value = Vec<(String, V)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
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
    let entries = d.deserialize_map(Entries(std::marker::PhantomData))?;
    Ok(entries.into_iter().collect())
}

/// A blake3 hash of the canonical encoding of a [`State`], as 64 hex characters.
pub type StateDigest = String;

impl State {
    pub fn block(&self, id: &str) -> Option<&Block> {
        self.blocks.get(id)
    }

    pub fn editor(&self, id: &str) -> Option<&Editor> {
        self.editors.get(id)
    }

    /// Whether `editor` holds `cap` on `block` through a grant (exact or wildcard on either side).
    /// Ownership is checked separately (see the CBAC module of `elfiee-capabilities`).
    pub fn has_grant(&self, editor: &str, cap: &str, block: &str) -> bool {
        let probe = |e: &str, b: &str| {
            self.grants.contains(&Grant {
                editor_id: e.to_owned(),
                cap_id: cap.to_owned(),
                block_id: b.to_owned(),
            })
        };
        probe(editor, block)
            || probe(WILDCARD, block)
            || probe(editor, WILDCARD)
            || probe(WILDCARD, WILDCARD)
    }

    /// Grants held by one editor (exact id only).
    pub fn grants_of<'a>(&'a self, editor: &'a str) -> impl Iterator<Item = &'a Grant> + 'a {
        self.grants.iter().filter(move |g| g.editor_id == editor)
    }

    /// Canonical encoding: MessagePack with named fields over ordered maps.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Serializing plain data into a Vec cannot fail.
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// Hash of the canonical encoding: two states are equal exactly when their digests are.
    pub fn digest(&self) -> StateDigest {
        blake3::hash(&self.canonical_bytes()).to_hex().to_string()
    }
}
