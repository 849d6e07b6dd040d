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

mod cache;
mod edits;
mod put_back;
mod record;
mod revert;
pub mod scan;
pub mod watch;

pub use edits::{redo_edits, undo_edits};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Command, EXTERNAL_ROOT_PATH};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use record::{content_ref, storage};
pub use record::{Change, FolderChange, UndoReport, MAX_KEPT_BYTES};
pub use scan::{FileChange, FileState, Manifest, ScanStats, Version};

use crate::payload::{str_field, str_list};

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

/// The bytes of a file version kept in the content store (`None`: not kept, e.g. over
/// [`MAX_KEPT_BYTES`], or unreadable).
pub fn stored_bytes(file: &FileHandle, v: &Version) -> Option<Vec<u8>> {
    file.bytes(&content_ref(v).ok()?).ok()
}

/// What a scan does with the bytes of each file it hashed: keeps them in `file`'s content
/// store (durable with the next commit), but for files over [`MAX_KEPT_BYTES`].
fn keeper(file: &FileHandle) -> impl FnMut(&str, &FileState, &[u8]) -> Result<(), String> + '_ {
    move |_: &str, st: &FileState, bytes: &[u8]| {
        if st.len > MAX_KEPT_BYTES {
            // Tracked by hash only (the scan hands no bytes): an undo that needs them says so.
            return Ok(());
        }
        let r = file.put_bytes(bytes).map_err(|e| e.to_string())?;
        if r.hash.to_hex() != st.hash {
            return Err("the content store hashed a file differently".to_owned());
        }
        Ok(())
    }
}

/// Tracks one project folder between checkpoints: the last manifest, kept in a cache file
/// inside the `.elf` (a cache: losing it costs one full rescan, never a wrong answer).
pub struct FolderTracker {
    file: FileHandle,
    root: PathBuf,
    /// The cache files, and what of `last` they do not hold yet.
    cache: cache::Cache,
    last: Manifest,
    /// File events since the last scan (after the first walk of this process).
    watch: Option<watch::FolderWatch>,
    /// Whether `last` was made by a walk or a rescan in this process (a cache loaded from
    /// disk may be older than the watch: the first scan walks).
    fresh: bool,
    /// Paths whose changes were given back ([`FolderTracker::give_back`]): looked at again by
    /// the next scan whatever the file events say.
    given_back: BTreeSet<PathBuf>,
}

impl FolderTracker {
    /// Loads the cache of `dir_block_id`'s folder `root`.
    pub fn open(file: &FileHandle, dir_block_id: &str, root: &Path) -> FolderTracker {
        let (cache, last) = cache::Cache::load(
            file.path()
                .join("cache")
                .join(format!("checkpoint-{dir_block_id}.bin")),
        );
        FolderTracker {
            file: file.clone(),
            root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
            cache,
            last,
            watch: None,
            fresh: false,
            given_back: BTreeSet::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the tracker has a manifest to compare with (a cache, or a scan of this
    /// process); without one, a scan cannot tell what changed.
    pub fn has_baseline(&self) -> bool {
        self.last.scanned_at_ns != 0
    }

    /// Rescans the folder; the bytes of every file not seen before go to the content store
    /// (durable with the next commit). Returns the manifest (the tracker's own: a caller that
    /// keeps it clones it) and what the scan cost.
    pub fn scan(&mut self) -> Result<(&Manifest, ScanStats), EngineError> {
        let (m, stats) = self.scan_new()?;
        self.last = m;
        self.cache.replaced();
        Ok((&self.last, stats))
    }

    /// Rescans the folder (as [`FolderTracker::scan`]) and returns what changed since the
    /// previous scan, without copying the manifest (a hook's step on a large project): with
    /// the folder's file events, only the paths they name are looked at and changed in place.
    pub fn scan_changes(&mut self) -> Result<(Vec<FileChange>, ScanStats), EngineError> {
        let given_back = std::mem::take(&mut self.given_back);
        if let Some(mut paths) = self.watched_paths() {
            paths.extend(given_back);
            let keep = keeper(&self.file);
            let root = &self.root;
            let found = scan::rescan_paths_in_place(root, &mut self.last, &paths, keep)
                .map_err(|e| storage(format!("checkpoint of {}: {e}", root.display())))?;
            if let Some((changes, stats)) = found {
                self.cache.changed(&self.last, &changes);
                return Ok((changes, stats));
            }
        }
        let (m, stats) = self.walk_new()?;
        let changes = scan::diff(&self.last, &m);
        self.last = m;
        self.cache.replaced();
        Ok((changes, stats))
    }

    /// Takes `changes` (from the last [`FolderTracker::scan_changes`]) back out of the
    /// baseline: the next scan finds them again (another session's step records them). Each
    /// file's entry goes back to its version before, with no file times, so it is read again.
    pub fn give_back(&mut self, changes: &[FileChange]) {
        if changes.is_empty() {
            return;
        }
        for c in changes {
            match &c.before {
                None => {
                    self.last.files.remove(&c.path);
                }
                Some(v) => {
                    self.last.files.insert(
                        c.path.clone(),
                        scan::FileState {
                            hash: v.hash.clone(),
                            len: v.len,
                            mode: v.mode,
                            mtime_ns: 0,
                            ctime_ns: 0,
                            ino: 0,
                        },
                    );
                }
            }
            self.given_back.insert(self.root.join(&c.path));
        }
        self.cache.changed(&self.last, changes);
    }

    /// The manifest of the folder now (the tracker's `last` is the baseline it trusts).
    fn scan_new(&mut self) -> Result<(Manifest, ScanStats), EngineError> {
        if let Some(paths) = self.watched_paths() {
            let found = scan::rescan_paths(&self.root, &self.last, &paths, keeper(&self.file))
                .map_err(|e| storage(format!("checkpoint of {}: {e}", self.root.display())))?;
            if let Some(found) = found {
                return Ok(found);
            }
        }
        self.walk_new()
    }

    /// The paths the folder's file events named since the last scan (`None`: no events to
    /// trust yet, or they do not say enough: walk).
    fn watched_paths(&self) -> Option<BTreeSet<PathBuf>> {
        let (Some(w), true) = (&self.watch, self.fresh) else {
            return None;
        };
        match w.changes() {
            watch::Changes::Paths(paths) => Some(paths),
            watch::Changes::Walk(why) => {
                tracing::debug!(why, "checkpoint walks the folder");
                None
            }
        }
    }

    /// A walk of the whole folder (trusting the cache), watching each folder it comes to.
    fn walk_new(&mut self) -> Result<(Manifest, ScanStats), EngineError> {
        let keep = keeper(&self.file);
        let failed = |e: String| storage(format!("checkpoint of {}: {e}", self.root.display()));
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

    /// Saves the last manifest as the cache (after the commit that made its bytes durable):
    /// after rescans that changed a few files, only those (a journal beside the manifest).
    pub fn save(&self) {
        self.cache.save(&self.last);
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
        let mut files = match (&mut self.tracker, &start.manifest) {
            (Some(t), Some(before)) => {
                let (after, _) = t.scan()?;
                scan::diff(before, after)
            }
            _ => Vec::new(),
        };
        // What an export of the directory wrote during the step is the disk following the
        // document: it belongs to the step that changed those blocks (an undo of that step
        // takes the file with the block), not to this one.
        let exported = self.exported_since(start.seq);
        files.retain(|f| match exported.get(&f.path) {
            Some(h) => f.after.as_ref().map(|v| &v.hash) != h.as_ref(),
            None => true,
        });
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

    /// The files exports of the step's directory wrote since seq `from` (path → the hash
    /// written) or removed (path → `None`).
    fn exported_since(&self, from: u64) -> BTreeMap<String, Option<String>> {
        let mut out = BTreeMap::new();
        let Some(dir) = &self.dir_block_id else {
            return out;
        };
        let Ok(events) = self.file.events(from + 1) else {
            return out;
        };
        for e in events
            .iter()
            .filter(|e| e.entity == *dir && e.cap_id() == "directory.export_outcome")
        {
            for p in str_list(&e.value, "written") {
                let hash = e.value.get("disk").and_then(|d| d.get(&p));
                if let Some(h) = hash.and_then(Value::as_str) {
                    out.insert(p, Some(h.to_owned()));
                }
            }
            for p in str_list(&e.value, "removed") {
                out.insert(p, None);
            }
        }
        out
    }

    /// After the step's record is committed: its bytes are durable, so the cache may name them.
    pub fn committed(&self) {
        if let Some(t) = &self.tracker {
            t.save();
        }
    }
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
        // The path of every file block of a directory (a write of one changes that file).
        let entry_paths: BTreeMap<String, String> = file.with_state(|s| {
            s.blocks
                .values()
                .filter(|b| b.block_type == "directory")
                .flat_map(|d| {
                    elfiee_capabilities::builtin::directory_list::<elfiee_model::DirectoryEntry>(
                        d, "entries",
                    )
                })
                .map(|e| (e.block_id, e.path))
                .collect()
        });
        self.steps
            .iter()
            .map(|(n, c)| {
                let pick = |f: fn(&FileChange) -> bool| {
                    c.folders()
                        .flat_map(|(_, files)| files.iter())
                        .filter(|x| f(x))
                        .map(|x| x.path.clone())
                        .collect::<Vec<_>>()
                };
                let range: Vec<&elfiee_model::Event> = events
                    .iter()
                    .filter(|e| e.seq > c.doc_from && e.seq <= c.doc_to)
                    .collect();
                let mut created = pick(|x| x.before.is_none());
                let mut modified = pick(|x| x.before.is_some() && x.after.is_some());
                let mut deleted = pick(|x| x.after.is_none());
                // The files the step made, changed and removed in the document's directories
                // (a file it made is its own even when a later export writes it to disk).
                let (made, changed, gone) = document_files(&range, &entry_paths);
                let recorded: BTreeSet<String> = created
                    .iter()
                    .chain(&modified)
                    .chain(&deleted)
                    .cloned()
                    .collect();
                for (list, more) in [
                    (&mut created, made),
                    (&mut modified, changed),
                    (&mut deleted, gone),
                ] {
                    for p in more {
                        if !recorded.contains(&p) && !list.contains(&p) {
                            list.push(p);
                        }
                    }
                }
                StepInfo {
                    step: *n,
                    status: if undone.contains(n) { "undone" } else { "done" }.into(),
                    doc_from: c.doc_from,
                    doc_to: c.doc_to,
                    events: range
                        .iter()
                        .filter(|e| e.cap_id() != "agent.session")
                        .count() as u64,
                    files_created: created,
                    files_modified: modified,
                    files_deleted: deleted,
                    tools: self.tools.get(n).cloned().unwrap_or_default(),
                    outside_grants: self.outside.get(n).cloned().unwrap_or_default(),
                }
            })
            .collect()
    }
}

/// The files a range of events made, changed and removed in the document's directories:
/// `directory.add`, `.move` and `.remove`, and writes of a directory's file blocks
/// (`entry_paths`: block id → path) made before the range.
fn document_files(
    range: &[&elfiee_model::Event],
    entry_paths: &BTreeMap<String, String>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut made, mut changed, mut gone) = (Vec::new(), Vec::new(), Vec::new());
    let new_blocks: BTreeSet<&str> = range
        .iter()
        .filter(|e| e.cap_id() == "core.create")
        .map(|e| e.entity.as_str())
        .collect();
    let path = |e: &elfiee_model::Event, k: &str| {
        e.value.get(k).and_then(Value::as_str).map(str::to_owned)
    };
    for e in range {
        match e.cap_id() {
            "directory.add" => made.extend(path(e, "path")),
            "directory.remove" => gone.extend(path(e, "path")),
            "directory.move" => {
                gone.extend(path(e, "from"));
                made.extend(path(e, "to"));
            }
            cap if cap.ends_with(".write") && !new_blocks.contains(e.entity.as_str()) => {
                changed.extend(entry_paths.get(&e.entity).cloned());
            }
            _ => {}
        }
    }
    for list in [&mut made, &mut changed, &mut gone] {
        let mut seen = BTreeSet::new();
        list.retain(|p| seen.insert(p.clone()));
    }
    (made, changed, gone)
}

/// Which steps an undo takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// The newest `n` steps not undone yet.
    Last(u64),
    /// Every step after this one (the document and folder as after it).
    To(u64),
}

/// Reverts `changes` on both sides, the document's blocks and the recorded files only (a
/// person's own edits); agent steps use [`revert::revert`] with `follow`.
async fn revert(
    file: &FileHandle,
    editor: &str,
    changes: &[&Change],
    force: bool,
    reason: Value,
) -> Result<(UndoReport, Change), EngineError> {
    revert::revert(file, editor, changes, force, reason, false).await
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
    let (mut report, change) = revert::revert(file, editor, &changes, force, reason, true).await?;
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
    let (mut report, new) = revert::revert(file, editor, &[change], force, reason, true).await?;
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
