//! The filesystem as the programs see it, and as a power cut would leave it.
//!
//! Every inode keeps two images: the current one (what reads return) and the durable one (what
//! survived the last `fsync` of that file, or the last `fsync` of that directory for its
//! entries), plus the operations in between, in order. A cut is then computed, not simulated:
//! the durable images, plus (optionally) some of the operations since. Nothing here does I/O;
//! `disk.rs` loads and writes the backing directory, `fuse.rs` answers the kernel.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::SystemTime;

/// An inode number (1 is the root).
pub type Ino = u64;

/// The root directory's inode.
pub const ROOT: Ino = 1;

/// The sector size a torn write is cut at.
pub const SECTOR: u64 = 512;

/// What an inode is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink(PathBuf),
    Socket,
    Fifo,
}

/// A change to a file's bytes not yet made durable.
#[derive(Clone, Debug)]
pub enum DataOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

/// A change to a directory's entries not yet made durable. A rename inside one directory is one
/// operation (atomic, as journaling filesystems make it); across directories it is an unlink in
/// one and a link in the other, each durable with its own directory.
#[derive(Clone, Debug)]
pub enum DirOp {
    Link(OsString, Ino),
    Unlink(OsString),
    Rename(OsString, OsString),
}

/// One inode.
#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    /// Permission bits (`0o7777`).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Links in the current tree.
    pub nlink: u32,
    /// A directory's parent in the current tree (for `..`).
    pub parent: Ino,
    pub data: Vec<u8>,
    pub durable: Vec<u8>,
    pub pending: Vec<DataOp>,
    pub entries: BTreeMap<OsString, Ino>,
    pub durable_entries: BTreeMap<OsString, Ino>,
    pub dir_pending: Vec<DirOp>,
}

impl Node {
    pub fn new(kind: Kind, perm: u16, uid: u32, gid: u32, parent: Ino) -> Node {
        let now = SystemTime::now();
        Node {
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            kind,
            perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            parent,
            data: Vec::new(),
            durable: Vec::new(),
            pending: Vec::new(),
            entries: BTreeMap::new(),
            durable_entries: BTreeMap::new(),
            dir_pending: Vec::new(),
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }

    /// The size `stat` reports.
    pub fn size(&self) -> u64 {
        match &self.kind {
            Kind::File => self.data.len() as u64,
            Kind::Symlink(target) => target.as_os_str().len() as u64,
            Kind::Dir => 4096,
            Kind::Socket | Kind::Fifo => 0,
        }
    }
}

/// An errno the kernel gets back.
pub type Errno = i32;

/// How a power cut treats what was not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Everything not synced is lost: the backing directory keeps exactly the durable images.
    DropAll,
    /// Some of it reached the disk: per file a random subset (in order) of its unsynced writes,
    /// the last of them possibly torn at a 512-byte boundary; per directory a random prefix of
    /// its unsynced entry changes. Seeded, so a failing cut can be replayed.
    Some { seed: u64, tear: bool },
}

/// What a cut threw away (or, with [`Cut::Some`], kept).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Unsynced writes (and truncations) lost.
    pub writes_lost: u64,
    /// Bytes of those writes.
    pub bytes_lost: u64,
    /// Unsynced writes applied anyway (only [`Cut::Some`]).
    pub writes_kept: u64,
    /// Writes applied only in part (only [`Cut::Some`] with `tear`).
    pub writes_torn: u64,
    /// Directory entry changes lost.
    pub dir_ops_lost: u64,
    /// Directory entry changes applied anyway (only [`Cut::Some`]).
    pub dir_ops_kept: u64,
}

/// What survives a cut: per inode its bytes (files) or entries (directories).
#[derive(Clone, Debug, Default)]
pub struct Persisted {
    pub data: HashMap<Ino, Vec<u8>>,
    pub entries: HashMap<Ino, BTreeMap<OsString, Ino>>,
}

/// Counters of what the programs did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub writes: u64,
    pub fsyncs: u64,
    pub dir_fsyncs: u64,
}

/// The whole filesystem.
#[derive(Clone, Debug)]
pub struct Tree {
    pub nodes: HashMap<Ino, Node>,
    next: Ino,
    pub counters: Counters,
}

/// A small deterministic generator (splitmix64): the cut needs no more.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

fn apply_data(data: &mut Vec<u8>, op: &DataOp) {
    match op {
        DataOp::Write { offset, bytes } => {
            let start = *offset as usize;
            let end = start + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[start..end].copy_from_slice(bytes);
        }
        DataOp::SetLen(len) => data.resize(*len as usize, 0),
    }
}

fn apply_dir(entries: &mut BTreeMap<OsString, Ino>, op: &DirOp) {
    match op {
        DirOp::Link(name, ino) => {
            entries.insert(name.clone(), *ino);
        }
        DirOp::Unlink(name) => {
            entries.remove(name);
        }
        DirOp::Rename(from, to) => {
            if let Some(ino) = entries.remove(from) {
                entries.insert(to.clone(), ino);
            }
        }
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}

impl Tree {
    /// An empty filesystem: the root directory alone, durable.
    pub fn new() -> Tree {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT, Node::new(Kind::Dir, 0o755, 0, 0, ROOT));
        Tree {
            nodes,
            next: ROOT + 1,
            counters: Counters::default(),
        }
    }

    pub fn node(&self, ino: Ino) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn node_mut(&mut self, ino: Ino) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: Ino) -> Result<&Node, Errno> {
        let n = self.node(ino)?;
        if n.is_dir() {
            Ok(n)
        } else {
            Err(libc::ENOTDIR)
        }
    }

    pub fn lookup(&self, parent: Ino, name: &OsStr) -> Result<Ino, Errno> {
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    /// Makes a new inode under `parent` (not durable until the parent is synced). Used when
    /// loading the backing directory too, where `durable` makes the entry durable at once.
    pub fn make(
        &mut self,
        parent: Ino,
        name: &OsStr,
        node: Node,
        durable: bool,
    ) -> Result<Ino, Errno> {
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next;
        self.next += 1;
        let is_dir = node.is_dir();
        self.nodes.insert(ino, node);
        let p = self.node_mut(parent)?;
        p.entries.insert(name.to_owned(), ino);
        if durable {
            p.durable_entries.insert(name.to_owned(), ino);
        } else {
            p.dir_pending.push(DirOp::Link(name.to_owned(), ino));
        }
        if is_dir {
            p.nlink += 1;
        }
        let now = SystemTime::now();
        p.mtime = now;
        p.ctime = now;
        Ok(ino)
    }

    /// A hard link (`link(2)`).
    pub fn link(&mut self, ino: Ino, parent: Ino, name: &OsStr) -> Result<(), Errno> {
        if self.node(ino)?.is_dir() {
            return Err(libc::EPERM);
        }
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let p = self.node_mut(parent)?;
        p.entries.insert(name.to_owned(), ino);
        p.dir_pending.push(DirOp::Link(name.to_owned(), ino));
        self.node_mut(ino)?.nlink += 1;
        Ok(())
    }

    /// `unlink(2)` (`dir` false) or `rmdir(2)` (`dir` true).
    pub fn remove(&mut self, parent: Ino, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        let n = self.node(ino)?;
        match (dir, n.is_dir()) {
            (false, true) => return Err(libc::EISDIR),
            (true, false) => return Err(libc::ENOTDIR),
            (true, true) if !n.entries.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        let p = self.node_mut(parent)?;
        p.entries.remove(name);
        p.dir_pending.push(DirOp::Unlink(name.to_owned()));
        if dir {
            p.nlink -= 1;
        }
        let n = self.node_mut(ino)?;
        n.nlink = if dir { 0 } else { n.nlink.saturating_sub(1) };
        Ok(())
    }

    fn is_ancestor(&self, ancestor: Ino, mut ino: Ino) -> bool {
        loop {
            if ino == ancestor {
                return true;
            }
            match self.nodes.get(&ino) {
                Some(n) if ino != ROOT => ino = n.parent,
                _ => return false,
            }
        }
    }

    /// `rename(2)`; `noreplace` is `RENAME_NOREPLACE`.
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &OsStr,
        to_parent: Ino,
        to_name: &OsStr,
        noreplace: bool,
    ) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        self.dir(to_parent)?;
        let moving_dir = self.node(ino)?.is_dir();
        if moving_dir && parent != to_parent && self.is_ancestor(ino, to_parent) {
            return Err(libc::EINVAL);
        }
        let replaced = self.lookup(to_parent, to_name).ok();
        if let Some(old) = replaced {
            if old == ino {
                return Ok(());
            }
            if noreplace {
                return Err(libc::EEXIST);
            }
            let o = self.node(old)?;
            match (moving_dir, o.is_dir()) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !o.entries.is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
            let o = self.node_mut(old)?;
            o.nlink = if o.is_dir() {
                0
            } else {
                o.nlink.saturating_sub(1)
            };
            if o.kind == Kind::Dir {
                self.node_mut(to_parent)?.nlink -= 1;
            }
        }
        if parent == to_parent {
            let p = self.node_mut(parent)?;
            p.entries.remove(name);
            p.entries.insert(to_name.to_owned(), ino);
            p.dir_pending
                .push(DirOp::Rename(name.to_owned(), to_name.to_owned()));
        } else {
            let p = self.node_mut(parent)?;
            p.entries.remove(name);
            p.dir_pending.push(DirOp::Unlink(name.to_owned()));
            if moving_dir {
                p.nlink -= 1;
            }
            let q = self.node_mut(to_parent)?;
            q.entries.insert(to_name.to_owned(), ino);
            q.dir_pending.push(DirOp::Link(to_name.to_owned(), ino));
            if moving_dir {
                q.nlink += 1;
            }
            self.node_mut(ino)?.parent = to_parent;
        }
        let n = self.node_mut(ino)?;
        n.ctime = SystemTime::now();
        Ok(())
    }

    fn file_mut(&mut self, ino: Ino) -> Result<&mut Node, Errno> {
        let n = self.node_mut(ino)?;
        match n.kind {
            Kind::File => Ok(n),
            Kind::Dir => Err(libc::EISDIR),
            _ => Err(libc::EINVAL),
        }
    }

    pub fn write(&mut self, ino: Ino, offset: u64, bytes: &[u8]) -> Result<(), Errno> {
        let n = self.file_mut(ino)?;
        let op = DataOp::Write {
            offset,
            bytes: bytes.to_vec(),
        };
        apply_data(&mut n.data, &op);
        n.pending.push(op);
        let now = SystemTime::now();
        n.mtime = now;
        n.ctime = now;
        self.counters.writes += 1;
        Ok(())
    }

    pub fn set_len(&mut self, ino: Ino, len: u64) -> Result<(), Errno> {
        let n = self.file_mut(ino)?;
        let op = DataOp::SetLen(len);
        apply_data(&mut n.data, &op);
        n.pending.push(op);
        let now = SystemTime::now();
        n.mtime = now;
        n.ctime = now;
        Ok(())
    }

    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<&[u8], Errno> {
        let n = self.node(ino)?;
        if n.is_dir() {
            return Err(libc::EISDIR);
        }
        let start = (offset as usize).min(n.data.len());
        let end = (start + size as usize).min(n.data.len());
        Ok(&n.data[start..end])
    }

    /// `fsync` / `fdatasync` of a file: its bytes are durable (not its name).
    pub fn sync_file(&mut self, ino: Ino) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        if n.is_dir() {
            return self.sync_dir(ino);
        }
        n.durable = n.data.clone();
        n.pending.clear();
        self.counters.fsyncs += 1;
        Ok(())
    }

    /// `fsync` of a directory: its entries are durable (not the bytes of the files they name).
    pub fn sync_dir(&mut self, ino: Ino) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        if !n.is_dir() {
            return Err(libc::ENOTDIR);
        }
        n.durable_entries = n.entries.clone();
        n.dir_pending.clear();
        self.counters.dir_fsyncs += 1;
        Ok(())
    }

    /// Everything durable, as `sync(1)` followed by a clean shutdown leaves it.
    pub fn sync_all(&mut self) {
        for n in self.nodes.values_mut() {
            n.durable = n.data.clone();
            n.pending.clear();
            n.durable_entries = n.entries.clone();
            n.dir_pending.clear();
        }
    }

    /// What a power cut at this instant leaves on the disk.
    pub fn persisted(&self, cut: Cut) -> (Persisted, CutReport) {
        let mut out = Persisted::default();
        let mut report = CutReport::default();
        let (mut rng, tear) = match cut {
            Cut::DropAll => (None, false),
            Cut::Some { seed, tear } => (Some(Rng(seed)), tear),
        };
        // Inode order, so a seed gives the same cut whatever the hash map's order.
        let inos: BTreeSet<Ino> = self.nodes.keys().copied().collect();
        for ino in inos {
            let n = &self.nodes[&ino];
            if n.is_dir() {
                let mut entries = n.durable_entries.clone();
                let keep = match rng.as_mut() {
                    Some(r) => r.below(n.dir_pending.len() as u64 + 1) as usize,
                    None => 0,
                };
                for op in &n.dir_pending[..keep] {
                    apply_dir(&mut entries, op);
                }
                report.dir_ops_kept += keep as u64;
                report.dir_ops_lost += (n.dir_pending.len() - keep) as u64;
                out.entries.insert(ino, entries);
            } else if n.kind == Kind::File {
                let mut data = n.durable.clone();
                let kept: Vec<bool> = match rng.as_mut() {
                    Some(r) => n.pending.iter().map(|_| r.next() & 1 == 1).collect(),
                    None => vec![false; n.pending.len()],
                };
                let last_kept = kept.iter().rposition(|k| *k);
                for (i, op) in n.pending.iter().enumerate() {
                    if !kept[i] {
                        report.writes_lost += 1;
                        if let DataOp::Write { bytes, .. } = op {
                            report.bytes_lost += bytes.len() as u64;
                        }
                        continue;
                    }
                    report.writes_kept += 1;
                    let last = Some(i) == last_kept;
                    match (op, last && tear, rng.as_mut()) {
                        (DataOp::Write { offset, bytes }, true, Some(r)) => {
                            let end = offset + bytes.len() as u64;
                            let first = offset / SECTOR + 1;
                            let boundaries = (end - 1) / SECTOR + 1 - first;
                            if boundaries == 0 || bytes.is_empty() {
                                apply_data(&mut data, op);
                            } else {
                                let at = (first + r.below(boundaries)) * SECTOR;
                                let part = (at - offset) as usize;
                                apply_data(
                                    &mut data,
                                    &DataOp::Write {
                                        offset: *offset,
                                        bytes: bytes[..part].to_vec(),
                                    },
                                );
                                report.writes_torn += 1;
                            }
                        }
                        _ => apply_data(&mut data, op),
                    }
                }
                out.data.insert(ino, data);
            }
        }
        (out, report)
    }

    /// The current images (what a clean unmount leaves).
    pub fn current(&self) -> Persisted {
        let mut out = Persisted::default();
        for (ino, n) in &self.nodes {
            if n.is_dir() {
                out.entries.insert(*ino, n.entries.clone());
            } else if n.kind == Kind::File {
                out.data.insert(*ino, n.data.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(t: &mut Tree, parent: Ino, name: &str) -> Ino {
        t.make(
            parent,
            OsStr::new(name),
            Node::new(Kind::File, 0o644, 0, 0, parent),
            false,
        )
        .unwrap()
    }

    fn dir(t: &mut Tree, parent: Ino, name: &str) -> Ino {
        t.make(
            parent,
            OsStr::new(name),
            Node::new(Kind::Dir, 0o755, 0, 0, parent),
            false,
        )
        .unwrap()
    }

    #[test]
    fn an_unsynced_write_is_lost_and_a_synced_one_kept() {
        let mut t = Tree::new();
        let f = file(&mut t, ROOT, "a");
        t.sync_dir(ROOT).unwrap();
        t.write(f, 0, b"durable").unwrap();
        t.sync_file(f).unwrap();
        t.write(f, 0, b"lost!!!!!").unwrap();
        let (p, r) = t.persisted(Cut::DropAll);
        assert_eq!(p.data[&f], b"durable");
        assert_eq!(p.entries[&ROOT].get(OsStr::new("a")), Some(&f));
        assert_eq!((r.writes_lost, r.bytes_lost), (1, 9));
        assert_eq!(t.read(f, 0, 100).unwrap(), b"lost!!!!!");
    }

    #[test]
    fn a_synced_file_in_an_unsynced_directory_is_lost() {
        let mut t = Tree::new();
        let d = dir(&mut t, ROOT, "d");
        t.sync_dir(ROOT).unwrap();
        let f = file(&mut t, d, "f");
        t.write(f, 0, b"x").unwrap();
        t.sync_file(f).unwrap();
        let (p, r) = t.persisted(Cut::DropAll);
        assert!(p.entries[&d].is_empty());
        assert_eq!(r.dir_ops_lost, 1);
        t.sync_dir(d).unwrap();
        let (p, _) = t.persisted(Cut::DropAll);
        assert_eq!(p.entries[&d].get(OsStr::new("f")), Some(&f));
    }

    #[test]
    fn a_rename_in_one_directory_is_all_or_nothing() {
        let mut t = Tree::new();
        let old = file(&mut t, ROOT, "x");
        t.write(old, 0, b"old").unwrap();
        t.sync_file(old).unwrap();
        t.sync_dir(ROOT).unwrap();
        let tmp = file(&mut t, ROOT, "x.tmp");
        t.write(tmp, 0, b"new").unwrap();
        t.sync_file(tmp).unwrap();
        t.rename(ROOT, OsStr::new("x.tmp"), ROOT, OsStr::new("x"), false)
            .unwrap();
        assert_eq!(t.lookup(ROOT, OsStr::new("x")), Ok(tmp));
        for seed in 0..64 {
            let (p, _) = t.persisted(Cut::Some { seed, tear: true });
            let x = p.entries[&ROOT][OsStr::new("x")];
            assert!(x == old || x == tmp, "seed {seed}");
            assert!(p.data[&x] == b"old" || p.data[&x] == b"new");
        }
        let (p, _) = t.persisted(Cut::DropAll);
        assert_eq!(p.entries[&ROOT][OsStr::new("x")], old);
    }

    #[test]
    fn a_torn_write_stops_at_a_sector_boundary() {
        let mut t = Tree::new();
        let f = file(&mut t, ROOT, "f");
        t.sync_dir(ROOT).unwrap();
        t.sync_file(f).unwrap();
        t.write(f, 100, &[7u8; 2000]).unwrap();
        let mut torn = 0;
        for seed in 0..64 {
            let (p, r) = t.persisted(Cut::Some { seed, tear: true });
            let len = p.data[&f].len() as u64;
            if r.writes_torn == 1 {
                torn += 1;
                assert!(
                    len.is_multiple_of(SECTOR) && len > 100 && len < 2100,
                    "{len}"
                );
            } else {
                assert!(len == 0 || len == 2100, "{len}");
            }
        }
        assert!(torn > 10, "{torn} of 64 seeds tore the write");
    }

    #[test]
    fn some_keeps_a_subset_of_the_writes_in_order() {
        let mut t = Tree::new();
        let f = file(&mut t, ROOT, "f");
        t.sync_dir(ROOT).unwrap();
        for i in 0..8u8 {
            t.write(f, i as u64, &[i + 1]).unwrap();
        }
        let (a, ra) = t.persisted(Cut::Some {
            seed: 3,
            tear: false,
        });
        let (b, _) = t.persisted(Cut::Some {
            seed: 3,
            tear: false,
        });
        assert_eq!(a.data[&f], b.data[&f], "a seed gives one cut");
        assert_eq!(ra.writes_kept + ra.writes_lost, 8);
        for (i, byte) in a.data[&f].iter().enumerate() {
            assert!(*byte == 0 || *byte == i as u8 + 1);
        }
    }

    #[test]
    fn rename_refuses_what_rename_2_refuses() {
        let mut t = Tree::new();
        let d = dir(&mut t, ROOT, "d");
        let e = dir(&mut t, d, "e");
        file(&mut t, e, "f");
        file(&mut t, ROOT, "g");
        assert_eq!(
            t.rename(ROOT, OsStr::new("d"), e, OsStr::new("d2"), false),
            Err(libc::EINVAL)
        );
        assert_eq!(
            t.rename(ROOT, OsStr::new("g"), d, OsStr::new("e"), false),
            Err(libc::EISDIR)
        );
        assert_eq!(t.remove(d, OsStr::new("e"), true), Err(libc::ENOTEMPTY));
        assert_eq!(
            t.rename(ROOT, OsStr::new("g"), ROOT, OsStr::new("d"), true),
            Err(libc::EEXIST)
        );
    }
}
