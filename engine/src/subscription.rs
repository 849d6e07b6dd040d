use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use elfiee_model::Event;
use tokio::sync::broadcast::{self, error::RecvError};

use crate::actor::Shared;
use crate::EngineError;

/// A stream of committed events, in seq order, with no gaps and no repeats.
///
/// Live events arrive through a bounded broadcast channel. A subscriber that falls behind is
/// never silently dropped: when the channel reports a lag (or a gap), the subscription reads
/// the missing events from the log and then continues live.
pub struct Subscription {
    rx: broadcast::Receiver<Arc<Event>>,
    next: u64,
    shared: Arc<Shared>,
    backlog: VecDeque<Event>,
    /// How many times this subscriber had to catch up from the log.
    pub catch_ups: u64,
}

impl Subscription {
    pub(crate) fn new(shared: Arc<Shared>, from: Option<u64>) -> Subscription {
        let rx = match shared
            .events_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(tx) => tx.subscribe(),
            // Closed file: a receiver that reports `Closed` at once, so `recv` drains the log.
            None => broadcast::channel(1).1,
        };
        // Subscribe first, then read the watermark: anything published in between has a seq at
        // or below the watermark and is skipped, anything later is received.
        let next = from
            .unwrap_or_else(|| shared.committed_seq.load(Ordering::Acquire) + 1)
            .max(1);
        Subscription {
            rx,
            next,
            shared,
            backlog: VecDeque::new(),
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
        loop {
            if let Some(e) = self.backlog.pop_front() {
                self.next = e.seq + 1;
                return Some(e);
            }
            let committed = self.shared.committed_seq.load(Ordering::Acquire);
            if committed >= self.next && self.rx.is_empty() {
                // Older events than the channel holds (subscribed from an earlier seq).
                if !self.fill_from_log(committed)? {
                    continue;
                }
                // Nothing could be read yet: wait for the channel rather than ask again.
            }
            match self.rx.recv().await {
                Ok(e) if e.seq < self.next => continue,
                Ok(e) if e.seq == self.next => {
                    self.next += 1;
                    return Some((*e).clone());
                }
                Ok(e) => {
                    self.fill_from_log(e.seq - 1)?;
                    self.backlog.push_back((*e).clone());
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(
                        skipped = n,
                        next = self.next,
                        "subscriber lagged; catching up from the log"
                    );
                    let committed = self.shared.committed_seq.load(Ordering::Acquire);
                    self.fill_from_log(committed)?;
                }
                Err(RecvError::Closed) => {
                    let committed = self.shared.committed_seq.load(Ordering::Acquire);
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
        match self.shared.read_events(self.next, to) {
            Ok(events) => {
                let empty = events.is_empty();
                self.backlog.extend(events);
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
