//! Calling language models (DESIGN.md §8).
//!
//! - [`types`] — the provider-agnostic request / response / stream types and the [`Provider`]
//!   trait: `complete(request, on_event)` streams deltas to a callback and returns the whole
//!   answer.
//! - [`anthropic`] — the Anthropic Messages API; [`openai`] — the OpenAI chat-completions format
//!   (also local servers); [`scripted`] — recorded answers for tests.
//! - [`sse`] — the incremental Server-Sent Events parser both providers read their streams with.
//! - [`retry`] — backoff with jitter, server-requested delays, attempt cap.
//! - [`parser`] — `<command>` blocks of an answer → proposed commands.
//! - [`error`] — [`LlmError`]: what failed and what to do about it.
//!
//! [`CLIENTS`] maps each provider name `agent.configure` accepts
//! ([`elfiee_capabilities::builtin::PROVIDERS`]) to its client; [`build_provider`] is the one
//! door from a name to a [`Provider`]. `adapters/tests/providers.rs` keeps the two lists equal.
//!
//! The API key is handed in as an [`ApiKey`] (read by the caller from the environment variable
//! the agent config names). It goes into a request header marked sensitive and nowhere else:
//! not into `Debug` output, errors or tracing fields.

pub mod anthropic;
pub mod error;
mod http;
pub mod openai;
pub mod parser;
pub mod retry;
pub mod scripted;
pub mod sse;
pub mod types;

pub use anthropic::AnthropicProvider;
pub use error::LlmError;
pub use http::{Assembler, ProviderConfig};
pub use openai::OpenAiProvider;
pub use parser::{parse_structured_output, ParseResult, ProposedCommand};
pub use retry::RetryPolicy;
pub use scripted::ScriptedProvider;
pub use types::{
    ApiKey, ContentBlock, LlmRequest, LlmResponse, Message, Provider, Role, StreamEvent, ToolDef,
    Usage,
};

use std::sync::Arc;

/// Builds a provider's client: the name of the environment variable holding the API key (read
/// now, at call time) and the endpoint settings.
pub type BuildClient =
    fn(api_key_env: &str, config: ProviderConfig) -> Result<Arc<dyn Provider>, LlmError>;

/// Every provider by name, with its client. The names are exactly
/// [`elfiee_capabilities::builtin::PROVIDERS`], the ones `agent.configure` accepts (a test
/// checks both ways); a provider is added here and there, nowhere else.
pub const CLIENTS: &[(&str, BuildClient)] = &[("anthropic", anthropic), ("openai", openai)];

fn anthropic(api_key_env: &str, config: ProviderConfig) -> Result<Arc<dyn Provider>, LlmError> {
    Ok(Arc::new(AnthropicProvider::new(
        ApiKey::from_env(api_key_env)?,
        config,
    )?))
}

/// The key is optional: local OpenAI-compatible servers take none.
fn openai(api_key_env: &str, config: ProviderConfig) -> Result<Arc<dyn Provider>, LlmError> {
    Ok(Arc::new(OpenAiProvider::new(
        ApiKey::from_env(api_key_env).ok(),
        config,
    )?))
}

/// The client of the provider called `name`; a name [`CLIENTS`] lacks is
/// [`LlmError::UnknownProvider`], listing the known ones (never a fallback to another
/// provider).
pub fn build_provider(
    name: &str,
    api_key_env: &str,
    config: ProviderConfig,
) -> Result<Arc<dyn Provider>, LlmError> {
    match CLIENTS.iter().find(|(n, _)| *n == name) {
        Some((_, build)) => build(api_key_env, config),
        None => Err(LlmError::UnknownProvider {
            name: name.to_owned(),
            known: CLIENTS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}
