//! The OpenAI chat-completions format (`POST {base}/v1/chat/completions`, `Authorization:
//! Bearer`), always streamed. Also speaks to local servers that copy the format (llama.cpp,
//! vLLM, Ollama, LM Studio).
//!
//! Mapping: the system prompt becomes a `system` message; tool results become `tool` messages
//! (placed before the user's text of the same turn, right after the assistant's `tool_calls`);
//! tools become `{"type": "function", "function": {name, description, parameters}}`. The
//! `finish_reason` is mapped onto Anthropic's vocabulary: `stop` → `end_turn`, `tool_calls` →
//! `tool_use`, `length` → `max_tokens`.

use std::collections::BTreeMap;
use std::fmt;

use reqwest::header::{HeaderMap, AUTHORIZATION};
use serde_json::{json, Map, Value};

use super::error::shorten;
use super::http::{secret_header, Assembler, Endpoint, ProviderConfig, Wire};
use super::retry::Emitter;
use super::sse::SseEvent;
use super::{ApiKey, ContentBlock, LlmError, LlmRequest, LlmResponse, Role, StreamEvent, Usage};

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com";
pub const BASE_URL_ENV: &str = "OPENAI_BASE_URL";

/// A client of an OpenAI-compatible chat-completions endpoint. `Debug` never shows the key.
pub struct OpenAiProvider {
    endpoint: Endpoint,
    api_key: Option<ApiKey>,
}

impl OpenAiProvider {
    /// `api_key` may be `None` for local servers that want no `Authorization` header. The base
    /// URL comes from `config`, else `OPENAI_BASE_URL`, else the public API.
    pub fn new(api_key: Option<ApiKey>, config: ProviderConfig) -> Result<Self, LlmError> {
        Ok(OpenAiProvider {
            endpoint: Endpoint::new(config, BASE_URL_ENV, DEFAULT_BASE_URL)?,
            api_key,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.endpoint.base_url
    }

    /// The JSON body sent for `req` (streaming on, usage requested).
    pub fn request_body(req: &LlmRequest) -> Value {
        let mut messages = Vec::new();
        if !req.system.is_empty() {
            messages.push(json!({"role": "system", "content": req.system}));
        }
        for m in &req.messages {
            let text: String = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            match m.role {
                Role::User => {
                    for b in &m.content {
                        if let ContentBlock::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } = b
                        {
                            let content = if *is_error {
                                format!("Error: {content}")
                            } else {
                                content.clone()
                            };
                            messages.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                        }
                    }
                    if !text.is_empty() || m.content.is_empty() {
                        messages.push(json!({"role": "user", "content": text}));
                    }
                }
                Role::Assistant => {
                    let calls: Vec<Value> = m
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::ToolUse { id, name, input } => Some(json!({
                                "id": id, "type": "function",
                                "function": {"name": name, "arguments": input.to_string()}
                            })),
                            _ => None,
                        })
                        .collect();
                    let mut msg = Map::new();
                    msg.insert("role".into(), json!("assistant"));
                    msg.insert(
                        "content".into(),
                        if text.is_empty() && !calls.is_empty() {
                            Value::Null
                        } else {
                            json!(text)
                        },
                    );
                    if !calls.is_empty() {
                        msg.insert("tool_calls".into(), Value::Array(calls));
                    }
                    messages.push(Value::Object(msg));
                }
            }
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(req.model));
        body.insert("messages".into(), Value::Array(messages));
        body.insert("max_tokens".into(), json!(req.max_tokens));
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(t) = req.temperature {
            body.insert("temperature".into(), json!(t));
        }
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        Value::Object(body)
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self.api_key.as_ref().map(|_| "<redacted>");
        self.endpoint.debug(f, "OpenAiProvider", &key)
    }
}

impl Wire for OpenAiProvider {
    const NAME: &'static str = "openai";
    const PATH: &'static str = "/v1/chat/completions";
    const UNAUTHORIZED_HINT: &'static str = "check the environment variable named in the agent's api_key_env: it must hold a valid key for this server";
    type Assembler = ChunkAssembler;
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
    fn headers(&self) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.api_key {
            let bearer = secret_header(&format!("Bearer {}", key.expose()))?;
            headers.insert(AUTHORIZATION, bearer);
        }
        Ok(headers)
    }
    fn body(req: &LlmRequest) -> Value {
        OpenAiProvider::request_body(req)
    }
}

/// Folds chat-completion chunks into an [`LlmResponse`], forwarding deltas as they come.
#[derive(Debug, Default)]
pub struct ChunkAssembler {
    model: String,
    text: String,
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<String>,
    usage: Usage,
    done: bool,
}

#[derive(Debug)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl Assembler for ChunkAssembler {
    fn new(model: &str) -> Self {
        ChunkAssembler {
            model: model.to_owned(),
            ..Default::default()
        }
    }

    /// Handles one SSE event; returns `true` at `data: [DONE]`.
    fn on_event(&mut self, ev: &SseEvent, emit: &mut Emitter<'_>) -> Result<bool, LlmError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::Malformed(format!(
                "chunk with invalid JSON ({e}): {}",
                shorten(data, 200)
            ))
        })?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            let kind = err.get("type").or_else(|| err.get("code")).map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            });
            return Err(LlmError::StreamError {
                kind: kind.unwrap_or_else(|| "error".into()),
                message: err
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| err.to_string()),
            });
        }
        if let Some(m) = chunk.get("model").and_then(Value::as_str) {
            self.model = m.to_owned();
        }
        if let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        {
            let delta = &choice["delta"];
            if let Some(piece) = delta.get("content").and_then(Value::as_str) {
                if !piece.is_empty() {
                    self.text.push_str(piece);
                    emit.emit(StreamEvent::TextDelta(piece.to_owned()));
                }
            }
            for tc in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
                let call = self.calls.entry(index).or_insert_with(|| {
                    let id = tc
                        .get("id")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("call_{index}"));
                    let name = tc
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    emit.emit(StreamEvent::ToolUseStart {
                        id: id.clone(),
                        name: name.clone(),
                    });
                    Call {
                        id,
                        name,
                        arguments: String::new(),
                    }
                });
                if call.name.is_empty() {
                    if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                        call.name = n.to_owned();
                    }
                }
                if let Some(piece) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                    if !piece.is_empty() {
                        call.arguments.push_str(piece);
                        emit.emit(StreamEvent::ToolInputDelta(piece.to_owned()));
                    }
                }
            }
            if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(r.to_owned());
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage.input_tokens = u
                .get("prompt_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(self.usage.input_tokens);
            self.usage.output_tokens = u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(self.usage.output_tokens);
            emit.emit(StreamEvent::Usage(self.usage));
        }
        Ok(false)
    }

    /// The assembled response. A stream without `[DONE]` is accepted if a `finish_reason`
    /// arrived (some local servers omit the marker).
    fn finish(self) -> Result<LlmResponse, LlmError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(LlmError::Network(
                "the stream ended before [DONE] (connection cut?)".into(),
            ));
        }
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        for call in self.calls.into_values() {
            let input = if call.arguments.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(&call.arguments).map_err(|e| {
                    LlmError::Malformed(format!(
                        "the arguments of tool call {} are not valid JSON ({e}): {}",
                        call.name,
                        shorten(&call.arguments, 200)
                    ))
                })?
            };
            content.push(ContentBlock::ToolUse {
                id: call.id,
                name: call.name,
                input,
            });
        }
        let stop_reason = self.finish_reason.map(|r| match r.as_str() {
            "stop" => "end_turn".to_owned(),
            "tool_calls" | "function_call" => "tool_use".to_owned(),
            "length" => "max_tokens".to_owned(),
            _ => r,
        });
        Ok(LlmResponse {
            content,
            stop_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}
