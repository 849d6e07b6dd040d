//! The engine's one seam for events decided on another device (what sync uses; the rest of
//! the engine knows nothing of sync).
//!
//! [`FileHandle::foreign_log`] gives a [`ForeignLog`] in the process that owns the file. With
//! it a synchronizer:
//! - appends another device's events ([`ForeignLog::append`]): each gets the next local seq
//!   and joins the hash chain, through the same door as every other write (the owner's
//!   `submit`), with no handler run and no command indexed — the sender decided them. The
//!   bytes it keeps with each (its origin) are stored beside the event, and subscribers get
//!   the event marked [`Origin::Foreign`], so effects skip it without a storage read;
//! - keeps its own records beside them, in the same atomic batch ([`ForeignLog::side`]);
//! - asks which command a local event came from ([`ForeignLog::record_commands`],
//!   [`ForeignLog::command_of`]), to seal local events with it;
//! - stores bodies that arrived from another device in the content store
//!   ([`ForeignLog::put_content_from`]);
//! - shows readers its merged state instead of the committed one ([`ForeignLog::set_view`]).
//!
//! How these are stored (the `m‖`, `f‖` and `x‖` side records) is `file::foreign`'s business.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use elfiee_model::{ContentRef, Event};

use crate::error::EngineError;
pub use crate::file::core::{Committed, Origin, StateView};
use crate::file::foreign as keys;
use crate::file::owned::{Owned, Submission};
use crate::handle::FileHandle;

/// Another device's events, and what a synchronizer keeps beside them (see the module docs).
/// Only in the process that owns the file; dropped with its role (a client that takes the
/// file over asks for a new one).
#[derive(Clone)]
pub struct ForeignLog {
    owned: Arc<Owned>,
}

impl FileHandle {
    /// The seam for another device's events ([`ForeignLog`]); an error when another process
    /// owns the file, or it is closed.
    pub fn foreign_log(&self) -> Result<ForeignLog, EngineError> {
        Ok(ForeignLog {
            owned: self.owned()?,
        })
    }
}

impl ForeignLog {
    /// Appends events decided on another device, in one atomic batch with `side` records
    /// (`(key, value)`; read them with [`ForeignLog::side`]). Each event gets the next local
    /// seq and joins the hash chain; `origin` is kept beside it ([`ForeignLog::origin`]).
    /// Answers once they are durable.
    pub async fn append(
        &self,
        events: Vec<(Event, Vec<u8>)>,
        side: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<Event>, EngineError> {
        self.submit(events, side, true).await
    }

    /// [`ForeignLog::append`], answered once written, before it is durable: the next durable
    /// append, local commit, snapshot or close makes it durable (with no flush of its own it
    /// costs a fraction). For events a crash may lose because they can be fetched again
    /// (sync's ingest: the ingest checkpoint in `side` goes with them, and it calls
    /// [`ForeignLog::sync`] each time it has caught up).
    pub async fn append_deferred(
        &self,
        events: Vec<(Event, Vec<u8>)>,
        side: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<Event>, EngineError> {
        self.submit(events, side, false).await
    }

    /// Makes every event appended so far durable: one flush when some are not (deferred
    /// appends), nothing otherwise. Runs beside the commit path, not in its queue.
    pub async fn sync(&self) -> Result<(), EngineError> {
        let log = self.owned.log()?;
        tokio::task::spawn_blocking(move || log.flush_written())
            .await
            .map_err(|e| EngineError::Storage(format!("the flush did not finish: {e}")))?
    }

    async fn submit(
        &self,
        events: Vec<(Event, Vec<u8>)>,
        side: Vec<(Vec<u8>, Vec<u8>)>,
        durable: bool,
    ) -> Result<Vec<Event>, EngineError> {
        self.owned.log()?;
        let side = side
            .into_iter()
            .map(|(k, v)| (keys::side_record_key(&k), v))
            .collect();
        self.owned
            .submit(Submission::Foreign(events, side, durable))
            .await
    }

    /// The `origin` bytes kept with event `seq` when it came from another device
    /// ([`ForeignLog::append`]); `None` for this file's own events. A storage read: a
    /// subscriber that only needs to know whether an event is foreign reads
    /// [`Committed::origin`] instead.
    pub fn origin(&self, seq: u64) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.origins(seq, seq)?.pop().map(|(_, bytes)| bytes))
    }

    /// The foreign events in `from..=to` with the `origin` bytes kept with each, in seq order
    /// (a few range scans, whatever the length of the range).
    pub fn origins(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>, EngineError> {
        keys::origins(&*self.owned.log()?, from, to)
    }

    /// A side record stored by [`ForeignLog::append`].
    pub fn side(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.owned.log()?.side(&keys::side_record_key(key))
    }

    /// Keeps each submission's commands (capability and target) beside its events from now
    /// on, so [`ForeignLog::command_of`] can name the command an event came from. Off by
    /// default: it costs one more record per submission.
    pub fn record_commands(&self, on: bool) {
        self.owned.record_commands.store(on, Ordering::Release);
    }

    /// The command (capability, target block) event `seq` came from, when this file recorded
    /// it ([`ForeignLog::record_commands`]); `None` for an event from before that, or from
    /// another device.
    pub fn command_of(&self, seq: u64) -> Result<Option<(String, Option<String>)>, EngineError> {
        let log = self.owned.log()?;
        keys::command_of(&log, seq)
    }

    /// [`ForeignLog::command_of`] for every event in `from..=to` that recorded one, by seq
    /// (a few range scans, whatever the length of the range).
    pub fn commands(
        &self,
        from: u64,
        to: u64,
    ) -> Result<std::collections::BTreeMap<u64, (String, Option<String>)>, EngineError> {
        keys::commands_in(&*self.owned.log()?, from, to)
    }

    /// Whether this file's content store holds the body `r` refers to.
    pub fn has_content(&self, r: &ContentRef) -> Result<bool, EngineError> {
        self.owned.log()?;
        self.owned.core.content.contains(r)
    }

    /// Stores a body that arrived from another device; durable with the next commit (the
    /// content store is synced before the events that name it).
    pub fn put_content(&self, text: &str) -> Result<ContentRef, EngineError> {
        self.owned.log()?;
        self.owned.core.content.put(text)
    }

    /// Stores a body from `reader` (exactly `r.len` bytes, hashed on the way; a mismatch
    /// stores nothing), copied piece by piece: the body is never whole in memory. Durable
    /// with the next commit.
    pub fn put_content_from(
        &self,
        r: &ContentRef,
        reader: impl std::io::Read,
    ) -> Result<(), EngineError> {
        self.owned.log()?;
        self.owned.core.content.put_reader(r, reader)
    }

    /// Shows readers of the file (every handle's `with_state`, `state`, `block`, …, and the
    /// processes that reach this one through its owner socket) the state `view` gives instead
    /// of the committed one, which stays what commands are checked against and what
    /// snapshots and `replay` hold. Sync sets its merged state here; `None` removes it.
    pub fn set_view(&self, view: Option<Arc<dyn StateView>>) {
        self.owned.core.set_view(view);
    }
}
