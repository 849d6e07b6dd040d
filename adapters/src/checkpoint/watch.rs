//! Changes to a project folder between two checkpoints of one process, from the operating
//! system's file events (inotify, FSEvents, ReadDirectoryChangesW through `notify`), so a
//! checkpoint stats and reads only what changed: git's fsmonitor idea, with Watchman's
//! "cookie" to know every event up to now has arrived.
//!
//! Each folder is watched on its own, added by the walk as it comes to it (before listing
//! it), so setting the watch up costs one system call per folder. Anything the events cannot
//! say precisely (a folder made, moved or removed, an overflowed queue, a cookie that does not
//! come back, a folder that could not be watched) asks for a full walk instead, and a changed
//! folder starts the watch afresh: the answer is never a guess.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use notify::{EventKind, RecursiveMode, Watcher};

/// How long a checkpoint waits for its cookie's event before it walks the folder instead.
const COOKIE_WAIT: Duration = Duration::from_secs(1);

struct Inner {
    watcher: notify::RecommendedWatcher,
    rx: Receiver<notify::Result<notify::Event>>,
    /// Folders watched so far.
    watched: HashSet<PathBuf>,
    /// A folder could not be watched (no watches left …): the events are incomplete.
    broken: bool,
}

impl Inner {
    fn new() -> Option<Inner> {
        let (tx, rx) = channel();
        let watcher = notify::recommended_watcher(tx)
            .map_err(|e| tracing::debug!(error = %e, "no folder watch; checkpoints walk"))
            .ok()?;
        Some(Inner {
            watcher,
            rx,
            watched: HashSet::new(),
            broken: false,
        })
    }
}

/// A watch on one folder and the folders below it that the walks came to.
pub struct FolderWatch {
    inner: Mutex<Inner>,
    root: PathBuf,
}

/// What changed since the last [`FolderWatch::changes`].
pub enum Changes {
    /// These paths (absolute) may have changed; nothing else did.
    Paths(BTreeSet<PathBuf>),
    /// The events cannot tell: walk the folder (the walk watches it again).
    Walk(&'static str),
}

static COOKIES: AtomicU64 = AtomicU64::new(0);

impl FolderWatch {
    /// Starts watching `root` (canonical); `None` when the system refuses (no watches left,
    /// an unsupported file system): checkpoints then walk.
    pub fn start(root: &Path) -> Option<FolderWatch> {
        let w = FolderWatch {
            inner: Mutex::new(Inner::new()?),
            root: root.to_path_buf(),
        };
        w.watch_dir(root);
        w.healthy().then_some(w)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Watches folder `dir` (not what is below it) unless it is already.
    pub fn watch_dir(&self, dir: &Path) {
        let mut g = self.lock();
        if g.watched.contains(dir) {
            return;
        }
        match g.watcher.watch(dir, RecursiveMode::NonRecursive) {
            Ok(()) => {
                g.watched.insert(dir.to_path_buf());
            }
            Err(e) => {
                tracing::debug!(error = %e, dir = %dir.display(), "folder not watched; checkpoints walk");
                g.broken = true;
            }
        }
    }

    /// Whether every folder the walks came to is watched.
    pub fn healthy(&self) -> bool {
        !self.lock().broken
    }

    /// Drops every watch and starts again from the root (a folder moved: the kernel's
    /// watches follow the folder, not its path).
    fn restart(&self, g: &mut Inner) {
        match Inner::new() {
            Some(fresh) => *g = fresh,
            None => g.broken = true,
        }
        if let Err(e) = g.watcher.watch(&self.root, RecursiveMode::NonRecursive) {
            tracing::debug!(error = %e, "folder not watched; checkpoints walk");
            g.broken = true;
        } else {
            g.watched.insert(self.root.clone());
        }
    }

    /// The paths changed since the last call. A cookie file is made and removed in the root
    /// first, and events are read until its removal arrives: the queue is ordered, so every
    /// change made before this call has been seen.
    pub fn changes(&self) -> Changes {
        let n = COOKIES.fetch_add(1, Ordering::Relaxed);
        let cookie = self
            .root
            .join(format!(".elfiee-cookie-{}-{n}", std::process::id()));
        if std::fs::write(&cookie, b"").is_err() || std::fs::remove_file(&cookie).is_err() {
            let _ = std::fs::remove_file(&cookie);
            return Changes::Walk("the cookie file could not be written");
        }
        let mut g = self.lock();
        let mut paths = BTreeSet::new();
        let mut walk = None;
        let deadline = Instant::now() + COOKIE_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = match g.rx.recv_timeout(left) {
                Ok(Ok(e)) => e,
                Ok(Err(_)) => {
                    walk.get_or_insert("the watch reported an error");
                    continue;
                }
                Err(_) => {
                    walk = Some("the cookie's event did not arrive in time");
                    break;
                }
            };
            if event.need_rescan() {
                walk.get_or_insert("the event queue overflowed");
            }
            if event.paths.iter().any(|p| p == &cookie) {
                if matches!(event.kind, EventKind::Remove(_)) {
                    break;
                }
                continue;
            }
            // Reads (opens, closes without writing) change nothing.
            if matches!(event.kind, EventKind::Access(_)) {
                continue;
            }
            if matches!(
                event.kind,
                EventKind::Create(notify::event::CreateKind::Folder)
            ) {
                walk.get_or_insert("a folder was made");
            }
            for p in event.paths {
                if g.watched.contains(&p) {
                    walk.get_or_insert("a folder changed");
                }
                let cookie_like = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(".elfiee-cookie-"));
                if !cookie_like {
                    paths.insert(p);
                }
            }
        }
        if g.broken {
            walk.get_or_insert("a folder could not be watched");
        }
        match walk {
            Some(why) => {
                self.restart(&mut g);
                Changes::Walk(why)
            }
            None => Changes::Paths(paths),
        }
    }
}
