//! The export effect: writes a directory block's files back under its `external_root_path`.
//! Every path is checked: relative, no `..`, and no existing symlink on the way — nothing is
//! ever written outside the root.

use std::path::{Path, PathBuf};

use elfiee_capabilities::builtin::check_relative_path;
use elfiee_engine::EngineError;
use elfiee_model::{DirectoryEntry, Event};
use serde_json::{json, Value};

use crate::effects::{BoxFuture, Effect, EffectCx, FailedOutcome};
use crate::json_file::write_atomic;

pub struct ExportEffect;

/// Why `rel` may not be written under `root`, if it may not. `root` is the canonical folder
/// recorded at import; every existing part of the path must resolve inside it (symlinks that
/// stay inside are fine).
pub fn refuse_reason(root: &Path, rel: &str) -> Option<String> {
    if let Err(e) = check_relative_path(rel) {
        return Some(e);
    }
    match root.canonicalize() {
        Ok(c) if c == root => {}
        Ok(c) => {
            return Some(format!(
                "the root folder {} now resolves to {}",
                root.display(),
                c.display()
            ))
        }
        Err(e) => {
            return Some(format!(
                "the root folder {} is unreadable: {e}",
                root.display()
            ))
        }
    }
    let mut cur = root.to_path_buf();
    for part in rel.split('/') {
        cur.push(part);
        if cur.symlink_metadata().is_err() {
            break; // does not exist yet: created below a checked parent
        }
        match cur.canonicalize() {
            Ok(real) if real.starts_with(root) => {}
            Ok(real) => {
                return Some(format!(
                    "{} is a symlink to {}, outside the root",
                    cur.display(),
                    real.display()
                ))
            }
            Err(_) => return Some(format!("{} is a broken symlink", cur.display())),
        }
    }
    None
}

impl Effect for ExportEffect {
    fn name(&self) -> &'static str {
        "export"
    }
    fn wants(&self, e: &Event) -> bool {
        e.cap_id() == "directory.export"
    }
    fn failed_outcome(&self, e: &Event, why: &str) -> FailedOutcome {
        let root = e.value.get("root").cloned().unwrap_or_default();
        FailedOutcome {
            cap_id: "directory.export_outcome",
            block_id: e.entity.clone(),
            payload: json!({"trigger_seq": e.seq, "root": root, "written": [],
                "refused": [{"path": root, "reason": why}]}),
        }
    }
    fn run<'a>(&'a self, cx: &'a EffectCx, e: &'a Event) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let root = PathBuf::from(
                e.value
                    .get("root")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            );
            // Metadata under the state lock; each body is read from the content store as it
            // is written, so an export holds one file's text at a time.
            let files: Vec<(String, Option<elfiee_model::Block>)> = cx.file.with_state(|s| {
                let entries: Vec<DirectoryEntry> = s
                    .block(&e.entity)
                    .and_then(|b| b.contents.get("entries"))
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default();
                entries
                    .into_iter()
                    .map(|en| (en.path, s.block(&en.block_id).cloned()))
                    .collect()
            });
            let body = |b: &elfiee_model::Block| -> Result<Option<String>, EngineError> {
                let b = cx.file.resolve(b)?;
                Ok(b.contents
                    .get("markdown")
                    .or_else(|| b.contents.get("text"))
                    .and_then(Value::as_str)
                    .map(str::to_owned))
            };
            let mut written = Vec::new();
            let mut refused = Vec::new();
            if !root.is_dir() {
                refused.push(json!({"path": root, "reason": "the root folder does not exist"}));
            } else if let Some(reason) =
                refuse_reason(&root, "probe").filter(|r| r.contains("root folder"))
            {
                refused.push(json!({"path": root, "reason": reason}));
            } else {
                for (rel, block) in files {
                    let text = match block.as_ref().map(body).transpose() {
                        Ok(t) => t.flatten(),
                        Err(err) => {
                            refused.push(json!({"path": rel, "reason": err.to_string()}));
                            continue;
                        }
                    };
                    let Some(text) = text else {
                        refused.push(json!({"path": rel, "reason": "its block was deleted"}));
                        continue;
                    };
                    if let Some(reason) = refuse_reason(&root, &rel) {
                        refused.push(json!({"path": rel, "reason": reason}));
                        continue;
                    }
                    let target = root.join(&rel);
                    let res = target
                        .parent()
                        .map(std::fs::create_dir_all)
                        .transpose()
                        .and_then(|_| write_atomic(&target, text.as_bytes()));
                    match res {
                        Ok(()) => written.push(rel),
                        Err(err) => refused.push(json!({"path": rel, "reason": err.to_string()})),
                    }
                }
            }
            let outcome =
                json!({"trigger_seq": e.seq, "root": root, "written": written, "refused": refused});
            cx.record(e, "outcome", "directory.export_outcome", &e.entity, outcome)
                .await?;
            Ok(())
        })
    }
}
