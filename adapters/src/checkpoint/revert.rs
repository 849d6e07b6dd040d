//! Reverting recorded changes on both sides: the blocks back to their images before the
//! changes (one `core.restore`), the files back byte for byte.
//!
//! For agent steps (`follow`), the files of a directory block follow the document: a step that
//! changed a file's block (or made, moved or removed the file in the directory) owns that file
//! on disk too, whoever exported it later (the agent's shell, the user's `terminal run
//! --export`, `dir export`). So the undo sets every such file to what the step found: the
//! block's text before the step when the file was on disk then, no file when it was not — if
//! the disk holds what the step left (it was exported since) — and leaves it alone when the
//! disk still holds what it held when the step ended (not exported). Anything else on disk is a
//! change by someone else: named, and overwritten only with `force`.
//!
//! An export changes the disk, not the directory's content: the directory block's record of
//! what the disk holds (each entry's `disk` hash, the pending removals, `last_export`, its
//! `updated_at`) is never a conflict, and the restored directory keeps that record for the
//! files the undo does not touch and takes the hashes of what it wrote for the others, so
//! `dir status` is clean after an undo of exported steps.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use elfiee_capabilities::builtin::entry_path;
use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Block, Command, EXTERNAL_ROOT_PATH};
use elfiee_projections::State;
use serde_json::{json, Value};

use super::put_back::{on_disk, put_file, Kept};
use super::record::{content_ref, Change, FolderChange, UndoReport, MAX_KEPT_BYTES};
use super::scan::{FileChange, Version};

/// A path in a project folder: (root, relative path).
type Place = (String, String);

/// The links (relation, target) some changes made or removed on one block: there before the
/// first of them that touched it, there after the last.
type LinkNet = BTreeMap<(String, String), (bool, bool)>;

/// The net change of several changes, oldest first: per block, its image before the first
/// and after the last; per file, the version before the first and after the last.
struct Net {
    /// block id → (before, expected now)
    blocks: BTreeMap<String, (Option<Block>, Option<Block>)>,
    /// (root, path) → (before, expected now)
    files: BTreeMap<Place, (Option<Version>, Option<Version>)>,
    /// Directory id → the paths the changes themselves touched there (an entry made, moved or
    /// removed, or its block changed, inside one of their ranges). A directory a change
    /// touched is here even with no path.
    dirs: BTreeMap<String, BTreeMap<String, PathNet>>,
    /// Block id → the links (relation, target) the changes themselves made or removed there:
    /// (there before the first of them that touched it, there after the last).
    links: BTreeMap<String, LinkNet>,
}

/// A path of a directory the changes touched: its entry before the first of them that
/// touched it and after the last.
#[derive(Clone)]
struct PathNet {
    before: Option<Value>,
    after: Option<Value>,
    /// The disk hash of a pending removal at the path before (the entry was removed then).
    before_pending: Option<String>,
    /// What the directory recorded the disk to hold there after the last (entry or pending
    /// removal).
    end_disk: Option<String>,
    /// Whether one of the changes changed the text there (made, removed or wrote the file),
    /// even if a later one changed it back.
    text_changed: bool,
}

fn pending_disk(b: Option<&Block>, path: &str) -> Option<String> {
    b.and_then(|b| b.contents.get("pending_removals"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|x| entry_path(x) == path)
        .and_then(|x| x.get("disk"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The directory paths one change touched, folded into `dirs` (see [`Net::dirs`]).
fn touched_paths(
    file: &FileHandle,
    before: &State,
    after: &State,
    touched: &BTreeSet<&str>,
    dirs: &mut BTreeMap<String, BTreeMap<String, PathNet>>,
) {
    let text_in = |st: &State, e: Option<&Value>| {
        block_of(e).map(|b| st.block(b).and_then(|b| text_of(file, b)))
    };
    let ids: BTreeSet<&String> = before
        .blocks
        .values()
        .chain(after.blocks.values())
        .filter(|b| b.block_type == "directory")
        .map(|b| &b.block_id)
        .collect();
    for id in ids {
        let (db, da) = (before.block(id), after.block(id));
        let (eb, ea) = (
            db.map(entries_of).unwrap_or_default(),
            da.map(entries_of).unwrap_or_default(),
        );
        let block_touched = |e: Option<&Value>| block_of(e).is_some_and(|b| touched.contains(b));
        let dir_touched = touched.contains(id.as_str());
        if !dir_touched
            && !eb
                .values()
                .chain(ea.values())
                .any(|e| block_touched(Some(e)))
        {
            continue;
        }
        let paths = dirs.entry(id.clone()).or_default();
        let all: BTreeSet<&String> = eb.keys().chain(ea.keys()).collect();
        for p in all {
            let (x, y) = (eb.get(p), ea.get(p));
            if block_of(x) == block_of(y) && !block_touched(x) && !block_touched(y) {
                continue;
            }
            let end_disk = match y {
                Some(e) => disk_of(Some(e)),
                None => pending_disk(da, p),
            };
            let text_changed = text_in(before, x) != text_in(after, y);
            paths
                .entry(p.clone())
                .and_modify(|n| {
                    n.after = y.cloned();
                    n.end_disk = end_disk.clone();
                    n.text_changed |= text_changed;
                })
                .or_insert_with(|| PathNet {
                    before: x.cloned(),
                    after: y.cloned(),
                    before_pending: pending_disk(db, p),
                    end_disk,
                    text_changed,
                });
        }
    }
}

async fn net_of(file: &FileHandle, changes: &[&Change]) -> Result<Net, EngineError> {
    let events = file.events(1)?;
    let mut blocks: BTreeMap<String, (Option<Block>, Option<Block>)> = BTreeMap::new();
    let mut files: BTreeMap<Place, (Option<Version>, Option<Version>)> = BTreeMap::new();
    let mut dirs = BTreeMap::new();
    let mut links: BTreeMap<String, LinkNet> = BTreeMap::new();
    for c in changes {
        let touched: BTreeSet<&str> = events
            .iter()
            .filter(|e| e.seq > c.doc_from && e.seq <= c.doc_to)
            .map(|e| e.entity.as_str())
            .collect();
        if !touched.is_empty() {
            let before = file.state_at(c.doc_from).await?;
            let after = file.state_at(c.doc_to).await?;
            touched_paths(file, &before, &after, &touched, &mut dirs);
            for id in touched {
                let (a, b) = (before.block(id).cloned(), after.block(id).cloned());
                for (rel, to) in all_links([a.as_ref(), b.as_ref(), None]) {
                    let (was, now) = (has_link(a.as_ref(), rel, to), has_link(b.as_ref(), rel, to));
                    if was != now {
                        links
                            .entry(id.to_owned())
                            .or_default()
                            .entry((rel.to_owned(), to.to_owned()))
                            .and_modify(|e| e.1 = now)
                            .or_insert((was, now));
                    }
                }
                if a == b && !blocks.contains_key(id) {
                    continue;
                }
                blocks
                    .entry(id.to_owned())
                    .and_modify(|e| e.1 = b.clone())
                    .or_insert((a, b));
            }
        }
        for (root, list) in c.folders() {
            for f in list {
                files
                    .entry((canon(root), f.path.clone()))
                    .and_modify(|e| e.1 = f.after.clone())
                    .or_insert((f.before.clone(), f.after.clone()));
            }
        }
    }
    blocks.retain(|_, (a, b)| a != b);
    files.retain(|_, (a, b)| a != b);
    Ok(Net {
        blocks,
        files,
        dirs,
        links,
    })
}

/// A folder's path as one spelling (symlinks resolved), so a path recorded by a step and the
/// same path of a directory block are one place.
fn canon(root: &str) -> String {
    std::fs::canonicalize(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| root.to_owned())
}

fn hash_of(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

/// The text a file block puts on disk (what an export writes), `None` when its body cannot
/// be read.
fn text_of(file: &FileHandle, b: &Block) -> Option<String> {
    let b = file.resolve(b).ok()?;
    Some(
        b.contents
            .get("markdown")
            .or_else(|| b.contents.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    )
}

fn root_of(b: &Block) -> Option<String> {
    b.metadata
        .custom
        .get(EXTERNAL_ROOT_PATH)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A directory whose files the changes touched in the document.
struct DirCase {
    id: String,
    root: String,
    before: Block,
    expected: Block,
    /// The paths the changes touched there.
    paths: BTreeMap<String, PathNet>,
    /// Those whose text the changes changed and someone changed again since.
    changed_since: Vec<String>,
    /// Blocks of paths that hold what the changes left there (see `revert`).
    superseded: Vec<String>,
    /// Whether the changes touched the directory block itself (else only its files' blocks).
    in_net: bool,
}

/// A file of such a directory whose content the changes changed in the document.
struct Followed {
    /// blake3 of the text the changes left there (`None`: no file there in the document).
    left: Option<String>,
    /// What the document knew the disk held there when the changes ended.
    end_disk: Option<String>,
    /// What goes back: the text before the changes when the file was on disk then, else no
    /// file.
    target: Option<String>,
}

/// The directories the changes touched and their files whose content changed (see the
/// module docs).
fn followed_files(
    file: &FileHandle,
    net: &Net,
    now: &State,
) -> (Vec<DirCase>, BTreeMap<Place, Followed>) {
    // The text a file block puts on disk; `Ok(None)`: no such block; `Err`: a body that
    // cannot be read (that file is left alone rather than guessed at).
    let text = |id: &str, after: bool| -> Result<Option<String>, ()> {
        let block = match net.blocks.get(id) {
            Some((b, a)) => if after { a } else { b }.as_ref(),
            None => now.block(id),
        };
        match block {
            None => Ok(None),
            Some(b) => text_of(file, b).map(Some).ok_or(()),
        }
    };
    let mut dirs = Vec::new();
    let mut out = BTreeMap::new();
    for (id, paths) in &net.dirs {
        let (before, expected, in_net) = match net.blocks.get(id) {
            Some((b, e)) => (b.clone(), e.clone(), true),
            None => (now.block(id).cloned(), now.block(id).cloned(), false),
        };
        // A directory the changes made (an import) or deleted has no files to follow.
        let (Some(before), Some(expected)) = (before, expected) else {
            continue;
        };
        if before.block_type != "directory" || expected.block_type != "directory" {
            continue;
        }
        let Some(root) = root_of(&expected)
            .or_else(|| now.block(id).and_then(root_of))
            .filter(|r| Path::new(r).is_dir())
            .map(|r| canon(&r))
        else {
            continue;
        };
        let now_entries = now.block(id).map(entries_of).unwrap_or_default();
        let mut changed_since = Vec::new();
        let mut superseded = Vec::new();
        for (p, n) in paths {
            let (w, l) = (block_of(n.before.as_ref()), block_of(n.after.as_ref()));
            let (Ok(before_text), Ok(left_text)) = (
                w.map_or(Ok(None), |b| text(b, false)),
                l.map_or(Ok(None), |b| text(b, true)),
            ) else {
                tracing::warn!(path = %p, "a file block's text cannot be read; its file is left as it is");
                continue;
            };
            // The text the path holds now (`None`: unknown, a block that cannot be read).
            let now_text = match block_of(now_entries.get(p)) {
                None => Some(None),
                Some(b) => now.block(b).and_then(|b| text_of(file, b)).map(Some),
            };
            // Changed since: the path no longer holds the text the changes left there (its
            // entry made, moved or removed by someone else, its block written; the same text
            // under another block is no change). A file the changes changed and changed back
            // is theirs too when it was changed since: it goes back with them when forced.
            let since = now_text.as_ref() != Some(&left_text);
            if before_text == left_text && !(n.text_changed && since) {
                continue;
            }
            // (A file block of the changes still at its path is judged as a block: named once.)
            let same_block = l.is_some_and(|b| {
                block_of(now_entries.get(p)) == Some(b) && net.blocks.contains_key(b)
            });
            if since && !same_block {
                changed_since.push(p.clone());
            }
            if !since {
                // The path holds what the changes left (under another block, maybe): its
                // blocks someone deleted since are no conflict.
                superseded.extend(w.into_iter().chain(l).map(str::to_owned));
            }
            let was_on_disk = disk_of(n.before.as_ref()).is_some();
            out.insert(
                (root.clone(), p.clone()),
                Followed {
                    left: left_text.as_deref().map(hash_of),
                    end_disk: n.end_disk.clone(),
                    target: before_text.filter(|_| was_on_disk),
                },
            );
        }
        dirs.push(DirCase {
            id: id.clone(),
            root,
            before,
            expected,
            paths: paths.clone(),
            changed_since,
            superseded,
            in_net,
        });
    }
    (dirs, out)
}

/// A block as compared for changes since: its time of last change left out (an undo that
/// put the same text back, by another event, changed nothing of it), and its relations: they
/// are merged link by link ([`links_merged`]), each going to what it was before the changes
/// when they made or removed it, so a link someone else made or removed is kept and none is
/// a conflict.
fn unstamped(b: &Option<Block>) -> Option<Block> {
    b.clone().map(|mut b| {
        b.metadata.updated_at = b.metadata.created_at;
        b.children.clear();
        b
    })
}

fn has_link(b: Option<&Block>, rel: &str, to: &str) -> bool {
    b.and_then(|b| b.children.get(rel))
        .is_some_and(|l| l.iter().any(|t| t == to))
}

/// Every link (relation, target) of the three images.
fn all_links(images: [Option<&Block>; 3]) -> BTreeSet<(&str, &str)> {
    images
        .into_iter()
        .flatten()
        .flat_map(|b| {
            b.children
                .iter()
                .flat_map(|(rel, l)| l.iter().map(move |t| (rel.as_str(), t.as_str())))
        })
        .collect()
}

/// `before` with its relations merged link by link: the links the changes made or removed
/// as they were before them, the others as they are now (in `before`'s order, then the
/// newer ones).
fn links_merged(before: &Block, links: Option<&LinkNet>, current: &Block) -> Block {
    let mut r = before.clone();
    let keep = |rel: &str, to: &str| match links
        .and_then(|l| l.get(&(rel.to_owned(), to.to_owned())))
        .filter(|(was, left)| was != left)
    {
        Some((was, _)) => *was,
        None => has_link(Some(current), rel, to),
    };
    let rels: BTreeSet<&String> = before
        .children
        .keys()
        .chain(current.children.keys())
        .collect();
    let mut children = BTreeMap::new();
    for rel in rels {
        let mut list: Vec<String> = before
            .children
            .get(rel)
            .into_iter()
            .flatten()
            .filter(|t| keep(rel, t))
            .cloned()
            .collect();
        for t in current.children.get(rel).into_iter().flatten() {
            if keep(rel, t) && !list.contains(t) {
                list.push(t.clone());
            }
        }
        if !list.is_empty() || before.children.contains_key(rel) {
            children.insert(rel.clone(), list);
        }
    }
    r.children = children;
    r
}

/// A directory block's own content apart from its entries and its record of the disk (each
/// entry's `disk` hash, the pending removals, `last_export`, `updated_at`): its name,
/// relations, root. Changed as a whole; an export never changes it.
fn rest_of(b: &Block) -> Block {
    let mut b = b.clone();
    if let Some(o) = b.contents.as_object_mut() {
        o.remove("entries");
        o.remove("pending_removals");
    }
    b.metadata.custom.remove("last_export");
    b.metadata.updated_at = b.metadata.created_at;
    b
}

/// A directory's entries as path → the entry's JSON.
fn entries_of(b: &Block) -> BTreeMap<String, Value> {
    b.contents
        .get("entries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| (entry_path(e).to_owned(), e.clone()))
        .collect()
}

fn block_of(e: Option<&Value>) -> Option<&str> {
    e.and_then(|e| e.get("block_id")).and_then(Value::as_str)
}

fn disk_of(e: Option<&Value>) -> Option<String> {
    e.and_then(|e| e.get("disk"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// What was changed since in a directory the changes touched, file by file: `Err(())` when
/// its own content ([`rest_of`]) was changed by the changes and since, or it is gone; else the
/// paths whose text the changes changed (their entry made, moved or removed, or their block
/// written) and that hold another text now (or none, or one where they left none).
/// Entries others changed at other paths (between the changes too), and exports, are not
/// conflicts.
fn directory_conflicts(d: &DirCase, current: Option<&Block>) -> Result<Vec<String>, ()> {
    let current = current.filter(|c| c.block_type == "directory").ok_or(())?;
    let (rb, re, rc) = (rest_of(&d.before), rest_of(&d.expected), rest_of(current));
    if re != rb && rc != re {
        return Err(());
    }
    Ok(d.changed_since.clone())
}

/// The image a directory goes back to, merged path by path: the entries the changes made,
/// moved or removed as they were before them, every other entry as it is now (others' changes
/// since, or between the changes, stay); its own content as before the changes if they
/// changed it, else as now. Each entry's disk hash is that of what the undo wrote there
/// (`written`), else what the directory records now for the same block; the pending
/// removals are those still to be done.
fn restored_directory(
    d: &DirCase,
    current: Option<&Block>,
    written: &BTreeMap<String, Option<String>>,
) -> Block {
    let Some(current) = current.filter(|c| c.block_type == "directory") else {
        return d.before.clone();
    };
    let mut r = match rest_of(&d.before) == rest_of(&d.expected) {
        true => current.clone(),
        false => d.before.clone(),
    };
    let c = entries_of(current);
    let mut entries = c.clone();
    for (p, n) in &d.paths {
        // Unchanged by the changes and as they left it: nothing to set back (a forced undo
        // sets back an entry changed since, too).
        let left = block_of(n.after.as_ref());
        if block_of(n.before.as_ref()) == left && block_of(c.get(p)) == left {
            continue;
        }
        match &n.before {
            Some(e) => entries.insert(p.clone(), e.clone()),
            None => entries.remove(p),
        };
    }
    for (p, entry) in entries.iter_mut() {
        let block = block_of(Some(entry)).unwrap_or_default().to_owned();
        let disk = match written.get(p) {
            Some(h) => h.clone(),
            None => match c.get(p) {
                Some(now) if block_of(Some(now)) == Some(block.as_str()) => disk_of(Some(now)),
                _ => disk_of(Some(entry)),
            },
        };
        if let Some(o) = entry.as_object_mut() {
            match disk {
                Some(h) => o.insert("disk".into(), json!(h)),
                None => o.remove("disk"),
            };
        }
    }
    let pending = |blk: &Block| -> Vec<Value> {
        blk.contents
            .get("pending_removals")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let cp = pending(current);
    let mut kept: Vec<Value> = cp
        .iter()
        .filter(|x| !entries.contains_key(entry_path(x)))
        .cloned()
        .collect();
    // A removal the changes took back (a file put at that path again) is pending again when
    // its file is still on disk.
    for (p, n) in &d.paths {
        if let Some(disk) = &n.before_pending {
            if !entries.contains_key(p)
                && !written.contains_key(p)
                && !kept.iter().any(|x| entry_path(x) == p)
            {
                kept.push(json!({"path": p, "disk": disk}));
            }
        }
    }
    let as_before = entries == entries_of(&d.before) && kept == pending(&d.before);
    if let Some(o) = r.contents.as_object_mut() {
        o.insert(
            "entries".into(),
            Value::Array(entries.into_values().collect()),
        );
        // An empty list where there was none before is the same; kept as it was.
        if kept.is_empty() && d.before.contents.get("pending_removals").is_none() {
            o.remove("pending_removals");
        } else {
            o.insert("pending_removals".into(), Value::Array(kept));
        }
    }
    // The record of the last export: as before the changes when the disk is as it was then,
    // else as now.
    let source = if as_before { &d.before } else { current };
    r.metadata.updated_at = source.metadata.updated_at;
    match source.metadata.custom.get("last_export") {
        Some(v) => r.metadata.custom.insert("last_export".into(), v.clone()),
        None => r.metadata.custom.remove("last_export"),
    };
    r
}

/// What goes at a path: a recorded version (its bytes in the content store) or a text.
enum Put {
    Version(Option<Version>),
    Text(Option<String>),
}

struct FileOp {
    /// The hashes the path may hold now for the op to go ahead without `force`.
    ok_now: Vec<Option<String>>,
    put: Put,
}

/// Reverts `changes` (oldest first) on both sides, as `editor`; refused (nothing written)
/// when a block or file changed since, unless `force`. With `follow` (agent steps), the files
/// of directory blocks follow the document (see the module docs). Returns the report and the
/// record fields of the new change.
pub(super) async fn revert(
    file: &FileHandle,
    editor: &str,
    changes: &[&Change],
    force: bool,
    reason: Value,
    follow: bool,
) -> Result<(UndoReport, Change), EngineError> {
    let mut net = net_of(file, changes).await?;
    let now = file.state();
    let (dirs, followed) = if follow {
        followed_files(file, &net, &now)
    } else {
        Default::default()
    };
    let dirs_in_net: BTreeMap<&str, &DirCase> = dirs
        .iter()
        .filter(|d| d.in_net)
        .map(|d| (d.id.as_str(), d))
        .collect();
    // A file block someone deleted since whose path a later change took over (the user
    // removed the file, the agent made it again), or whose path holds again what the changes
    // left there (the user made the file anew): the path moved on under the changes, so that
    // block is theirs to set back, not a conflict.
    let mut superseded: BTreeSet<&str> = dirs
        .iter()
        .flat_map(|d| d.superseded.iter().map(String::as_str))
        .collect();
    for d in &dirs {
        let now_entries = now.block(&d.id).map(entries_of).unwrap_or_default();
        for (p, n) in &d.paths {
            let (was, left) = (block_of(n.before.as_ref()), block_of(n.after.as_ref()));
            if let Some(w) = was.filter(|w| Some(*w) != left) {
                if block_of(now_entries.get(p)) == left {
                    superseded.insert(w);
                }
            }
        }
    }
    let mut conflicts = Vec::new();
    let mut forced = Vec::new();
    for (id, (_, expected)) in &net.blocks {
        let current = now.block(id).cloned();
        let name = current
            .as_ref()
            .or(expected.as_ref())
            .map(|b| b.name.clone())
            .unwrap_or_default();
        // A directory is compared file by file (others' files and exports are no conflict).
        let changed: Vec<String> = match dirs_in_net.get(id.as_str()) {
            Some(d) => match directory_conflicts(d, current.as_ref()) {
                Ok(paths) => paths
                    .into_iter()
                    .map(|p| format!("'{p}' in directory '{name}'"))
                    .collect(),
                Err(()) => vec![format!("block '{name}' ({id})")],
            },
            None if current.is_none() && expected.is_some() && superseded.contains(id.as_str()) => {
                Vec::new()
            }
            // Already as the undo leaves it: nothing to overwrite.
            None if unstamped(&current) != unstamped(expected)
                && unstamped(&current) != unstamped(&net.blocks[id].0) =>
            {
                vec![format!("block '{name}' ({id})")]
            }
            None => Vec::new(),
        };
        if force {
            forced.extend(changed);
        } else {
            conflicts.extend(changed);
        }
    }
    // The files: what each path holds now, and what goes there.
    let mut ops: BTreeMap<Place, FileOp> = BTreeMap::new();
    for (place, (before, after)) in &net.files {
        let hash = |v: &Option<Version>| v.as_ref().map(|v| v.hash.clone());
        let put = match followed.get(place) {
            // The recorded changes start from what the document had exported there: the
            // file goes back with its block.
            Some(f) if hash(before) == f.left => Put::Text(f.target.clone()),
            _ => Put::Version(before.clone()),
        };
        ops.insert(
            place.clone(),
            FileOp {
                ok_now: vec![hash(after)],
                put,
            },
        );
    }
    let mut current_files: BTreeMap<Place, (Option<Version>, Option<Kept>)> = BTreeMap::new();
    let mut settled: BTreeMap<Place, Option<String>> = BTreeMap::new();
    let mut roots: Vec<String> = Vec::new();
    for (root, _) in ops.keys().chain(followed.keys()) {
        if !roots.contains(root) {
            roots.push(root.clone());
        }
    }
    for root in &roots {
        if !Path::new(root).is_dir() {
            return Err(EngineError::rejected(format!(
                "the project folder {root} is not there; nothing was undone"
            )));
        }
    }
    for (place, f) in &followed {
        let path = Path::new(&place.0).join(&place.1);
        let (current, bytes) = on_disk(&path)?;
        let now_hash = current.as_ref().map(|v| v.hash.clone());
        current_files.insert(place.clone(), (current, bytes));
        if ops.contains_key(place) {
            continue;
        }
        let target_hash = f.target.as_deref().map(hash_of);
        if now_hash == f.left {
            // Exported since: the file goes back with its block.
            if now_hash != target_hash {
                ops.insert(
                    place.clone(),
                    FileOp {
                        ok_now: vec![now_hash],
                        put: Put::Text(f.target.clone()),
                    },
                );
            }
        } else if now_hash == f.end_disk {
            // Not exported: the disk is as the step left it.
        } else if now_hash == target_hash {
            // Already what goes back (put back by hand): nothing to write.
            settled.insert(place.clone(), now_hash);
        } else {
            ops.insert(
                place.clone(),
                FileOp {
                    ok_now: vec![f.left.clone(), f.end_disk.clone()],
                    put: Put::Text(f.target.clone()),
                },
            );
        }
    }
    for (place, op) in &ops {
        if !current_files.contains_key(place) {
            let path = Path::new(&place.0).join(&place.1);
            current_files.insert(place.clone(), on_disk(&path)?);
        }
        let now_hash = current_files[place].0.as_ref().map(|v| v.hash.clone());
        if !op.ok_now.contains(&now_hash) {
            if force {
                forced.push(place.1.clone());
            } else {
                conflicts.push(place.1.clone());
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(EngineError::rejected(format!(
            "changed since by someone else, so nothing was undone: {}; look at them, or run again with --force to overwrite them",
            conflicts.join(", ")
        )));
    }
    // Everything the files need, read before anything is written: the versions to bring back
    // (a file too large to keep was tracked by hash only: refused here, nothing changed).
    let mut wanted: BTreeMap<&Place, (Option<Kept>, Option<Version>)> = BTreeMap::new();
    for (place, op) in &ops {
        let got = match &op.put {
            Put::Version(Some(v)) => (
                Some((
                    file.bytes(&content_ref(v)?).map_err(|e| {
                        EngineError::rejected(format!(
                            "the earlier version of {} ({} bytes) was not kept ({e}); nothing was undone",
                            place.1, v.len
                        ))
                    })?,
                    v.mode,
                )),
                Some(v.clone()),
            ),
            Put::Text(Some(t)) => {
                let mode = current_files[place].1.as_ref().map_or(0o644, |k| k.1);
                let v = Version {
                    hash: hash_of(t),
                    len: t.len() as u64,
                    mode,
                };
                (Some((t.clone().into_bytes(), mode)), Some(v))
            }
            Put::Version(None) | Put::Text(None) => (None, None),
        };
        wanted.insert(place, got);
    }
    // What is there now is kept too, so a redo can bring it back.
    for place in ops.keys() {
        if let Some((bytes, _)) = &current_files[place].1 {
            if bytes.len() as u64 <= MAX_KEPT_BYTES {
                file.put_bytes(bytes)?;
            }
        }
    }
    // Files first, each atomically; if one fails, the ones written go back.
    let mut written: Vec<&Place> = Vec::new();
    let rollback = |written: &[&Place]| {
        for p in written {
            let _ = put_file(&Path::new(&p.0).join(&p.1), current_files[*p].1.as_ref());
        }
    };
    let mut report = UndoReport {
        forced,
        ..UndoReport::default()
    };
    for place in ops.keys() {
        let path = PathBuf::from(&place.0).join(&place.1);
        if let Err(e) = put_file(&path, wanted[place].0.as_ref()) {
            rollback(&written);
            return Err(e);
        }
        written.push(place);
        match wanted[place].1 {
            Some(_) => report.files_restored.push(place.1.clone()),
            None => report.files_removed.push(place.1.clone()),
        }
    }
    // The directories: their content before the changes, with the disk as it is now. Only
    // the files that follow their blocks are the document's writes; a recorded change the
    // document never saw (a shell's `sed -i`) leaves the directory's record as it was.
    for d in &dirs {
        let wrote: BTreeMap<String, Option<String>> = ops
            .keys()
            .filter(|place| followed.contains_key(*place))
            .map(|place| (place, wanted[place].1.as_ref().map(|v| v.hash.clone())))
            .chain(settled.iter().map(|(place, h)| (place, h.clone())))
            .filter(|((root, _), _)| *root == d.root)
            .map(|((_, path), h)| (path.clone(), h))
            .collect();
        let current = now.block(&d.id);
        let image = restored_directory(d, current, &wrote);
        let unchanged = current == Some(&image);
        match (d.in_net, unchanged) {
            (true, true) => {
                net.blocks.remove(&d.id);
            }
            (true, false) => {
                if let Some(e) = net.blocks.get_mut(&d.id) {
                    e.0 = Some(image);
                }
            }
            (false, false) => {
                net.blocks
                    .insert(d.id.clone(), (Some(image), current.cloned()));
            }
            (false, true) => {}
        }
    }
    // Other blocks: their relations merged link by link (a link someone made since stays).
    let dir_ids: BTreeSet<&str> = dirs.iter().map(|d| d.id.as_str()).collect();
    for (id, (before, _)) in net.blocks.iter_mut() {
        if dir_ids.contains(id.as_str()) {
            continue;
        }
        if let (Some(b), Some(c)) = (before.as_ref(), now.block(id)) {
            *before = Some(links_merged(b, net.links.get(id), c));
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
                rollback(&written);
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
    // The record: each file from what it held to what went there, by folder.
    let mut by_root: Vec<FolderChange> = Vec::new();
    for place in ops.keys() {
        let change = FileChange {
            path: place.1.clone(),
            before: current_files[place].0.clone(),
            after: wanted[place].1.clone(),
        };
        match by_root.iter_mut().find(|f| f.root == place.0) {
            Some(f) => f.files.push(change),
            None => by_root.push(FolderChange {
                root: place.0.clone(),
                files: vec![change],
            }),
        }
    }
    // The folder of the changes first (the one an agent's steps are recorded in).
    let main_root = changes
        .iter()
        .rev()
        .find_map(|c| c.root.as_deref().map(canon))
        .or_else(|| by_root.first().map(|f| f.root.clone()));
    let mut change = Change {
        doc_from,
        doc_to,
        root: main_root.clone(),
        files: Vec::new(),
        more: Vec::new(),
    };
    for f in by_root {
        if Some(&f.root) == main_root.as_ref() {
            change.files = f.files;
        } else {
            change.more.push(f);
        }
    }
    Ok((report, change))
}
