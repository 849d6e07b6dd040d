//! Which nodes (devices) belong to a document: `node.add {node_id, public_key, name?}`, run by
//! the file owner, folded into `extensions.sync.nodes`. Ingest verifies every event's
//! signature with the key its node was added with ([`key_of`]).
//!
//! It is registered like an embedder's capability ([`register`]): a program that syncs
//! documents adds it to its registry; the plain engine does not know the kind.

use std::collections::BTreeMap;
use std::sync::Arc;

use elfiee_capabilities::{Capability, Registry, Target};
use elfiee_model::{CapError, Command, Ctx, Event, EventDraft};
use elfiee_projections::{Fold, Folded, State};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::identity::NodeId;

/// `node.add`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAddPayload {
    /// The node's id: its public key, as 64 hex characters.
    pub node_id: String,
    /// The node's Ed25519 public key, as 64 hex characters (equal to `node_id`).
    pub public_key: String,
    /// A name to show for the device.
    #[serde(default)]
    pub name: Option<String>,
}

/// `node.remove`: the device's events after its origin seq `upto` are refused on every
/// device, and a new key generation is sealed to the members that stay (decision 0047).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRemovePayload {
    pub node_id: String,
    /// The last of the device's own events that stays (its origin seq; 0: none).
    pub upto: u64,
}

/// Adds `node.add`, `node.remove` and their folds to a registry.
pub fn register(registry: &mut Registry) {
    registry.register(Arc::new(NodeAdd));
    registry.register(Arc::new(NodeRemove));
}

/// Removed nodes: node → the last origin seq of its that stays.
pub fn removed(state: &State) -> BTreeMap<NodeId, u64> {
    let Some(Value::Object(nodes)) = state.extensions.get("sync").and_then(|s| s.get("nodes"))
    else {
        return BTreeMap::new();
    };
    nodes
        .iter()
        .filter_map(|(id, v)| Some((NodeId(parse_key(id)?), v.get("removed_upto")?.as_u64()?)))
        .collect()
}

/// The devices that hold the document now: the first one and the added ones, less the
/// removed.
pub fn current(state: &State, genesis: Option<&NodeId>) -> Vec<NodeId> {
    let removed = removed(state);
    let mut out: Vec<NodeId> = members(state).into_keys().collect();
    out.extend(genesis.copied());
    out.sort();
    out.dedup();
    out.retain(|n| !removed.contains_key(n));
    out
}

/// The members of a document: node → public key.
pub fn members(state: &State) -> BTreeMap<NodeId, [u8; 32]> {
    let Some(Value::Object(nodes)) = state.extensions.get("sync").and_then(|s| s.get("nodes"))
    else {
        return BTreeMap::new();
    };
    nodes
        .iter()
        .filter_map(|(id, v)| {
            let key = parse_key(v.get("public_key")?.as_str()?)?;
            (parse_key(id)? == key).then_some((NodeId(key), key))
        })
        .collect()
}

/// The key a member was added with, for [`crate::identity::SyncEvent::verify`].
pub fn key_of(state: &State) -> impl Fn(&NodeId) -> Option<[u8; 32]> {
    let members = members(state);
    move |n| members.get(n).copied()
}

fn parse_key(hex: &str) -> Option<[u8; 32]> {
    NodeId::from_hex(hex).map(|n| n.0)
}

pub struct NodeAdd;

/// Refuses `cmd` unless its editor owns the file.
fn owner_only(cmd: &Command, state: &State, what: &str) -> Result<(), CapError> {
    if state.file_owner.as_deref() != Some(cmd.editor_id.as_str()) {
        return Err(CapError::rejected(format!(
            "only the file owner {what}; '{}' is not the owner",
            cmd.editor_id
        )));
    }
    Ok(())
}

impl Capability for NodeAdd {
    fn id(&self) -> &'static str {
        "node.add"
    }

    fn target(&self) -> Target {
        Target::File
    }

    /// Membership is a grant of the whole document: whoever may grant on `*` passes CBAC,
    /// and the handler then requires the file owner.
    fn authorized_by(&self, _: &Command) -> &'static str {
        "core.grant"
    }

    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let p = NodeAddPayload::deserialize(&cmd.payload)
            .map_err(|e| CapError::payload(self.id(), e.to_string()))?;
        owner_only(cmd, state, "adds devices")?;
        let key = parse_key(&p.public_key).ok_or_else(|| {
            CapError::payload(
                self.id(),
                "public_key must be 64 lower-case hex characters (an Ed25519 public key)",
            )
        })?;
        // A key that is not a point on the curve could never verify an event.
        if ed25519_dalek::VerifyingKey::from_bytes(&key).is_err() {
            return Err(CapError::payload(
                self.id(),
                "public_key is not an Ed25519 public key (not a point on the curve); copy it \
                 from `elfiee sync node-id` on the device",
            ));
        }
        if parse_key(&p.node_id) != Some(key) {
            return Err(CapError::payload(
                self.id(),
                "node_id must equal public_key (a node is named by its key)",
            ));
        }
        if members(state).contains_key(&NodeId(key)) {
            return Ok(Vec::new());
        }
        Ok(vec![EventDraft::new(
            &p.node_id,
            self.id(),
            json!({"node_id": p.node_id, "public_key": p.public_key, "name": p.name}),
        )])
    }

    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(|state: &mut State, event: &Event| {
            let Some(id) = event.value.get("node_id").and_then(Value::as_str) else {
                return Folded::Done;
            };
            let nodes = state
                .extension_mut("sync")
                .entry("nodes")
                .or_insert_with(|| json!({}));
            if let Value::Object(nodes) = nodes {
                let mut entry = event.value.clone();
                if let Value::Object(e) = &mut entry {
                    e.remove("node_id");
                    e.insert("added_seq".into(), json!(event.seq));
                }
                nodes.insert(id.to_owned(), entry);
            }
            Folded::Done
        }))
    }
}

pub struct NodeRemove;

impl Capability for NodeRemove {
    fn id(&self) -> &'static str {
        "node.remove"
    }

    fn target(&self) -> Target {
        Target::File
    }

    /// As `node.add`: a grant of the whole document, then the file owner only.
    fn authorized_by(&self, _: &Command) -> &'static str {
        "core.grant"
    }

    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let p = NodeRemovePayload::deserialize(&cmd.payload)
            .map_err(|e| CapError::payload(self.id(), e.to_string()))?;
        owner_only(cmd, state, "removes devices")?;
        let node = NodeId::from_hex(&p.node_id).ok_or_else(|| {
            CapError::payload(
                self.id(),
                "node_id must be 64 lower-case hex characters (what `elfiee sync node-id` printed on the device)",
            )
        })?;
        if !members(state).contains_key(&node) {
            return Err(CapError::rejected(format!(
                "node {} is not a device of this document (only an added device can be removed)",
                p.node_id
            )));
        }
        if removed(state).contains_key(&node) {
            return Ok(Vec::new());
        }
        Ok(vec![EventDraft::new(
            &p.node_id,
            self.id(),
            json!({"node_id": p.node_id, "upto": p.upto}),
        )])
    }

    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(|state: &mut State, event: &Event| {
            let (Some(id), Some(upto)) = (
                event.value.get("node_id").and_then(Value::as_str),
                event.value.get("upto").and_then(Value::as_u64),
            ) else {
                return Folded::Done;
            };
            let nodes = state
                .extension_mut("sync")
                .entry("nodes")
                .or_insert_with(|| json!({}));
            if let Some(Value::Object(entry)) = nodes.get_mut(id) {
                entry.insert("removed_upto".into(), json!(upto));
                entry.insert("removed_seq".into(), json!(event.seq));
            }
            Folded::Done
        }))
    }
}
