//! Retrying failed calls: exponential backoff with jitter, honouring the server's
//! `retry-after-ms` / `retry-after` headers, with a cap on attempts.
//!
//! Only errors for which [`LlmError::is_retryable`] holds are retried (408, 429, 500, 502, 503,
//! 504, 529, timeouts, network errors), and only while nothing of the answer has reached the
//! caller's callback — a stream that breaks after the first delta is reported, not replayed.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use super::{LlmError, LlmRequest, LlmResponse, Provider, StreamEvent};
use crate::effects::BoxFuture;

/// How often and how patiently to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, the first one included (default 4). `1` disables retrying.
    pub max_attempts: u32,
    /// Delay before the first retry; doubled for each further one (default 500 ms).
    pub base_delay: Duration,
    /// Upper bound of the computed backoff (default 8 s).
    pub max_delay: Duration,
    /// A server-requested delay up to this long is honoured as is; a longer one is replaced by
    /// the computed backoff (default 60 s).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Backoff before retry number `retry` (1 for the first retry): `base · 2^(retry-1)`, capped
    /// at `max_delay`, minus up to 25 % jitter so that many clients do not retry in lockstep.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20));
        let capped = exp.min(self.max_delay);
        capped.mul_f64(1.0 - 0.25 * jitter())
    }

    /// The delay before retry number `retry` after `err`: the server's own delay if it gave one
    /// (and it is not absurdly long), else [`RetryPolicy::backoff`].
    pub fn delay_for(&self, retry: u32, err: &LlmError) -> Duration {
        match err.retry_after() {
            Some(d) if d <= self.max_retry_after => d,
            _ => self.backoff(retry),
        }
    }
}

/// A number in `[0, 1)` that differs between calls; good enough for jitter.
fn jitter() -> f64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Parses the retry headers: `retry-after-ms` (milliseconds) first, then `retry-after`
/// (seconds; the HTTP-date form is ignored).
pub fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
) -> Option<Duration> {
    let secs = |s: &str, scale: f64| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| Duration::from_secs_f64(v / scale))
    };
    retry_after_ms
        .and_then(|v| secs(v, 1000.0))
        .or_else(|| retry_after.and_then(|v| secs(v, 1.0)))
}

/// Wraps the caller's callback and remembers whether any part of the answer went out.
pub struct Emitter<'e> {
    sink: &'e mut (dyn FnMut(StreamEvent) + Send),
    content_sent: bool,
}

impl<'e> Emitter<'e> {
    pub fn new(sink: &'e mut (dyn FnMut(StreamEvent) + Send)) -> Self {
        Emitter {
            sink,
            content_sent: false,
        }
    }

    pub fn emit(&mut self, ev: StreamEvent) {
        if matches!(
            ev,
            StreamEvent::TextDelta(_)
                | StreamEvent::ToolUseStart { .. }
                | StreamEvent::ToolInputDelta(_)
        ) {
            self.content_sent = true;
        }
        (self.sink)(ev);
    }

    /// Whether a text or tool delta reached the caller (then a retry would duplicate it).
    pub fn content_sent(&self) -> bool {
        self.content_sent
    }
}

/// One attempt of a provider's call, without retrying.
pub(crate) trait Attempt: Sync {
    fn provider_name(&self) -> &'static str;
    fn policy(&self) -> &RetryPolicy;
    fn attempt<'a>(
        &'a self,
        req: &'a LlmRequest,
        emit: &'a mut Emitter<'_>,
    ) -> BoxFuture<'a, Result<LlmResponse, LlmError>>;
}

/// Every HTTP provider is a [`Provider`] through its attempts: name, retries, streaming.
impl<A: Attempt + Send> Provider for A {
    fn name(&self) -> &'static str {
        self.provider_name()
    }

    fn complete<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<LlmResponse, LlmError>> {
        Box::pin(complete_with_retry(self, req, on_event))
    }
}

/// Runs attempts until one succeeds, a non-retryable error occurs, content was already
/// delivered, or the attempts are used up ([`LlmError::RetriesExhausted`]).
pub(crate) async fn complete_with_retry<A: Attempt>(
    provider: &A,
    req: &LlmRequest,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<LlmResponse, LlmError> {
    let policy = provider.policy();
    let max = policy.max_attempts.max(1);
    let mut emit = Emitter::new(on_event);
    let mut attempt = 1;
    loop {
        let span = tracing::debug_span!(
            "llm_attempt",
            provider = provider.provider_name(),
            model = %req.model,
            attempt
        );
        let started = std::time::Instant::now();
        let result =
            tracing::Instrument::instrument(provider.attempt(req, &mut emit), span.clone()).await;
        tracing::debug!(
            parent: &span,
            ms = started.elapsed().as_millis() as u64,
            ok = result.is_ok(),
            status = result.as_ref().err().and_then(|e| e.status()),
            "attempt finished"
        );
        let err = match result {
            Ok(resp) => return Ok(resp),
            Err(e) => e,
        };
        if !err.is_retryable() || emit.content_sent() {
            return Err(err);
        }
        if attempt >= max {
            tracing::warn!(
                provider = provider.provider_name(),
                attempts = attempt,
                status = err.status(),
                "LLM request failed, giving up"
            );
            return Err(LlmError::RetriesExhausted {
                attempts: attempt,
                last: Box::new(err),
            });
        }
        let delay = policy.delay_for(attempt, &err);
        tracing::info!(
            provider = provider.provider_name(),
            attempt,
            status = err.status(),
            delay_ms = delay.as_millis() as u64,
            "LLM request failed, retrying"
        );
        emit.emit(StreamEvent::Retrying {
            attempt,
            delay,
            reason: err.to_string(),
        });
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}
