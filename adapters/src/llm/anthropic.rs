//! The Anthropic Messages API (`POST {base}/v1/messages`, `anthropic-version: 2023-06-01`),
//! always streamed.
//!
//! Stream events handled: `message_start` (model, input tokens), `content_block_start` (text or
//! tool_use), `content_block_delta` (`text_delta`, `input_json_delta` — collected and parsed as
//! JSON at `content_block_stop`), `content_block_stop`, `message_delta` (stop reason, output
//! tokens), `message_stop`; `ping` and unknown events are ignored; `error` becomes
//! [`LlmError::StreamError`] even though the HTTP status was 200.

use std::collections::BTreeMap;
use std::fmt;

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{json, Map, Value};

use super::error::shorten;
use super::http::{secret_header, Assembler, Endpoint, ProviderConfig, Wire};
use super::retry::Emitter;
use super::sse::SseEvent;
use super::{ApiKey, ContentBlock, LlmError, LlmRequest, LlmResponse, StreamEvent, Usage};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const BASE_URL_ENV: &str = "ANTHROPIC_BASE_URL";
pub const API_VERSION: &str = "2023-06-01";

/// A client of the Anthropic Messages API. `Debug` never shows the key.
pub struct AnthropicProvider {
    endpoint: Endpoint,
    api_key: ApiKey,
}

impl AnthropicProvider {
    /// `api_key` comes from the environment variable named in the agent's config (see
    /// [`ApiKey::from_env`]); the base URL from `config`, else `ANTHROPIC_BASE_URL`, else the
    /// public API.
    pub fn new(api_key: ApiKey, config: ProviderConfig) -> Result<Self, LlmError> {
        Ok(AnthropicProvider {
            endpoint: Endpoint::new(config, BASE_URL_ENV, DEFAULT_BASE_URL)?,
            api_key,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.endpoint.base_url
    }

    /// The JSON body sent for `req` (streaming on).
    pub fn request_body(req: &LlmRequest) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(req.model));
        body.insert("max_tokens".into(), json!(req.max_tokens));
        if !req.system.is_empty() {
            body.insert("system".into(), json!(req.system));
        }
        let messages: Vec<Value> = req
            .messages
            .iter()
            .map(|m| json!({"role": m.role.as_str(), "content": m.content.iter().map(block_json).collect::<Vec<_>>()}))
            .collect();
        body.insert("messages".into(), Value::Array(messages));
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(t) = req.temperature {
            body.insert("temperature".into(), json!(t));
        }
        body.insert("stream".into(), Value::Bool(true));
        Value::Object(body)
    }
}

fn block_json(b: &ContentBlock) -> Value {
    match b {
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error})
        }
    }
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.endpoint.debug(f, "AnthropicProvider", &"<redacted>")
    }
}

impl Wire for AnthropicProvider {
    const NAME: &'static str = "anthropic";
    const PATH: &'static str = "/v1/messages";
    const UNAUTHORIZED_HINT: &'static str = "check the environment variable named in the agent's api_key_env: it must hold a valid Anthropic API key";
    type Assembler = StreamAssembler;
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
    fn headers(&self) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", secret_header(self.api_key.expose())?);
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        Ok(headers)
    }
    fn body(req: &LlmRequest) -> Value {
        AnthropicProvider::request_body(req)
    }
}

/// Folds Anthropic stream events into an [`LlmResponse`], forwarding deltas as they come.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    model: String,
    blocks: BTreeMap<u64, Partial>,
    stop_reason: Option<String>,
    usage: Usage,
    done: bool,
}

#[derive(Debug)]
enum Partial {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
        input: Option<Value>,
    },
    /// Block types we do not use (thinking, server tools, …).
    Other,
}

impl Assembler for StreamAssembler {
    fn new(model: &str) -> Self {
        StreamAssembler {
            model: model.to_owned(),
            ..Default::default()
        }
    }

    /// Handles one SSE event; returns `true` once `message_stop` arrived.
    fn on_event(&mut self, ev: &SseEvent, emit: &mut Emitter<'_>) -> Result<bool, LlmError> {
        let name = ev.event.as_deref();
        // The event name and the data's `type` agree on the real API; either is enough.
        let kind_of = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_owned);
        let known = |k: &str| {
            matches!(
                k,
                "message_start"
                    | "content_block_start"
                    | "content_block_delta"
                    | "content_block_stop"
                    | "message_delta"
                    | "message_stop"
                    | "error"
            )
        };
        if name.is_some_and(|n| !known(n)) {
            return Ok(false); // ping and future event types
        }
        let data: Value = serde_json::from_str(&ev.data).map_err(|e| {
            LlmError::Malformed(format!(
                "{} event with invalid JSON ({e}): {}",
                name.unwrap_or("unnamed"),
                shorten(&ev.data, 200)
            ))
        })?;
        let kind = match name {
            Some(n) => n.to_owned(),
            None => match kind_of(&data) {
                Some(k) if known(&k) => k,
                _ => return Ok(false),
            },
        };
        match kind.as_str() {
            "message_start" => {
                let msg = &data["message"];
                if let Some(m) = msg.get("model").and_then(Value::as_str) {
                    self.model = m.to_owned();
                }
                self.read_usage(&msg["usage"]);
                emit.emit(StreamEvent::Usage(self.usage));
            }
            "content_block_start" => {
                let index = index_of(&data)?;
                let block = &data["content_block"];
                let partial = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        if !text.is_empty() {
                            emit.emit(StreamEvent::TextDelta(text.clone()));
                        }
                        Partial::Text(text)
                    }
                    Some("tool_use") => {
                        let id = str_field(block, "id")?;
                        let name = str_field(block, "name")?;
                        emit.emit(StreamEvent::ToolUseStart {
                            id: id.clone(),
                            name: name.clone(),
                        });
                        Partial::Tool {
                            id,
                            name,
                            json: String::new(),
                            input: None,
                        }
                    }
                    _ => Partial::Other,
                };
                self.blocks.insert(index, partial);
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                let delta = &data["delta"];
                match (
                    self.blocks.get_mut(&index),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(Partial::Text(text)), Some("text_delta")) => {
                        let piece = delta
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        text.push_str(piece);
                        emit.emit(StreamEvent::TextDelta(piece.to_owned()));
                    }
                    (Some(Partial::Tool { json, .. }), Some("input_json_delta")) => {
                        let piece = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        json.push_str(piece);
                        emit.emit(StreamEvent::ToolInputDelta(piece.to_owned()));
                    }
                    (None, _) => {
                        return Err(LlmError::Malformed(format!(
                            "content_block_delta for block {index}, which never started"
                        )))
                    }
                    _ => {} // thinking / signature / citation deltas
                }
            }
            "content_block_stop" => {
                let index = index_of(&data)?;
                if let Some(Partial::Tool {
                    json, input, name, ..
                }) = self.blocks.get_mut(&index)
                {
                    let parsed = if json.trim().is_empty() {
                        Value::Object(Map::new())
                    } else {
                        serde_json::from_str(json).map_err(|e| {
                            LlmError::Malformed(format!(
                                "the input of tool call {name} is not valid JSON ({e}): {}",
                                shorten(json, 200)
                            ))
                        })?
                    };
                    *input = Some(parsed);
                }
            }
            "message_delta" => {
                if let Some(r) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_owned());
                }
                self.read_usage(&data["usage"]);
                emit.emit(StreamEvent::Usage(self.usage));
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            "error" => {
                let err = &data["error"];
                return Err(LlmError::StreamError {
                    kind: err
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                        .to_owned(),
                    message: err
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("(no message)")
                        .to_owned(),
                });
            }
            _ => {}
        }
        Ok(false)
    }

    /// The assembled response; an error if the stream ended before `message_stop`.
    fn finish(self) -> Result<LlmResponse, LlmError> {
        if !self.done {
            return Err(LlmError::Network(
                "the stream ended before message_stop (connection cut?)".into(),
            ));
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for partial in self.blocks.into_values() {
            match partial {
                Partial::Text(text) => content.push(ContentBlock::Text { text }),
                Partial::Tool {
                    id,
                    name,
                    json,
                    input,
                } => {
                    let input = match input {
                        Some(v) => v,
                        // No content_block_stop: parse what we have.
                        None if json.trim().is_empty() => Value::Object(Map::new()),
                        None => serde_json::from_str(&json).map_err(|e| {
                            LlmError::Malformed(format!(
                                "the input of tool call {name} is not valid JSON ({e})"
                            ))
                        })?,
                    };
                    content.push(ContentBlock::ToolUse { id, name, input });
                }
                Partial::Other => {}
            }
        }
        Ok(LlmResponse {
            content,
            stop_reason: self.stop_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}

impl StreamAssembler {
    fn read_usage(&mut self, u: &Value) {
        if let Some(n) = u.get("input_tokens").and_then(Value::as_u64) {
            self.usage.input_tokens = n;
        }
        if let Some(n) = u.get("output_tokens").and_then(Value::as_u64) {
            self.usage.output_tokens = n;
        }
    }
}

fn index_of(data: &Value) -> Result<u64, LlmError> {
    data.get("index").and_then(Value::as_u64).ok_or_else(|| {
        LlmError::Malformed(format!(
            "event without an index: {}",
            shorten(&data.to_string(), 200)
        ))
    })
}

fn str_field(v: &Value, key: &str) -> Result<String, LlmError> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| LlmError::Malformed(format!("tool_use block without {key}")))
}
