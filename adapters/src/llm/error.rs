//! What can go wrong when calling a model, and what to do about it.

use std::time::Duration;

/// An LLM call failed. Each message says what to do next. Nothing here ever contains the API key.
///
/// [`LlmError::is_retryable`] decides what [`super::retry`] tries again: rate limits, overload,
/// server errors, timeouts and network errors. Client errors (400/401/403/404/413), errors the
/// server reports inside an HTTP 200 stream and malformed responses are returned at once.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// HTTP 401 (or no key at all).
    #[error("unauthorized: the API key was rejected or is missing ({hint})")]
    Unauthorized { hint: String },

    #[error("bad request (HTTP {status}): {message}; fix the request (model name, max_tokens, message order) — retrying will not help")]
    BadRequest { status: u16, message: String },

    #[error("forbidden (HTTP 403): {message}; the key has no access to this model or feature — check the account's permissions")]
    Forbidden { message: String },

    #[error("not found (HTTP 404): {message}; check the model name and the base URL")]
    NotFound { message: String },

    #[error(
        "request too large (HTTP 413): {message}; lower the context budget (max_context_tokens) or send fewer blocks"
    )]
    TooLarge { message: String },

    #[error("rate limited (HTTP 429): {message}; wait a moment or lower the request rate")]
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },

    #[error("the model is overloaded (HTTP 529): {message}; try again later")]
    Overloaded {
        message: String,
        retry_after: Option<Duration>,
    },

    #[error(
        "server error (HTTP {status}): {message}; the provider has a problem, try again later"
    )]
    Server {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },

    #[error("timed out: {0}; the network or the provider is slow, try again (or raise the read timeout)")]
    Timeout(String),

    #[error("network error: {0}; check the connection and the base URL")]
    Network(String),

    /// The server accepted the request (HTTP 200) and then sent an `error` event in the stream.
    #[error("the provider reported an error mid-stream ({kind}): {message}; the answer is incomplete, try again")]
    StreamError { kind: String, message: String },

    /// The response was not the SSE / JSON we expect.
    #[error("malformed response: {0}; the base URL may not point at a compatible API")]
    Malformed(String),

    /// An agent names a provider this program has no client for.
    #[error(
        "unknown provider '{name}'; use one of {known} (elfiee agent configure ID --provider P)"
    )]
    UnknownProvider { name: String, known: String },

    #[error("gave up after {attempts} attempts; last error: {last}")]
    RetriesExhausted { attempts: u32, last: Box<LlmError> },
}

/// Statuses worth another try (Anthropic's SDK retries the same set).
pub const RETRYABLE_STATUSES: &[u16] = &[408, 429, 500, 502, 503, 504, 529];

impl LlmError {
    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::RateLimited { .. }
            | LlmError::Overloaded { .. }
            | LlmError::Timeout(_)
            | LlmError::Network(_) => true,
            LlmError::Server { status, .. } => RETRYABLE_STATUSES.contains(status),
            _ => false,
        }
    }

    /// The delay the server asked for (`retry-after-ms` / `retry-after`), if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after, .. }
            | LlmError::Overloaded { retry_after, .. }
            | LlmError::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The HTTP status behind this error, if it came from one.
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Unauthorized { .. } => Some(401),
            LlmError::BadRequest { status, .. } | LlmError::Server { status, .. } => Some(*status),
            LlmError::Forbidden { .. } => Some(403),
            LlmError::NotFound { .. } => Some(404),
            LlmError::TooLarge { .. } => Some(413),
            LlmError::RateLimited { .. } => Some(429),
            LlmError::Overloaded { .. } => Some(529),
            LlmError::RetriesExhausted { last, .. } => last.status(),
            _ => None,
        }
    }

    /// Maps a non-success HTTP status and its body to an error.
    /// `unauthorized_hint` tells the user where the key comes from.
    pub fn from_status(
        status: u16,
        body: &str,
        retry_after: Option<Duration>,
        unauthorized_hint: &str,
    ) -> LlmError {
        let message = error_message(body);
        match status {
            401 => LlmError::Unauthorized {
                hint: format!("{unauthorized_hint}; server said: {message}"),
            },
            403 => LlmError::Forbidden { message },
            404 => LlmError::NotFound { message },
            413 => LlmError::TooLarge { message },
            408 => LlmError::Timeout(format!("HTTP 408: {message}")),
            429 => LlmError::RateLimited {
                message,
                retry_after,
            },
            529 => LlmError::Overloaded {
                message,
                retry_after,
            },
            500..=599 => LlmError::Server {
                status,
                message,
                retry_after,
            },
            _ => LlmError::BadRequest { status, message },
        }
    }
}

/// The human part of an error body: `error.message` (Anthropic and OpenAI both use it), else the
/// body itself, shortened.
pub(crate) fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .and_then(|m| m.as_str())
            .map(str::to_owned)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    if text.is_empty() {
        return "(empty body)".into();
    }
    shorten(&text, 500)
}

/// At most `max` bytes of `s`, cut at a character boundary, with `…` when cut.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
