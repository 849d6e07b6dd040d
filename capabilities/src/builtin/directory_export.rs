use std::collections::BTreeSet;

use elfiee_model::{CapError, Command, Ctx, Event, EXTERNAL_ROOT_PATH};
use elfiee_projections::{update_block, Folded, State};
use serde_json::json;

use super::entries::{entry_path, list_mut, set_disk_hashes, strings};
use super::spec::Builtin;
use super::support::on_block;
use super::support::record;
use crate::{Handled, Target};

const ID: &str = "directory.export";

pub(crate) const CAPABILITIES: &[Builtin] = &[
    Builtin::new(ID, Target::Block(Some("directory")), handle),
    // What the export effect wrote and refused.
    Builtin::new(
        "directory.export_outcome",
        Target::Block(Some("directory")),
        record,
    )
    .authorized_by(|_| ID)
    .fold(fold_export_outcome),
];

/// `directory.export`: asks the export effect to write the directory's blocks back under its
/// `external_root_path`. The event is only the request; the effect does the writing (never
/// outside the root) and records `directory.export_outcome`.
fn handle(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    let id = cmd.block_id.as_deref().unwrap_or_default();
    let root = state
        .block(id)
        .and_then(|b| b.metadata.custom.get(EXTERNAL_ROOT_PATH))
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            CapError::rejected(format!(
                "directory '{id}' has no {EXTERNAL_ROOT_PATH}; import a folder first"
            ))
        })?;
    // `force`: overwrite files changed on disk since the document last saw them.
    let force = match cmd.payload.get("force") {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(_) => return Err(CapError::payload(ID, "'force' must be true or false")),
    };
    // `paths`: only these files (an agent's shell exports what is its own, not what others
    // left pending); absent: every change.
    let paths = match cmd.payload.get("paths") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for p in a {
                let p = p.as_str().ok_or_else(|| {
                    CapError::payload(ID, "'paths' must be a list of relative paths")
                })?;
                super::directory_import::check_relative_path(p)
                    .map_err(|e| CapError::payload(ID, format!("'paths': {e}")))?;
                out.push(p.to_owned());
            }
            Some(out)
        }
        Some(_) => {
            return Err(CapError::payload(
                ID,
                "'paths' must be a list of relative paths",
            ))
        }
    };
    let mut value = json!({"root": root, "force": force});
    if let Some(p) = paths {
        value["paths"] = json!(p);
    }
    on_block(cmd, ID, value)
}

/// The disk hashes the export wrote, the pending removals it carried out, and the whole
/// record in `metadata.custom.last_export`.
fn fold_export_outcome(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        set_disk_hashes(b, v);
        let removed: BTreeSet<&str> = strings(v, "removed").collect();
        // The list is made only when something was removed.
        if !removed.is_empty() {
            if let Some(list) = list_mut(b, "pending_removals") {
                list.retain(|e| !removed.contains(entry_path(e)));
            }
        }
        b.metadata.custom.insert("last_export".into(), v.clone());
    })
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn export_takes_a_list_of_paths_and_refuses_a_bad_one() {
        let mut k = Kit::new();
        let dir = k.project(json!([{"path": "src/main.rs", "content": "fn main() {}"}]));
        let ev = k.ok(
            "directory.export",
            Some(&dir),
            json!({"paths": ["src/main.rs"]}),
        );
        assert_eq!(ev[0].value["paths"], json!(["src/main.rs"]));
        let ev = k.ok("directory.export", Some(&dir), json!({}));
        assert!(ev[0].value.get("paths").is_none(), "every change");
        k.err_contains(
            "directory.export",
            Some(&dir),
            json!({"paths": ["../etc/passwd"]}),
            "'paths'",
        );
        k.err_contains(
            "directory.export",
            Some(&dir),
            json!({"paths": "src/main.rs"}),
            "a list of relative paths",
        );
    }
}
