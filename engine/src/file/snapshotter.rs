//! The snapshot thread: appends the command index and stores snapshot files beside the commit
//! path, never in front of it (jobs come from [`super::commit`]).

use std::time::Instant;

use elfiee_model::EventHash;

use crate::error::EngineError;
use crate::layout::ElfPaths;

/// A snapshot of the committed state at `seq`, and the index entries of the commands since
/// the previous one.
pub(crate) struct SnapshotJob {
    pub seq: u64,
    pub hash: EventHash,
    pub bytes: Vec<u8>,
    pub entries: Vec<(uuid::Uuid, u64, u64)>,
}

/// The snapshot thread: for each job (the latest of those waiting), appends the command index
/// entries to `commands.idx` and syncs it, then stores the snapshot and flushes, so a stored
/// snapshot at seq S always comes after the index entries of every command up to S (an open
/// trusts the snapshot and indexes only the tail). Runs beside the commit path, never in front
/// of it.
pub(crate) fn run_snapshots(paths: ElfPaths, jobs: std::sync::mpsc::Receiver<SnapshotJob>) {
    let index_file = paths.commands_index_file();
    let mut entries: Vec<(uuid::Uuid, u64, u64)> = Vec::new();
    while let Ok(mut job) = jobs.recv() {
        entries.append(&mut job.entries);
        while let Ok(mut next) = jobs.try_recv() {
            entries.append(&mut next.entries);
            job = next;
        }
        let t = Instant::now();
        let indexed = entries.len();
        if !entries.is_empty() {
            if let Err(e) = crate::cmd_index::append(&index_file, &entries) {
                // No snapshot without its index; the entries are retried with the next one.
                tracing::warn!(error = %e, "command index not written; snapshot skipped");
                continue;
            }
            entries.clear();
        }
        // The events up to `seq` are durable already (they were flushed before the job was
        // made); the snapshot is a file of its own.
        let written = crate::replay::write_snapshot(&paths, job.seq, &job.bytes)
            .map_err(|e| EngineError::io(paths.snapshots_dir(), e));
        match written {
            Ok(()) => {
                tracing::debug!(
                    seq = job.seq,
                    bytes = job.bytes.len(),
                    indexed,
                    ms = t.elapsed().as_millis() as u64,
                    "snapshot written"
                );
                // Everything up to `seq` is durable: record it outside sled.
                if let Err(e) = paths.write_head(job.seq, &job.hash) {
                    tracing::warn!(error = %e, "HEAD not written");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "snapshot not written; the next open replays more")
            }
        }
    }
}
