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
    pub blocks: BTreeMap<String, Block>,
    pub editors: BTreeMap<EditorId, Editor>,
    pub grants: BTreeSet<Grant>,
    /// Vector clock: `"<node_id>:<editor_id>"` → number of events by that editor on that node.
    pub clocks: BTreeMap<String, u64>,
    /// Seq of the last event that touched each block (for optimistic concurrency).
    pub block_seq: BTreeMap<String, u64>,
    /// Reverse index of block relations.
    pub graph: RelationGraph,
    /// Seq of the last applied event (0 for an empty log).
    pub last_seq: u64,
    /// Free-form projection data owned by extensions (agents, proposals, …), keyed by namespace.
    #[serde(default)]
    pub extensions: BTreeMap<String, serde_json::Value>,
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
