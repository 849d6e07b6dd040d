//! `elfiee sync …` and `elfiee serve --sync`: several devices on one document through a NATS
//! JetStream broker (see `elfiee_sync` and docs/CLI.md, "Sync").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use elfiee_engine::FileHandle;
use elfiee_sync::identity::NodeKey;
use elfiee_sync::node::{BrokerAccess, SyncConfig, SyncError, SyncNode, SyncStatus};
use serde_json::json;

use super::output::{CliError, Out};
use crate::Engine;

/// Where this device's key lives when neither `--key` nor `ELFIEE_NODE_KEY` says:
/// `$XDG_CONFIG_HOME/elfiee/node.key`, else `~/.config/elfiee/node.key`. Outside any `.elf`,
/// so a copied document never carries another device's key.
pub fn default_key_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("elfiee").join("node.key")
}

/// The device's key from `path` (64 hex characters: the secret seed), made when missing.
pub fn load_or_make_key(path: &Path) -> Result<NodeKey, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let seed = elfiee_model::EventHash::from_hex(text.trim()).ok_or_else(|| {
                CliError::failed(
                    "bad_key",
                    format!(
                        "{} does not hold a node key (64 hex characters); move it away to make a new one",
                        path.display()
                    ),
                )
            })?;
            Ok(NodeKey::from_seed(seed.0))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = NodeKey::generate();
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
            }
            let mut f = {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(|e| io_error(path, e))?
            };
            writeln!(f, "{}", elfiee_model::EventHash(key.seed()).to_hex())
                .and_then(|()| f.sync_all())
                .map_err(|e| io_error(path, e))?;
            Ok(key)
        }
        Err(e) => Err(io_error(path, e)),
    }
}

fn io_error(path: &Path, e: std::io::Error) -> CliError {
    CliError::failed("io", format!("{}: {e}", path.display()))
}

/// `elfiee sync node-id`.
pub fn node_id(key: &Path, out: &Out) -> Result<(), CliError> {
    let node = load_or_make_key(key)?.node();
    out.print(
        &json!({"node_id": node.to_hex(), "key": key.display().to_string()}),
        || node.to_hex(),
    );
    Ok(())
}

/// `elfiee sync join`: an empty document that will receive `doc` from the broker.
pub async fn join(
    path: &Path,
    broker: &str,
    doc: &str,
    key: &Path,
    access: &BrokerAccess,
    out: &Out,
) -> Result<(), CliError> {
    check_doc(doc)?;
    elfiee_sync::node::check_broker_url(broker).map_err(CliError::usage)?;
    // Credentials leave the URL: the file records the bare address.
    let (broker, access) = access.clone().from_url(broker).map_err(CliError::usage)?;
    let broker = broker.as_str();
    // A broker that refuses these settings says so now; one that cannot be reached is no
    // error (the device joins offline and `serve --sync` reaches it later).
    access
        .check(broker, Duration::from_secs(5))
        .await
        .map_err(|r| CliError::failed("broker_refused", r.0))?;
    let node = load_or_make_key(key)?.node();
    let file = Engine::global().create_empty(path).await?;
    let side = elfiee_sync::node::join_records(&node, broker, doc);
    let stored = match file.foreign_log() {
        Ok(seam) => seam.append(Vec::new(), side).await,
        Err(e) => Err(e),
    };
    let elf = file.path().display().to_string();
    file.close().await;
    stored?;
    out.print(
        &json!({"elf": elf, "node_id": node.to_hex(), "broker": broker, "doc": doc}),
        || {
            format!(
                "created {elf}, empty, to receive '{doc}' from {broker}\n\
                 this device is node {node}\n\
                 next: on a device with the document, the owner runs\n  \
                 elfiee --elf DOC.elf sync add-node {node}\n\
                 then here:\n  elfiee --elf {elf} serve --sync {broker}"
            )
        },
    );
    Ok(())
}

fn check_doc(doc: &str) -> Result<(), CliError> {
    if !elfiee_sync::node::valid_doc_name(doc) {
        return Err(CliError::usage(format!(
            "the document name '{doc}' may only hold letters, digits, '-' and '_'"
        )));
    }
    Ok(())
}

/// The name a document is synced under: `--doc`, else the recorded one, else the file's
/// name with other characters made '-'.
fn doc_name(file: &FileHandle, given: Option<&str>) -> Result<String, CliError> {
    if let Some(d) = given {
        check_doc(d)?;
        return Ok(d.to_owned());
    }
    let recorded = elfiee_sync::node::recorded_config(file)
        .map_err(|e| CliError::failed("sync", e.to_string()))?;
    if let Some((_, d)) = recorded.filter(|(_, d)| !d.is_empty()) {
        return Ok(d);
    }
    let stem = file
        .path()
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("doc");
    Ok(stem
        .chars()
        .map(|c| {
            if elfiee_sync::node::valid_doc_char(c) {
                c
            } else {
                '-'
            }
        })
        .collect())
}

/// Where a serving process keeps its sync status for `elfiee sync status`.
fn status_path(file: &FileHandle) -> PathBuf {
    file.path().join("sync-status.json")
}

/// `elfiee serve --sync URL`: starts the node and keeps `sync-status.json` current; says on
/// stderr when the broker comes and goes.
pub async fn start(
    file: &FileHandle,
    url: &str,
    doc: Option<&str>,
    key: &Path,
    replicas: u8,
    access: BrokerAccess,
) -> Result<SyncNode, CliError> {
    elfiee_sync::node::check_broker_url(url).map_err(CliError::usage)?;
    let key = load_or_make_key(key)?;
    let doc = doc_name(file, doc)?;
    let mut config = SyncConfig::new(url, doc.clone(), key.seed());
    config.access = access;
    config.replicas = replicas.into();
    let registry = Engine::global().config().registry.clone();
    let node = SyncNode::start(file.clone(), registry, config)
        .await
        .map_err(|e| match e {
            SyncError::Refused(why) => CliError::failed("broker_refused", why),
            e => CliError::failed("sync", e.to_string()),
        })?;
    eprintln!(
        "syncing '{doc}' through {} as node {}",
        node.status().broker,
        node.node().to_hex()
    );
    let mut changes = node.subscribe();
    let path = status_path(file);
    let watched = node.clone();
    tokio::spawn(async move {
        let (mut online, mut said) = (None, None);
        loop {
            let s = watched.status();
            // Said once per change: coming back, or going offline for a new reason (the
            // broker refusing this device after a reconnect reads differently from a cut).
            if online != Some(s.online) || (!s.online && s.last_error != said) {
                if s.online {
                    eprintln!("sync: broker reachable");
                } else if let Some(e) = &s.last_error {
                    eprintln!(
                        "sync: offline ({e}); local commands go on, sync resumes when it is back"
                    );
                }
                online = Some(s.online);
                said = s.last_error.clone();
            }
            write_status(&path, &s);
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
    });
    Ok(node)
}

fn write_status(path: &Path, s: &SyncStatus) {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    v["served_by"] = json!(std::process::id());
    let tmp = path.with_extension("json.tmp");
    let written = std::fs::write(&tmp, serde_json::to_vec_pretty(&v).unwrap_or_default())
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot write the sync status file");
    }
}

/// `elfiee sync remove-node NODE_ID`: `node.remove` with the last of the device's events
/// this device holds (they stay; the device's later ones are refused at merge everywhere).
pub async fn remove_node(
    file: &FileHandle,
    editor: &str,
    node_id: &str,
    out: &Out,
) -> Result<(), CliError> {
    let events = file.events(1)?;
    let notes = event_notes(file, &events);
    let upto = notes
        .values()
        .filter(|n| n["sync"]["origin_node"] == node_id)
        .filter_map(|n| n["sync"]["origin_seq"].as_u64())
        .max()
        .unwrap_or(0);
    let ev = file
        .submit(elfiee_model::Command::new(
            editor,
            "node.remove",
            None,
            json!({"node_id": node_id, "upto": upto}),
        ))
        .await?;
    out.print(
        &json!({"node_id": node_id, "upto": upto, "events": ev.len()}),
        || {
            if ev.is_empty() {
                format!("node {node_id} was already removed")
            } else {
                format!(
                    "node {node_id} removed: its first {upto} events stay; what it writes from now on is refused on every device, and a new document key goes to the devices that stay"
                )
            }
        },
    );
    Ok(())
}

/// `elfiee sync status`.
pub async fn status(file: &FileHandle, access: &BrokerAccess, out: &Out) -> Result<(), CliError> {
    let status: serde_json::Value = if let Some(pid) = file.owner_pid() {
        // Served: the serving process keeps the status current.
        let path = status_path(file);
        let text = std::fs::read(&path).map_err(|_| {
            CliError::failed(
                "not_synced",
                format!("process {pid} serves this document without --sync"),
            )
        })?;
        serde_json::from_slice(&text)
            .map_err(|e| CliError::failed("io", format!("{}: {e}", path.display())))?
    } else {
        let registry = Engine::global().config().registry.clone();
        let s =
            elfiee_sync::node::offline_status(file, registry, Some(Duration::from_secs(3)), access)
                .await
                .map_err(|e| CliError::failed("sync", e.to_string()))?
                .ok_or_else(|| {
                    CliError::failed(
                "not_synced",
                "this document was never synced; start with `elfiee serve --sync nats://HOST:PORT`",
            )
                })?;
        serde_json::to_value(s).unwrap_or_default()
    };
    out.print(&status, || {
        let n = |k: &str| status[k].as_u64().unwrap_or(0);
        let t = |k: &str| status[k].as_str().unwrap_or("").to_owned();
        let mut lines = vec![
            format!("node:      {}", t("node")),
            format!(
                "broker:    {} ({})",
                t("broker"),
                if status["online"].as_bool() == Some(true) {
                    "reachable"
                } else {
                    "not reachable"
                }
            ),
            format!("document:  {} ({} events merged)", t("doc"), n("events")),
            format!(
                "publish:   {} of {} own events acknowledged, {} behind",
                n("published"),
                n("own_events"),
                n("to_publish")
            ),
            format!(
                "ingest:    up to stream message {}, {} waiting",
                n("ingested"),
                n("to_ingest")
            ),
        ];
        if let Some(r) = status["replicas"].as_u64() {
            lines.push(format!(
                "stream:    {r} replica{}, leader {}",
                if r == 1 { "" } else { "s" },
                status["leader"].as_str().unwrap_or("(no cluster)")
            ));
        }
        if status["member"].as_bool() != Some(true) {
            lines.push(
                "member:    no — the owner must run `elfiee sync add-node` with this node id"
                    .into(),
            );
        }
        if let Some(pid) = status["served_by"].as_u64() {
            lines.push(format!("served by: process {pid}"));
        }
        if let Some(e) = status["last_error"].as_str() {
            lines.push(format!("last error: {e}"));
        }
        if let Some(g) = status["key_generation"].as_u64() {
            lines.push(format!("key:       generation {g} (end-to-end encrypted)"));
        }
        if status["removed"].as_bool() == Some(true) {
            lines.push("removed:   this device was removed from the document".into());
        }
        for (node, k) in status["refused_from_removed"]
            .as_object()
            .into_iter()
            .flatten()
        {
            lines.push(format!(
                "refused events from removed node {node}: {}",
                k.as_u64().unwrap_or(0)
            ));
        }
        for r in status["rejected"].as_array().into_iter().flatten() {
            lines.push(format!("rejected:  {}", r.as_str().unwrap_or_default()));
        }
        lines.join("\n")
    });
    Ok(())
}

/// What to add to each of `events` (by seq) where `log --json` shows it: for a synced
/// document, `{"sync": EventPlace}` — from the process that syncs it (the owner's view), or
/// folded from the log here when this process holds the file. Empty for a document never
/// synced.
pub fn event_notes(
    file: &FileHandle,
    events: &[elfiee_model::Event],
) -> std::collections::BTreeMap<u64, serde_json::Value> {
    if events.is_empty() {
        return Default::default();
    }
    let served: std::collections::BTreeMap<u64, serde_json::Value> =
        file.notes(events).unwrap_or_default().into_iter().collect();
    if !served.is_empty() {
        return served;
    }
    let registry = Engine::global().config().registry.clone();
    match elfiee_sync::node::event_places(file, registry, events) {
        Ok(Some(places)) => events
            .iter()
            .zip(places)
            .filter_map(|(e, p)| p.map(|p| (e.seq, json!({ "sync": p }))))
            .collect(),
        _ => Default::default(),
    }
}

/// `event` as JSON with the fields `notes` holds for it (an `{"sync": …}` object from
/// [`event_notes`]) merged in.
pub fn event_json(
    event: &elfiee_model::Event,
    notes: &std::collections::BTreeMap<u64, serde_json::Value>,
) -> serde_json::Value {
    let mut v = json!(event);
    if let (Some(serde_json::Value::Object(fields)), Some(obj)) =
        (notes.get(&event.seq), v.as_object_mut())
    {
        obj.extend(fields.clone());
    }
    v
}

/// The merged digest of a synced file, for `elfiee replay` (`None` when never synced).
pub async fn synced_digest(path: &Path) -> Result<Option<String>, CliError> {
    let file = Engine::global().open(path).await?;
    let registry = Engine::global().config().registry.clone();
    let state = elfiee_sync::node::synced_state(&file, registry);
    file.close().await;
    Ok(state
        .map_err(|e| CliError::failed("sync", e.to_string()))?
        .map(|s| s.digest()))
}
