//! Putting a project file back as an undo found it: read what the disk holds now, and write a
//! version back atomically and durably (split from `revert.rs`).

use std::path::Path;

use elfiee_engine::EngineError;

use super::record::storage;
use super::scan::Version;

/// A regular file's bytes and mode.
pub(super) type Kept = (Vec<u8>, u32);

/// The version a file on disk holds now (`None`: absent), and its bytes and mode when it is a
/// regular file (to put back if a later write fails).
pub(super) fn on_disk(path: &Path) -> Result<(Option<Version>, Option<Kept>), EngineError> {
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
/// atomically and durably: a temporary file, synced, renamed over it, and the folder synced
/// (with every folder made for it), so that a power cut leaves the old file or the new one,
/// never a torn one, and an acknowledged undo stays done (issue 39).
pub(super) fn put_file(path: &Path, content: Option<&Kept>) -> Result<(), EngineError> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let io = |e: std::io::Error| storage(format!("cannot write {}: {e}", path.display()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match content {
        None => match std::fs::remove_file(path) {
            Ok(()) => elfiee_engine::layout::sync_dir(dir).map_err(io),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(e)),
        },
        Some((bytes, mode)) => {
            make_dirs(dir).map_err(io)?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let tmp = path.with_file_name(format!(".{name}.elfiee-undo.tmp"));
            let written = (|| {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(bytes)?;
                f.set_permissions(std::fs::Permissions::from_mode(*mode))?;
                f.sync_all()?;
                std::fs::rename(&tmp, path)?;
                elfiee_engine::layout::sync_dir(dir)
            })();
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            written.map_err(io)
        }
    }
}

/// `create_dir_all`, each folder it made synced into its parent.
fn make_dirs(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        make_dirs(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => elfiee_engine::layout::sync_dir(p),
            _ => elfiee_engine::layout::sync_dir(Path::new(".")),
        },
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}
