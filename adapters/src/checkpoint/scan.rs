//! What a project folder holds, file by file, found fast: a walk that trusts a cache of
//! `(size, mtime, ctime, inode) → hash` (git's index idea), so a rescan of a 10,000-file
//! project where one file changed reads and hashes one file.
//!
//! The walk honours `.gitignore` and skips `.git`, `target`, `node_modules` and `.elf`
//! documents, like the importer; symlinks are not followed and not recorded. A file whose
//! mtime is too close to the previous scan is hashed again ("racily clean": it may have
//! changed within the clock's granularity after the scan read it).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::import::SKIPPED_DIRS;

/// Files modified this close (ns) before the previous scan started are hashed again.
const RACY_NS: i128 = 2_000_000_000;

/// One file as a scan found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    /// blake3 of the bytes, 64 hex characters.
    pub hash: String,
    pub len: u64,
    /// Permission bits (`0o755` …): restored with the bytes.
    pub mode: u32,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
}

impl FileState {
    /// Same bytes and mode (what a restore must bring back).
    pub fn same_content(&self, other: &FileState) -> bool {
        self.hash == other.hash && self.len == other.len && self.mode == other.mode
    }
}

/// Every file of a folder: relative `/`-separated path → state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub files: BTreeMap<String, FileState>,
    /// When the scan that made it started (ns since the epoch).
    pub scanned_at_ns: i128,
}

/// What a scan cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScanStats {
    pub files: usize,
    /// Files read and hashed (the rest came from the cache).
    pub hashed: usize,
    pub hashed_bytes: u64,
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn skipped_dir(name: &str) -> bool {
    SKIPPED_DIRS.contains(&name) || name.ends_with(".elf")
}

/// The regular files under `root` (relative path, full path), in path order.
pub fn walk(root: &Path) -> Result<Vec<(String, PathBuf, std::fs::Metadata)>, String> {
    if !root.is_dir() {
        return Err(format!("{} is not a folder", root.display()));
    }
    let mut wb = ignore::WalkBuilder::new(root);
    wb.hidden(false)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| {
            !(e.depth() > 0
                && e.file_type().is_some_and(|t| t.is_dir())
                && skipped_dir(&e.file_name().to_string_lossy()))
        });
    let mut out = Vec::new();
    for entry in wb.build() {
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let Some(rel) = rel.to_str() else { continue };
        if rel.ends_with(".elf") {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        out.push((rel.replace('\\', "/"), entry.path().to_path_buf(), meta));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Scans `root`, taking each file's hash from `cache` when its size, times and inode match
/// and it is not racily clean; `on_new` gets the bytes of every file it hashed (to keep
/// them). Returns the new manifest and what it cost.
pub fn scan(
    root: &Path,
    cache: &Manifest,
    mut on_new: impl FnMut(&str, &FileState, &[u8]) -> Result<(), String>,
) -> Result<(Manifest, ScanStats), String> {
    let started = now_ns();
    let mut files = BTreeMap::new();
    let mut stats = ScanStats::default();
    for (rel, path, meta) in walk(root)? {
        stats.files += 1;
        let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        let ctime_ns = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
        let (len, ino, mode) = (meta.len(), meta.ino(), meta.mode() & 0o7777);
        let cached = cache.files.get(&rel).filter(|c| {
            c.len == len
                && c.mtime_ns == mtime_ns
                && c.ctime_ns == ctime_ns
                && c.ino == ino
                && c.mode == mode
                && mtime_ns < cache.scanned_at_ns - RACY_NS
        });
        let state = match cached {
            Some(c) => c.clone(),
            None => {
                let bytes = match std::fs::read(&path) {
                    Ok(b) => b,
                    // Gone (or unreadable) between the walk and the read: not there.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
                };
                stats.hashed += 1;
                stats.hashed_bytes += bytes.len() as u64;
                let state = FileState {
                    hash: blake3::hash(&bytes).to_hex().to_string(),
                    len: bytes.len() as u64,
                    mode,
                    mtime_ns,
                    ctime_ns,
                    ino,
                };
                on_new(&rel, &state, &bytes)?;
                state
            }
        };
        files.insert(rel, state);
    }
    Ok((
        Manifest {
            files,
            scanned_at_ns: started,
        },
        stats,
    ))
}

/// One file's change between two scans: `None` = absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: String,
    pub before: Option<Version>,
    pub after: Option<Version>,
}

/// The content of a file at one time: bytes (by hash, in the content store) and mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub hash: String,
    pub len: u64,
    pub mode: u32,
}

impl From<&FileState> for Version {
    fn from(s: &FileState) -> Version {
        Version {
            hash: s.hash.clone(),
            len: s.len,
            mode: s.mode,
        }
    }
}

/// Files created, changed (bytes or mode) or deleted from `a` to `b`, in path order.
pub fn diff(a: &Manifest, b: &Manifest) -> Vec<FileChange> {
    let mut out = Vec::new();
    let mut ai = a.files.iter().peekable();
    let mut bi = b.files.iter().peekable();
    loop {
        let change = match (ai.peek(), bi.peek()) {
            (None, None) => break,
            (Some((pa, sa)), Some((pb, sb))) if pa == pb => {
                let c = (!sa.same_content(sb)).then(|| FileChange {
                    path: (*pa).clone(),
                    before: Some(Version::from(*sa)),
                    after: Some(Version::from(*sb)),
                });
                ai.next();
                bi.next();
                c
            }
            (Some((pa, sa)), Some((pb, _))) if pa < pb => {
                let c = FileChange {
                    path: (*pa).clone(),
                    before: Some(Version::from(*sa)),
                    after: None,
                };
                ai.next();
                Some(c)
            }
            (Some((pa, sa)), None) => {
                let c = FileChange {
                    path: (*pa).clone(),
                    before: Some(Version::from(*sa)),
                    after: None,
                };
                ai.next();
                Some(c)
            }
            (_, Some((pb, sb))) => {
                let c = FileChange {
                    path: (*pb).clone(),
                    before: None,
                    after: Some(Version::from(*sb)),
                };
                bi.next();
                Some(c)
            }
        };
        out.extend(change);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_keep(_: &str, _: &FileState, _: &[u8]) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn a_rescan_hashes_only_what_changed_and_the_diff_names_it() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(root.join("README.md"), "# r").unwrap();
        std::fs::write(root.join("target/debug/big"), "ignored").unwrap();
        std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
        std::fs::write(root.join("x.log"), "ignored too").unwrap();
        let (m0, s0) = scan(root, &Manifest::default(), no_keep).unwrap();
        assert_eq!(
            m0.files.keys().collect::<Vec<_>>(),
            vec![".gitignore", "README.md", "src/main.rs"]
        );
        assert_eq!(s0.hashed, 3);
        // Old enough not to be racily clean: an unchanged rescan reads nothing.
        let mut aged = m0.clone();
        aged.scanned_at_ns += 10 * RACY_NS;
        let (m1, s1) = scan(root, &aged, no_keep).unwrap();
        assert_eq!(s1.hashed, 0);
        assert!(diff(&m0, &m1).is_empty());
        std::fs::write(root.join("src/main.rs"), "fn main() { println!(); }").unwrap();
        std::fs::remove_file(root.join("README.md")).unwrap();
        std::fs::write(root.join("src/new.rs"), "").unwrap();
        let mut kept = Vec::new();
        let (m2, s2) = scan(root, &aged, |p, _, b| {
            kept.push((p.to_owned(), b.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(s2.hashed, 2);
        assert_eq!(kept.len(), 2);
        let d = diff(&m1, &m2);
        let paths: Vec<(&str, bool, bool)> = d
            .iter()
            .map(|c| (c.path.as_str(), c.before.is_some(), c.after.is_some()))
            .collect();
        assert_eq!(
            paths,
            vec![
                ("README.md", true, false),
                ("src/main.rs", true, true),
                ("src/new.rs", false, true)
            ]
        );
    }

    #[test]
    fn a_file_changed_right_after_a_scan_is_hashed_again() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), "1").unwrap();
        let (m0, _) = scan(d.path(), &Manifest::default(), no_keep).unwrap();
        // Same size, and possibly the same mtime on a coarse clock: the racy rule catches it.
        std::fs::write(d.path().join("a"), "2").unwrap();
        let (m1, s1) = scan(d.path(), &m0, no_keep).unwrap();
        assert_eq!(s1.hashed, 1);
        assert_eq!(diff(&m0, &m1).len(), 1);
    }
}
