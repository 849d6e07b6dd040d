//! The group-commit queue between the sequencer and the flusher thread.
//!
//! Submitters push each sequenced (sealed, not yet written) command, in seq order; the flusher
//! takes *everything* queued since its last round, writes it, makes it durable with one flush,
//! and answers. Commands that arrive while a flush runs therefore share the next flush.
//!
//! Invariants (model-checked with loom in `tests/loom_commit_queue.rs`):
//! - every item whose `push` returned `Ok` is returned by exactly one `take_all`;
//! - items come out in push order;
//! - `take_all` never sleeps while items are queued (no lost wake-up);
//! - after `close`, pushes fail and `take_all` drains what is left, then returns `None`.

use super::sync::{Condvar, Mutex};

/// The queue itself (see the module docs for what it guarantees).
pub struct CommitQueue<T> {
    inner: Mutex<Inner<T>>,
    ready: Condvar,
}

struct Inner<T> {
    items: Vec<T>,
    closed: bool,
}

impl<T> Default for CommitQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> CommitQueue<T> {
    /// An open, empty queue.
    pub fn new() -> Self {
        CommitQueue {
            inner: Mutex::new(Inner {
                items: Vec::new(),
                closed: false,
            }),
            ready: Condvar::new(),
        }
    }

    /// Queues an item; gives it back if the queue is closed.
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.closed {
            return Err(item);
        }
        g.items.push(item);
        drop(g);
        self.ready.notify_one();
        Ok(())
    }

    /// Waits until something is queued and takes all of it; `None` once closed and drained.
    pub fn take_all(&self) -> Option<Vec<T>> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if !g.items.is_empty() {
                return Some(std::mem::take(&mut g.items));
            }
            if g.closed {
                return None;
            }
            g = self.ready.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().map(|g| g.closed).unwrap_or(true)
    }

    /// Refuses further pushes and wakes the consumer so it can drain and stop.
    pub fn close(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.closed = true;
        drop(g);
        self.ready.notify_all();
    }
}
