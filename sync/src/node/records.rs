//! What a synced file keeps beside its events (side records: its node, the ingest
//! checkpoint, the broker and document it uses), and the checks of a broker address and a
//! document name.

use elfiee_engine::{FileHandle, ForeignLog};

use crate::identity::NodeId;

use super::types::*;

/// Bodies travel in chunks of this many bytes (the server's default payload limit is 1 MiB).
pub const CHUNK: usize = 256 * 1024;

/// The publisher's checkpoint (the last origin seq the broker acknowledged), per node: see
/// [`publish_checkpoint`].
pub const PUBLISH_CHECKPOINT: &str = "sync.publish";
/// Side record: the last stream sequence ingest stored (written with the events).
pub(super) const INGEST_SIDE: &[u8] = b"sync.ingest";
/// Side record: the document's first node (the one whose stream it is).
pub(super) const GENESIS_SIDE: &[u8] = b"sync.genesis";

/// Side record: the node this file is synced as.
pub(super) const NODE_SIDE: &[u8] = b"sync.node";
/// Side record: earlier nodes of a copied file and the last local seq each wrote.
pub(super) const ADOPTED_SIDE: &[u8] = b"sync.adopted";
/// Side record: the first local seq whose own events are sealed with their event id and hash
/// (u64 BE; issue 28). Events before it were sealed, and published, by an older build
/// without them, so their ids stay as they were.
pub(super) const IDENTITY_SIDE: &[u8] = b"sync.identity_from";

/// Side record: the broker and the document name last used (JSON).
pub(super) const CONFIG_SIDE: &[u8] = b"sync.config";

/// The node id a side record holds (`NODE_SIDE`: this device's, `GENESIS_SIDE`: the
/// stream's first).
pub(super) fn side_node(foreign: &ForeignLog, key: &[u8]) -> Result<Option<NodeId>, SyncError> {
    Ok(foreign
        .side(key)?
        .and_then(|b| b.try_into().ok())
        .map(NodeId))
}

pub(super) fn recorded_node(foreign: &ForeignLog) -> Result<Option<NodeId>, SyncError> {
    side_node(foreign, NODE_SIDE)
}

/// The ingest checkpoint: the stream sequence up to which every message is settled.
pub(super) fn ingested(foreign: &ForeignLog) -> Result<u64, SyncError> {
    Ok(foreign
        .side(INGEST_SIDE)?
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0))
}

/// The first local seq sealed with an event id and hash ([`IDENTITY_SIDE`]). A file that
/// was synced without the record (by a build before issue 28) seals every event as that
/// build did.
pub(super) fn identity_from(foreign: &ForeignLog) -> Result<u64, SyncError> {
    Ok(foreign
        .side(IDENTITY_SIDE)?
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(u64::MAX))
}

pub(super) fn adopted(foreign: &ForeignLog) -> Result<Vec<(NodeId, u64)>, SyncError> {
    Ok(foreign
        .side(ADOPTED_SIDE)?
        .and_then(|b| rmp_serde::from_slice(&b).ok())
        .unwrap_or_default())
}

/// The side records a device that joins a document starts with (its node, the broker and
/// the document's name), for [`elfiee_engine::ForeignLog::append`] on an empty file.
pub fn join_records(node: &NodeId, url: &str, doc: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (NODE_SIDE.to_vec(), node.0.to_vec()),
        (CONFIG_SIDE.to_vec(), config_record(url, doc)),
        (IDENTITY_SIDE.to_vec(), 1u64.to_be_bytes().to_vec()),
    ]
}

/// The `sync.config` side record: the broker and the document's name, as JSON.
pub(super) fn config_record(url: &str, doc: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"url": url, "doc": doc})).unwrap_or_default()
}

/// The broker URL and document name a file was last synced with (`None`: never).
pub fn recorded_config(file: &FileHandle) -> Result<Option<(String, String)>, SyncError> {
    Ok(file
        .foreign_log()?
        .side(CONFIG_SIDE)?
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .map(|v| {
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (text("url"), text("doc"))
        }))
}

/// Checks a broker address before anything is recorded or started: a NATS URL with a host
/// (`nats://HOST:PORT`; a bare `HOST[:PORT]` means `nats://`, port 4222).
pub fn check_broker_url(url: &str) -> Result<(), String> {
    let hint = "give the broker as nats://HOST:PORT or tls://HOST:PORT (a cluster: several, comma-separated), e.g. nats://127.0.0.1:4222";
    let shown = crate::broker::redact(url);
    let addrs = crate::broker::server_addrs(url).map_err(|e| format!("{e}; {hint}"))?;
    if addrs.is_empty() {
        return Err(format!("'{shown}' names no broker; {hint}"));
    }
    for addr in addrs {
        if addr.into_inner().host_str().is_none_or(str::is_empty) {
            return Err(format!("'{shown}' names no host; {hint}"));
        }
    }
    Ok(())
}

/// Whether `doc` may name a document on the broker: letters, digits, `-` and `_`.
pub fn valid_doc_name(doc: &str) -> bool {
    !doc.is_empty() && doc.chars().all(valid_doc_char)
}

/// A character a document name may hold.
pub fn valid_doc_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// The publisher's checkpoint name for a node (a copied file's earlier node has its own).
pub fn publish_checkpoint(node: &NodeId) -> String {
    format!("{PUBLISH_CHECKPOINT}.{}", &node.to_hex()[..16])
}
