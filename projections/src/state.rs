use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use elfiee_model::{Block, Editor, EditorId, Grant, Relation, WILDCARD};
use serde::{Deserialize, Serialize};

use crate::graph::RelationGraph;
use crate::lazy::{Image, LazyMap, SectionError};

/// Everything the log says, folded: blocks, editors, grants, clocks and the relation graph.
///
/// All collections are ordered maps so that the canonical encoding (and so [`State::digest`])
/// depends only on content, never on insertion order or hashing seeds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The editor created by `elf.init`; holds every capability on `*`.
    pub file_owner: Option<EditorId>,
    /// Loaded lazily from the snapshot a file opened from (see [`LazyMap`]).
    pub blocks: LazyMap<Block>,
    pub editors: BTreeMap<EditorId, Editor>,
    pub grants: BTreeSet<Grant>,
    /// Vector clock: `"<node_id>:<editor_id>"` → number of events by that editor on that node.
    pub clocks: BTreeMap<String, u64>,
    /// Seq of the last event that touched each block (for optimistic concurrency).
    pub block_seq: LazyMap<u64>,
    /// Reverse index of block relations.
    pub graph: RelationGraph,
    /// Seq of the last applied event (0 for an empty log).
    pub last_seq: u64,
    /// Free-form projection data owned by extensions (agents, proposals, …), keyed by namespace.
    #[serde(default)]
    pub extensions: BTreeMap<String, serde_json::Value>,
    /// Event kinds this state's folds do not know, with how many events of each were skipped
    /// (a document written by a program that registered more kinds). Empty, and then absent
    /// from the encoding, for a document whose every kind is known.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown_kinds: BTreeMap<String, u64>,
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

    /// The object extension `namespace` keeps in [`State::extensions`], made (or, if it held
    /// something else, replaced) when needed: where a fold keeps data that is not a block's.
    pub fn extension_mut(
        &mut self,
        namespace: &str,
    ) -> &mut serde_json::Map<String, serde_json::Value> {
        let v = self
            .extensions
            .entry(namespace.to_owned())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if !v.is_object() {
            *v = serde_json::Value::Object(Default::default());
        }
        match v {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("made an object above"),
        }
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

    /// Appends the state's image: `head length u64 LE ‖ head (MessagePack: everything but
    /// the blocks and their seqs) ‖ blocks section ‖ block seqs section` (sections as in
    /// [`crate::lazy`]). Blocks still encoded in the state's own image are copied, not
    /// decoded, so storing a snapshot costs what changed plus a copy.
    pub fn encode_image(&self, out: &mut Vec<u8>) {
        let head = HeadRef {
            file_owner: &self.file_owner,
            editors: &self.editors,
            grants: &self.grants,
            clocks: &self.clocks,
            graph: &self.graph,
            last_seq: self.last_seq,
            extensions: &self.extensions,
            unknown_kinds: &self.unknown_kinds,
        };
        let at = out.len();
        out.extend_from_slice(&[0; 8]);
        // Plain data into a Vec: cannot fail.
        let _ = rmp_serde::encode::write_named(out, &head);
        let head_len = (out.len() - at - 8) as u64;
        out[at..at + 8].copy_from_slice(&head_len.to_le_bytes());
        self.blocks.encode_section(out);
        self.block_seq.encode_section(out);
    }

    /// The state whose image starts at `start` in `image`: the head is decoded, the blocks
    /// stay in the image until read. Returns the state and the image's length.
    pub fn from_image(image: Arc<dyn Image>, start: u64) -> Result<(State, u64), SectionError> {
        let truncated = || SectionError("the state image is truncated".into());
        let mut word = [0u8; 8];
        if !image.read_at(start, &mut word) {
            return Err(truncated());
        }
        let head_len = u64::from_le_bytes(word);
        let head_end = (start + 8)
            .checked_add(head_len)
            .filter(|&e| e <= image.len())
            .ok_or_else(truncated)?;
        let mut head = vec![0u8; head_len as usize];
        if !image.read_at(start + 8, &mut head) {
            return Err(truncated());
        }
        let head: Head = rmp_serde::from_slice(&head)
            .map_err(|e| SectionError(format!("the state head does not decode: {e}")))?;
        let (blocks, n) = LazyMap::from_section(image.clone(), head_end)?;
        let (block_seq, m) = LazyMap::from_section(image, head_end + n)?;
        let state = State {
            file_owner: head.file_owner,
            blocks,
            editors: head.editors,
            grants: head.grants,
            clocks: head.clocks,
            block_seq,
            graph: head.graph,
            last_seq: head.last_seq,
            extensions: head.extensions,
            unknown_kinds: head.unknown_kinds,
        };
        Ok((state, head_end + n + m - start))
    }

    /// Hash of the canonical encoding: two states are equal exactly when their digests are.
    pub fn digest(&self) -> StateDigest {
        blake3::hash(&self.canonical_bytes()).to_hex().to_string()
    }
}

/// The part of a state image that is decoded when it loads.
#[derive(Serialize)]
struct HeadRef<'a> {
    file_owner: &'a Option<EditorId>,
    editors: &'a BTreeMap<EditorId, Editor>,
    grants: &'a BTreeSet<Grant>,
    clocks: &'a BTreeMap<String, u64>,
    graph: &'a RelationGraph,
    last_seq: u64,
    extensions: &'a BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    unknown_kinds: &'a BTreeMap<String, u64>,
}

#[derive(Deserialize)]
struct Head {
    file_owner: Option<EditorId>,
    editors: BTreeMap<EditorId, Editor>,
    grants: BTreeSet<Grant>,
    clocks: BTreeMap<String, u64>,
    graph: RelationGraph,
    last_seq: u64,
    extensions: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    unknown_kinds: BTreeMap<String, u64>,
}

/// The relation graph, read from the state: forward edges from the blocks, backward ones from
/// the reverse index.
impl State {
    /// Blocks that `block` links to, with the relation.
    pub fn children_of<'a>(
        &'a self,
        block: &str,
    ) -> impl Iterator<Item = (Relation, &'a str)> + 'a {
        self.blocks.get(block).into_iter().flat_map(|b| {
            b.children
                .iter()
                .filter_map(|(r, ids)| Relation::parse(r).map(|r| (r, ids)))
                .flat_map(|(r, ids)| ids.iter().map(move |id| (r, id.as_str())))
        })
    }

    /// Blocks that link to `block`.
    pub fn parents_of<'a>(&'a self, block: &str) -> impl Iterator<Item = (Relation, &'a str)> + 'a {
        self.graph.parents_of(block)
    }

    /// Whether `to` can be reached from `from` by following links of any relation.
    pub fn reaches(&self, from: &str, to: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([from]);
        while let Some(cur) = queue.pop_front() {
            if cur == to {
                return true;
            }
            if !seen.insert(cur) {
                continue;
            }
            queue.extend(self.children_of(cur).map(|(_, c)| c));
        }
        false
    }
}
