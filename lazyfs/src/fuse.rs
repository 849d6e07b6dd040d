//! The kernel's side: every FUSE request answered from the [`Tree`] in memory. Once a cut is
//! taken every request fails with `EIO`, as a disk that lost power would.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::tree::{Cut, CutReport, Ino, Kind, Node, Persisted, Tree};

/// The tree and, once cut, what the cut left.
pub struct State {
    pub tree: Tree,
    pub cut: Option<(Persisted, CutReport)>,
}

/// Shared between the FUSE session's thread and the test's handle.
pub type Shared = Arc<Mutex<State>>;

pub fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panic in a request handler must not wedge every later request.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// Takes the cut now: later requests fail, the image is fixed.
    pub fn cut(&mut self, how: Cut) -> CutReport {
        if let Some((_, report)) = &self.cut {
            return *report;
        }
        let (image, report) = self.tree.persisted(how);
        self.cut = Some((image, report));
        report
    }
}

pub struct LazyFs {
    pub shared: Shared,
}

const TTL: Duration = Duration::from_secs(1);

fn attr(ino: Ino, n: &Node) -> FileAttr {
    let kind = match n.kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink(_) => FileType::Symlink,
        Kind::Socket => FileType::Socket,
        Kind::Fifo => FileType::NamedPipe,
    };
    let size = n.size();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: n.atime,
        mtime: n.mtime,
        ctime: n.ctime,
        crtime: n.ctime,
        kind,
        perm: n.perm,
        nlink: n.nlink,
        uid: n.uid,
        gid: n.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl LazyFs {
    /// The state, or `EIO` once cut.
    fn live(&self) -> Result<MutexGuard<'_, State>, Errno> {
        let s = lock(&self.shared);
        if s.cut.is_some() {
            Err(Errno::EIO)
        } else {
            Ok(s)
        }
    }

    fn entry_of(&self, ino: Result<Ino, i32>, reply: ReplyEntry) {
        let s = match self.live() {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        match ino.and_then(|ino| s.tree.node(ino).map(|n| attr(ino, n))) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        perm: u32,
    ) -> Result<FileAttr, Errno> {
        let mut s = self.live()?;
        let node = Node::new(kind, (perm & 0o7777) as u16, req.uid(), req.gid(), parent.0);
        let ino = s
            .tree
            .make(parent.0, name, node, false)
            .map_err(Errno::from_i32)?;
        Ok(attr(ino, s.tree.node(ino).map_err(Errno::from_i32)?))
    }

    /// Runs `f` on the tree (`EIO` once cut) and answers with its outcome, the lock released.
    fn change(&self, reply: ReplyEmpty, f: impl FnOnce(&mut Tree) -> Result<(), i32>) {
        let r = match self.live() {
            Ok(mut s) => f(&mut s.tree),
            Err(e) => return reply.error(e),
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }
}

impl Filesystem for LazyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = match self.live() {
            Ok(s) => s.tree.lookup(parent.0, name),
            Err(e) => return reply.error(e),
        };
        self.entry_of(ino, reply)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = match self.live() {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        match s.tree.node(ino.0) {
            Ok(n) => reply.attr(&TTL, &attr(ino.0, n)),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _ = req;
        let mut s = match self.live() {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        if let Some(len) = size {
            if let Err(e) = s.tree.set_len(ino.0, len) {
                return reply.error(Errno::from_i32(e));
            }
        }
        let Some(n) = s.tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(m) = mode {
            n.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = uid {
            n.uid = u;
        }
        if let Some(g) = gid {
            n.gid = g;
        }
        if let Some(t) = atime {
            n.atime = time(t);
        }
        if let Some(t) = mtime {
            n.mtime = time(t);
        }
        n.ctime = SystemTime::now();
        reply.attr(&TTL, &attr(ino.0, n))
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let s = match self.live() {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        match s.tree.node(ino.0).map(|n| &n.kind) {
            Ok(Kind::Symlink(t)) => reply.data(t.as_os_str().as_encoded_bytes()),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFIFO => Kind::Fifo,
            _ => return reply.error(Errno::EPERM),
        };
        match self.make(req, parent, name, kind, mode & !umask) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.make(req, parent, name, Kind::Dir, mode & !umask) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.change(reply, |t| t.remove(parent.0, name, false))
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.change(reply, |t| t.remove(parent.0, name, true))
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        match self.make(
            req,
            parent,
            link_name,
            Kind::Symlink(target.to_owned()),
            0o777,
        ) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        self.change(reply, |t| {
            t.rename(parent.0, name, newparent.0, newname, noreplace)
        })
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = match self.live() {
            Ok(mut s) => s.tree.link(ino.0, newparent.0, newname).map(|()| ino.0),
            Err(e) => return reply.error(e),
        };
        self.entry_of(r, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.live().map(|s| s.tree.node(ino.0).is_ok()) {
            Ok(true) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(false) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = match self.live() {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        match s.tree.read(ino.0, offset, size) {
            Ok(bytes) => reply.data(bytes),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // A file opened O_SYNC / O_DSYNC is synced by every write.
        let synced = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
        match self.live() {
            Ok(mut s) => match s.tree.write(ino.0, offset, data).and_then(|()| {
                if synced {
                    s.tree.sync_file(ino.0)
                } else {
                    Ok(())
                }
            }) {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(Errno::from_i32(e)),
            },
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.change(reply, |t| t.sync_file(ino.0))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.live().map(|s| s.tree.node(ino.0).map(|n| n.is_dir())) {
            Ok(Ok(true)) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(Ok(false)) => reply.error(Errno::ENOTDIR),
            Ok(Err(e)) => reply.error(Errno::from_i32(e)),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = match self.live() {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        let Ok(dir) = s.tree.node(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let mut all = vec![
            (ino.0, FileType::Directory, OsStr::new(".")),
            (dir.parent, FileType::Directory, OsStr::new("..")),
        ];
        for (name, child) in &dir.entries {
            let kind = match s.tree.node(*child).map(|n| &n.kind) {
                Ok(Kind::Dir) => FileType::Directory,
                Ok(Kind::Symlink(_)) => FileType::Symlink,
                Ok(Kind::Socket) => FileType::Socket,
                Ok(Kind::Fifo) => FileType::NamedPipe,
                _ => FileType::RegularFile,
            };
            all.push((*child, kind, name.as_os_str()));
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.change(reply, |t| t.sync_dir(ino.0))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096)
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Root runs the tests; permission bits are the kernel's business (default_permissions).
        reply.ok()
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.make(req, parent, name, Kind::File, mode & !umask) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        self.change(reply, |t| {
            let len = t.node(ino.0).map(|n| n.data.len() as u64).unwrap_or(0);
            if offset + length > len {
                t.set_len(ino.0, offset + length)
            } else {
                Ok(())
            }
        })
    }
}
