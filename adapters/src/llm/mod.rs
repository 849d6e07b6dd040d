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
