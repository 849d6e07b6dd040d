//! On-disk layout of a `.elf` document: a directory holding
//! - `ELFIEE` — marker file with the format version,
//! - `log/` — the sled database (events, snapshots, effect checkpoints),
//! - `HEAD` — the last committed seq and hash as of the last snapshot,
//! - `commands.idx` — the command index (see [`crate::cmd_index`]),
//! - `snapshots/` — state snapshots, the newest few,
//! - `content/` — the content store of large bodies (see [`crate::content`]),
//! - `assets/` — room for block assets written by effects.

use std::path::{Path, PathBuf};

use crate::error::EngineError;

/// The marker file's name: a folder with it is an `.elf` document.
pub const MARKER: &str = "ELFIEE";

/// The paths of one document's files, from its folder.
#[derive(Debug, Clone)]
pub struct ElfPaths {
    /// The document's folder.
    pub root: PathBuf,
}

impl ElfPaths {
    /// The paths of the document at `root` (nothing is checked or created).
    pub fn new(root: impl Into<PathBuf>) -> ElfPaths {
        ElfPaths { root: root.into() }
    }
    /// `ELFIEE`: the marker, with the format version.
    pub fn marker(&self) -> PathBuf {
        self.root.join(MARKER)
    }
    /// `log/`: the sled database.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("log")
    }
    /// `assets/`: room for block assets written by effects.
    pub fn assets_dir(&self) -> PathBuf {
        self.root.join("assets")
    }
    /// `HEAD`: the last committed seq and hash, kept outside sled so that a log that lost its
    /// tail (a damaged sled file) is detected instead of served.
    pub fn head_file(&self) -> PathBuf {
        self.root.join("HEAD")
    }

    /// Snapshot files, `<seq, 20 digits>.snap`; the newest few are kept.
    pub fn snapshots_dir(&self) -> PathBuf {
        self.root.join("snapshots")
    }

    /// The command index file (see [`crate::cmd_index`]).
    pub fn commands_index_file(&self) -> PathBuf {
        self.root.join("commands.idx")
    }

    /// The format version the marker names (`format_version = N`); `None` when the marker
    /// does not say (damaged: the log and the snapshots still carry their own versions).
    pub fn format_version(&self) -> Option<u32> {
        let text = std::fs::read(self.marker()).ok()?;
        String::from_utf8_lossy(&text).lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "format_version").then(|| v.trim().parse().ok())?
        })
    }

    /// Reads `HEAD` (`"<seq> <hash hex>"`); `None` if absent or unreadable.
    pub fn read_head(&self) -> Option<(u64, elfiee_model::EventHash)> {
        let text = std::fs::read_to_string(self.head_file()).ok()?;
        let mut parts = text.split_whitespace();
        let seq = parts.next()?.parse().ok()?;
        let hash = elfiee_model::EventHash::from_hex(parts.next()?)?;
        Some((seq, hash))
    }

    /// Writes `HEAD` durably (temp file, fsync, rename).
    pub fn write_head(&self, seq: u64, hash: &elfiee_model::EventHash) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = self.root.join(".HEAD.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{seq} {}", hash.to_hex())?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.head_file())?;
        sync_dir(&self.root)
    }

    /// Creates an empty document directory; refuses an existing non-empty path.
    pub fn create(path: &Path) -> Result<ElfPaths, EngineError> {
        if path.exists() {
            let empty_dir = path.is_dir()
                && std::fs::read_dir(path)
                    .map(|mut d| d.next().is_none())
                    .unwrap_or(false);
            if !empty_dir {
                return Err(EngineError::AlreadyExists(path.to_owned()));
            }
        }
        std::fs::create_dir_all(path.join("assets")).map_err(|e| EngineError::io(path, e))?;
        let marker = format!(
            "elfiee document\nformat_version = {}\n",
            elfiee_model::FORMAT_VERSION
        );
        std::fs::write(path.join(MARKER), marker).map_err(|e| EngineError::io(path, e))?;
        let root = path.canonicalize().map_err(|e| EngineError::io(path, e))?;
        // The new folder, its marker and `assets/` survive a power loss once the first commit
        // is acknowledged (`init` commits the owner's events).
        let synced = std::fs::File::open(root.join(MARKER))
            .and_then(|f| f.sync_all())
            .and_then(|()| sync_dir(&root.join("assets")))
            .and_then(|()| sync_dir(&root))
            .and_then(|()| root.parent().map_or(Ok(()), sync_dir));
        synced.map_err(|e| EngineError::io(&root, e))?;
        Ok(ElfPaths { root })
    }

    /// Finds an existing document; its canonical path is the registry key.
    pub fn existing(path: &Path) -> Result<ElfPaths, EngineError> {
        let root = path
            .canonicalize()
            .map_err(|_| EngineError::NotAnElf(path.to_owned()))?;
        if !root.join(MARKER).is_file() {
            return Err(EngineError::NotAnElf(path.to_owned()));
        }
        let paths = ElfPaths { root };
        if let Some(found) = paths.format_version() {
            if found > elfiee_model::FORMAT_VERSION {
                return Err(EngineError::NewerFormat {
                    path: path.to_owned(),
                    found,
                    supported: elfiee_model::FORMAT_VERSION,
                });
            }
        }
        Ok(paths)
    }
}

/// Makes the entries of folder `dir` (files created, renamed or removed in it) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Copies the folder `from` (a document, or any folder) to `to`, recursively: folders and
/// regular files (not sockets). A file that cannot be copied goes to `unreadable`, which
/// decides: an error stops the copy, `Ok` skips the file.
pub fn copy_tree(
    from: &Path,
    to: &Path,
    unreadable: impl Fn(&Path, std::io::Error) -> std::io::Result<()> + Copy,
) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (p, dest) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&p, &dest, unreadable)?;
        } else if kind.is_file() {
            if let Err(e) = std::fs::copy(&p, &dest) {
                unreadable(&p, e)?;
            }
        }
    }
    Ok(())
}

/// `path` as the filesystem resolves it: absolute, through every symlink of the part that
/// exists (the rest, not made yet, appended as given).
pub fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut rest = Vec::new();
    let mut at = abs.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return abs,
        }
    }
}

/// Refuses `target` (what `what` would write) when it lies inside the document `doc` (or is
/// it): a write into the document's own folder copies the document into itself or
/// overwrites the files it reads (issue 39, F2 and F3).
pub fn refuse_inside(doc: &Path, target: &Path, what: &str) -> Result<(), EngineError> {
    let (doc, target) = (resolved(doc), resolved(target));
    if target.starts_with(&doc) {
        return Err(EngineError::rejected(format!(
            "{what} {} would be inside the document {} it is made from; give a path outside that folder (beside it, for example)",
            target.display(),
            doc.display(),
        )));
    }
    Ok(())
}
