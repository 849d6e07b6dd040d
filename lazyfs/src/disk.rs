//! The backing directory: read whole into a [`Tree`] at mount, written back from what a cut
//! (or a clean unmount) leaves. Between the two it is not touched, so after an unmount it holds
//! exactly what was durable at the cut.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use crate::tree::{Ino, Kind, Node, Persisted, Tree, ROOT};

/// Reads `backing` into a tree whose every file and entry is durable.
pub fn load(backing: &Path) -> io::Result<Tree> {
    let mut tree = Tree::new();
    let meta = fs::metadata(backing)?;
    if let Some(root) = tree.nodes.get_mut(&ROOT) {
        root.perm = (meta.mode() & 0o7777) as u16;
        root.uid = meta.uid();
        root.gid = meta.gid();
    }
    let mut seen: HashMap<u64, Ino> = HashMap::new();
    load_dir(&mut tree, backing, ROOT, &mut seen)?;
    Ok(tree)
}

fn load_dir(tree: &mut Tree, dir: &Path, ino: Ino, seen: &mut HashMap<u64, Ino>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let meta = fs::symlink_metadata(&path)?;
        let name = entry.file_name();
        if meta.nlink() > 1 && !meta.is_dir() {
            if let Some(&other) = seen.get(&meta.ino()) {
                tree.link(other, ino, &name)
                    .map_err(io::Error::from_raw_os_error)?;
                tree.sync_dir(ino).map_err(io::Error::from_raw_os_error)?;
                continue;
            }
        }
        let ft = meta.file_type();
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Symlink(fs::read_link(&path)?)
        } else if ft.is_socket() {
            Kind::Socket
        } else if ft.is_fifo() {
            Kind::Fifo
        } else if ft.is_file() {
            Kind::File
        } else {
            continue;
        };
        let mut node = Node::new(
            kind.clone(),
            (meta.mode() & 0o7777) as u16,
            meta.uid(),
            meta.gid(),
            ino,
        );
        if let Ok(t) = meta.modified() {
            node.mtime = t;
            node.ctime = t;
        }
        if kind == Kind::File {
            node.data = fs::read(&path)?;
            node.durable = node.data.clone();
        }
        let child = tree
            .make(ino, &name, node, true)
            .map_err(io::Error::from_raw_os_error)?;
        seen.insert(meta.ino(), child);
        if kind == Kind::Dir {
            load_dir(tree, &path, child, seen)?;
        }
    }
    Ok(())
}

/// Replaces everything under `backing` with `image` (the inodes' kinds and modes from `tree`).
pub fn render(tree: &Tree, image: &Persisted, backing: &Path) -> io::Result<()> {
    for entry in fs::read_dir(backing)? {
        let path = entry?.path();
        if fs::symlink_metadata(&path)?.is_dir() {
            fs::remove_dir_all(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
    }
    let mut files: HashMap<Ino, std::path::PathBuf> = HashMap::new();
    let mut dirs: HashSet<Ino> = HashSet::from([ROOT]);
    render_dir(tree, image, ROOT, backing, &mut files, &mut dirs)
}

fn render_dir(
    tree: &Tree,
    image: &Persisted,
    ino: Ino,
    at: &Path,
    files: &mut HashMap<Ino, std::path::PathBuf>,
    dirs: &mut HashSet<Ino>,
) -> io::Result<()> {
    let Some(entries) = image.entries.get(&ino) else {
        return Ok(());
    };
    for (name, child) in entries {
        let Some(node) = tree.nodes.get(child) else {
            continue;
        };
        let path = at.join(name);
        match &node.kind {
            Kind::Dir => {
                // A cut can leave a directory under two names (a rename across directories
                // half durable); it is written once.
                if !dirs.insert(*child) {
                    continue;
                }
                fs::create_dir(&path)?;
                render_dir(tree, image, *child, &path, files, dirs)?;
                fs::set_permissions(&path, fs::Permissions::from_mode(node.perm as u32))?;
            }
            Kind::File => {
                if let Some(first) = files.get(child) {
                    fs::hard_link(first, &path)?;
                    continue;
                }
                let empty = Vec::new();
                fs::write(&path, image.data.get(child).unwrap_or(&empty))?;
                fs::set_permissions(&path, fs::Permissions::from_mode(node.perm as u32))?;
                files.insert(*child, path);
            }
            Kind::Symlink(target) => std::os::unix::fs::symlink(target, &path)?,
            Kind::Socket | Kind::Fifo => {
                let kind = if node.kind == Kind::Socket {
                    libc::S_IFSOCK
                } else {
                    libc::S_IFIFO
                };
                let c = CString::new(path.as_os_str().as_bytes())?;
                // SAFETY: a valid NUL-terminated path; mknod of a socket or FIFO needs no device.
                let rc = unsafe { libc::mknod(c.as_ptr(), kind | node.perm as libc::mode_t, 0) };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
    }
    Ok(())
}
