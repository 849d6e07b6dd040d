//! Reading a folder into a `directory.import` command. Skips `.git`, `target`,
//! `node_modules` and any `.elf`; follows no symlink that leaves the root (nor symlinked
//! folders); leaves out binary and oversize files — every skip is reported, never silent.

use std::path::Path;

use elfiee_model::{ImportedFile, SkippedFile};

/// Folder names never imported.
pub const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];

#[derive(Debug, Clone)]
pub struct ImportLimits {
    /// Largest file imported, in bytes (default 1 MiB).
    pub max_file_bytes: u64,
    /// Largest total of file bytes in one import (default 15 MiB, under the payload limit).
    pub max_total_bytes: u64,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_file_bytes: 1024 * 1024,
            max_total_bytes: 15 * 1024 * 1024,
        }
    }
}

/// Files and skips of the folder `root` (canonical), in path order. `progress` is called once
/// per file looked at.
pub fn read_folder(
    root: &Path,
    limits: &ImportLimits,
    mut progress: impl FnMut(&str),
) -> Result<(Vec<ImportedFile>, Vec<SkippedFile>), String> {
    let root = root
        .canonicalize()
        .map_err(|e| format!("cannot read {}: {e}", root.display()))?;
    if !root.is_dir() {
        return Err(format!("{} is not a folder", root.display()));
    }
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut total = 0u64;
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.file_name()));
        for entry in entries {
            let path = entry.path();
            let rel = path
                .strip_prefix(&root)
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            let name = entry.file_name().to_string_lossy().to_string();
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            let skip = |reason: String, skipped: &mut Vec<SkippedFile>| {
                skipped.push(SkippedFile {
                    path: rel.clone(),
                    reason,
                })
            };
            if meta.is_dir() {
                if SKIPPED_DIRS.contains(&name.as_str()) || name.ends_with(".elf") {
                    skip(format!("'{name}' folders are not imported"), &mut skipped);
                } else {
                    stack.push(path);
                }
                continue;
            }
            progress(&rel);
            if name.ends_with(".elf") {
                skip("an .elf document".into(), &mut skipped);
                continue;
            }
            let meta = if meta.file_type().is_symlink() {
                match path.canonicalize() {
                    Ok(t) if !t.starts_with(&root) => {
                        skip(
                            format!("symlink leaves the root (to {})", t.display()),
                            &mut skipped,
                        );
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
                        skip("symlink into a skipped folder".into(), &mut skipped);
                        continue;
                    }
                    Ok(t) if t.is_dir() => {
                        skip("symlinked folder (not followed)".into(), &mut skipped);
                        continue;
                    }
                    Ok(t) => match t.metadata() {
                        Ok(m) => m,
                        Err(e) => {
                            skip(format!("unreadable: {e}"), &mut skipped);
                            continue;
                        }
                    },
                    Err(_) => {
                        skip("broken symlink".into(), &mut skipped);
                        continue;
                    }
                }
            } else {
                meta
            };
            if !meta.is_file() {
                skip("not a regular file".into(), &mut skipped);
                continue;
            }
            if meta.len() > limits.max_file_bytes {
                skip(
                    format!(
                        "{} bytes, over the {} byte limit",
                        meta.len(),
                        limits.max_file_bytes
                    ),
                    &mut skipped,
                );
                continue;
            }
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    skip(format!("unreadable: {e}"), &mut skipped);
                    continue;
                }
            };
            if bytes[..bytes.len().min(8192)].contains(&0) {
                skip("binary".into(), &mut skipped);
                continue;
            }
            let Ok(content) = String::from_utf8(bytes) else {
                skip("binary (not UTF-8)".into(), &mut skipped);
                continue;
            };
            total += content.len() as u64;
            if total > limits.max_total_bytes {
                return Err(format!(
                    "{} holds more than {} bytes of text; import a subfolder instead",
                    root.display(),
                    limits.max_total_bytes
                ));
            }
            files.push(ImportedFile { path: rel, content });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((files, skipped))
}
