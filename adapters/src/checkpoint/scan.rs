//! What a project folder holds, file by file, found fast: a walk that trusts a cache of
//! `(size, mtime, ctime, inode) → hash` (git's index idea), so a rescan of a 10,000-file
//! project where one file changed reads and hashes one file.
//!
//! The walk honours `.gitignore` and skips `.git`, `target`, `node_modules` and `.elf`
//! documents, like the importer; symlinks are not followed and not recorded. A file whose
//! mtime is too close to the previous scan is hashed again ("racily clean": it may have
//! changed within the clock's granularity after the scan read it).

use std::cmp::Ordering;
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

/// The regular files under `root` (relative path, full path, metadata), in path order. The
/// walk runs on every core: a rescan's cost is this walk (a `stat` per file).
pub fn walk(root: &Path) -> Result<Vec<(String, PathBuf, std::fs::Metadata)>, String> {
    walk_with(root, |_| {})
}

/// [`walk`], calling `on_dir` with each folder it comes to before listing it.
pub fn walk_with(
    root: &Path,
    on_dir: impl Fn(&Path) + Sync,
) -> Result<Vec<(String, PathBuf, std::fs::Metadata)>, String> {
    if !root.is_dir() {
        return Err(format!("{} is not a folder", root.display()));
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let mut wb = crate::import::walk_builder(root);
    wb.threads(threads).filter_entry(|e| {
        !(e.depth() > 0
            && e.file_type().is_some_and(|t| t.is_dir())
            && skipped_dir(&e.file_name().to_string_lossy()))
    });
    type Found = Vec<(String, PathBuf, std::fs::Metadata)>;
    /// Each thread's finds, handed over when its visitor is dropped.
    struct Collector<'a> {
        local: Found,
        found: &'a std::sync::Mutex<Found>,
    }
    impl Drop for Collector<'_> {
        fn drop(&mut self) {
            self.found
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&mut self.local);
        }
    }
    let found = std::sync::Mutex::new(Vec::new());
    wb.build_parallel().run(|| {
        let mut c = Collector {
            local: Vec::new(),
            found: &found,
        };
        let on_dir = &on_dir;
        Box::new(move |entry| {
            if let Ok(entry) = entry {
                if entry.depth() > 0 && entry.file_type().is_some_and(|t| t.is_dir()) {
                    on_dir(entry.path());
                }
                if entry.file_type().is_some_and(|t| t.is_file()) {
                    if let Some(rel) = entry
                        .path()
                        .strip_prefix(root)
                        .ok()
                        .and_then(Path::to_str)
                        .filter(|r| !r.ends_with(".elf"))
                    {
                        if let Ok(meta) = entry.metadata() {
                            c.local.push((
                                rel.replace('\\', "/"),
                                entry.path().to_path_buf(),
                                meta,
                            ));
                        }
                    }
                }
            }
            ignore::WalkState::Continue
        })
    });
    let mut out = found.into_inner().unwrap_or_else(|p| p.into_inner());
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// What a `stat` says of a file, as the cache keeps it.
struct Stat {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    mode: u32,
}

impl Stat {
    fn of(meta: &std::fs::Metadata) -> Stat {
        Stat {
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            ino: meta.ino(),
            mode: meta.mode() & 0o7777,
        }
    }

    /// Whether `cached` (from a scan that started at `scanned_at_ns`) can be trusted for a
    /// file with this stat: nothing changed, and not racily clean.
    fn trusts(&self, cached: &FileState, scanned_at_ns: i128) -> bool {
        cached.len == self.len
            && cached.mtime_ns == self.mtime_ns
            && cached.ctime_ns == self.ctime_ns
            && cached.ino == self.ino
            && cached.mode == self.mode
            && self.mtime_ns < scanned_at_ns - RACY_NS
    }
}

/// Files larger than this are tracked by hash but their bytes are not kept in the document
/// (a video in the project would otherwise be copied into the `.elf` at the first step); an
/// undo that needs one is refused, naming it. The scan never holds more of a file than this.
pub const MAX_KEPT_BYTES: u64 = 64 * 1024 * 1024;

/// The blake3 and length of the regular file at `path`, and its bytes when they are at most
/// [`MAX_KEPT_BYTES`] (else empty: a larger file is hashed in pieces, never held whole, so a
/// huge or endless file costs bounded memory). Opened without waiting on a FIFO put there
/// since the walk (issue 39: every input bounded before it is read).
///
fn read_bounded(path: &Path) -> std::io::Result<(blake3::Hash, u64, Vec<u8>)> {
    use std::io::Read;
    let limit = MAX_KEPT_BYTES;
    let mut f = crate::bounded::open_regular(path)?;
    let mut bytes = Vec::new();
    (&mut f).take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 <= limit {
        return Ok((blake3::hash(&bytes), bytes.len() as u64, bytes));
    }
    let mut h = blake3::Hasher::new();
    h.update(&bytes);
    let len = bytes.len() as u64 + std::io::copy(&mut f, &mut h)?;
    Ok((h.finalize(), len, Vec::new()))
}

/// Reads and hashes the file at `path` (`Ok(None)`: gone since its stat), counts it in
/// `stats` and hands its bytes to `on_new`.
fn read_new(
    rel: &str,
    path: &Path,
    st: &Stat,
    stats: &mut ScanStats,
    on_new: &mut impl FnMut(&str, &FileState, &[u8]) -> Result<(), String>,
) -> Result<Option<FileState>, String> {
    let (hash, len, bytes) = match read_bounded(path) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    stats.hashed += 1;
    stats.hashed_bytes += len;
    let state = FileState {
        hash: hash.to_hex().to_string(),
        len,
        mode: st.mode,
        mtime_ns: st.mtime_ns,
        ctime_ns: st.ctime_ns,
        ino: st.ino,
    };
    on_new(rel, &state, &bytes)?;
    Ok(Some(state))
}

/// Scans `root`, taking each file's hash from `cache` when its size, times and inode match
/// and it is not racily clean; `on_new` gets the bytes of every file it hashed (to keep
/// them; none for a file over [`MAX_KEPT_BYTES`]). Returns the new manifest and what
/// it cost.
pub fn scan(
    root: &Path,
    cache: &Manifest,
    on_new: impl FnMut(&str, &FileState, &[u8]) -> Result<(), String>,
) -> Result<(Manifest, ScanStats), String> {
    scan_with(root, cache, on_new, |_| {})
}

/// [`scan`], calling `on_dir` with each folder the walk comes to before listing it.
pub fn scan_with(
    root: &Path,
    cache: &Manifest,
    mut on_new: impl FnMut(&str, &FileState, &[u8]) -> Result<(), String>,
    on_dir: impl Fn(&Path) + Sync,
) -> Result<(Manifest, ScanStats), String> {
    let started = now_ns();
    // In path order, so the map is built in bulk.
    let mut files = Vec::new();
    let mut stats = ScanStats::default();
    for (rel, path, meta) in walk_with(root, on_dir)? {
        stats.files += 1;
        let st = Stat::of(&meta);
        let state = match cache.files.get(&rel) {
            Some(c) if st.trusts(c, cache.scanned_at_ns) => c.clone(),
            // Gone (or unreadable) between the walk and the read: not there.
            _ => match read_new(&rel, &path, &st, &mut stats, &mut on_new)? {
                Some(state) => state,
                None => continue,
            },
        };
        files.push((rel, state));
    }
    Ok((
        Manifest {
            files: files.into_iter().collect(),
            scanned_at_ns: started,
        },
        stats,
    ))
}

/// Whether the walk would leave `rel` out by an ignore file (`.ignore`, `.gitignore` in the
/// folders on its way, deepest first, then `.git/info/exclude`), judged from the ignore files
/// `manifest` holds.
fn ignored(root: &Path, manifest: &Manifest, rel: &str) -> bool {
    let full = root.join(rel);
    let mut dirs: Vec<&str> = vec![""];
    for (i, c) in rel.char_indices() {
        if c == '/' {
            dirs.push(&rel[..i]);
        }
    }
    for dir in dirs.iter().rev() {
        for name in [".ignore", ".gitignore"] {
            let file = if dir.is_empty() {
                name.to_owned()
            } else {
                format!("{dir}/{name}")
            };
            if !manifest.files.contains_key(&file) {
                continue;
            }
            let (gi, _) = ignore::gitignore::Gitignore::new(root.join(&file));
            let m = gi.matched_path_or_any_parents(&full, false);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
    }
    let exclude = root.join(".git/info/exclude");
    if exclude.is_file() {
        let mut b = ignore::gitignore::GitignoreBuilder::new(root);
        b.add(exclude);
        if let Ok(gi) = b.build() {
            return gi.matched_path_or_any_parents(&full, false).is_ignore();
        }
    }
    false
}

/// [`scan`] of only the `changed` paths (absolute, from a [`super::watch::FolderWatch`]):
/// `Ok(None)` when that cannot be precise (a folder made, moved or removed, an ignore file
/// changed), and then the caller walks.
pub fn rescan_paths(
    root: &Path,
    last: &Manifest,
    changed: &std::collections::BTreeSet<PathBuf>,
    on_new: impl FnMut(&str, &FileState, &[u8]) -> Result<(), String>,
) -> Result<Option<(Manifest, ScanStats)>, String> {
    let mut m = last.clone();
    Ok(rescan_paths_in_place(root, &mut m, changed, on_new)?.map(|(_, stats)| (m, stats)))
}

/// [`rescan_paths`] into `manifest` itself, returning what changed as [`diff`] would (in
/// path order) without copying or comparing the whole manifest: a checkpoint of a
/// 10,000-file folder where one file changed costs that file. On `Ok(None)` (the caller
/// walks) and on an error, `manifest` is left as it was.
pub fn rescan_paths_in_place(
    root: &Path,
    manifest: &mut Manifest,
    changed: &std::collections::BTreeSet<PathBuf>,
    mut on_new: impl FnMut(&str, &FileState, &[u8]) -> Result<(), String>,
) -> Result<Option<(Vec<FileChange>, ScanStats)>, String> {
    let started = now_ns();
    let mut stats = ScanStats::default();
    // Each path this rescan touched, with its state before (path order, as `diff`'s).
    let mut before: BTreeMap<String, Option<FileState>> = BTreeMap::new();
    let found = rescan_into(
        root,
        manifest,
        changed,
        &mut on_new,
        &mut stats,
        &mut before,
    );
    if !matches!(found, Ok(true)) {
        for (path, old) in before {
            match old {
                Some(s) => manifest.files.insert(path, s),
                None => manifest.files.remove(&path),
            };
        }
        return found.map(|_| None);
    }
    let changes = before
        .into_iter()
        .filter_map(|(path, a)| {
            let b = manifest.files.get(&path);
            match (a, b) {
                (Some(a), Some(b)) => (!a.same_content(b)).then(|| FileChange {
                    before: Some(Version::from(&a)),
                    after: Some(Version::from(b)),
                    path,
                }),
                (Some(a), None) => Some(FileChange {
                    before: Some(Version::from(&a)),
                    after: None,
                    path,
                }),
                (None, Some(b)) => Some(FileChange {
                    before: None,
                    after: Some(Version::from(b)),
                    path,
                }),
                (None, None) => None,
            }
        })
        .collect();
    stats.files = manifest.files.len();
    manifest.scanned_at_ns = started;
    Ok(Some((changes, stats)))
}

/// The loop of [`rescan_paths_in_place`]: `Ok(false)` when a walk is needed. Every path it
/// changes in `m` is in `before` with its earlier state first.
fn rescan_into(
    root: &Path,
    m: &mut Manifest,
    changed: &std::collections::BTreeSet<PathBuf>,
    on_new: &mut impl FnMut(&str, &FileState, &[u8]) -> Result<(), String>,
    stats: &mut ScanStats,
    before: &mut BTreeMap<String, Option<FileState>>,
) -> Result<bool, String> {
    // The manifest's ignore files and its scan time stay as they were during the loop (an
    // ignore file changed, or a folder, means a walk), so `m` serves as the previous scan.
    let scanned_at_ns = m.scanned_at_ns;
    let mut remember = |m: &Manifest, rel: &str| {
        before
            .entry(rel.to_owned())
            .or_insert_with(|| m.files.get(rel).cloned());
    };
    for p in changed {
        let Some(rel) = p.strip_prefix(root).ok().and_then(Path::to_str) else {
            continue;
        };
        if rel.is_empty() {
            continue;
        }
        let rel = rel.replace('\\', "/");
        let mut parts = rel.split('/');
        let name = parts.next_back().unwrap_or_default();
        if parts.any(skipped_dir) || name.ends_with(".elf") {
            continue;
        }
        if matches!(name, ".gitignore" | ".ignore") {
            return Ok(false);
        }
        let prefix = format!("{rel}/");
        let holds_files = |m: &Manifest| {
            m.files
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&prefix))
        };
        match std::fs::symlink_metadata(p) {
            Ok(meta) if meta.is_dir() => return Ok(false),
            Ok(meta) if meta.is_file() => {
                if !m.files.contains_key(&rel) && ignored(root, m, &rel) {
                    continue;
                }
                let st = Stat::of(&meta);
                if m.files
                    .get(&rel)
                    .is_some_and(|c| st.trusts(c, scanned_at_ns))
                {
                    continue;
                }
                let Some(state) = read_new(&rel, p, &st, stats, &mut *on_new)? else {
                    remember(m, &rel);
                    m.files.remove(&rel);
                    continue;
                };
                remember(m, &rel);
                m.files.insert(rel, state);
            }
            // Gone, or not a regular file (a symlink): not in the folder's files.
            _ => {
                if holds_files(m) {
                    return Ok(false);
                }
                remember(m, &rel);
                m.files.remove(&rel);
            }
        }
    }
    Ok(true)
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
        // Which side holds the next path: only `a` (deleted), only `b` (created), or both.
        let order = match (ai.peek(), bi.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((pa, _)), Some((pb, _))) => pa.cmp(pb),
        };
        let change = match order {
            Ordering::Equal => {
                let ((path, sa), (_, sb)) = (ai.next().unwrap(), bi.next().unwrap());
                (!sa.same_content(sb)).then(|| FileChange {
                    path: path.clone(),
                    before: Some(Version::from(sa)),
                    after: Some(Version::from(sb)),
                })
            }
            Ordering::Less => {
                let (path, sa) = ai.next().unwrap();
                Some(FileChange {
                    path: path.clone(),
                    before: Some(Version::from(sa)),
                    after: None,
                })
            }
            Ordering::Greater => {
                let (path, sb) = bi.next().unwrap();
                Some(FileChange {
                    path: path.clone(),
                    before: None,
                    after: Some(Version::from(sb)),
                })
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
    fn a_file_over_the_kept_limit_is_hashed_in_pieces_and_its_bytes_not_handed_on() {
        let d = tempfile::tempdir().unwrap();
        let big = vec![7u8; (MAX_KEPT_BYTES + 4096) as usize];
        std::fs::write(d.path().join("big.bin"), &big).unwrap();
        std::fs::write(d.path().join("small.txt"), "small").unwrap();
        let mut handed = Vec::new();
        let (m, _) = scan(d.path(), &Manifest::default(), |rel, st, bytes| {
            handed.push((rel.to_owned(), st.len, bytes.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            m.files["big.bin"].hash,
            blake3::hash(&big).to_hex().to_string()
        );
        assert_eq!(m.files["big.bin"].len, big.len() as u64);
        handed.sort();
        assert_eq!(
            handed,
            vec![
                ("big.bin".to_owned(), big.len() as u64, 0),
                ("small.txt".to_owned(), 5, 5)
            ]
        );
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

    #[test]
    fn a_rescan_in_place_is_a_rescan_and_its_diff() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        for (p, t) in [
            ("a-b.rs", "1"),
            ("a/b.rs", "2"),
            ("a/c.rs", "3"),
            ("gone.txt", "4"),
            (".gitignore", "*.log\n"),
        ] {
            std::fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            std::fs::write(root.join(p), t).unwrap();
        }
        let (mut m0, _) = scan(root, &Manifest::default(), no_keep).unwrap();
        m0.scanned_at_ns += 10 * RACY_NS;
        std::fs::write(root.join("a/b.rs"), "22").unwrap();
        std::fs::write(root.join("a-b.rs"), "11").unwrap();
        std::fs::write(root.join("new.rs"), "5").unwrap();
        std::fs::write(root.join("x.log"), "ignored").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        let changed: std::collections::BTreeSet<PathBuf> = [
            "a/b.rs", "a-b.rs", "a/c.rs", "new.rs", "x.log", "gone.txt", "never.rs",
        ]
        .iter()
        .map(|p| root.join(p))
        .collect();
        let (m1, s1) = rescan_paths(root, &m0, &changed, no_keep).unwrap().unwrap();
        let mut m2 = m0.clone();
        let (changes, s2) = rescan_paths_in_place(root, &mut m2, &changed, no_keep)
            .unwrap()
            .unwrap();
        assert_eq!(m2.files, m1.files);
        assert_eq!(changes, diff(&m0, &m1), "the changes, in path order");
        assert_eq!(changes.len(), 4);
        assert_eq!((s2.files, s2.hashed), (s1.files, s1.hashed));
        // A folder made: a walk is needed, and the manifest is left as it was.
        std::fs::create_dir_all(root.join("sub")).unwrap();
        let with_dir: std::collections::BTreeSet<PathBuf> = [root.join("a-b.rs"), root.join("sub")]
            .into_iter()
            .collect();
        std::fs::write(root.join("a-b.rs"), "111").unwrap();
        let before = m2.clone();
        assert!(rescan_paths_in_place(root, &mut m2, &with_dir, no_keep)
            .unwrap()
            .is_none());
        assert_eq!(m2, before);
    }
}
