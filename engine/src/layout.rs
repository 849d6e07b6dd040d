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

    /// Finds an existing document; its canonical path is the registry key. Only a path or
    /// marker that is not there (or not a file) is "not an .elf"; any other failure to read
    /// them (an I/O error of a failing disk) is named with its path and errno (issue 39, P4).
    pub fn existing(path: &Path) -> Result<ElfPaths, EngineError> {
        let absent = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            )
        };
        let root = path.canonicalize().map_err(|e| match absent(&e) {
            true => EngineError::NotAnElf(path.to_owned()),
            false => EngineError::io(path, e),
        })?;
        match std::fs::metadata(root.join(MARKER)) {
            Ok(m) if m.is_file() => {}
            Err(e) if !absent(&e) => return Err(EngineError::io(root.join(MARKER), e)),
            _ => return Err(EngineError::NotAnElf(path.to_owned())),
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

/// Writes a new document at `to` whole or not at all (issue 39, P4): `write` fills a hidden
/// sibling folder (`.NAME.partial-PID`), which is renamed to `to`, and the rename synced, only
/// once `write` returned `Ok`; on an error it is removed. A power cut or a kill part way leaves
/// nothing at `to` (a restore or salvage run again is not refused), and the siblings left by
/// processes that are gone are removed by the next run. `to` must not exist, or be an empty
/// folder.
pub fn create_whole<T>(
    to: &Path,
    write: impl FnOnce(&ElfPaths) -> Result<T, EngineError>,
) -> Result<(ElfPaths, T), EngineError> {
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| EngineError::rejected(format!("{} names no folder", to.display())))?;
    let parent = match to.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if to.exists() && !(to.is_dir() && std::fs::read_dir(to).is_ok_and(|mut d| d.next().is_none()))
    {
        return Err(EngineError::AlreadyExists(to.to_owned()));
    }
    remove_left_behind(&parent, &name);
    let partial = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let paths = ElfPaths::create(&partial)?;
    let written = write(&paths).and_then(|v| {
        std::fs::rename(&paths.root, to)
            .and_then(|()| sync_dir(&parent))
            .and_then(|()| to.canonicalize())
            .map(|root| (ElfPaths { root }, v))
            .map_err(|e| EngineError::io(to, e))
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&paths.root);
    }
    written
}

/// Removes the hidden siblings of `name` in `parent` that a restore or salvage left when it
/// was cut short (`.NAME.partial-PID`, `.NAME.salvage-PID`), once their process is gone.
fn remove_left_behind(parent: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let pid = [".partial-", ".salvage-"].iter().find_map(|kind| {
            file.strip_prefix(&format!(".{name}{kind}"))
                .and_then(|p| p.parse::<i32>().ok())
        });
        // SAFETY: kill with signal 0 only asks whether the process exists.
        let gone = pid.is_some_and(|pid| {
            let alive = unsafe { libc::kill(pid, 0) } == 0;
            !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        });
        if gone {
            tracing::info!(folder = %e.path().display(), "removing what an interrupted restore or salvage left");
            let _ = std::fs::remove_dir_all(e.path());
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// P4 (issue 39): only a marker that is not there is "not an .elf"; one that cannot be
    /// read is an I/O error naming it and the errno.
    #[test]
    fn a_marker_that_cannot_be_read_is_named_not_taken_for_no_document() {
        let dir = tempfile::tempdir().unwrap();
        let doc = dir.path().join("d.elf");
        std::fs::create_dir(&doc).unwrap();
        assert!(matches!(
            ElfPaths::existing(&doc),
            Err(EngineError::NotAnElf(_))
        ));
        // A marker that loops on itself: reading it fails (ELOOP), as EIO would.
        std::os::unix::fs::symlink(doc.join(MARKER), doc.join(MARKER)).unwrap();
        let e = ElfPaths::existing(&doc).unwrap_err();
        assert!(matches!(e, EngineError::Io { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(MARKER) && text.contains("os error 40"),
            "{text}"
        );
    }

    /// P4: a new document is whole at its path or not there: a write that fails leaves
    /// nothing, one that succeeds is renamed into place; folders a process that is gone
    /// left behind are removed.
    #[test]
    fn a_new_document_appears_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("new.elf");
        // Left by a process that is gone (pid 2^22 + 1 exceeds Linux's pid_max).
        let stale = dir.path().join(".new.elf.partial-4194305");
        std::fs::create_dir(&stale).unwrap();
        let failed = create_whole(&to, |p| {
            assert!(!to.exists(), "written under another name");
            std::fs::write(p.root.join("half"), b"x").unwrap();
            Err::<(), _>(EngineError::Storage("cut short".into()))
        });
        assert!(failed.is_err());
        assert!(!to.exists());
        assert!(!stale.exists(), "a folder a gone process left was kept");
        let names = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        assert!(names().is_empty(), "{:?}", names());
        let (paths, n) = create_whole(&to, |p| {
            std::fs::write(p.root.join("whole"), b"x").unwrap();
            Ok(7)
        })
        .unwrap();
        assert_eq!((n, paths.root), (7, to.canonicalize().unwrap()));
        assert!(to.join("whole").exists() && to.join(MARKER).exists());
        assert_eq!(names(), vec!["new.elf".to_string()]);
        assert!(matches!(
            create_whole(&to, |_| Ok(())),
            Err(EngineError::AlreadyExists(_))
        ));
    }
}
