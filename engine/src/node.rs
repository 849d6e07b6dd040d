//! The node id: the first half of vector-clock keys (`"<node_id>:<editor_id>"`).
//!
//! Taken from `ELFIEE_NODE_ID`, else from a per-machine file created once
//! (`$XDG_CONFIG_HOME/elfiee/node-id` or `~/.config/elfiee/node-id`).

use std::path::PathBuf;

fn node_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("elfiee").join("node-id"))
}

/// This machine's node id. Never fails: if the id file cannot be read or written, a fresh id
/// is used for this process and a warning is logged.
pub fn node_id() -> String {
    if let Ok(id) = std::env::var("ELFIEE_NODE_ID") {
        if !id.trim().is_empty() {
            return id.trim().to_owned();
        }
    }
    let fresh = || format!("node-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let Some(path) = node_file() else {
        return fresh();
    };
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if !id.is_empty() {
            return id.to_owned();
        }
    }
    let id = fresh();
    let written = path
        .parent()
        .map(std::fs::create_dir_all)
        .transpose()
        .and_then(|_| std::fs::write(&path, &id));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "could not store the node id; using a per-process id");
    }
    id
}
