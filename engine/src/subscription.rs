use std::collections::VecDeque;
use std::sync::Arc;

use elfiee_model::Event;
use tokio::sync::broadcast::{self, error::RecvError};

use crate::error::EngineError;
use crate::file::core::{Committed, FileCore};

/// Where a subscription reads the committed events it missed: the owner's log, or the owner
/// process.
pub(crate) trait EventSource: Send + Sync {
    /// Committed events `from..=to` with their origins.
    fn read_committed(&self, from: u64, to: u64) -> Result<Vec<Committed>, EngineError>;
}

/// A stream of committed events, in seq order, with no gaps and no repeats.
///
/// Live events arrive through a bounded broadcast channel. A subscriber that falls behind is
/// never silently dropped: when the channel reports a lag (or a gap), the subscription reads
/// the missing events from the log and then continues live.
pub struct Subscription {
    rx: broadcast::Receiver<Arc<Committed>>,
    next: u64,
    core: Arc<FileCore>,
    source: Arc<dyn EventSource>,
    backlog: VecDeque<Arc<Committed>>,
    /// Whether `recv_committed` ran once (the first call reads what the channel missed).
    started: bool,
    /// How many times this subscriber had to catch up from the log.
    pub catch_ups: u64,
}

impl Subscription {
    pub(crate) fn new(
        core: Arc<FileCore>,
        source: Arc<dyn EventSource>,
        from: Option<u64>,
    ) -> Subscription {
        // A closed file gives a receiver that reports `Closed` at once: `recv` drains the log.
        let rx = core.receiver();
        // Subscribe first, then read the watermark: anything published in between has a seq at
        // or below the watermark and is skipped, anything later is received.
        let next = from.unwrap_or_else(|| core.last_seq() + 1).max(1);
        Subscription {
            rx,
            next,
            core,
            source,
            backlog: VecDeque::new(),
            started: false,
            catch_ups: 0,
        }
    }

    /// Seq of the next event this subscription will return.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The next committed event; `None` once the file is closed and everything was delivered,
    /// or when the log can no longer be read (a subscription that was behind when the file
    /// closed: effects get those events again on the next open, from their checkpoints).
    pub async fn recv(&mut self) -> Option<Event> {
        self.recv_committed().await.map(|c| c.event)
    }

    /// Like [`Subscription::recv`], with where the event was decided ([`Committed::origin`]):
    /// known without reading storage for live events, and with one range scan per catch-up
    /// from the log.
    pub async fn recv_committed(&mut self) -> Option<Committed> {
        self.recv_shared().await.map(Arc::unwrap_or_clone)
    }

    /// [`Subscription::recv_committed`] as the live stream shares it: no copy of the event,
    /// for a subscriber that looks at most events without keeping them (another device's,
    /// skipped by its origin).
    pub async fn recv_shared(&mut self) -> Option<Arc<Committed>> {
        loop {
            if let Some(c) = self.backlog.pop_front() {
                self.next = c.event.seq + 1;
                return Some(c);
            }
            let committed = self.core.last_seq();
            // Events that were sent before this subscription could receive them: everything
            // committed on the first call (subscribed from an earlier seq, or sent between
            // the watermark and the subscribe), later only what was sent and not received (a
            // reset). An event committed and still being sent is waited for, not read.
            let sent = if self.started {
                self.core.published_seq()
            } else {
                committed
            };
            self.started = true;
            // When nothing could be read yet, wait for the channel rather than ask again.
            if sent.min(committed) >= self.next
                && self.rx.is_empty()
                && !self.fill_from_log(committed)?
            {
                continue;
            }
            match self.rx.recv().await {
                Ok(c) if c.event.seq < self.next => continue,
                Ok(c) if c.event.seq == self.next => {
                    self.next += 1;
                    return Some(c);
                }
                Ok(c) => {
                    self.fill_from_log(c.event.seq - 1)?;
                    self.backlog.push_back(c);
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(
                        skipped = n,
                        next = self.next,
                        "subscriber lagged; catching up from the log"
                    );
                    let committed = self.core.last_seq();
                    self.fill_from_log(committed)?;
                }
                Err(RecvError::Closed) => {
                    let committed = self.core.last_seq();
                    if committed >= self.next {
                        self.fill_from_log(committed)?;
                        if !self.backlog.is_empty() {
                            continue;
                        }
                    }
                    return None;
                }
            }
        }
    }

    /// Reads events `next..=to` from the log into the backlog. `Some(true)` when nothing was
    /// there to read; `None` when the log cannot be read (the file was closed under the
    /// subscription, or the log is damaged): the stream then ends, since it could only go on
    /// with a gap, and never asks again in a loop that does not wait.
    fn fill_from_log(&mut self, to: u64) -> Option<bool> {
        if to < self.next {
            return Some(true);
        }
        self.catch_ups += 1;
        match self.source.read_committed(self.next, to) {
            Ok(events) => {
                let empty = events.is_empty();
                self.backlog.extend(events.into_iter().map(Arc::new));
                Some(empty)
            }
            Err(EngineError::Closed) => {
                tracing::debug!(next = self.next, "file closed; the subscription ends");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, next = self.next, "subscription cannot read the log; it ends");
                None
            }
        }
    }
}
