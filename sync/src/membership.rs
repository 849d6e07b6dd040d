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

/// Adds `node.add` and its fold to a registry.
pub fn register(registry: &mut Registry) {
    registry.register(Arc::new(NodeAdd));
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
        if state.file_owner.as_deref() != Some(cmd.editor_id.as_str()) {
            return Err(CapError::rejected(format!(
                "only the file owner adds devices; '{}' is not the owner",
                cmd.editor_id
            )));
        }
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
