//! The settings of an [`crate::Engine`], shared by every file it opens.

use elfiee_capabilities::Registry;

/// Settings shared by every file an [`crate::Engine`] opens.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// First half of vector-clock keys; see [`crate::node::node_id`].
    pub node_id: String,
    /// Write a snapshot once this many events came after the last one (default 1000).
    pub snapshot_every: u64,
    /// ... or once the events after the last one take this many stored bytes (default 4 MiB).
    pub snapshot_tail_bytes: u64,
    /// At close, write one if at least this many events came after the last one (default
    /// 100, so a process that made a few changes — a CLI call, an MCP tool call — closes
    /// without writing the whole state, and the next open replays at most about this many
    /// events; 1 writes one at every close that changed something).
    pub snapshot_at_close_after: u64,
    /// Largest accepted payload, in bytes of JSON (default 16 MiB).
    pub max_payload_bytes: usize,
    /// Live events buffered per subscriber before it has to catch up from the log.
    pub channel_capacity: usize,
    /// How long an open waits for a file locked by another process: it tries the owner's
    /// socket and the lock in turn (the owner may be starting, or closing and about to let
    /// go), then gives up with [`crate::EngineError::Locked`]'s explanation (default 10 s).
    pub handover_wait: std::time::Duration,
    /// The capabilities and the folds of every event kind (built-in ones, plus an embedder's).
    pub registry: Registry,
    /// For tests: run every command at a fixed time with ids from a fixed base instead of the
    /// clock and a random seed, so the same commands give the same events as the pure
    /// pipeline ([`FixedCtx`]). `None` (the default) in real use.
    pub fixed_ctx: Option<FixedCtx>,
    /// Back every file up on its own (off by default): see [`AutoBackup`].
    pub auto_backup: Option<AutoBackup>,
}

/// An automatic backup ([`crate::backup`]) of every file the engine owns: appended after
/// every `every_events` committed events (checked about ten times a second) and when the
/// file closes, into `NAME.elf.backup` in `dir` (default: beside the document). A failed
/// backup is logged and tried again later; it never stops the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoBackup {
    /// Committed events between two automatic backups.
    pub every_events: u64,
    /// The folder the backups go into; `None`: beside each document.
    pub dir: Option<std::path::PathBuf>,
}

impl AutoBackup {
    /// Where the backup of the document at `elf` goes.
    pub fn path_for(&self, elf: &std::path::Path) -> std::path::PathBuf {
        let default = crate::backup::default_path(elf);
        match (&self.dir, default.file_name()) {
            (Some(dir), Some(name)) => dir.join(name),
            _ => default,
        }
    }
}

/// A fixed handler context: commands run at `now`, and the id seed of the `i`-th command of a
/// batch on a state whose last event is `last_seq` is
/// [`elfiee_model::Ctx::command_seed`]`(id_base, last_seq, i)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedCtx {
    /// The time every command runs at.
    pub now: chrono::DateTime<chrono::Utc>,
    /// The base the id seeds of commands are derived from.
    pub id_base: [u8; 16],
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            node_id: crate::node::node_id(),
            snapshot_every: 1000,
            snapshot_tail_bytes: 4 * 1024 * 1024,
            snapshot_at_close_after: 100,
            max_payload_bytes: elfiee_capabilities::MAX_PAYLOAD_BYTES,
            channel_capacity: 4096,
            handover_wait: std::time::Duration::from_secs(10),
            registry: Registry::builtin(),
            fixed_ctx: None,
            auto_backup: None,
        }
    }
}
