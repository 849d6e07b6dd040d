//! `AgentSession`: one conversation of the agent loop (seeds 003/004, DESIGN.md §8).
//!
//! A turn: the user's message → the model, with native tool definitions (the MCP catalogue plus
//! `shell` and `self_info`) → for each tool call: permission (rules, autonomy, doom-loop guard,
//! the confirm callback for `ask`) → execution as the **agent's editor** through CBAC → the
//! result back to the model → … until the model stops or the iteration cap is reached (the
//! stop reason is part of the outcome). Every message, session rule and stop is an
//! `agent.session` event, so reopening the `.elf` resumes the session; replay calls nothing.
//!
//! When a call's tokens reach the context limit minus a buffer, the conversation is compacted:
//! a summary call (Goal / Instructions / Discoveries / Accomplished / Files) replaces the older
//! history; if that call fails, the history is truncated instead, so the session stays usable.
//!
//! Tool outputs older than the newest 40K tokens of output are sent as a marker (the log keeps
//! them).
//!
//! The `task` tool runs a read-only explore sub-agent in a child session (its events carry
//! `parent_session`); it shares the parent's cancel flag, so cancelling the parent stops it.
//!
//! Not built yet: memory, profiles, titles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{CapError, Command};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::permissions::{Action, Autonomy, Rule, Ruleset};
use crate::llm::{ContentBlock, LlmRequest, Message, Provider, Role, ToolDef};

/// How the user answered an `ask`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    /// Run this call.
    Once,
    /// Run it and allow this tool for the rest of the session (a session rule).
    Always,
    Reject,
    /// Reject and tell the model why.
    RejectWithFeedback(String),
}

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without calling a tool.
    EndTurn,
    /// The turn made `limit` model calls and the model still wanted tools.
    IterationCap { limit: usize },
    /// The model call failed.
    Error { message: String },
    /// The session (or its parent) was cancelled.
    Cancelled,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::EndTurn => f.write_str("the agent finished"),
            StopReason::IterationCap { limit } => write!(f, "stopped after {limit} steps (the iteration cap); send another message to continue"),
            StopReason::Error { message } => write!(f, "stopped: the model call failed: {message}"),
            StopReason::Cancelled => f.write_str("cancelled"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    pub stop_reason: StopReason,
    /// The model's last text.
    pub text: String,
    pub tool_calls: usize,
}

/// Session settings.
#[derive(Clone)]
pub struct SessionOptions {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub autonomy: Autonomy,
    pub rules: Ruleset,
    /// Model calls per turn (default 10).
    pub max_iterations: usize,
    /// Messages sent to the model (default 50, newest kept).
    pub max_history: usize,
    /// Reply language for the system prompt (e.g. "Chinese"); `None` = the user's language.
    pub language: Option<String>,
    /// Calls of the same tool with the same input in one turn before the user is asked (3).
    pub doom_loop_threshold: usize,
    /// The model's context window in tokens (default 200,000).
    pub context_limit: u64,
    /// Compact when input + output tokens of a call reach `context_limit - compaction_buffer`.
    pub compaction_buffer: u64,
    /// Tool outputs older than the newest this-many tokens of tool output are sent to the model
    /// as a marker (default 40,000). The log keeps them whole.
    pub prune_tool_tokens: usize,
    /// Set to stop the session (and its sub-agents, which share the flag) at the next step.
    pub cancel: Arc<AtomicBool>,
    /// The parent session of a sub-agent.
    pub parent_session: Option<String>,
    /// Called with `("running" | "success" | "failed", tool name, detail)` around every tool call
    /// (the status lines of seed 003).
    pub on_tool: Option<Arc<dyn Fn(&str, &str, &str) + Send + Sync>>,
}

impl SessionOptions {
    pub fn new(provider: Arc<dyn Provider>, model: impl Into<String>) -> SessionOptions {
        SessionOptions {
            provider,
            model: model.into(),
            autonomy: Autonomy::Supervised,
            rules: Ruleset::default(),
            max_iterations: 10,
            max_history: 50,
            language: None,
            doom_loop_threshold: 3,
            context_limit: 200_000,
            compaction_buffer: 20_000,
            prune_tool_tokens: 40_000,
            cancel: Arc::new(AtomicBool::new(false)),
            parent_session: None,
            on_tool: None,
        }
    }
}

pub struct AgentSession {
    file: FileHandle,
    agent_block_id: String,
    agent_editor: String,
    /// The human (or host) talking to the agent.
    user_editor: String,
    session_id: String,
    history: Vec<Message>,
    session_rules: Ruleset,
    opts: SessionOptions,
}

/// Messages kept verbatim after a compaction: the last assistant message and the tool results
/// that answer it, so tool calls stay paired.
const KEPT_AFTER_COMPACTION: usize = 2;

fn summary_message(summary: &str) -> Message {
    Message::user_text(format!("Summary of the conversation so far (older messages were compacted):\n\n{summary}"))
}

fn truncation_message() -> Message {
    Message::user_text("[Older messages were dropped to stay within the context window; ask the user if you need them.]")
}

/// `note` followed by the last `kept` messages.
fn compacted(history: Vec<Message>, note: Message, kept: usize) -> Vec<Message> {
    let start = history.len().saturating_sub(kept);
    let mut out = vec![note];
    out.extend(history.into_iter().skip(start));
    out
}

/// Replaces tool outputs older than the newest `budget` tokens of tool output with a marker.
fn prune_tool_outputs(mut messages: Vec<Message>, budget: usize) -> Vec<Message> {
    let mut seen = 0usize;
    for m in messages.iter_mut().rev() {
        for block in m.content.iter_mut().rev() {
            if let ContentBlock::ToolResult { content, .. } = block {
                let tokens = elfiee_projections::context::count_tokens(content);
                if seen + tokens > budget {
                    *content = format!("[older tool output pruned: {tokens} tokens; call the tool again if you need it]");
                } else {
                    seen += tokens;
                }
            }
        }
    }
    messages
}

fn rejected(msg: impl Into<String>) -> EngineError {
    EngineError::Rejected(CapError::rejected(msg))
}

impl AgentSession {
    /// Opens session `session_id` of the agent (resuming it from its events), or a new one.
    pub fn open(
        file: &FileHandle,
        user_editor: &str,
        agent_block_id: &str,
        session_id: Option<&str>,
        opts: SessionOptions,
    ) -> Result<AgentSession, EngineError> {
        let agent_editor = file
            .with_state(|s| s.block(agent_block_id).filter(|b| b.block_type == "agent").and_then(|b| b.contents.get("editor_id")).and_then(Value::as_str).map(str::to_owned))
            .ok_or_else(|| rejected(format!("'{agent_block_id}' is not an agent block; see `elfiee agent list`")))?;
        let session_id = session_id.map(str::to_owned).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut history = Vec::new();
        let mut session_rules = Ruleset::default();
        for e in file.events(1)? {
            if e.entity != agent_block_id || e.cap_id() != "agent.session" || e.value.get("session_id").and_then(Value::as_str) != Some(&session_id) {
                continue;
            }
            match e.value.get("entry").and_then(Value::as_str) {
                Some("message") => {
                    if let Some(m) = e.value.get("message").and_then(|m| serde_json::from_value::<Message>(m.clone()).ok()) {
                        history.push(m);
                    }
                }
                Some("compaction") => {
                    let kept = e.value.get("kept").and_then(Value::as_u64).unwrap_or(0) as usize;
                    let note = e.value.get("summary").and_then(Value::as_str).map(summary_message).unwrap_or_else(truncation_message);
                    history = compacted(history, note, kept);
                }
                Some("rule") => {
                    if let Some(r) = e.value.get("rule").and_then(|r| serde_json::from_value::<Rule>(r.clone()).ok()) {
                        session_rules.push(r);
                    }
                }
                _ => {}
            }
        }
        Ok(AgentSession { file: file.clone(), agent_block_id: agent_block_id.into(), agent_editor, user_editor: user_editor.into(), session_id, history, session_rules, opts })
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The conversation so far (as rebuilt from events on open).
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    async fn record(&self, editor: &str, entry: Value) -> Result<(), EngineError> {
        let mut payload = entry;
        payload["session_id"] = json!(self.session_id);
        if let Some(parent) = &self.opts.parent_session {
            payload["parent_session"] = json!(parent);
        }
        self.file.submit(Command::new(editor, "agent.session", Some(&self.agent_block_id), payload)).await.map(|_| ())
    }

    async fn push(&mut self, editor: &str, m: Message) -> Result<(), EngineError> {
        self.record(editor, json!({"entry": "message", "message": m})).await?;
        self.history.push(m);
        Ok(())
    }

    fn tools() -> Vec<ToolDef> {
        let mut tools: Vec<ToolDef> = crate::mcp::tools::catalogue()
            .into_iter()
            .map(|t| ToolDef { name: t.name.into(), description: t.description.into(), input_schema: t.input_schema })
            .collect();
        tools.push(ToolDef {
            name: "shell".into(),
            description: "Run a shell command in the agent's terminal (timeout 120 s); returns stdout, stderr and the exit code.".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"], "additionalProperties": false}),
        });
        tools.push(ToolDef {
            name: "task".into(),
            description: "Hand a research question to a read-only explore sub-agent; returns its final answer.".into(),
            input_schema: json!({"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"], "additionalProperties": false}),
        });
        tools.push(ToolDef {
            name: "self_info".into(),
            description: "Your own configuration, grants and limits.".into(),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        });
        tools
    }

    fn system_prompt(&self) -> String {
        let safety = match self.opts.autonomy {
            Autonomy::ReadOnly => "You may only read: every tool that changes something is refused.",
            Autonomy::Supervised => "Changes may need the user's confirmation; a refused call comes back as a failure — do not retry it unchanged.",
            Autonomy::Full => "You may act without confirmation, except where a rule forbids it.",
        };
        let mut s = format!(
            "You are an agent working inside an Elfiee document (agent block {}, editor {}). You act only through the tools; every change you make is recorded as yours.\n\
Safety: {safety}\n\
Principles: read before you write; keep changes small and explain them; link code to the requirement it implements with elfiee_block_link (relation \"implement\"); stop when the task is done.\n\
Tool results starting with [failed] or [error] mean the call did not succeed.\n",
            self.agent_block_id, self.agent_editor
        );
        if let Some(lang) = &self.opts.language {
            s.push_str(&format!("Reply in {lang}.\n"));
        }
        s
    }

    /// The thing a rule's `pattern` is matched against for a call.
    fn subject(name: &str, input: &Value) -> String {
        let field = match name {
            "shell" => "command",
            "elfiee_block_link" | "elfiee_block_unlink" => "from",
            "elfiee_directory_import" => "path",
            _ => "block_id",
        };
        input.get(field).and_then(Value::as_str).unwrap_or_default().to_owned()
    }

    async fn execute(&self, name: &str, input: &Value) -> Result<Value, String> {
        match name {
            "self_info" => Ok(self.file.with_state(|s| {
                let block = s.block(&self.agent_block_id);
                json!({
                    "agent_block_id": self.agent_block_id, "editor_id": self.agent_editor,
                    "config": block.and_then(|b| b.contents.get("config")).cloned(),
                    "grants": s.grants_of(&self.agent_editor).collect::<Vec<_>>(),
                    "autonomy": self.opts.autonomy, "max_iterations": self.opts.max_iterations,
                })
            })),
            "shell" => {
                let command = input.get("command").and_then(Value::as_str).ok_or("shell needs {\"command\": string}")?;
                let terminal = self.agent_terminal().await.map_err(|e| e.to_string())?;
                let out = crate::service::run_terminal(&self.file, &self.agent_editor, &terminal, command, None).await.map_err(|e| e.to_string())?;
                if out.get("error").is_some() || out.get("exit_code").and_then(Value::as_i64) != Some(0) {
                    return Err(format!("{out}"));
                }
                Ok(out)
            }
            "task" => {
                let prompt = input.get("prompt").and_then(Value::as_str).ok_or("task needs {\"prompt\": string}")?;
                // A read-only explore agent in a child session that shares our cancel flag.
                let mut opts = self.opts.clone();
                opts.autonomy = Autonomy::ReadOnly;
                opts.rules = Ruleset::default();
                opts.parent_session = Some(self.session_id.clone());
                let mut child = AgentSession::open(&self.file, &self.user_editor, &self.agent_block_id, None, opts).map_err(|e| e.to_string())?;
                let mut refuse = |_: &str, _: &Value| Confirm::Reject;
                let out = Box::pin(child.run_turn(prompt, &mut refuse)).await.map_err(|e| e.to_string())?;
                Ok(json!({"answer": out.text, "stop_reason": out.stop_reason, "session_id": child.session_id}))
            }
            _ => crate::mcp::tools::call(&self.file, &self.agent_editor, name, input.clone()).await.map_err(|e| e.message),
        }
    }

    /// The agent's terminal: created by the user on first use, usable by the agent.
    async fn agent_terminal(&self) -> Result<String, EngineError> {
        let name = format!("shell: {}", self.agent_editor);
        if let Some(id) = self.file.with_state(|s| s.blocks.values().find(|b| b.block_type == "terminal" && b.name == name).map(|b| b.block_id.clone())) {
            return Ok(id);
        }
        let ev = self.file.submit(Command::new(&self.user_editor, "terminal.create", None, json!({"name": name}))).await?;
        let id = ev[0].entity.clone();
        self.file.submit(Command::new(&self.user_editor, "core.grant", Some(&id), json!({"editor_id": self.agent_editor, "cap_id": "terminal.execute"}))).await?;
        Ok(id)
    }

    /// Summarises the conversation and keeps only the summary and the last exchange; on a
    /// failed summary call, truncates instead. Recorded as an event either way.
    async fn compact(&mut self) -> Result<(), EngineError> {
        let mut messages = self.history.clone();
        messages.push(Message::user_text(
            "Summarise the conversation so far for your own later use, under the headings: Goal, Instructions, Discoveries, Accomplished, Files. Be specific: block ids, names, decisions.",
        ));
        let req = LlmRequest {
            model: self.opts.model.clone(),
            system: "You write precise summaries of agent conversations.".into(),
            messages,
            tools: Vec::new(),
            max_tokens: 2048,
            temperature: None,
        };
        let provider = self.opts.provider.clone();
        let summary = match provider.complete(&req, &mut |_| {}).await {
            Ok(r) if !r.joined_text().trim().is_empty() => Some(r.joined_text()),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "compaction call failed; truncating the history instead");
                None
            }
        };
        let agent = self.agent_editor.clone();
        self.record(&agent, json!({"entry": "compaction", "summary": summary, "kept": KEPT_AFTER_COMPACTION})).await?;
        let note = summary.as_deref().map(summary_message).unwrap_or_else(truncation_message);
        self.history = compacted(std::mem::take(&mut self.history), note, KEPT_AFTER_COMPACTION);
        Ok(())
    }

    /// Runs one turn for `user_message`. `confirm` answers `ask` decisions.
    pub async fn run_turn(&mut self, user_message: &str, confirm: &mut (dyn FnMut(&str, &Value) -> Confirm + Send)) -> Result<TurnOutcome, EngineError> {
        let user = self.user_editor.clone();
        let agent = self.agent_editor.clone();
        self.push(&user, Message::user_text(user_message)).await?;
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut calls = 0;
        let mut last_text = String::new();
        for _ in 0..self.opts.max_iterations {
            if self.opts.cancel.load(Ordering::Acquire) {
                let stop = StopReason::Cancelled;
                self.record(&agent, json!({"entry": "stop", "stop_reason": stop})).await?;
                return Ok(TurnOutcome { stop_reason: stop, text: last_text, tool_calls: calls });
            }
            let start = self.history.len().saturating_sub(self.opts.max_history);
            let req = LlmRequest {
                model: self.opts.model.clone(),
                system: self.system_prompt(),
                messages: prune_tool_outputs(self.history[start..].to_vec(), self.opts.prune_tool_tokens),
                tools: Self::tools(),
                max_tokens: 4096,
                temperature: None,
            };
            let provider = self.opts.provider.clone();
            let resp = match provider.complete(&req, &mut |_| {}).await {
                Ok(r) => r,
                Err(e) => {
                    let stop = StopReason::Error { message: e.to_string() };
                    self.record(&agent, json!({"entry": "stop", "stop_reason": stop})).await?;
                    return Ok(TurnOutcome { stop_reason: stop, text: last_text, tool_calls: calls });
                }
            };
            last_text = resp.joined_text();
            let used = resp.usage.input_tokens + resp.usage.output_tokens;
            let compact_after = used >= self.opts.context_limit.saturating_sub(self.opts.compaction_buffer);
            let uses: Vec<(String, String, Value)> = resp.tool_uses().map(|(i, n, v)| (i.to_owned(), n.to_owned(), v.clone())).collect();
            self.push(&agent, Message::new(Role::Assistant, resp.content.clone())).await?;
            if uses.is_empty() {
                let stop = StopReason::EndTurn;
                self.record(&agent, json!({"entry": "stop", "stop_reason": stop})).await?;
                return Ok(TurnOutcome { stop_reason: stop, text: last_text, tool_calls: calls });
            }
            let mut results = Vec::new();
            for (id, name, input) in uses {
                calls += 1;
                let subject = Self::subject(&name, &input);
                let n = seen.entry(format!("{name}\u{0}{input}")).or_insert(0);
                *n += 1;
                let mut rules = self.opts.rules.clone();
                rules.rules.extend(self.session_rules.rules.iter().cloned());
                let mut action = rules.decide(self.opts.autonomy, &name, &subject);
                if action == Action::Allow && *n >= self.opts.doom_loop_threshold {
                    action = Action::Ask; // the same call again and again: let the user decide
                }
                if let Some(cb) = &self.opts.on_tool {
                    cb("running", &name, &subject);
                }
                let outcome: Result<Value, String> = match action {
                    Action::Deny => Err(format!("denied: a permission rule forbids {name} on {subject:?}")),
                    Action::Allow => self.execute(&name, &input).await,
                    Action::Ask => match confirm(&name, &input) {
                        Confirm::Once => self.execute(&name, &input).await,
                        Confirm::Always => {
                            let rule = Rule::new(&name, "*", Action::Allow);
                            self.record(&user, json!({"entry": "rule", "rule": rule})).await?;
                            self.session_rules.push(rule);
                            self.execute(&name, &input).await
                        }
                        Confirm::Reject => Err("rejected by the user".into()),
                        Confirm::RejectWithFeedback(f) => Err(format!("rejected by the user: {f}")),
                    },
                };
                let (content, is_error) = match outcome {
                    Ok(v) => (v.to_string(), false),
                    Err(e) => (format!("[failed] {e}"), true),
                };
                if let Some(cb) = &self.opts.on_tool {
                    cb(if is_error { "failed" } else { "success" }, &name, &subject);
                }
                results.push(ContentBlock::ToolResult { tool_use_id: id, content, is_error });
            }
            self.push(&agent, Message::new(Role::User, results)).await?;
            if compact_after {
                self.compact().await?;
            }
        }
        let stop = StopReason::IterationCap { limit: self.opts.max_iterations };
        self.record(&agent, json!({"entry": "stop", "stop_reason": stop})).await?;
        Ok(TurnOutcome { stop_reason: stop, text: last_text, tool_calls: calls })
    }
}
