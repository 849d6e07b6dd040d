//! What both roles of an open file share: the committed state (and the view readers see
//! instead), publishing committed events to subscribers, and the content store. It knows no
//! actor and no socket: the owner's commit path ([`super::commit`]) and a client's replica
//! (`crate::remote::client`) both write here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use elfiee_model::Event;
use elfiee_projections::State;
use tokio::sync::broadcast;

use crate::config::EngineConfig;
use crate::content::ContentStore;
use crate::error::EngineError;
use crate::layout::ElfPaths;

/// Another state to show readers of a file (see [`crate::ForeignLog::set_view`]).
pub trait StateView: Send + Sync {
    /// Calls `f` once with the state to show (not calling it shows the committed state).
    fn view(&self, f: &mut dyn FnMut(&State));

    /// What the view adds to each of `events` where it is shown (fields to merge into the
    /// event's JSON, e.g. sync's `{"sync": {origin…, local…}}`), aligned with `events`;
    /// nothing by default.
    fn notes(&self, events: &[elfiee_model::Event]) -> Vec<Option<serde_json::Value>> {
        vec![None; events.len()]
    }
}

/// Where a committed event was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Origin {
    /// By this document's own pipeline (a command submitted to it).
    Local,
    /// On another device, and appended here by sync (see [`crate::foreign`]).
    Foreign,
}

impl Origin {
    /// Whether the event came from another device.
    pub fn is_foreign(self) -> bool {
        self == Origin::Foreign
    }
}

/// A committed event as subscribers receive it: the event and where it was decided, so a
/// subscriber (an effect) can skip another device's events without reading storage.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The event as it is in the log.
    pub event: Event,
    /// Where it was decided.
    pub origin: Origin,
}

/// The shared part of an open file (see the module docs).
pub(crate) struct FileCore {
    pub paths: ElfPaths,
    pub config: EngineConfig,
    /// State as of the last durable event.
    pub committed: RwLock<State>,
    /// Seq of the last durable, applied and published event.
    pub committed_seq: AtomicU64,
    /// Seq of the last event sent to the live stream (it trails `committed_seq` while a
    /// commit sends): a subscriber reads the log only for events that were sent and that it
    /// did not receive, never for one that is still being sent.
    published_seq: AtomicU64,
    /// Live committed events; `None` once the stream has ended (the file closed).
    events_tx: Mutex<Option<broadcast::Sender<Arc<Committed>>>>,
    /// Set when a flush failed (or a hand-over did): the file refuses commands until reopened.
    poisoned: Mutex<Option<String>>,
    /// Signalled whenever committed events were applied (read-your-writes waits on it).
    pub applied: tokio::sync::Notify,
    /// Block bodies kept out of the log's values and the state (read here by the owner;
    /// clients ask the owner).
    pub content: ContentStore,
    /// What readers see instead of `committed` (see [`crate::ForeignLog::set_view`]).
    view: RwLock<Option<Arc<dyn StateView>>>,
    /// Services this process offers on the owner socket while it owns the file.
    pub services: crate::services::Services,
}

impl FileCore {
    pub(crate) fn new(paths: ElfPaths, config: EngineConfig) -> FileCore {
        let (tx, _) = broadcast::channel(config.channel_capacity.max(1));
        FileCore {
            content: ContentStore::new(&paths.root),
            paths,
            config,
            committed: RwLock::new(State::default()),
            committed_seq: AtomicU64::new(0),
            published_seq: AtomicU64::new(0),
            events_tx: Mutex::new(Some(tx)),
            poisoned: Mutex::new(None),
            applied: tokio::sync::Notify::new(),
            view: RwLock::new(None),
            services: Default::default(),
        }
    }

    pub fn last_seq(&self) -> u64 {
        self.committed_seq.load(Ordering::Acquire)
    }

    /// Makes `state` the committed state (an open, or a client's first copy of the owner's).
    pub fn reset(&self, state: State) {
        let mut committed = self.committed.write().unwrap_or_else(|p| p.into_inner());
        let seq = state.last_seq;
        *committed = state;
        self.committed_seq.store(seq, Ordering::Release);
        self.published_seq.store(seq, Ordering::Release);
    }

    /// Seq of the last event sent to the live stream (or of the state a reset jumped to).
    pub fn published_seq(&self) -> u64 {
        self.published_seq.load(Ordering::Acquire)
    }

    /// Every event up to `seq` was sent to the live stream (called after the sends).
    pub fn mark_published(&self, seq: u64) {
        self.published_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Why the file refuses commands, if it does.
    pub fn poisoned(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The failure that poisoned the file, as the error every command now gets.
    pub fn check_poisoned(&self) -> Result<(), EngineError> {
        match self.poisoned() {
            Some(why) => Err(EngineError::Storage(why)),
            None => Ok(()),
        }
    }

    /// Refuses further commands with `why` (`None` lifts it: a fresh open).
    pub fn set_poisoned(&self, why: Option<String>) {
        *self.poisoned.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// The live sender, when anybody listens (the commit path skips publishing otherwise).
    pub fn listened(&self) -> Option<broadcast::Sender<Arc<Committed>>> {
        self.events_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|tx| tx.receiver_count() > 0)
    }

    /// A receiver of the live stream; one that reports `Closed` at once when it has ended.
    pub fn receiver(&self) -> broadcast::Receiver<Arc<Committed>> {
        match self
            .events_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(tx) => tx.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// Ends the live stream: subscribers drain what is committed and stop.
    pub fn end_stream(&self) {
        self.events_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Runs `f` on the view's state when a view is set, else on the committed state.
    pub fn with_state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        let view = self.view.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut f = Some(f);
        if let Some(view) = view {
            let mut out = None;
            view.view(&mut |s: &State| {
                if let Some(f) = f.take() {
                    out = Some(f(s));
                }
            });
            if let Some(out) = out {
                return out;
            }
        }
        let f = f.expect("taken only by a view, which then answered");
        f(&self.committed.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether a view is set.
    pub fn has_view(&self) -> bool {
        self.view
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// [`StateView::notes`] of the view, when one is set.
    pub fn notes(&self, events: &[elfiee_model::Event]) -> Vec<Option<serde_json::Value>> {
        let view = self.view.read().unwrap_or_else(|p| p.into_inner()).clone();
        match view {
            Some(v) => v.notes(events),
            None => vec![None; events.len()],
        }
    }

    pub fn set_view(&self, view: Option<Arc<dyn StateView>>) {
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = view;
    }
}
