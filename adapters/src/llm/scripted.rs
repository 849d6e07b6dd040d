//! A provider that plays back pre-recorded answers: for tests and the agent loop's fixtures.
//!
//! ```
//! use elfiee_adapters::llm::{LlmRequest, LlmResponse, Provider, ScriptedProvider, StreamEvent};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let p = ScriptedProvider::new([LlmResponse::text("m", "hello")]);
//! let mut seen = String::new();
//! let resp = p.complete(&LlmRequest::new("m", "", "hi", 100), &mut |ev| {
//!     if let StreamEvent::TextDelta(t) = ev { seen.push_str(&t) }
//! }).await.unwrap();
//! assert_eq!(resp.joined_text(), "hello");
//! assert_eq!(seen, "hello");
//! assert_eq!(p.requests()[0].messages.len(), 1);
//! # });
//! ```

use std::collections::VecDeque;
use std::sync::Mutex;

use super::{ContentBlock, LlmError, LlmRequest, LlmResponse, Provider, StreamEvent};
use crate::effects::BoxFuture;

/// Answers calls with a script of responses (or errors), in order, and records every request.
/// When the script runs out, calls fail with [`LlmError::Malformed`] naming the call.
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    script: Mutex<VecDeque<Result<LlmResponse, LlmError>>>,
    requests: Mutex<Vec<LlmRequest>>,
}

impl ScriptedProvider {
    pub fn new(responses: impl IntoIterator<Item = LlmResponse>) -> Self {
        ScriptedProvider {
            script: Mutex::new(responses.into_iter().map(Ok).collect()),
            requests: Mutex::default(),
        }
    }

    /// A script that may also contain failures.
    pub fn with_results(results: impl IntoIterator<Item = Result<LlmResponse, LlmError>>) -> Self {
        ScriptedProvider {
            script: Mutex::new(results.into_iter().collect()),
            requests: Mutex::default(),
        }
    }

    pub fn push(&self, result: Result<LlmResponse, LlmError>) {
        lock(&self.script).push_back(result);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<LlmRequest> {
        lock(&self.requests).clone()
    }

    /// How many scripted answers are left.
    pub fn remaining(&self) -> usize {
        lock(&self.script).len()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn complete<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<LlmResponse, LlmError>> {
        Box::pin(async move {
            let call = {
                let mut requests = lock(&self.requests);
                requests.push(req.clone());
                requests.len()
            };
            let next = lock(&self.script).pop_front();
            let resp = match next {
                Some(r) => r?,
                None => {
                    return Err(LlmError::Malformed(format!(
                        "ScriptedProvider: no scripted answer left for call {call}"
                    )))
                }
            };
            for block in &resp.content {
                match block {
                    ContentBlock::Text { text } => {
                        // Deliver text in a few pieces, split at character boundaries, like a stream.
                        let mut rest = text.as_str();
                        while !rest.is_empty() {
                            let mut cut = rest.len().min(16);
                            while !rest.is_char_boundary(cut) {
                                cut += 1;
                            }
                            on_event(StreamEvent::TextDelta(rest[..cut].to_owned()));
                            rest = &rest[cut..];
                        }
                    }
                    ContentBlock::ToolUse { id, name, input } => {
                        on_event(StreamEvent::ToolUseStart {
                            id: id.clone(),
                            name: name.clone(),
                        });
                        on_event(StreamEvent::ToolInputDelta(input.to_string()));
                    }
                    ContentBlock::ToolResult { .. } => {}
                }
            }
            on_event(StreamEvent::Usage(resp.usage));
            Ok(resp)
        })
    }
}
