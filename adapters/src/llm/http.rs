//! The HTTP part both providers share: one POST that answers with an event stream, status
//! mapping, and reading the stream chunk by chunk into the SSE parser.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, USER_AGENT};

use serde_json::Value;

use super::error::shorten;
use super::retry::{Attempt, Emitter};
use super::sse::{SseEvent, SseParser};
use super::{LlmError, LlmRequest, LlmResponse, RetryPolicy};
use crate::effects::BoxFuture;

/// Settings common to every provider.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Base URL without the `/v1/...` path, e.g. `https://api.anthropic.com` or
    /// `http://127.0.0.1:8080`. A trailing `/v1` is accepted too. `None`: the provider's
    /// environment variable (`ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL`), else its public API.
    pub base_url: Option<String>,
    pub retry: RetryPolicy,
    /// Time to establish the connection (default 10 s).
    pub connect_timeout: Duration,
    /// Longest silence while waiting for response bytes (default 120 s). Streams send pings,
    /// so a long answer is fine; a stalled one fails with [`LlmError::Timeout`].
    pub read_timeout: Duration,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            base_url: None,
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(120),
        }
    }
}

impl ProviderConfig {
    /// The base URL to use: the configured one, else `$env_var`, else `default`; without a
    /// trailing `/` or `/v1`.
    pub(crate) fn resolve_base_url(&self, env_var: &str, default: &str) -> String {
        let raw = self
            .base_url
            .clone()
            .filter(|s| !s.trim().is_empty())
            .or_else(|| std::env::var(env_var).ok().filter(|s| !s.trim().is_empty()))
            .unwrap_or_else(|| default.to_owned());
        let mut url = raw.trim().trim_end_matches('/').to_owned();
        if url.ends_with("/v1") {
            url.truncate(url.len() - 3);
        }
        url
    }

    /// The HTTP client. A loopback base URL (a local model server, a test server) bypasses any
    /// proxy configured in the environment.
    pub(crate) fn build_client(&self, base_url: &str) -> Result<reqwest::Client, LlmError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .read_timeout(self.read_timeout);
        if is_loopback(base_url) {
            builder = builder.no_proxy();
        }
        builder
            .build()
            .map_err(|e| LlmError::Network(format!("cannot set up the HTTP client: {e}")))
    }
}

fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = if host.starts_with('[') {
        host.split(']').next().map(|h| &h[1..]).unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A header value that HTTP debug output shows as `Sensitive`.
pub(crate) fn secret_header(value: &str) -> Result<HeaderValue, LlmError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| LlmError::Unauthorized {
        hint: "the API key contains characters not allowed in an HTTP header".into(),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// POSTs `body` as JSON and returns the response once its status is a success.
pub(crate) async fn post_for_stream(
    client: &reqwest::Client,
    url: &str,
    mut headers: HeaderMap,
    body: Vec<u8>,
    unauthorized_hint: &str,
) -> Result<reqwest::Response, LlmError> {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("elfiee/", env!("CARGO_PKG_VERSION"))),
    );
    let resp = client
        .post(url)
        .headers(headers)
        .body(body)
        .send()
        .await
        .map_err(|e| transport_error(e, url))?;
    let status = resp.status().as_u16();
    if resp.status().is_success() {
        let ct = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if ct.starts_with("application/json") {
            let text = resp.text().await.unwrap_or_default();
            return Err(LlmError::Malformed(format!(
                "expected an event stream, got a JSON body: {}",
                shorten(&text, 300)
            )));
        }
        return Ok(resp);
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = super::retry::parse_retry_after(
        header("retry-after-ms").as_deref(),
        header("retry-after").as_deref(),
    );
    let text = resp.text().await.unwrap_or_default();
    Err(LlmError::from_status(
        status,
        &text,
        retry_after,
        unauthorized_hint,
    ))
}

fn transport_error(e: reqwest::Error, url: &str) -> LlmError {
    if e.is_timeout() {
        LlmError::Timeout(format!("no answer from {url}"))
    } else if e.is_connect() {
        LlmError::Network(format!("cannot connect to {url}: {}", error_chain(&e)))
    } else {
        LlmError::Network(format!("request to {url} failed: {}", error_chain(&e)))
    }
}

/// The error and its sources on one line (reqwest's top-level message alone is vague).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

/// Reads the response body into `on_event` until it ends or `on_event` says it is done
/// (returns `Ok(true)`). Returns whether the consumer finished.
pub(crate) async fn read_events(
    mut resp: reqwest::Response,
    mut on_event: impl FnMut(SseEvent) -> Result<bool, LlmError>,
) -> Result<bool, LlmError> {
    let mut parser = SseParser::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) if e.is_timeout() => {
                return Err(LlmError::Timeout("the stream went silent".into()))
            }
            Err(e) => {
                return Err(LlmError::Network(format!(
                    "the connection broke mid-response: {}",
                    error_chain(&e)
                )))
            }
        };
        for ev in parser.push(&chunk) {
            if on_event(ev)? {
                return Ok(true);
            }
        }
        parser.check()?;
    }
    if let Some(ev) = parser.finish() {
        if on_event(ev)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What an HTTP provider keeps: the client, the resolved base URL and its settings.
pub(crate) struct Endpoint {
    client: reqwest::Client,
    pub(crate) base_url: String,
    pub(crate) config: ProviderConfig,
}

impl Endpoint {
    /// The base URL comes from `config`, else `$env_var`, else `default`.
    pub(crate) fn new(
        config: ProviderConfig,
        env_var: &str,
        default: &str,
    ) -> Result<Self, LlmError> {
        let base_url = config.resolve_base_url(env_var, default);
        Ok(Endpoint {
            client: config.build_client(&base_url)?,
            base_url,
            config,
        })
    }

    /// `Debug` of the provider `name` holding this endpoint; `api_key` shows how its key is
    /// printed (never the key itself).
    pub(crate) fn debug(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        name: &str,
        api_key: &dyn std::fmt::Debug,
    ) -> std::fmt::Result {
        f.debug_struct(name)
            .field("base_url", &self.base_url)
            .field("api_key", api_key)
            .field("config", &self.config)
            .finish()
    }
}

/// Folds one provider's stream events into an [`LlmResponse`], forwarding deltas as they come
/// (Anthropic's [`super::anthropic::StreamAssembler`], OpenAI's
/// [`super::openai::ChunkAssembler`]).
pub trait Assembler: Send + Sized {
    /// An empty answer from `model`.
    fn new(model: &str) -> Self;
    /// Handles one SSE event; returns `true` once the stream says it is complete.
    fn on_event(&mut self, ev: &SseEvent, emit: &mut Emitter<'_>) -> Result<bool, LlmError>;
    /// The whole answer, or why the stream did not make one.
    fn finish(self) -> Result<LlmResponse, LlmError>;
}

/// What differs between the HTTP providers: where a request goes, how it is authorized and
/// written, and how the streamed answer is read. One attempt of a call is the same for all
/// (see the [`Attempt`] implementation below), retries are [`super::retry`]'s.
pub(crate) trait Wire: Sync + Send {
    /// Short name for logs (`anthropic`, `openai`).
    const NAME: &'static str;
    /// The path under the base URL (`/v1/messages`).
    const PATH: &'static str;
    /// What to check when the server answers 401.
    const UNAUTHORIZED_HINT: &'static str;
    type Assembler: Assembler;
    fn endpoint(&self) -> &Endpoint;
    /// The authorization (and version) headers.
    fn headers(&self) -> Result<HeaderMap, LlmError>;
    /// The JSON body sent for `req` (streaming on).
    fn body(req: &LlmRequest) -> Value;
}

impl<W: Wire> Attempt for W {
    fn provider_name(&self) -> &'static str {
        W::NAME
    }
    fn policy(&self) -> &RetryPolicy {
        &self.endpoint().config.retry
    }
    fn attempt<'a>(
        &'a self,
        req: &'a LlmRequest,
        emit: &'a mut Emitter<'_>,
    ) -> BoxFuture<'a, Result<LlmResponse, LlmError>> {
        Box::pin(async move {
            let endpoint = self.endpoint();
            let url = format!("{}{}", endpoint.base_url, W::PATH);
            let body = serde_json::to_vec(&W::body(req)).unwrap_or_default();
            let resp = post_for_stream(
                &endpoint.client,
                &url,
                self.headers()?,
                body,
                W::UNAUTHORIZED_HINT,
            )
            .await?;
            let mut asm = W::Assembler::new(&req.model);
            read_events(resp, |ev| asm.on_event(&ev, emit)).await?;
            asm.finish()
        })
    }
}
