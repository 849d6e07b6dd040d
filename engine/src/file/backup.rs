//! A backup taken by the owner while it serves (see [`crate::backup`]).

use std::path::PathBuf;
use std::sync::Arc;

use super::owned::Owned;
use crate::backup::{write_backup, BackupReport, Cut};
use crate::error::EngineError;
use crate::log::EventLog;

impl Owned {
    /// Appends what is new up to the committed tail to the backup file `to`. Writers wait
    /// only while the cut is taken (the tail and sync's records); the events are read
    /// after, while they write on.
    pub(crate) async fn backup(self: &Arc<Self>, to: PathBuf) -> Result<BackupReport, EngineError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let (cut, log) = me.quiet(|log| -> Result<_, EngineError> {
                let (seq, hash) = log.tail()?;
                let current = super::foreign::current_records(log)?;
                Ok((Cut { seq, hash, current }, log.clone()))
            })??;
            write_backup(&log, &me.core.content, cut, &to, |_, _| {})
        })
        .await
        .map_err(|e| EngineError::Storage(format!("backup task failed: {e}")))?
    }
}
