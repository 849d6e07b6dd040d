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

use elfiee_capabilities::builtin::{directory_list, entry_path};
use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Block, Command, DirectoryEntry, PendingRemoval, EXTERNAL_ROOT_PATH};
use elfiee_projections::State;
use serde_json::{json, Value};

use super::record::{content_ref, storage, Change, FolderChange, UndoReport, MAX_KEPT_BYTES};
use super::scan::{FileChange, Version};

/// A path in a project folder: (root, relative path).
type Place = (String, String);

/// The net change of several changes, oldest first: per block, its image before the first
/// and after the last; per file, the version before the first and after the last.
struct Net {
    /// block id → (before, expected now)
    blocks: BTreeMap<String, (Option<Block>, Option<Block>)>,
    /// (root, path) → (before, expected now)
    files: BTreeMap<Place, (Option<Version>, Option<Version>)>,
}

async fn net_of(file: &FileHandle, changes: &[&Change]) -> Result<Net, EngineError> {
    let events = file.events(1)?;
    let mut blocks: BTreeMap<String, (Option<Block>, Option<Block>)> = BTreeMap::new();
    let mut files: BTreeMap<Place, (Option<Version>, Option<Version>)> = BTreeMap::new();
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
    Ok(Net { blocks, files })
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
fn put_file(path: &Path, content: Option<&Kept>) -> Result<(), EngineError> {
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
    let is_dir = |b: &Option<Block>| b.as_ref().is_some_and(|b| b.block_type == "directory");
    let mut ids: BTreeSet<String> = net
        .blocks
        .iter()
        .filter(|(_, (a, b))| is_dir(a) || is_dir(b))
        .map(|(id, _)| id.clone())
        .collect();
    for b in now.blocks.values().filter(|b| b.block_type == "directory") {
        if !ids.contains(&b.block_id)
            && directory_list::<DirectoryEntry>(b, "entries")
                .iter()
                .any(|e| net.blocks.contains_key(&e.block_id))
        {
            ids.insert(b.block_id.clone());
        }
    }
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
    let mut paths = BTreeMap::new();
    for id in ids {
        let (before, expected, in_net) = match net.blocks.get(&id) {
            Some((b, e)) => (b.clone(), e.clone(), true),
            None => (now.block(&id).cloned(), now.block(&id).cloned(), false),
        };
        // A directory the changes made (an import) or deleted has no files to follow.
        let (Some(before), Some(expected)) = (before, expected) else {
            continue;
        };
        if before.block_type != "directory" || expected.block_type != "directory" {
            continue;
        }
        let Some(root) = root_of(&expected)
            .or_else(|| now.block(&id).and_then(root_of))
            .filter(|r| Path::new(r).is_dir())
            .map(|r| canon(&r))
        else {
            continue;
        };
        let map = |b: &Block| -> BTreeMap<String, DirectoryEntry> {
            directory_list::<DirectoryEntry>(b, "entries")
                .into_iter()
                .map(|e| (e.path.clone(), e))
                .collect()
        };
        let (was, left) = (map(&before), map(&expected));
        let pending_left: BTreeMap<String, String> =
            directory_list::<PendingRemoval>(&expected, "pending_removals")
                .into_iter()
                .map(|p| (p.path, p.disk))
                .collect();
        let all: BTreeSet<&String> = was.keys().chain(left.keys()).collect();
        for p in all {
            let (w, l) = (was.get(p), left.get(p));
            if let (Some(w), Some(l)) = (w, l) {
                if w.block_id == l.block_id && !net.blocks.contains_key(&w.block_id) {
                    continue;
                }
            }
            let (Ok(before_text), Ok(left_text)) = (
                w.map_or(Ok(None), |e| text(&e.block_id, false)),
                l.map_or(Ok(None), |e| text(&e.block_id, true)),
            ) else {
                tracing::warn!(path = %p, "a file block's text cannot be read; its file is left as it is");
                continue;
            };
            // Also a file whose block the changes wrote and wrote back, changed since: a forced
            // undo sets the block back, so the file goes back with it.
            let written_back = l.is_some_and(|e| {
                net.blocks.contains_key(&e.block_id)
                    && now.block(&e.block_id).and_then(|b| text_of(file, b)) != left_text
            });
            if before_text == left_text && !written_back {
                continue;
            }
            paths.insert(
                (root.clone(), p.clone()),
                Followed {
                    left: left_text.as_deref().map(hash_of),
                    end_disk: match l {
                        Some(e) => e.disk.clone(),
                        None => pending_left.get(p).cloned(),
                    },
                    target: w.filter(|e| e.disk.is_some()).and(before_text),
                },
            );
        }
        dirs.push(DirCase {
            id,
            root,
            before,
            expected,
            in_net,
        });
    }
    (dirs, paths)
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
/// paths whose entry the changes made, moved or removed and someone changed again since.
/// Entries others changed at other paths, and exports, are not conflicts.
fn directory_conflicts(
    before: &Block,
    expected: &Block,
    current: Option<&Block>,
) -> Result<Vec<String>, ()> {
    let current = current.filter(|c| c.block_type == "directory").ok_or(())?;
    let (rb, re, rc) = (rest_of(before), rest_of(expected), rest_of(current));
    if re != rb && rc != re {
        return Err(());
    }
    let (b, e, c) = (
        entries_of(before),
        entries_of(expected),
        entries_of(current),
    );
    let paths: BTreeSet<&String> = b.keys().chain(e.keys()).collect();
    Ok(paths
        .into_iter()
        .filter(|p| {
            let (was, left) = (block_of(b.get(*p)), block_of(e.get(*p)));
            was != left && block_of(c.get(*p)) != left
        })
        .cloned()
        .collect())
}

/// The image a directory goes back to, merged path by path: the entries the changes made,
/// moved or removed as they were before them, every other entry as it is now (others' changes
/// since stay); its own content as before the changes if they changed it, else as now. Each
/// entry's disk hash is that of what the undo wrote there (`written`), else what the
/// directory records now for the same block; the pending removals are those still to be done.
fn restored_directory(
    before: &Block,
    expected: &Block,
    current: Option<&Block>,
    written: &BTreeMap<String, Option<String>>,
) -> Block {
    let Some(current) = current.filter(|c| c.block_type == "directory") else {
        return before.clone();
    };
    let mut r = match rest_of(before) == rest_of(expected) {
        true => current.clone(),
        false => before.clone(),
    };
    let (b, e, c) = (
        entries_of(before),
        entries_of(expected),
        entries_of(current),
    );
    let mut entries: BTreeMap<String, Value> = BTreeMap::new();
    let paths: BTreeSet<&String> = b.keys().chain(e.keys()).chain(c.keys()).collect();
    for p in paths {
        let undone = block_of(b.get(p)) != block_of(e.get(p));
        let Some(mut entry) = (if undone { b.get(p) } else { c.get(p) }).cloned() else {
            continue;
        };
        let block = block_of(Some(&entry)).unwrap_or_default().to_owned();
        let disk = match written.get(p) {
            Some(h) => h.clone(),
            None => match c.get(p) {
                Some(now) if block_of(Some(now)) == Some(block.as_str()) => disk_of(Some(now)),
                _ => disk_of(Some(&entry)),
            },
        };
        if let Some(o) = entry.as_object_mut() {
            match disk {
                Some(h) => o.insert("disk".into(), json!(h)),
                None => o.remove("disk"),
            };
        }
        entries.insert(p.clone(), entry);
    }
    let pending = |blk: &Block| -> Vec<Value> {
        blk.contents
            .get("pending_removals")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (bp, cp) = (pending(before), pending(current));
    let in_cp = |p: &str| cp.iter().find(|x| entry_path(x) == p);
    let mut kept: Vec<Value> = Vec::new();
    for x in &bp {
        let p = entry_path(x);
        if entries.contains_key(p) {
            continue;
        }
        match in_cp(p) {
            Some(now) => kept.push(now.clone()),
            // Taken back by the changes (a file put at that path again) and still on disk.
            None if c.contains_key(p) && !written.contains_key(p) => kept.push(x.clone()),
            None => {}
        }
    }
    for x in &cp {
        let p = entry_path(x);
        if !entries.contains_key(p) && !bp.iter().any(|y| entry_path(y) == p) {
            kept.push(x.clone());
        }
    }
    let as_before = entries == b && kept == bp;
    if let Some(o) = r.contents.as_object_mut() {
        o.insert(
            "entries".into(),
            Value::Array(entries.into_values().collect()),
        );
        // An empty list where there was none before is the same; kept as it was.
        if kept.is_empty() && before.contents.get("pending_removals").is_none() {
            o.remove("pending_removals");
        } else {
            o.insert("pending_removals".into(), Value::Array(kept));
        }
    }
    // The record of the last export: as before the changes when the disk is as it was then,
    // else as now.
    let source = if as_before { before } else { current };
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
            Some(d) => match directory_conflicts(&d.before, &d.expected, current.as_ref()) {
                Ok(paths) => paths
                    .into_iter()
                    .map(|p| format!("'{p}' in directory '{name}'"))
                    .collect(),
                Err(()) => vec![format!("block '{name}' ({id})")],
            },
            None if &current != expected => vec![format!("block '{name}' ({id})")],
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
        let image = restored_directory(&d.before, &d.expected, current, &wrote);
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
