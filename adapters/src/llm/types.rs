//! Provider-agnostic request, response and stream types.
//!
//! The shapes follow the Anthropic Messages API (content blocks tagged by `type`), so a request
//! or response serializes to JSON that reads like the API's own; the OpenAI provider maps them.
//! Everything is `Serialize + Deserialize` so the agent loop can keep messages in events.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::LlmError;
use crate::effects::BoxFuture;

/// One call to a model: system prompt, conversation, tools and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    pub model: String,
    /// System prompt; omitted from the wire request when empty.
    #[serde(default)]
    pub system: String,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDef>,
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

impl LlmRequest {
    /// A request with one user message and no tools.
    pub fn new(
        model: impl Into<String>,
        system: impl Into<String>,
        prompt: impl Into<String>,
        max_tokens: u32,
    ) -> Self {
        LlmRequest {
            model: model.into(),
            system: system.into(),
            messages: vec![Message::user_text(prompt)],
            tools: Vec::new(),
            max_tokens,
            temperature: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    pub fn assistant_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
        }
    }

    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Message { role, content }
    }
}

/// A piece of a message. Serialized as `{"type": "text" | "tool_use" | "tool_result", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// The model asks to call a tool; `input` is the parsed JSON arguments.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// The answer to a tool call, sent back in a user message.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

/// A tool the model may call: name, description and a JSON Schema for its input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The assembled answer of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmResponse {
    pub content: Vec<ContentBlock>,
    /// Why the model stopped, in Anthropic's vocabulary (`end_turn`, `tool_use`, `max_tokens`,
    /// `stop_sequence`); the OpenAI provider maps its `finish_reason` onto these.
    pub stop_reason: Option<String>,
    pub usage: Usage,
    pub model: String,
}

impl LlmResponse {
    /// A plain text answer (handy for scripted tests).
    pub fn text(model: impl Into<String>, text: impl Into<String>) -> Self {
        LlmResponse {
            content: vec![ContentBlock::text(text)],
            stop_reason: Some("end_turn".into()),
            usage: Usage::default(),
            model: model.into(),
        }
    }

    /// All text blocks joined.
    pub fn joined_text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls of the answer: `(id, name, input)`.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// Live progress of a streamed call, delivered to the caller's callback as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A piece of assistant text.
    TextDelta(String),
    /// The model started a tool call.
    ToolUseStart { id: String, name: String },
    /// A piece of the current tool call's JSON input (not parseable on its own).
    ToolInputDelta(String),
    /// Token counts so far (input from the start of the message, output cumulative).
    Usage(Usage),
    /// The call failed with a retryable error and will be tried again after `delay`.
    Retrying {
        attempt: u32,
        delay: Duration,
        reason: String,
    },
}

/// A language model behind some wire protocol.
///
/// `complete` streams under the hood: `on_event` receives deltas as they arrive, and the
/// assembled [`LlmResponse`] is returned at the end. Retries (see [`super::RetryPolicy`]) happen
/// inside; they are announced through [`StreamEvent::Retrying`] and only happen before any
/// content was delivered, so the callback never sees a delta twice.
pub trait Provider: Send + Sync {
    /// Short name for logs (`anthropic`, `openai`, `scripted`).
    fn name(&self) -> &'static str;

    fn complete<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<LlmResponse, LlmError>>;
}

/// An API key. It is only ever put into a request header; `Debug` prints `ApiKey(<redacted>)`
/// and there is no `Display`, so it cannot end up in logs or error messages by accident.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// Reads the key from the environment variable `var` (the agent config's `api_key_env`).
    pub fn from_env(var: &str) -> Result<Self, LlmError> {
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(ApiKey(v.trim().to_owned())),
            _ => Err(LlmError::Unauthorized {
                hint: format!(
                    "the environment variable {var} is not set or empty; export the API key there"
                ),
            }),
        }
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}
