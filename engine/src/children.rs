//! What a host can supervise under an open file it owns, and what it can read about it
//! ([`crate::FileHandle::supervise`], [`crate::FileHandle::children`], [`crate::Engine::status`]).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ractor::ActorCell;
use serde::Serialize;

/// A boxed, sendable future: what [`StartChild`] and the takeover hooks return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Starts (or restarts) a child linked to the given supervisor (the file actor's cell).
pub type StartChild =
    Arc<dyn Fn(ActorCell) -> BoxFuture<'static, Result<ActorCell, String>> + Send + Sync>;

/// A child the file actor keeps running: started at once, restarted with backoff when it fails.
#[derive(Clone)]
pub struct ChildSpec {
    /// Unique per file (a second spec with the same name replaces nothing and is refused).
    pub name: String,
    /// Starts the child, linked to the supervisor it is given.
    pub start: StartChild,
    /// How it is restarted after a failure.
    pub restart: RestartPolicy,
}

/// How a failed child is restarted.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    /// Pause before the first restart; it doubles with each failure in a row, up to
    /// `max_backoff`.
    pub backoff: Duration,
    /// The longest pause between restarts.
    pub max_backoff: Duration,
    /// Failures in a row after which the child is left stopped ([`ChildState::GaveUp`]).
    pub max_failures: u32,
    /// A child that ran this long before failing starts a new series of failures.
    pub stable_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_failures: 10,
            stable_after: Duration::from_secs(30),
        }
    }
}

/// Where a supervised child is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildState {
    /// Started and not failed since.
    Running,
    /// Failed; restarts after its backoff.
    Restarting,
    /// Ended by itself (or the file is closing).
    Stopped,
    /// Failed `max_failures` times in a row; left stopped.
    GaveUp,
}

/// What a host can read about a supervised child ([`crate::FileHandle::children`]).
#[derive(Clone, Debug, Serialize)]
pub struct ChildStatus {
    /// Its [`ChildSpec::name`].
    pub name: String,
    /// Where it is now.
    pub state: ChildState,
    /// Times it was restarted after a failure.
    pub restarts: u32,
    /// Why it failed last, if it ever did.
    pub last_error: Option<String>,
}

/// One open file as the engine supervisor reports it ([`crate::Engine::status`]).
#[derive(Clone, Debug, Serialize)]
pub struct FileStatus {
    /// The document (canonical path).
    pub path: PathBuf,
    /// Its last committed seq.
    pub last_seq: u64,
    /// Its supervised children (effects, sync), by name.
    pub children: Vec<ChildStatus>,
}
