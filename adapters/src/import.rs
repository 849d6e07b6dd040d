//! Reading a folder into a directory block, streamed: the walk honours `.gitignore`,
//! `.ignore` and `.git/info/exclude` the way git does (hidden files are imported unless
//! ignored), skips `.git`, `target`, `node_modules` and any `.elf`, follows no symlink that
//! leaves the root (nor symlinked folders), and leaves out binary and oversize files — every
//! skip is reported, never silent (files ignored by the ignore files are left out like git
//! leaves them out).
//!
//! Files are committed in bounded chunks (`directory.sync` commands), so memory stays bounded
//! whatever the size of the tree, and a rescan sends only the files whose content hash
//! differs from the block's. An interrupted import leaves a valid document whose directory
//! block is marked `import_incomplete`; importing the same folder again resumes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Command, ImportedFile, SkippedFile, EXTERNAL_ROOT_PATH};

use elfiee_projections::content::{body_hash, body_keys};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Folder names never imported.
pub const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];

/// Largest file the importer accepts at all (a chunk must fit the engine's payload limit).
pub const MAX_FILE_BYTES_LIMIT: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct ImportLimits {
    /// Largest file imported, in bytes (default 1 MiB; at most [`MAX_FILE_BYTES_LIMIT`]).
    pub max_file_bytes: u64,
    /// A chunk (one `directory.sync` command) is sent once it holds this many bytes of text
    /// (default 4 MiB)…
    pub chunk_bytes: u64,
    /// … or this many files (default 1000).
    pub chunk_files: usize,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_file_bytes: 1024 * 1024,
            chunk_bytes: 4 * 1024 * 1024,
            chunk_files: 1000,
        }
    }
}

/// A regular file the walk found (not read yet).
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Relative, `/`-separated.
    pub rel: String,
    pub path: PathBuf,
    pub len: u64,
    /// Modification time, nanoseconds since the epoch (0 when unknown).
    pub mtime_ns: i128,
}

/// The walk of a project folder as the importer and the checkpoints see it: hidden files
/// included, `.gitignore` / `.ignore` / `.git/info/exclude` honoured (not the user's global
/// ignores, not ignore files above the root), symlinks not followed.
pub(crate) fn walk_builder(root: &Path) -> ignore::WalkBuilder {
    let mut wb = ignore::WalkBuilder::new(root);
    wb.hidden(false)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .parents(false)
        .require_git(false)
        .follow_links(false);
    wb
}

/// Walks `root` (canonical): the files to read, in path order, and the skips.
pub fn walk(
    root: &Path,
    limits: &ImportLimits,
) -> Result<(Vec<Candidate>, Vec<SkippedFile>), String> {
    let root = root
        .canonicalize()
        .map_err(|e| format!("cannot read {}: {e}", root.display()))?;
    if !root.is_dir() {
        return Err(format!("{} is not a folder", root.display()));
    }
    let skipped = Arc::new(Mutex::new(Vec::new()));
    let mut wb = walk_builder(&root);
    wb.sort_by_file_name(|a, b| a.cmp(b));
    {
        let (skipped, root) = (skipped.clone(), root.clone());
        wb.filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            let name = e.file_name().to_string_lossy();
            if is_dir
                && e.depth() > 0
                && (SKIPPED_DIRS.contains(&name.as_ref()) || name.ends_with(".elf"))
            {
                skipped
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(SkippedFile {
                        path: rel_of(&root, e.path()),
                        reason: format!("'{name}' folders are not imported"),
                    });
                return false;
            }
            true
        });
    }
    let mut files = Vec::new();
    let skip = |rel: String, reason: String| {
        skipped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(SkippedFile { path: rel, reason })
    };
    for entry in wb.build() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                skip(String::new(), format!("unreadable: {e}"));
                continue;
            }
        };
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path().to_path_buf();
        let rel = rel_of(&root, &path);
        let Some(ft) = entry.file_type() else {
            continue;
        };
        if ft.is_dir() {
            continue;
        }
        if entry.file_name().to_str().is_none()
            || path
                .strip_prefix(&root)
                .ok()
                .and_then(Path::to_str)
                .is_none()
        {
            skip(rel, "the name is not UTF-8".into());
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        if name.ends_with(".elf") {
            skip(rel, "an .elf document".into());
            continue;
        }
        let meta = if ft.is_symlink() {
            match path.canonicalize() {
                Ok(t) if !t.starts_with(&root) => {
                    skip(rel, format!("symlink leaves the root (to {})", t.display()));
                    continue;
                }
                Ok(t)
                    if t.strip_prefix(&root).is_ok_and(|r| {
                        r.components().any(|c| {
                            let c = c.as_os_str().to_string_lossy();
                            SKIPPED_DIRS.contains(&c.as_ref()) || c.ends_with(".elf")
                        })
                    }) =>
                {
                    skip(rel, "symlink into a skipped folder".into());
                    continue;
                }
                Ok(t) if t.is_dir() => {
                    skip(rel, "symlinked folder (not followed)".into());
                    continue;
                }
                Ok(t) => match t.metadata() {
                    Ok(m) => m,
                    Err(e) => {
                        skip(rel, format!("unreadable: {e}"));
                        continue;
                    }
                },
                Err(_) => {
                    skip(rel, "broken symlink".into());
                    continue;
                }
            }
        } else {
            match entry.metadata() {
                Ok(m) => m,
                Err(e) => {
                    skip(rel, format!("unreadable: {e}"));
                    continue;
                }
            }
        };
        if !meta.is_file() {
            skip(rel, "not a regular file".into());
            continue;
        }
        if meta.len() > limits.max_file_bytes {
            skip(
                rel,
                format!(
                    "{} bytes, over the {} byte limit",
                    meta.len(),
                    limits.max_file_bytes
                ),
            );
            continue;
        }
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        files.push(Candidate {
            rel,
            path,
            len: meta.len(),
            mtime_ns,
        });
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    let mut skipped = std::mem::take(&mut *skipped.lock().unwrap_or_else(|p| p.into_inner()));
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((files, skipped))
}

fn rel_of(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .unwrap_or_default()
}

/// The text of a candidate, or why it is left out (binary, not UTF-8, unreadable; no longer
/// a regular file, or grown past [`MAX_FILE_BYTES_LIMIT`] since the walk: read no further).
pub fn read_text(c: &Candidate) -> Result<String, String> {
    let bytes = crate::bounded::read_file(&c.path, MAX_FILE_BYTES_LIMIT)
        .map_err(|e| format!("unreadable: {e}"))?;
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Err("binary".into());
    }
    String::from_utf8(bytes).map_err(|_| "binary (not UTF-8)".into())
}

/// Files and skips of the folder `root`, read whole, in path order (for small folders and
/// tests; imports stream with [`sync_folder`]).
pub fn read_folder(
    root: &Path,
    limits: &ImportLimits,
    mut progress: impl FnMut(&str),
) -> Result<(Vec<ImportedFile>, Vec<SkippedFile>), String> {
    let (candidates, mut skipped) = walk(root, limits)?;
    let mut files = Vec::new();
    for c in candidates {
        progress(&c.rel);
        match read_text(&c) {
            Ok(content) => files.push(ImportedFile {
                path: c.rel,
                content,
            }),
            Err(reason) => skipped.push(SkippedFile {
                path: c.rel,
                reason,
            }),
        }
    }
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((files, skipped))
}

/// What a rescan remembers of each file between runs, like git's index: size, modification
/// time and the content hash its block held then. A file whose size and mtime are unchanged,
/// and whose block still holds that hash, is not read again. Kept in `<elf>/cache/` (a cache:
/// deleting it only makes the next rescan read every file); not part of the log.
#[derive(Debug, Default, Serialize, Deserialize)]
struct StatCache {
    /// When the cache was written (ns since the epoch): a file modified within a second of it
    /// may have changed after it was hashed ("racily clean"), so it is read again.
    written_ns: i128,
    /// path → (size, mtime_ns, content hash hex).
    files: BTreeMap<String, (u64, i128, String)>,
}

fn stat_cache_path(file: &FileHandle, dir_id: &str) -> PathBuf {
    file.path()
        .join("cache")
        .join(format!("dirsync-{dir_id}.json"))
}

fn load_stat_cache(path: &Path) -> StatCache {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Records the files of the walk with the hashes their blocks hold now (after the sync).
fn save_stat_cache(file: &FileHandle, dir_id: &str, walked: &[(String, u64, i128)]) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let files = file.with_state(|s| {
        let Some(dir) = s.block(dir_id) else {
            return BTreeMap::new();
        };
        walked
            .iter()
            .filter_map(|(rel, len, mtime)| {
                let id = elfiee_capabilities::builtin::directory_entry(dir, rel)?;
                let b = s.block(id)?;
                let hash = body_hash(b, body_keys(&b.block_type).first()?)?;
                Some((rel.clone(), (*len, *mtime, hash)))
            })
            .collect()
    });
    let cache = StatCache {
        written_ns: now,
        files,
    };
    let path = stat_cache_path(file, dir_id);
    let written = path
        .parent()
        .map(std::fs::create_dir_all)
        .transpose()
        .and_then(|_| {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(&cache).unwrap_or_default())?;
            std::fs::rename(&tmp, &path)
        });
    if let Err(e) = written {
        tracing::warn!(error = %e, "rescan cache not written; the next rescan reads every file");
    }
}

/// What a sync (or an import) did.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SyncReport {
    pub block_id: String,
    pub root: String,
    /// Files whose text changed (a write event each).
    pub changed: usize,
    /// New files (a new block each).
    pub added: usize,
    /// Files gone from disk (their blocks deleted).
    pub deleted: usize,
    /// Files equal to their block (no event).
    pub unchanged: usize,
    /// Text bytes sent (changed + added).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub bytes: u64,
    /// Commands submitted.
    pub chunks: usize,
    pub skipped: Vec<SkippedFile>,
}

/// Progress of a sync: files looked at, of how many; bytes read, of how many.
#[derive(Debug, Clone, Copy)]
pub struct SyncProgress {
    pub files_done: usize,
    pub files_total: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// Brings directory block `dir_id` up to date with its folder on disk: only changed, added
/// and deleted files produce events, in `directory.sync` chunks bounded by `limits`; the
/// last chunk carries `done` (which completes an interrupted import).
pub async fn sync_folder(
    file: &FileHandle,
    editor: &str,
    dir_id: &str,
    limits: &ImportLimits,
    mut progress: impl FnMut(SyncProgress),
) -> Result<SyncReport, EngineError> {
    if limits.max_file_bytes > MAX_FILE_BYTES_LIMIT {
        return Err(EngineError::rejected(format!(
            "the per-file limit is at most {MAX_FILE_BYTES_LIMIT} bytes (got {})",
            limits.max_file_bytes
        )));
    }
    // What the block holds now: path → content hash.
    let (root, mut known) = file
        .with_state(|s| {
            let dir = s.block(dir_id)?;
            if dir.block_type != "directory" {
                return None;
            }
            let root = dir
                .metadata
                .custom
                .get(EXTERNAL_ROOT_PATH)
                .and_then(|v| v.as_str())
                .map(str::to_owned)?;
            let known: BTreeMap<String, Option<String>> =
                elfiee_capabilities::builtin::directory_entries(dir)
                    .into_iter()
                    .map(|(path, id)| {
                        let hash = s.block(&id).and_then(|b| {
                            body_keys(&b.block_type)
                                .first()
                                .and_then(|k| body_hash(b, k))
                        });
                        (path, hash)
                    })
                    .collect();
            Some((root, known))
        })
        .ok_or_else(|| {
            EngineError::rejected(format!(
                "'{dir_id}' is not a directory block with a folder on disk; list them with `elfiee block list`"
            ))
        })?;
    let (candidates, mut skipped) = walk(Path::new(&root), limits)
        .map_err(|e| EngineError::rejected(format!("{e}; was the folder moved?")))?;
    let mut report = SyncReport {
        block_id: dir_id.to_owned(),
        root: root.clone(),
        ..Default::default()
    };
    let mut p = SyncProgress {
        files_done: 0,
        files_total: candidates.len(),
        bytes_done: 0,
        bytes_total: candidates.iter().map(|c| c.len).sum(),
    };
    progress(p);
    let mut chunk: Vec<ImportedFile> = Vec::new();
    let mut chunk_bytes = 0u64;
    let cache = load_stat_cache(&stat_cache_path(file, dir_id));
    let mut walked: Vec<(String, u64, i128)> = Vec::with_capacity(candidates.len());
    for c in candidates {
        p.files_done += 1;
        p.bytes_done += c.len;
        walked.push((c.rel.clone(), c.len, c.mtime_ns));
        let old = known.remove(&c.rel);
        // Same size and mtime as when the block last matched this file: not read again.
        let cached = cache.files.get(&c.rel).is_some_and(|(len, mtime, hash)| {
            *len == c.len
                && *mtime == c.mtime_ns
                && c.mtime_ns != 0
                && c.mtime_ns < cache.written_ns - 1_000_000_000
                && old.as_ref().and_then(|h| h.as_deref()) == Some(hash.as_str())
        });
        if cached {
            report.unchanged += 1;
            continue;
        }
        let text = match read_text(&c) {
            Ok(t) => t,
            Err(reason) => {
                skipped.push(SkippedFile {
                    path: c.rel,
                    reason,
                });
                continue;
            }
        };
        match old {
            Some(Some(hash)) if hash == blake3::hash(text.as_bytes()).to_hex().as_str() => {
                report.unchanged += 1;
            }
            old => {
                if old.is_some() {
                    report.changed += 1;
                } else {
                    report.added += 1;
                }
                // A chunk goes once the next file would take it over its bytes or files.
                let full = chunk_bytes + text.len() as u64 > limits.chunk_bytes
                    || chunk.len() >= limits.chunk_files;
                if full && !chunk.is_empty() {
                    send_chunk(
                        file,
                        editor,
                        dir_id,
                        &mut chunk,
                        Vec::new(),
                        Vec::new(),
                        false,
                        &mut report,
                    )
                    .await?;
                    chunk_bytes = 0;
                }
                chunk_bytes += text.len() as u64;
                report.bytes += text.len() as u64;
                chunk.push(ImportedFile {
                    path: c.rel,
                    content: text,
                });
            }
        }
        if p.files_done.is_multiple_of(64) {
            progress(p);
        }
    }
    progress(p);
    // Whatever the block holds that the walk did not find is gone from disk (or now ignored).
    let deleted: Vec<String> = known.into_keys().collect();
    report.deleted = deleted.len();
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    report.skipped = skipped.clone();
    // The last chunk: the rest of the files, the deletions, the skips, `done`.
    send_chunk(
        file,
        editor,
        dir_id,
        &mut chunk,
        deleted,
        skipped,
        true,
        &mut report,
    )
    .await?;
    save_stat_cache(file, dir_id, &walked);
    Ok(report)
}

/// Submits one `directory.sync` chunk (emptying `files`).
#[allow(clippy::too_many_arguments)]
async fn send_chunk(
    file: &FileHandle,
    editor: &str,
    dir_id: &str,
    files: &mut Vec<ImportedFile>,
    deleted: Vec<String>,
    skipped: Vec<SkippedFile>,
    done: bool,
    report: &mut SyncReport,
) -> Result<(), EngineError> {
    let payload = json!({
        "files": std::mem::take(files),
        "deleted": deleted,
        "skipped": skipped,
        "done": done,
    });
    file.submit(Command::new(
        editor,
        "directory.sync",
        Some(dir_id),
        payload,
    ))
    .await?;
    report.chunks += 1;
    Ok(())
}

/// Imports `folder` as a new directory block (one `directory.import`, then the files in
/// chunks), or resumes an interrupted import of the same folder (a directory block with the
/// same root still marked `import_incomplete`).
pub async fn import_folder(
    file: &FileHandle,
    editor: &str,
    folder: &Path,
    name: Option<&str>,
    limits: &ImportLimits,
    progress: impl FnMut(SyncProgress),
) -> Result<(SyncReport, bool), EngineError> {
    let root = folder
        .canonicalize()
        .map_err(|e| EngineError::rejected(format!("cannot import {}: {e}", folder.display())))?;
    if !root.is_dir() {
        return Err(EngineError::rejected(format!(
            "{} is not a folder",
            root.display()
        )));
    }
    if root.starts_with(file.path()) {
        return Err(EngineError::rejected(
            "cannot import a folder inside the .elf itself",
        ));
    }
    let root_s = root.display().to_string();
    let resume = file.with_state(|s| {
        s.blocks
            .values()
            .find(|b| {
                b.block_type == "directory"
                    && b.metadata
                        .custom
                        .get(EXTERNAL_ROOT_PATH)
                        .and_then(|v| v.as_str())
                        == Some(root_s.as_str())
                    && b.metadata
                        .custom
                        .contains_key(elfiee_capabilities::builtin::IMPORT_INCOMPLETE)
            })
            .map(|b| b.block_id.clone())
    });
    let (dir_id, resumed) = match resume {
        Some(id) => (id, true),
        None => {
            let mut payload = json!({"root": root_s, "files": [], "pending": true});
            if let Some(name) = name {
                payload["name"] = json!(name);
            }
            let events = file
                .submit(Command::new(editor, "directory.import", None, payload))
                .await?;
            (events[0].entity.clone(), false)
        }
    };
    let report = sync_folder(file, editor, &dir_id, limits, progress).await?;
    Ok((report, resumed))
}
