//! `AgentSession`: one conversation of the agent loop (seeds 003/004, DESIGN.md §8).
//!
//! A turn: the user's message → the model, with native tool definitions (the MCP catalogue plus
//! `shell`, `self_info` and `task`) → for each tool call: permission (rules, autonomy, doom-loop
//! guard, the confirm callback for `ask`) → execution as the **agent's editor** through CBAC →
//! the result back to the model (seed 003 format: success → the output; failure → `[failed] …`
//! with any `[partial output]`; system error → `[error] …`) → … until the model stops or the
//! iteration cap is reached (the stop reason is part of the outcome). Every message, approval,
//! session rule, compaction, memory and stop is an `agent.session` event, so reopening the
//! `.elf` resumes the session exactly; replay applies events and calls nothing.
//!
//! When a call's tokens reach the context limit minus a buffer, the conversation is compacted:
//! a summary call (Goal / Instructions / Discoveries / Accomplished / Files) replaces the older
//! history; if that call fails, the history is truncated instead, so the session stays usable.
//! Tool outputs older than the newest 40K tokens of output are sent as a marker (the log keeps
//! them).
//!
//! The `task` tool runs a read-only `explore` sub-agent in a child session (its events carry
//! `parent_session`); it shares the parent's cancel flag, so cancelling the parent stops it.
//!
//! Authorship: the user's messages, their approval answers and "always" rules are recorded as the
//! user's editor (the one who opened the session); everything the agent produces — its
//! messages, tool results, approval requests, compactions, memories, stop reasons — as the
//! agent's editor. Tool calls themselves run as the agent's editor through CBAC.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::Command;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::memory::{self, Memory};
use super::permissions::{Action, Rule, Ruleset};
use super::types::*;
mod history;
mod prompt;
mod state;
mod tools;

use history::*;
use prompt::*;
pub use prompt::{SHORT_CALL_TEMPERATURE, TITLE_INSTRUCTION};
pub use state::{AgentSession, SessionOptions, ToolStatusFn};
pub use tools::Markers;
use tools::*;

use crate::llm::{ContentBlock, LlmRequest, Message, Role, StreamEvent};

impl AgentSession {
    /// Opens session `session_id` of the agent (resuming it from its events), or a new one.
    /// `user_editor` is who talks to the agent (their messages and answers are recorded as them).
    pub fn open(
        file: &FileHandle,
        user_editor: &str,
        agent_block_id: &str,
        session_id: Option<&str>,
        opts: SessionOptions,
    ) -> Result<AgentSession, EngineError> {
        let agent_editor = file
            .with_state(|s| {
                s.block(agent_block_id)
                    .filter(|b| b.block_type == "agent")
                    .and_then(|b| b.contents.get("editor_id"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .ok_or_else(|| {
                EngineError::rejected(format!(
                    "'{agent_block_id}' is not an agent block; see `elfiee agent list`"
                ))
            })?;
        let session_id = session_id
            .map(str::to_owned)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut history = Vec::new();
        let mut session_rules = Ruleset::default();
        let mut memories = Vec::new();
        let mut title = None;
        let mut last_step = 0;
        for e in file.events(1)? {
            if e.entity != agent_block_id || e.cap_id() != "agent.session" {
                continue;
            }
            let sid = e
                .value
                .get("session_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let entry = e.value.get("entry").and_then(Value::as_str);
            if sid != session_id {
                if entry == Some("memory") {
                    if let Some(summary) = e.value.get("summary").and_then(Value::as_str) {
                        memories.push(Memory {
                            session_id: sid.to_owned(),
                            summary: summary.to_owned(),
                            keywords: memory::keywords(summary),
                        });
                    }
                }
                continue;
            }
            match entry {
                Some("message") => {
                    if let Some(m) = e
                        .value
                        .get("message")
                        .and_then(|m| serde_json::from_value::<Message>(m.clone()).ok())
                    {
                        push_paired(&mut history, m);
                    }
                }
                Some("compaction") => {
                    let kept = e.value.get("kept").and_then(Value::as_u64).unwrap_or(0) as usize;
                    let note = e
                        .value
                        .get("summary")
                        .and_then(Value::as_str)
                        .map(summary_message)
                        .unwrap_or_else(truncation_message);
                    history = compacted(history, note, kept);
                }
                Some("rule") => {
                    if let Some(r) = e
                        .value
                        .get("rule")
                        .and_then(|r| serde_json::from_value::<Rule>(r.clone()).ok())
                    {
                        session_rules.push(r);
                    }
                }
                Some("step") => {
                    last_step = e
                        .value
                        .get("step")
                        .and_then(Value::as_u64)
                        .unwrap_or(last_step)
                }
                Some("title") => {
                    title = e
                        .value
                        .get("title")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                }
                _ => {}
            }
        }
        Ok(AgentSession {
            file: file.clone(),
            agent_block_id: agent_block_id.into(),
            agent_editor,
            user_editor: user_editor.into(),
            session_id,
            title,
            history,
            session_rules,
            memories,
            status: watch::channel(SessionStatus::Idle).0,
            opts,
            pending_title: None,
            announce_title: false,
            last_step,
        })
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The session's title (set on the first step).
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// The agent's editor id (author of everything the agent does).
    pub fn agent_editor(&self) -> &str {
        &self.agent_editor
    }

    /// The conversation so far (as rebuilt from events on open).
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// Rules added during the session ("always" answers).
    pub fn session_rules(&self) -> &Ruleset {
        &self.session_rules
    }

    /// Subscribes to the session status (idle / busy / retrying).
    pub fn status(&self) -> watch::Receiver<SessionStatus> {
        self.status.subscribe()
    }

    /// The ids of the agent's sessions in `file` (top-level ones, not sub-agents), oldest first,
    /// with their titles.
    pub fn list(
        file: &FileHandle,
        agent_block_id: &str,
    ) -> Result<Vec<(String, Option<String>)>, EngineError> {
        let mut out: Vec<(String, Option<String>)> = Vec::new();
        for e in file.events(1)? {
            if e.entity != agent_block_id
                || e.cap_id() != "agent.session"
                || e.value.get("parent_session").is_some()
            {
                continue;
            }
            let Some(sid) = e.value.get("session_id").and_then(Value::as_str) else {
                continue;
            };
            let pos = match out.iter().position(|(s, _)| s == sid) {
                Some(p) => p,
                None => {
                    out.push((sid.to_owned(), None));
                    out.len() - 1
                }
            };
            if e.value.get("entry").and_then(Value::as_str) == Some("title") {
                out[pos].1 = e
                    .value
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
        Ok(out)
    }

    fn set_status(&self, s: SessionStatus, on_event: &mut (dyn FnMut(LoopEvent) + Send)) {
        if *self.status.borrow() != s {
            self.status.send_replace(s.clone());
            on_event(LoopEvent::Status(s));
        }
    }

    async fn record(&self, editor: &str, entry: Value) -> Result<(), EngineError> {
        let mut payload = entry;
        payload["session_id"] = json!(self.session_id);
        if let Some(parent) = &self.opts.parent_session {
            payload["parent_session"] = json!(parent);
        }
        self.file
            .submit(Command::new(
                editor,
                "agent.session",
                Some(&self.agent_block_id),
                payload,
            ))
            .await
            .map(|_| ())
    }

    async fn push(&mut self, editor: &str, m: Message) -> Result<(), EngineError> {
        self.record(editor, json!({"entry": "message", "message": m}))
            .await?;
        push_paired(&mut self.history, m);
        Ok(())
    }

    /// A short model call's request (a title, a summary): no tools, 64 tokens, a low
    /// temperature ([`SHORT_CALL_TEMPERATURE`]).
    fn short_request(&self, system: &str, text: &str) -> LlmRequest {
        LlmRequest {
            model: self.opts.model.clone(),
            system: system.to_owned(),
            messages: vec![Message::user_text(text)],
            tools: Vec::new(),
            max_tokens: 64,
            temperature: Some(SHORT_CALL_TEMPERATURE),
        }
    }

    /// One short model call without tools: its first non-empty line, or `None` when the call
    /// fails or answers nothing.
    async fn short_call(&self, system: &str, text: &str) -> Option<String> {
        short_call_with(self.opts.provider.clone(), self.short_request(system, text)).await
    }

    /// Starts the title call for a session whose first message is `first` (seed 004: in the
    /// background, 3–6 words, low temperature). The call is polled once here, so its request
    /// goes out before the first step's; if it is done at once, the title is returned and the
    /// caller records it. Otherwise it goes on in a task that records the `title` event itself
    /// when the answer comes (the derived title if the call fails) while the first step runs;
    /// [`Self::stop`] waits for it, so the turn never ends without its title.
    async fn start_title(&mut self, first: &str) -> Option<String> {
        let derived = title_of(first);
        let req = self.short_request(TITLE_INSTRUCTION, first);
        let mut call = Box::pin(short_call_with(self.opts.provider.clone(), req));
        let polled = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(call.as_mut(), cx))
        })
        .await;
        if let std::task::Poll::Ready(answer) = polled {
            return Some(clean_title(answer).unwrap_or(derived));
        }
        let file = self.file.clone();
        let mut entry = json!({"entry": "title", "session_id": self.session_id});
        if let Some(parent) = &self.opts.parent_session {
            entry["parent_session"] = json!(parent);
        }
        let (user, agent_block) = (self.user_editor.clone(), self.agent_block_id.clone());
        self.pending_title = Some(tokio::spawn(async move {
            let title = clean_title(call.await).unwrap_or(derived);
            entry["title"] = json!(title);
            match file
                .submit(Command::new(
                    &user,
                    "agent.session",
                    Some(&agent_block),
                    entry,
                ))
                .await
            {
                Ok(_) => Some(title),
                Err(e) => {
                    tracing::warn!(error = %e, "the session title could not be recorded");
                    None
                }
            }
        }));
        None
    }

    /// Summarises the conversation and keeps only the summary and the last exchange; on a
    /// failed summary call, truncates instead. Recorded as an event either way.
    async fn compact(
        &mut self,
        on_event: &mut (dyn FnMut(LoopEvent) + Send),
    ) -> Result<(), EngineError> {
        let mut messages = window(&self.history, self.opts.max_history);
        messages.push(Message::user_text(
            "Summarise the conversation so far for your own later use, under the headings: Goal, Instructions, Discoveries, Accomplished, Files. Be specific: block ids, names, decisions.",
        ));
        let req = LlmRequest {
            model: self.opts.model.clone(),
            system: "You write precise summaries of agent conversations.".into(),
            messages: prune_tool_outputs(messages, self.opts.prune_tool_tokens),
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
        self.record(
            &agent,
            json!({"entry": "compaction", "summary": summary, "kept": KEPT_AFTER_COMPACTION}),
        )
        .await?;
        on_event(LoopEvent::Compacted {
            summarised: summary.is_some(),
        });
        let note = summary
            .as_deref()
            .map(summary_message)
            .unwrap_or_else(truncation_message);
        self.history = compacted(
            std::mem::take(&mut self.history),
            note,
            KEPT_AFTER_COMPACTION,
        );
        Ok(())
    }

    /// Runs one turn for `user_message`; `confirm` answers `ask` decisions.
    pub async fn run_turn(
        &mut self,
        user_message: &str,
        confirm: &mut dyn ConfirmCallback,
    ) -> Result<TurnOutcome, EngineError> {
        self.run_turn_with(user_message, confirm, &mut |_| {}).await
    }

    /// [`run_turn`](Self::run_turn) with a callback that sees every [`LoopEvent`] as it happens.
    pub async fn run_turn_with(
        &mut self,
        user_message: &str,
        confirm: &mut dyn ConfirmCallback,
        on_event: &mut (dyn FnMut(LoopEvent) + Send),
    ) -> Result<TurnOutcome, EngineError> {
        self.set_status(SessionStatus::Busy, on_event);
        let result = self.turn(user_message, confirm, on_event).await;
        if std::mem::take(&mut self.announce_title) {
            if let Some(t) = &self.title {
                on_event(LoopEvent::Title(t.clone()));
            }
        }
        self.set_status(SessionStatus::Idle, on_event);
        let out = result?;
        on_event(LoopEvent::Stopped(out.stop_reason.clone()));
        Ok(out)
    }

    async fn stop(
        &mut self,
        stop: StopReason,
        text: String,
        calls: usize,
        tools_used: &[String],
        user_message: &str,
    ) -> Result<TurnOutcome, EngineError> {
        // The background title is recorded before the turn ends (the memory summary names it).
        if let Some(pending) = self.pending_title.take() {
            if let Ok(Some(title)) = pending.await {
                self.title = Some(title);
                self.announce_title = true;
            }
        }
        let agent = self.agent_editor.clone();
        self.record(&agent, json!({"entry": "stop", "stop_reason": stop}))
            .await?;
        if self.opts.memory_recall > 0 && stop != StopReason::Cancelled {
            let mut tools: Vec<&str> = tools_used.iter().map(String::as_str).collect();
            tools.dedup();
            let derived = format!(
                "[{}] asked: {} | tools: {} | result: {} ({})",
                self.title.as_deref().unwrap_or("session"),
                memory::clip(user_message, 200),
                if tools.is_empty() {
                    "none".to_owned()
                } else {
                    tools.join(", ")
                },
                memory::clip(&text, 300),
                match &stop {
                    StopReason::EndTurn => "done".to_owned(),
                    other => other.to_string(),
                }
            );
            let summary = match self.opts.model_summaries {
                true => self
                    .short_call(
                        "Summarise this agent turn for the agent's own memory in one or two sentences: what was asked, what was done, the outcome. Keep block ids and names.",
                        &derived,
                    )
                    .await
                    .map(|s| format!("[{}] {}", self.title.as_deref().unwrap_or("session"), memory::clip(&s, 500)))
                    .unwrap_or(derived),
                false => derived,
            };
            self.record(&agent, json!({"entry": "memory", "summary": summary}))
                .await?;
        }
        Ok(TurnOutcome {
            stop_reason: stop,
            text,
            tool_calls: calls,
        })
    }

    async fn turn(
        &mut self,
        user_message: &str,
        confirm: &mut dyn ConfirmCallback,
        on_event: &mut (dyn FnMut(LoopEvent) + Send),
    ) -> Result<TurnOutcome, EngineError> {
        let user = self.user_editor.clone();
        let agent = self.agent_editor.clone();
        if self.title.is_none() && self.pending_title.is_none() {
            // Named after the session's first message (a session whose title was lost with
            // its process gets one on its next turn).
            let first = self
                .history
                .iter()
                .find(|m| is_plain_user(m))
                .map(text_of)
                .unwrap_or_else(|| user_message.to_owned());
            let title = match self.opts.model_summaries {
                true => self.start_title(&first).await,
                false => Some(title_of(&first)),
            };
            if let Some(title) = title {
                self.record(&user, json!({"entry": "title", "title": title}))
                    .await?;
                on_event(LoopEvent::Title(title.clone()));
                self.title = Some(title);
            }
        }
        self.push(&user, Message::user_text(user_message)).await?;
        let recalled: Vec<Memory> =
            memory::recall(&self.memories, user_message, self.opts.memory_recall)
                .into_iter()
                .cloned()
                .collect();
        let recalled: Vec<&Memory> = recalled.iter().collect();
        let tools = self.tools();
        let system = self.system_prompt(&tools, &recalled);
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut calls = 0;
        let mut used = Vec::new();
        let mut last_text = String::new();
        // Steps are checkpointed in top-level sessions (a sub-agent's work is part of the
        // parent's `task` step).
        let mut recorder = self
            .opts
            .parent_session
            .is_none()
            .then(|| crate::checkpoint::StepRecorder::new(&self.file, &self.agent_block_id));
        for _ in 0..self.opts.max_iterations {
            if self.opts.cancel.load(Ordering::Acquire) {
                return self
                    .stop(StopReason::Cancelled, last_text, calls, &used, user_message)
                    .await;
            }
            let step_start = match recorder.as_mut().map(|r| r.begin()).transpose() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "step checkpoint failed; this session's steps are not recorded");
                    recorder = None;
                    None
                }
            };
            let req = LlmRequest {
                model: self.opts.model.clone(),
                system: system.clone(),
                messages: prune_tool_outputs(
                    window(&self.history, self.opts.max_history),
                    self.opts.prune_tool_tokens,
                ),
                tools: tools.clone(),
                max_tokens: 4096,
                temperature: self.opts.temperature,
            };
            let provider = self.opts.provider.clone();
            let status = &self.status;
            let resp = {
                let mut forward = |ev: StreamEvent| match ev {
                    StreamEvent::Retrying {
                        attempt, reason, ..
                    } => {
                        let s = SessionStatus::Retrying { attempt, reason };
                        status.send_replace(s.clone());
                        on_event(LoopEvent::Status(s));
                    }
                    StreamEvent::TextDelta(t) => {
                        if *status.borrow() != SessionStatus::Busy {
                            status.send_replace(SessionStatus::Busy);
                            on_event(LoopEvent::Status(SessionStatus::Busy));
                        }
                        on_event(LoopEvent::TextDelta(t));
                    }
                    _ => {}
                };
                provider.complete(&req, &mut forward).await
            };
            self.set_status(SessionStatus::Busy, on_event);
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    return self
                        .stop(
                            StopReason::Error {
                                message: e.to_string(),
                            },
                            last_text,
                            calls,
                            &used,
                            user_message,
                        )
                        .await
                }
            };
            last_text = resp.joined_text();
            on_event(LoopEvent::AssistantText(last_text.clone()));
            let tokens = resp.usage.input_tokens + resp.usage.output_tokens;
            let compact_after = tokens
                >= self
                    .opts
                    .context_limit
                    .saturating_sub(self.opts.compaction_buffer);
            let uses: Vec<(String, String, Value)> = resp
                .tool_uses()
                .map(|(i, n, v)| (i.to_owned(), n.to_owned(), v.clone()))
                .collect();
            self.push(&agent, Message::new(Role::Assistant, resp.content.clone()))
                .await?;
            if uses.is_empty() {
                return self
                    .stop(StopReason::EndTurn, last_text, calls, &used, user_message)
                    .await;
            }
            let mut results = Vec::new();
            for (id, name, input) in uses {
                calls += 1;
                used.push(name.clone());
                let subject = Self::subject(&name, &input);
                let outcome = if self.opts.cancel.load(Ordering::Acquire) {
                    ToolOutcome::Error("cancelled before this call ran".into())
                } else {
                    self.decide_and_run(&id, &name, &input, &subject, &mut seen, confirm, on_event)
                        .await?
                };
                let (content, is_error) =
                    outcome.render_in(Markers::for_language(self.opts.language.as_deref()));
                if let Some(cb) = &self.opts.on_tool {
                    cb(if is_error { "failed" } else { "success" }, &name, &subject);
                }
                on_event(if is_error {
                    LoopEvent::ToolFailed {
                        call_id: id.clone(),
                        tool: name.clone(),
                        error: first_lines(&content, 3),
                    }
                } else {
                    LoopEvent::ToolSuccess {
                        call_id: id.clone(),
                        tool: name.clone(),
                        summary: memory::clip(&success_preview(&name, &input, &content), 200),
                    }
                });
                results.push(ContentBlock::ToolResult {
                    tool_use_id: id,
                    content,
                    is_error,
                });
            }
            self.push(&agent, Message::new(Role::User, results)).await?;
            if let (Some(r), Some(start)) = (recorder.as_mut(), step_start) {
                self.record_step(r, start, on_event).await?;
            }
            if compact_after {
                self.compact(on_event).await?;
            }
        }
        self.stop(
            StopReason::IterationCap {
                limit: self.opts.max_iterations,
            },
            last_text,
            calls,
            &used,
            user_message,
        )
        .await
    }

    /// Records the step that began at `start` (a checkpoint of the document and the
    /// project folder); a failed scan is logged and the step goes unrecorded.
    async fn record_step(
        &mut self,
        recorder: &mut crate::checkpoint::StepRecorder,
        start: crate::checkpoint::StepStart,
        on_event: &mut (dyn FnMut(LoopEvent) + Send),
    ) -> Result<(), EngineError> {
        let step = self.last_step + 1;
        let entry = match recorder.end(start, step) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "step checkpoint failed; the step is not recorded");
                return Ok(());
            }
        };
        let agent = self.agent_editor.clone();
        self.record(&agent, entry.clone()).await?;
        recorder.committed();
        self.last_step = step;
        on_event(LoopEvent::Step(entry));
        Ok(())
    }

    /// Permission check (rules + autonomy + doom-loop guard + confirmation), then execution.
    #[allow(clippy::too_many_arguments)]
    async fn decide_and_run(
        &mut self,
        id: &str,
        name: &str,
        input: &Value,
        subject: &str,
        seen: &mut HashMap<String, usize>,
        confirm: &mut dyn ConfirmCallback,
        on_event: &mut (dyn FnMut(LoopEvent) + Send),
    ) -> Result<ToolOutcome, EngineError> {
        let user = self.user_editor.clone();
        let agent = self.agent_editor.clone();
        let n = seen.entry(format!("{name}\u{0}{input}")).or_insert(0);
        *n += 1;
        let mut rules = self.opts.rules.clone();
        rules.rules.extend(self.session_rules.rules.iter().cloned());
        let mut action = rules.decide(self.opts.autonomy, name, subject);
        let mut reason = AskReason::Rule;
        if action == Action::Allow && *n >= self.opts.doom_loop_threshold {
            action = Action::Ask; // the same call again and again: let the user decide
            reason = AskReason::DoomLoop;
        }
        if action == Action::Ask {
            let request = ApprovalRequest {
                call_id: id.into(),
                tool: name.into(),
                subject: subject.into(),
                input: input.clone(),
                reason,
            };
            self.record(&agent, json!({"entry": "approval", "request": request}))
                .await?;
            on_event(LoopEvent::ApprovalAsked(request.clone()));
            let answer = confirm.confirm(&request);
            let mut payload =
                json!({"entry": "approval_answer", "call_id": id, "answer": answer.as_str()});
            if let Confirm::RejectWithFeedback(f) = &answer {
                payload["feedback"] = json!(f);
            }
            self.record(&user, payload).await?;
            match answer {
                Confirm::Once => {}
                Confirm::Always => {
                    for rule in always_rules(name, subject) {
                        self.record(&user, json!({"entry": "rule", "rule": rule}))
                            .await?;
                        self.session_rules.push(rule);
                    }
                }
                Confirm::Reject => return Ok(ToolOutcome::failed("rejected by the user")),
                Confirm::RejectWithFeedback(f) => {
                    return Ok(ToolOutcome::failed(format!("rejected by the user: {f}")))
                }
            }
        } else if action == Action::Deny {
            return Ok(ToolOutcome::failed(format!(
                "denied: a permission rule forbids {name} on {subject:?}"
            )));
        }
        if let Some(cb) = &self.opts.on_tool {
            cb("running", name, subject);
        }
        on_event(LoopEvent::ToolRunning {
            call_id: id.into(),
            tool: name.into(),
            subject: subject.into(),
        });
        Ok(self.execute(name, input).await)
    }
}

/// The session rules an "always" answer adds: for `shell`, the base command (`cargo` and
/// `cargo *`, seed 003's per-command auto-approval); for other tools, the tool on any subject.
pub fn always_rules(tool: &str, subject: &str) -> Vec<Rule> {
    match (tool, subject.split_whitespace().next()) {
        ("shell", Some(base)) => vec![
            Rule::new("shell", base, Action::Allow),
            Rule::new("shell", &format!("{base} *"), Action::Allow),
        ],
        _ => vec![Rule::new(tool, "**", Action::Allow)],
    }
}

#[cfg(test)]
mod tests;
