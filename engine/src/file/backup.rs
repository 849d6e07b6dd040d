//! The automatic backup of an owned file ([`crate::AutoBackup`]): a thread that appends to
//! the backup after every N committed events, and a last run at close. (A backup on
//! request is `Owned::backup`.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::backup::{write_backup, BackupReport, Cut};
use crate::error::EngineError;
use crate::log::{EventLog, SledEventLog};
use crate::AutoBackup;

/// What the automatic backup needs of the file it backs up (the owner's half).
pub(crate) trait Source: Send + Sync {
    /// The committed seq.
    fn committed(&self) -> u64;
    /// Appends what is new to the backup at `to`.
    fn back_up(&self, to: &Path) -> Result<BackupReport, EngineError>;
}

/// The cut of a log nobody writes to.
pub(crate) fn cut_of(log: &SledEventLog) -> Result<Cut, EngineError> {
    let (seq, hash) = log.tail()?;
    let current = super::foreign::current_records(log)?;
    Ok(Cut { seq, hash, current })
}

/// The automatic backup of one owned file: a thread that appends to the backup once
/// `every_events` were committed since the last one. Stopped (and a last backup taken) by
/// [`Auto::finish`] when the file closes.
pub(crate) struct Auto {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    to: PathBuf,
}

pub(crate) fn start(owned: Weak<dyn Source>, policy: &AutoBackup, elf: &Path) -> Option<Auto> {
    let to = policy.path_for(elf);
    let every = policy.every_events.max(1);
    let stop = Arc::new(AtomicBool::new(false));
    let thread = std::thread::Builder::new()
        .name("elfiee-backup".into())
        .spawn({
            let (stop, to) = (stop.clone(), to.clone());
            move || {
                let mut done = crate::backup::newest_point(&to).map_or(0, |p| p.seq);
                let mut pause = Duration::from_millis(100);
                while !stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(pause);
                    let Some(owned) = owned.upgrade() else { return };
                    if owned.committed() < done + every || stop.load(Ordering::Acquire) {
                        continue;
                    }
                    match owned.back_up(&to) {
                        Ok(r) => {
                            tracing::debug!(seq = r.seq, events = r.events, ms = r.elapsed_ms, to = %to.display(), "automatic backup");
                            done = r.seq;
                            pause = Duration::from_millis(100);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, to = %to.display(), "automatic backup failed; trying again later");
                            pause = (pause * 2).min(Duration::from_secs(30));
                        }
                    }
                }
            }
        })
        .map_err(|e| tracing::warn!(error = %e, "cannot start the automatic backup"))
        .ok()?;
    Some(Auto { stop, thread, to })
}

impl Auto {
    /// Stops the thread and appends the last events (the file's writers are done: the
    /// caller has stopped them and committed what was queued).
    pub(crate) fn finish(self, log: &SledEventLog, core: &super::core::FileCore) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
        let done = crate::backup::newest_point(&self.to).map_or(0, |p| p.seq);
        if core.last_seq() <= done {
            return;
        }
        let written =
            cut_of(log).and_then(|cut| write_backup(log, &core.content, cut, &self.to, |_, _| {}));
        if let Err(e) = written {
            tracing::warn!(error = %e, to = %self.to.display(), "the backup at close failed");
        }
    }
}
