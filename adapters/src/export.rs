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
            let force = e.value.get("force").and_then(Value::as_bool) == Some(true);
            let only: Option<Vec<String>> = e
                .value
                .get("paths")
                .and_then(|p| serde_json::from_value(p.clone()).ok());
            let mut plan = plan_export_of(&cx.file, &e.entity, force, only.as_deref())?;
            // The root the command recorded (the directory's, when it was submitted).
            if let Some(root) = e.value.get("root").and_then(Value::as_str) {
                plan.root = PathBuf::from(root);
            }
            let mut outcome = execute(plan);
            outcome["trigger_seq"] = json!(e.seq);
            cx.record(e, "outcome", "directory.export_outcome", &e.entity, outcome)
                .await?;
            Ok(())
        })
    }
}

/// What an export of a directory would do (`elfiee dir export --dry-run` prints it; the
/// export effect carries it out).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ExportPlan {
    pub root: PathBuf,
    /// Files to write: new ones and ones whose text changed in the document.
    pub write: Vec<String>,
    /// Files to remove: they left the directory and the disk still holds what the document
    /// last saw there.
    pub remove: Vec<String>,
    /// Entries already on disk as they are (not touched).
    pub unchanged: usize,
    /// Files the export leaves alone, and why (changed on disk since the document last saw
    /// them, a path that would leave the root, ...).
    pub refused: Vec<Refusal>,
    /// Entries whose file on disk already holds their text: the disk hash to record.
    pub disk: std::collections::BTreeMap<String, String>,
    #[serde(skip)]
    bodies: std::collections::BTreeMap<String, String>,
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub path: String,
    pub reason: String,
}

/// The blake3 of the file at `path` as the disk holds it (read in pieces; not a regular
/// file, or unreadable: `None`).
fn hash_file(path: &Path) -> Option<String> {
    crate::bounded::hash_file(path)
        .ok()
        .map(|h| h.to_hex().to_string())
}

/// Plans the export of directory `dir_id`: only entries the document changed are looked at
/// on disk (a clean entry is not read), so an export costs what changed. A file is written
/// when the disk holds what the document last saw there (or nothing, for a new file); a file
/// changed on disk since is refused unless `force`. Bodies are read from the content store.
pub fn plan_export(
    file: &elfiee_engine::FileHandle,
    dir_id: &str,
    force: bool,
) -> Result<ExportPlan, EngineError> {
    plan_export_of(file, dir_id, force, None)
}

/// [`plan_export`] of the files at `only` (new, changed and removed ones among them; the
/// directory's other changes stay pending), or of every change for `None`.
pub fn plan_export_of(
    file: &elfiee_engine::FileHandle,
    dir_id: &str,
    force: bool,
    only: Option<&[String]>,
) -> Result<ExportPlan, EngineError> {
    use elfiee_capabilities::builtin::{directory_list, directory_status};
    let wanted = |p: &str| only.is_none_or(|o| o.iter().any(|x| x == p));
    let (root, status, entries, pending) = file.with_state(|s| {
        let dir = s
            .block(dir_id)
            .filter(|b| b.block_type == "directory")
            .ok_or_else(|| EngineError::rejected(format!("'{dir_id}' is not a directory block")))?;
        let root = dir
            .metadata
            .custom
            .get(elfiee_model::EXTERNAL_ROOT_PATH)
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| {
                EngineError::rejected(format!(
                    "directory '{dir_id}' has no folder on disk; import one first"
                ))
            })?;
        let pending: Vec<elfiee_model::PendingRemoval> =
            directory_list::<elfiee_model::PendingRemoval>(dir, "pending_removals")
                .into_iter()
                .filter(|p| wanted(&p.path))
                .collect();
        // The entries the document changed, with their blocks (bodies are read below).
        let st = directory_status(s, dir);
        let changed: std::collections::HashSet<&str> = st
            .new
            .iter()
            .chain(&st.modified)
            .map(String::as_str)
            .filter(|p| wanted(p))
            .collect();
        let dirty: Vec<(DirectoryEntry, Option<elfiee_model::Block>)> =
            directory_list::<DirectoryEntry>(dir, "entries")
                .into_iter()
                .filter(|e| changed.contains(e.path.as_str()))
                .map(|e| {
                    let b = s.block(&e.block_id).cloned();
                    (e, b)
                })
                .collect();
        Ok::<_, EngineError>((root, st, dirty, pending))
    })?;
    let mut plan = ExportPlan {
        root: root.clone(),
        unchanged: status.clean,
        ..ExportPlan::default()
    };
    let mut refuse = |path: &str, reason: String| {
        plan.refused.push(Refusal {
            path: path.to_owned(),
            reason,
        })
    };
    if !root.is_dir() {
        refuse(
            &root.display().to_string(),
            "the root folder does not exist".into(),
        );
        return Ok(plan);
    }
    if let Some(reason) = refuse_reason(&root, "probe").filter(|r| r.contains("root folder")) {
        refuse(&root.display().to_string(), reason);
        return Ok(plan);
    }
    for (e, block) in entries {
        let Some(block) = block else {
            refuse(&e.path, "its block was deleted".into());
            continue;
        };
        if let Some(reason) = refuse_reason(&root, &e.path) {
            refuse(&e.path, reason);
            continue;
        }
        let text = match file.resolve(&block) {
            Ok(b) => b
                .contents
                .get("markdown")
                .or_else(|| b.contents.get("text"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            Err(err) => {
                refuse(&e.path, err.to_string());
                continue;
            }
        };
        let want = blake3::hash(text.as_bytes()).to_hex().to_string();
        let on_disk = hash_file(&root.join(&e.path));
        if on_disk.as_deref() == Some(want.as_str()) {
            // Already there (written by hand, or by an export whose outcome was lost).
            plan.disk.insert(e.path.clone(), want);
            plan.unchanged += 1;
            continue;
        }
        if on_disk != e.disk && !force {
            let reason = match (&e.disk, &on_disk) {
                (_, None) => "deleted on disk since the document last saw it; `elfiee dir sync` takes that in, `dir export --force` writes it back".to_owned(),
                (None, Some(_)) => "a file the document did not write is there; `dir export --force` overwrites it, or move the entry".to_owned(),
                (Some(_), Some(_)) => "changed on disk since the last import or export; `elfiee dir sync` takes the disk version, `dir export --force` overwrites it".to_owned(),
            };
            refuse(&e.path, reason);
            continue;
        }
        plan.bodies.insert(e.path.clone(), text);
        plan.write.push(e.path);
    }
    for p in pending {
        if let Some(reason) = refuse_reason(&root, &p.path) {
            refuse(&p.path, reason);
            continue;
        }
        match crate::bounded::hash_file(&root.join(&p.path)).map(|h| h.to_hex().to_string()) {
            // Gone already: nothing to do (the outcome still clears it).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => plan.remove.push(p.path),
            Err(e) => refuse(&p.path, format!("left the directory, but cannot be read on disk ({e}); not removed")),
            Ok(h) if h == p.disk || force => plan.remove.push(p.path),
            Ok(_) => refuse(
                &p.path,
                "left the directory, but changed on disk since; not removed (`dir export --force` removes it)".into(),
            ),
        }
    }
    Ok(plan)
}

/// Carries out `plan` (each path checked again right before it is touched) and returns the
/// outcome value: `written`, `removed`, `refused`, `unchanged`, `disk` (hashes of what is on
/// disk now for the entries it wrote or found in place), `root`.
pub fn execute(plan: ExportPlan) -> Value {
    let root = plan.root.clone();
    let mut written = Vec::new();
    let mut removed = Vec::new();
    let mut refused: Vec<Refusal> = plan.refused.clone();
    let mut disk = plan.disk.clone();
    for rel in &plan.write {
        if let Some(reason) = refuse_reason(&root, rel) {
            refused.push(Refusal {
                path: rel.clone(),
                reason,
            });
            continue;
        }
        let text = plan.bodies.get(rel).map(String::as_str).unwrap_or_default();
        let target = root.join(rel);
        let res = target
            .parent()
            .map(create_dirs_durably)
            .transpose()
            .and_then(|_| write_atomic(&target, text.as_bytes()));
        match res {
            Ok(()) => {
                disk.insert(
                    rel.clone(),
                    blake3::hash(text.as_bytes()).to_hex().to_string(),
                );
                written.push(rel.clone());
            }
            Err(err) => refused.push(Refusal {
                path: rel.clone(),
                reason: err.to_string(),
            }),
        }
    }
    for rel in &plan.remove {
        if let Some(reason) = refuse_reason(&root, rel) {
            refused.push(Refusal {
                path: rel.clone(),
                reason,
            });
            continue;
        }
        match std::fs::remove_file(root.join(rel)) {
            Ok(()) => removed.push(rel.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => removed.push(rel.clone()),
            Err(err) => refused.push(Refusal {
                path: rel.clone(),
                reason: err.to_string(),
            }),
        }
    }
    json!({
        "root": root, "written": written, "removed": removed, "refused": refused,
        "unchanged": plan.unchanged, "disk": disk,
    })
}

/// `create_dir_all(dir)`, each folder it makes durable in its parent (a power cut must not
/// take away a folder holding a file the export wrote and synced; issue 39, P2).
fn create_dirs_durably(dir: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.is_dir() {
        missing.push(at);
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    std::fs::create_dir_all(dir)?;
    for made in missing.iter().rev() {
        if let Some(parent) = made.parent() {
            elfiee_engine::layout::sync_dir(parent)?;
        }
    }
    Ok(())
}
