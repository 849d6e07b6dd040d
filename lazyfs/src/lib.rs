//! A filesystem that forgets what was never synced: power cuts for the tests (issue 39).
//!
//! [`LazyFs::mount`] mounts a FUSE filesystem over a backing directory (read whole into memory).
//! Programs use the mount as any disk. Every write since a file's last `fsync` / `fdatasync`,
//! and every create, rename and unlink since its directory's last `fsync`, is kept pending.
//! [`LazyFs::cut`] is the power cut: from that instant every request fails with `EIO`, and the
//! disk image is computed from the durable images — with [`Cut::Some`], plus a seeded random
//! subset of the pending writes, the last one possibly torn at a 512-byte boundary.
//! [`LazyFs::unmount`] then writes that image into the backing directory, so a new mount (or
//! the test itself) sees exactly what survived. Why this shape: docs/decisions/0042.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use elfiee_lazyfs::{Cut, LazyFs};
//! let (backing, mnt) = (tempfile::tempdir()?, tempfile::tempdir()?);
//! let fs = LazyFs::mount(backing.path(), mnt.path())?;
//! std::fs::write(mnt.path().join("a"), b"never synced")?;
//! fs.cut(Cut::DropAll);
//! fs.unmount()?;
//! assert!(!backing.path().join("a").exists());
//! # Ok(()) }
//! ```
//!
//! Needs root (it mounts with `mount(2)`, no `fusermount`) and `/dev/fuse`: see [`available`].

mod disk;
mod fuse;
pub mod tree;

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use tree::{Counters, Cut, CutReport};

use fuse::{lock, Shared, State};

/// Why power-cut tests cannot run here (not root, no `/dev/fuse`), or `None` when they can.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: mounting FUSE without fusermount needs root".into());
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => None,
        Err(e) => Some(format!("/dev/fuse cannot be opened: {e}")),
    }
}

/// `Ok` when [`unavailable`] says nothing, else its reason.
pub fn available() -> Result<(), String> {
    unavailable().map_or(Ok(()), Err)
}

/// A mounted lazy filesystem.
pub struct LazyFs {
    shared: Shared,
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
    backing: PathBuf,
    /// The FUSE connection's number (`/sys/fs/fuse/connections/N`).
    connection: u64,
}

impl LazyFs {
    /// Mounts over `mountpoint` what `backing` holds, all of it durable.
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<LazyFs> {
        let mountpoint = &mountpoint.canonicalize()?;
        let tree = disk::load(backing)?;
        let shared: Shared = Arc::new(Mutex::new(State { tree, cut: None }));
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("lazyfs".into()),
            fuser::MountOption::DefaultPermissions,
        ];
        let session = fuser::spawn_mount(
            fuse::LazyFs {
                shared: shared.clone(),
            },
            mountpoint,
            &config,
        )?;
        let dev = std::fs::metadata(mountpoint)?.dev();
        Ok(LazyFs {
            shared,
            session: Some(session),
            mountpoint: mountpoint.to_owned(),
            backing: backing.to_owned(),
            connection: libc::minor(dev) as u64,
        })
    }

    /// Where the filesystem is mounted.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Makes everything durable now (as if the machine had run a long time since).
    pub fn sync_all(&self) {
        lock(&self.shared).tree.sync_all();
    }

    /// What the programs did so far on this mount.
    pub fn counters(&self) -> Counters {
        lock(&self.shared).tree.counters
    }

    /// The power cut, at this instant: what the disk keeps is fixed now, and every later
    /// request fails with `EIO`. A second call returns the first cut's report.
    pub fn cut(&self, how: Cut) -> CutReport {
        lock(&self.shared).cut(how)
    }

    /// Unmounts (every process using the mount should be gone) and writes the backing
    /// directory: what the cut left, or without a cut everything (a clean shutdown).
    pub fn unmount(mut self) -> io::Result<()> {
        self.detach()?;
        let s = lock(&self.shared);
        match &s.cut {
            Some((image, _)) => disk::render(&s.tree, image, &self.backing),
            None => disk::render(&s.tree, &s.tree.current(), &self.backing),
        }
    }

    fn detach(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        // A process killed a moment ago may still hold a file open (EBUSY): wait for it, then
        // abort the connection and detach.
        let path = std::ffi::CString::new(self.mountpoint.as_os_str().as_encoded_bytes())?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
                break;
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            if err.raw_os_error() != Some(libc::EINVAL) {
                let _ = std::fs::write(
                    format!("/sys/fs/fuse/connections/{}/abort", self.connection),
                    "1",
                );
                // SAFETY: as above.
                unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            }
            break;
        }
        session.join()
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        // A test that failed half-way leaves no mount behind (the backing is left as it was).
        if self.session.is_some() {
            lock(&self.shared).cut(Cut::DropAll);
            let _ = self.detach();
        }
    }
}
