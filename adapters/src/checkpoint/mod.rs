//! Checkpoints of agent steps, and undo / redo (seed 004 §3, issue 26).
//!
//! Every step of an agent (a model turn with its tool calls) is recorded with what it changed:
//! - in the **document**: the seq range of its events `(doc_from, doc_to]`; what the range did
//!   to each block is read back from the engine's earlier states (time travel), so nothing
//!   is copied;
//! - in the **project folder** (the directory the agent works in): the files created,
//!   modified and deleted, found by a rescan against the previous checkpoint (see [`scan`]),
//!   with every version's bytes kept in the document's content store.
//!
//! An undo reverts a set of steps on both sides: one `core.restore` command sets the blocks
//! back to their images before the steps (the log stays append-only), and the files are
//! written back byte for byte (created files removed, deleted ones back). It is recorded as a
//! change of its own (`undo`), so a redo is the undo of that change. A block or file changed
//! since by someone else is a conflict: named, and left alone unless forced.
//!
//! Records are `agent.session` entries of the session (`step`, `undo`, `redo`), so
//! `elfiee agent steps` and undo work from any process, and replay calls nothing.

mod edits;
pub mod scan;
pub mod watch;

pub use edits::{redo_edits, undo_edits};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Block, Command, ContentRef, EventHash, EXTERNAL_ROOT_PATH};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use scan::{FileChange, FileState, Manifest, ScanStats, Version};

use crate::payload::{str_field, str_list};

fn storage(msg: impl Into<String>) -> EngineError {
    EngineError::Storage(msg.into())
}

/// The project folder an agent's steps are checkpointed in: the directory it references
/// (else its target project) and that directory's root on disk.
pub fn project_of(file: &FileHandle, agent_block_id: &str) -> Option<(String, PathBuf)> {
    file.with_state(|s| {
        let dir = crate::service::agent_referenced(s, agent_block_id, "directory")?;
        let root = dir
            .metadata
            .custom
            .get(EXTERNAL_ROOT_PATH)
            .and_then(Value::as_str)?;
        Some((dir.block_id.clone(), PathBuf::from(root)))
    })
}

fn content_ref(v: &Version) -> Result<ContentRef, EngineError> {
    Ok(ContentRef {
        hash: EventHash::from_hex(&v.hash)
            .ok_or_else(|| storage(format!("a checkpoint names a bad hash '{}'", v.hash)))?,
        len: v.len,
    })
}

/// Files larger than this are tracked by hash but their bytes are not kept in the document
/// The bytes of a file version kept in the content store (`None`: not kept, e.g. over
/// [`MAX_KEPT_BYTES`], or unreadable).
pub fn stored_bytes(file: &FileHandle, v: &Version) -> Option<Vec<u8>> {
    file.bytes(&content_ref(v).ok()?).ok()
}

/// (a video in the project would otherwise be copied into the `.elf` at the first step); an
/// undo that needs one is refused, naming it.
pub const MAX_KEPT_BYTES: u64 = 64 * 1024 * 1024;

/// Tracks one project folder between checkpoints: the last manifest, kept in a cache file
/// inside the `.elf` (a cache: losing it costs one full rescan, never a wrong answer).
pub struct FolderTracker {
    file: FileHandle,
    root: PathBuf,
    cache_file: PathBuf,
    last: Manifest,
    /// File events since the last scan (after the first walk of this process).
    watch: Option<watch::FolderWatch>,
    /// Whether `last` was made by a walk or a rescan in this process (a cache loaded from
    /// disk may be older than the watch: the first scan walks).
    fresh: bool,
}

impl FolderTracker {
    /// Loads the cache of `dir_block_id`'s folder `root`.
    pub fn open(file: &FileHandle, dir_block_id: &str, root: &Path) -> FolderTracker {
        let cache_file = file
            .path()
            .join("cache")
            .join(format!("checkpoint-{dir_block_id}.bin"));
        let last = std::fs::read(&cache_file)
            .ok()
            .and_then(|b| rmp_serde::from_slice::<Manifest>(&b).ok())
            .unwrap_or_default();
        FolderTracker {
            file: file.clone(),
            root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
            cache_file,
            last,
            watch: None,
            fresh: false,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Rescans the folder; the bytes of every file not seen before go to the content store
    /// Whether the tracker has a manifest to compare with (a cache, or a scan of this
    /// process); without one, a scan cannot tell what changed.
    pub fn has_baseline(&self) -> bool {
        self.last.scanned_at_ns != 0
    }

    /// (durable with the next commit). Returns the manifest (the tracker's own: a caller that
    /// keeps it clones it) and what the scan cost.
    pub fn scan(&mut self) -> Result<(&Manifest, ScanStats), EngineError> {
        let file = self.file.clone();
        let (m, stats) = self.scan_new()?;
        self.last = m;
        Ok((&self.last, stats))
    }

    /// Rescans the folder (as [`FolderTracker::scan`]) and returns what changed since the
    /// previous scan, without copying the manifest (a hook's step on a large project).
    pub fn scan_changes(&mut self) -> Result<(Vec<FileChange>, ScanStats), EngineError> {
        let (m, stats) = self.scan_new()?;
        let changes = scan::diff(&self.last, &m);
        self.last = m;
        Ok((changes, stats))
    }

    /// The manifest of the folder now (the tracker's `last` is the baseline it trusts).
    fn scan_new(&mut self) -> Result<(Manifest, ScanStats), EngineError> {
        let keep = |_: &str, st: &FileState, bytes: &[u8]| {
            if bytes.len() as u64 > MAX_KEPT_BYTES {
                // Tracked by hash only: an undo that needs these bytes says so.
                return Ok(());
            }
            let r = file.put_bytes(bytes).map_err(|e| e.to_string())?;
            if r.hash.to_hex() != st.hash {
                return Err("the content store hashed a file differently".to_owned());
            }
            Ok(())
        };
        let failed = |e: String| storage(format!("checkpoint of {}: {e}", self.root.display()));
        if let (Some(w), true) = (&self.watch, self.fresh) {
            match w.changes() {
                watch::Changes::Paths(paths) => {
                    if let Some(found) =
                        scan::rescan_paths(&self.root, &self.last, &paths, keep).map_err(failed)?
                    {
                        return Ok(found);
                    }
                }
                watch::Changes::Walk(why) => tracing::debug!(why, "checkpoint walks the folder"),
            }
        }
        if self.watch.as_ref().is_none_or(|w| !w.healthy()) {
            self.watch = watch::FolderWatch::start(&self.root);
        }
        // Each folder is watched as the walk comes to it, before its files are listed: a
        // change made during the walk is an event next time.
        let w = self.watch.as_ref();
        let (m, stats) = scan::scan_with(&self.root, &self.last, keep, |dir| {
            if let Some(w) = w {
                w.watch_dir(dir);
            }
        })
        .map_err(failed)?;
        self.fresh = self.watch.as_ref().is_some_and(|w| w.healthy());
        Ok((m, stats))
    }

    /// Saves the last manifest as the cache (after the commit that made its bytes durable).
    pub fn save(&self) {
        let bytes = rmp_serde::to_vec_named(&self.last).unwrap_or_default();
        let tmp = self.cache_file.with_extension("tmp");
        let ok = std::fs::create_dir_all(self.cache_file.parent().unwrap_or(Path::new(".")))
            .and_then(|()| std::fs::write(&tmp, &bytes))
            .and_then(|()| std::fs::rename(&tmp, &self.cache_file));
        if let Err(e) = ok {
            tracing::warn!(error = %e, "checkpoint cache not saved; the next scan reads every file");
        }
    }
}

/// The start of a step: the document's seq and the folder's manifest.
pub struct StepStart {
    pub seq: u64,
    manifest: Option<Manifest>,
}

/// Records steps of one agent session.
pub struct StepRecorder {
    file: FileHandle,
    tracker: Option<FolderTracker>,
    dir_block_id: Option<String>,
}

impl StepRecorder {
    /// A recorder for the agent's project folder (none: the document side only).
    pub fn new(file: &FileHandle, agent_block_id: &str) -> StepRecorder {
        let project = project_of(file, agent_block_id);
        StepRecorder {
            file: file.clone(),
            tracker: project
                .as_ref()
                .filter(|(_, root)| root.is_dir())
                .map(|(d, root)| FolderTracker::open(file, d, root)),
            dir_block_id: project.map(|(d, _)| d),
        }
    }

    /// Checkpoint at the start of a step.
    pub fn begin(&mut self) -> Result<StepStart, EngineError> {
        let manifest = match &mut self.tracker {
            Some(t) => Some(t.scan()?.0.clone()),
            None => None,
        };
        Ok(StepStart {
            seq: self.file.last_seq(),
            manifest,
        })
    }

    /// Checkpoint at the end of a step: the entry to record (`agent.session` payload fields
    /// without the session id).
    pub fn end(&mut self, start: StepStart, step: u64) -> Result<Value, EngineError> {
        let files = match (&mut self.tracker, &start.manifest) {
            (Some(t), Some(before)) => {
                let (after, _) = t.scan()?;
                scan::diff(before, after)
            }
            _ => Vec::new(),
        };
        Ok(json!({
            "entry": "step",
            "step": step,
            "doc_from": start.seq,
            "doc_to": self.file.last_seq(),
            "directory": self.dir_block_id,
            "root": self.tracker.as_ref().map(|t| t.root().display().to_string()),
            "files": files,
        }))
    }

    /// After the step's record is committed: its bytes are durable, so the cache may name them.
    pub fn committed(&self) {
        if let Some(t) = &self.tracker {
            t.save();
        }
    }
}

/// A recorded change: a step, an undo or a redo.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Change {
    pub doc_from: u64,
    pub doc_to: u64,
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub files: Vec<FileChange>,
}

/// One step of a session as `agent steps` shows it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    pub step: u64,
    /// `done`, or `undone` (by an undo not redone).
    pub status: String,
    pub doc_from: u64,
    pub doc_to: u64,
    /// Blocks whose events fall in the step (by id).
    pub events: u64,
    pub files_created: Vec<String>,
    pub files_modified: Vec<String>,
    pub files_deleted: Vec<String>,
    /// The tools the step called.
    pub tools: Vec<String>,
    /// Files the step changed that the agent held no grant for (what Claude Code's `Bash`
    /// did, judged after the fact; see `crate::hooks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_grants: Vec<String>,
}

/// A session's records, as read from the log.
#[derive(Debug, Default)]
pub struct History {
    pub agent_block_id: String,
    /// Step number → its change.
    pub steps: BTreeMap<u64, Change>,
    /// Undos in log order: id, steps, change.
    pub undos: Vec<(String, Vec<u64>, Change)>,
    /// Undo ids that were redone (the redo's change).
    pub redos: BTreeMap<String, Change>,
    /// Undo ids after which a new step was taken: like an editor's, they cannot be redone.
    superseded: BTreeSet<String>,
    tools: BTreeMap<u64, Vec<String>>,
    outside: BTreeMap<u64, Vec<String>>,
}

impl History {
    /// Reads session `session_id`'s records (any agent); refused when no agent has it.
    pub fn load(file: &FileHandle, session_id: &str) -> Result<History, EngineError> {
        let mut h = History::default();
        let mut found = false;
        let mut last_step = 0u64;
        for e in file.events(1)? {
            if e.cap_id() != "agent.session"
                || e.value.get("session_id").and_then(Value::as_str) != Some(session_id)
            {
                continue;
            }
            found = true;
            h.agent_block_id = e.entity.clone();
            let change = || serde_json::from_value::<Change>(e.value.clone()).ok();
            match e.value.get("entry").and_then(Value::as_str) {
                Some("step") => {
                    let n = e.value.get("step").and_then(Value::as_u64).unwrap_or(0);
                    if let Some(c) = change() {
                        h.steps.insert(n, c);
                        last_step = n;
                        // The tools a step names itself (an MCP server's steps).
                        if e.value.get("tools").is_some_and(Value::is_array) {
                            h.tools.insert(n, str_list(&e.value, "tools"));
                        }
                        let outside = str_list(&e.value, "outside_grants");
                        if !outside.is_empty() {
                            h.outside.insert(n, outside);
                        }
                        for (id, _, _) in &h.undos {
                            h.superseded.insert(id.clone());
                        }
                    }
                }
                Some("undo") => {
                    let id = str_field(&e.value, "undo_id");
                    let steps: Vec<u64> = e
                        .value
                        .get("steps")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_u64).collect())
                        .unwrap_or_default();
                    if let Some(c) = change() {
                        h.undos.push((id, steps, c));
                    }
                }
                Some("redo") => {
                    let id = str_field(&e.value, "undo_id");
                    if let Some(c) = change() {
                        h.redos.insert(id, c);
                    }
                }
                Some("message") => {
                    // The tools an assistant message calls belong to the step after it.
                    if let Some(content) = e
                        .value
                        .get("message")
                        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                        .and_then(|m| m.get("content"))
                        .and_then(Value::as_array)
                    {
                        let names: Vec<String> = content
                            .iter()
                            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                            .filter_map(|b| b.get("name").and_then(Value::as_str))
                            .map(str::to_owned)
                            .collect();
                        if !names.is_empty() {
                            h.tools.insert(last_step + 1, names);
                        }
                    }
                }
                _ => {}
            }
        }
        if !found {
            return Err(EngineError::rejected(format!(
                "no agent session '{session_id}' in this document; see `elfiee agent sessions AGENT`"
            )));
        }
        Ok(h)
    }

    /// The step number the next step gets.
    pub fn next_step(&self) -> u64 {
        self.steps.keys().next_back().map_or(1, |n| n + 1)
    }

    /// Steps undone now (by an undo that was not redone).
    pub fn undone(&self) -> BTreeSet<u64> {
        let mut out = BTreeSet::new();
        for (id, steps, _) in &self.undos {
            if self.redos.contains_key(id) {
                continue;
            }
            out.extend(steps.iter().copied());
        }
        out
    }

    /// The newest undo not redone yet, unless a step was taken after it.
    pub fn redoable(&self) -> Option<&(String, Vec<u64>, Change)> {
        self.undos
            .iter()
            .rev()
            .find(|(id, _, _)| !self.redos.contains_key(id))
            .filter(|(id, _, _)| !self.superseded.contains(id))
    }

    /// The steps, oldest first, with their status and what they changed.
    pub fn infos(&self, file: &FileHandle) -> Vec<StepInfo> {
        let undone = self.undone();
        let events = file.events(1).unwrap_or_default();
        self.steps
            .iter()
            .map(|(n, c)| {
                let pick = |f: fn(&FileChange) -> bool| {
                    c.files
                        .iter()
                        .filter(|x| f(x))
                        .map(|x| x.path.clone())
                        .collect::<Vec<_>>()
                };
                StepInfo {
                    step: *n,
                    status: if undone.contains(n) { "undone" } else { "done" }.into(),
                    doc_from: c.doc_from,
                    doc_to: c.doc_to,
                    events: events
                        .iter()
                        .filter(|e| e.seq > c.doc_from && e.seq <= c.doc_to)
                        .filter(|e| e.cap_id() != "agent.session")
                        .count() as u64,
                    files_created: pick(|x| x.before.is_none()),
                    files_modified: pick(|x| x.before.is_some() && x.after.is_some()),
                    files_deleted: pick(|x| x.after.is_none()),
                    tools: self.tools.get(n).cloned().unwrap_or_default(),
                    outside_grants: self.outside.get(n).cloned().unwrap_or_default(),
                }
            })
            .collect()
    }
}

/// Which steps an undo takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// The newest `n` steps not undone yet.
    Last(u64),
    /// Every step after this one (the document and folder as after it).
    To(u64),
}

/// What an undo or redo did (or would have done, when refused).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UndoReport {
    pub session_id: String,
    /// The steps taken back (undo) or brought back (redo).
    pub steps: Vec<u64>,
    pub blocks_restored: Vec<String>,
    pub blocks_removed: Vec<String>,
    pub files_restored: Vec<String>,
    pub files_removed: Vec<String>,
    /// Blocks and files changed since by someone else, overwritten because of `force`.
    pub forced: Vec<String>,
    /// For an editor's own edits ([`undo_edits`]): the commands taken back or brought back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
}

/// The net change of several changes, oldest first: per block, its image before the first
/// and after the last; per file, the version before the first and after the last.
struct Net {
    /// block id → (before, expected now)
    blocks: BTreeMap<String, (Option<Block>, Option<Block>)>,
    /// path → (before, expected now)
    files: BTreeMap<String, (Option<Version>, Option<Version>)>,
    root: Option<PathBuf>,
}

async fn net_of(file: &FileHandle, changes: &[&Change]) -> Result<Net, EngineError> {
    let events = file.events(1)?;
    let mut blocks: BTreeMap<String, (Option<Block>, Option<Block>)> = BTreeMap::new();
    let mut files: BTreeMap<String, (Option<Version>, Option<Version>)> = BTreeMap::new();
    let mut root = None;
    for c in changes {
        let touched: BTreeSet<&str> = events
            .iter()
            .filter(|e| e.seq > c.doc_from && e.seq <= c.doc_to)
            .map(|e| e.entity.as_str())
            .collect();
        if !touched.is_empty() {
            let before = file.state_at(c.doc_from).await?;
            let after = file.state_at(c.doc_to).await?;
            for id in touched {
                let (a, b) = (before.block(id).cloned(), after.block(id).cloned());
                if a == b && !blocks.contains_key(id) {
                    continue;
                }
                blocks
                    .entry(id.to_owned())
                    .and_modify(|e| e.1 = b.clone())
                    .or_insert((a, b));
            }
        }
        for f in &c.files {
            files
                .entry(f.path.clone())
                .and_modify(|e| e.1 = f.after.clone())
                .or_insert((f.before.clone(), f.after.clone()));
        }
        if let Some(r) = &c.root {
            root = Some(PathBuf::from(r));
        }
    }
    blocks.retain(|_, (a, b)| a != b);
    files.retain(|_, (a, b)| a != b);
    Ok(Net {
        blocks,
        files,
        root,
    })
}

/// A regular file's bytes and mode.
type Kept = (Vec<u8>, u32);

/// The version a file on disk holds now (`None`: absent), and its bytes and mode when it is a
/// regular file (to put back if a later write fails).
fn on_disk(path: &Path) -> Result<(Option<Version>, Option<Kept>), EngineError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => {
            let bytes = std::fs::read(path)
                .map_err(|e| storage(format!("cannot read {}: {e}", path.display())))?;
            let mode = m.mode() & 0o7777;
            let version = Version {
                hash: blake3::hash(&bytes).to_hex().to_string(),
                len: bytes.len() as u64,
                mode,
            };
            Ok((Some(version), Some((bytes, mode))))
        }
        Ok(_) => Ok((
            Some(Version {
                hash: "not a regular file".into(),
                len: 0,
                mode: 0,
            }),
            None,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((None, None)),
        Err(e) => Err(storage(format!("cannot read {}: {e}", path.display()))),
    }
}

/// Writes `bytes` with permission bits `mode` at `path` (or removes it for `None`),
/// atomically: a temporary file renamed over it.
fn put_file(path: &Path, content: Option<&(Vec<u8>, u32)>) -> Result<(), EngineError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |e: std::io::Error| storage(format!("cannot write {}: {e}", path.display()));
    match content {
        None => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(e)),
        },
        Some((bytes, mode)) => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io)?;
            }
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let tmp = path.with_file_name(format!(".{name}.elfiee-undo.tmp"));
            std::fs::write(&tmp, bytes).map_err(io)?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(*mode)).map_err(io)?;
            std::fs::rename(&tmp, path).map_err(io)
        }
    }
}

/// Reverts `changes` (oldest first) on both sides, as `editor`; refused (nothing written)
/// when a block or file changed since, unless `force`. Returns the report and the record
/// fields of the new change.
async fn revert(
    file: &FileHandle,
    editor: &str,
    changes: &[&Change],
    force: bool,
    reason: Value,
) -> Result<(UndoReport, Change), EngineError> {
    let net = net_of(file, changes).await?;
    let mut conflicts = Vec::new();
    let mut forced = Vec::new();
    let now = file.state();
    for (id, (_, expected)) in &net.blocks {
        let current = now.block(id).cloned();
        if &current != expected {
            let name = current
                .as_ref()
                .or(expected.as_ref())
                .map(|b| b.name.clone())
                .unwrap_or_default();
            let what = format!("block '{name}' ({id})");
            if force {
                forced.push(what);
            } else {
                conflicts.push(what);
            }
        }
    }
    let root = net.root.clone();
    if !net.files.is_empty() && root.as_ref().is_none_or(|r| !r.is_dir()) {
        return Err(EngineError::rejected(format!(
            "the project folder {} is not there; nothing was undone",
            root.map(|r| r.display().to_string()).unwrap_or_default()
        )));
    }
    let root = root.unwrap_or_default();
    let mut current_files = BTreeMap::new();
    let mut now_on_disk: BTreeMap<&String, Option<(Vec<u8>, u32)>> = BTreeMap::new();
    for (path, (_, expected)) in &net.files {
        let (current, bytes) = on_disk(&root.join(path))?;
        now_on_disk.insert(path, bytes);
        if &current != expected {
            if force {
                forced.push(path.clone());
            } else {
                conflicts.push(path.clone());
            }
        }
        current_files.insert(path.clone(), current);
    }
    if !conflicts.is_empty() {
        return Err(EngineError::rejected(format!(
            "changed since by someone else, so nothing was undone: {}; look at them, or run again with --force to overwrite them",
            conflicts.join(", ")
        )));
    }
    // Everything the files need, read before anything is written: the versions to bring back
    // (a file too large to keep was tracked by hash only: refused here, nothing changed)
    // (what each path holds now was read above, to put back if a later write fails).
    let mut wanted: BTreeMap<&String, Option<(Vec<u8>, u32)>> = BTreeMap::new();
    for (path, (before, _)) in &net.files {
        let bytes = match before {
            Some(v) => Some((
                file.bytes(&content_ref(v)?).map_err(|e| {
                    EngineError::rejected(format!(
                        "the earlier version of {path} ({} bytes) was not kept ({e}); nothing was undone",
                        v.len
                    ))
                })?,
                v.mode,
            )),
            None => None,
        };
        wanted.insert(path, bytes);
    }
    // Files first, each atomically; if one fails, the ones written go back.
    let mut written: Vec<&String> = Vec::new();
    let mut report = UndoReport {
        forced,
        ..UndoReport::default()
    };
    for (path, (before, _)) in &net.files {
        if let Err(e) = put_file(&root.join(path), wanted[path].as_ref()) {
            for p in written {
                let _ = put_file(&root.join(p), now_on_disk[p].as_ref());
            }
            return Err(e);
        }
        written.push(path);
        match before {
            Some(_) => report.files_restored.push(path.clone()),
            None => report.files_removed.push(path.clone()),
        }
    }
    let blocks: Vec<Value> = net
        .blocks
        .iter()
        .map(|(id, (before, _))| json!({"block_id": id, "block": before}))
        .collect();
    let (doc_from, doc_to) = if blocks.is_empty() {
        (file.last_seq(), file.last_seq())
    } else {
        let result = file
            .submit(Command::new(
                editor,
                "core.restore",
                None,
                json!({"blocks": blocks, "reason": reason}),
            ))
            .await;
        match result {
            Ok(ev) => (
                ev.first().map_or(file.last_seq(), |e| e.seq - 1),
                ev.last().map_or(file.last_seq(), |e| e.seq),
            ),
            Err(e) => {
                for p in written {
                    let _ = put_file(&root.join(p), now_on_disk[p].as_ref());
                }
                return Err(e);
            }
        }
    };
    for (id, (before, _)) in &net.blocks {
        match before {
            Some(_) => report.blocks_restored.push(id.clone()),
            None => report.blocks_removed.push(id.clone()),
        }
    }
    let change = Change {
        doc_from,
        doc_to,
        root: net.root.map(|r| r.display().to_string()),
        files: net
            .files
            .into_iter()
            .map(|(path, (before, _))| FileChange {
                before: current_files.remove(&path).flatten(),
                after: before,
                path,
            })
            .collect(),
    };
    Ok((report, change))
}

async fn record(
    file: &FileHandle,
    editor: &str,
    agent: &str,
    mut entry: Value,
    change: &Change,
) -> Result<(), EngineError> {
    if let (Value::Object(e), Ok(Value::Object(c))) = (&mut entry, serde_json::to_value(change)) {
        e.extend(c);
    }
    file.submit(Command::new(editor, "agent.session", Some(agent), entry))
        .await
        .map(|_| ())
}

/// Undoes steps of agent session `session_id` as `editor` (see the module docs).
pub async fn undo(
    file: &FileHandle,
    editor: &str,
    session_id: &str,
    selection: Selection,
    force: bool,
) -> Result<UndoReport, EngineError> {
    let h = History::load(file, session_id)?;
    let undone = h.undone();
    let done: Vec<u64> = h
        .steps
        .keys()
        .copied()
        .filter(|n| !undone.contains(n))
        .collect();
    let picked: Vec<u64> = match selection {
        Selection::Last(0) => return Err(EngineError::rejected("--steps must be at least 1")),
        Selection::Last(n) => done[done.len().saturating_sub(n as usize)..].to_vec(),
        Selection::To(s) => {
            if !h.steps.contains_key(&s) && s != 0 {
                return Err(EngineError::rejected(format!(
                    "session '{session_id}' has no step {s}; see `elfiee agent steps {session_id}`"
                )));
            }
            done.iter().copied().filter(|n| *n > s).collect()
        }
    };
    if picked.is_empty() {
        return Err(EngineError::rejected(format!(
            "nothing to undo in session '{session_id}': no step is done after that point; see `elfiee agent steps {session_id}`"
        )));
    }
    let changes: Vec<&Change> = picked.iter().map(|n| &h.steps[n]).collect();
    let undo_id = uuid::Uuid::new_v4().to_string();
    let reason = json!({"undo": {"session_id": session_id, "steps": picked, "undo_id": undo_id}});
    let (mut report, change) = revert(file, editor, &changes, force, reason).await?;
    record(
        file,
        editor,
        &h.agent_block_id,
        json!({"session_id": session_id, "entry": "undo", "undo_id": undo_id, "steps": picked}),
        &change,
    )
    .await?;
    report.session_id = session_id.to_owned();
    report.steps = picked;
    Ok(report)
}

/// Redoes the newest undo of session `session_id` not redone yet (the undo of that undo).
pub async fn redo(
    file: &FileHandle,
    editor: &str,
    session_id: &str,
    force: bool,
) -> Result<UndoReport, EngineError> {
    let h = History::load(file, session_id)?;
    let Some((undo_id, steps, change)) = h.redoable() else {
        return Err(EngineError::rejected(format!(
            "nothing to redo in session '{session_id}' (no undo since its last step); see `elfiee agent steps {session_id}`"
        )));
    };
    let reason = json!({"redo": {"session_id": session_id, "steps": steps, "undo_id": undo_id}});
    let (mut report, new) = revert(file, editor, &[change], force, reason).await?;
    record(
        file,
        editor,
        &h.agent_block_id,
        json!({"session_id": session_id, "entry": "redo", "undo_id": undo_id, "steps": steps}),
        &new,
    )
    .await?;
    report.session_id = session_id.to_owned();
    report.steps = steps.clone();
    Ok(report)
}
