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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{CapError, Command};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::memory::{self, Memory};
use super::permissions::{Action, Autonomy, Rule, Ruleset, READ_ONLY_TOOLS};
use super::profiles::Profile;
use super::types::*;
use crate::llm::{
    ContentBlock, LlmError, LlmRequest, Message, Provider, Role, StreamEvent, ToolDef,
};

/// A status-line callback: `("running" | "success" | "failed", tool name, detail)`.
pub type ToolStatusFn = Arc<dyn Fn(&str, &str, &str) + Send + Sync>;

/// Session settings.
#[derive(Clone)]
pub struct SessionOptions {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub autonomy: Autonomy,
    pub rules: Ruleset,
    /// The profile's name (`build`, `plan`, `explore`, `general`) when one was applied.
    pub profile: Option<String>,
    /// Extra instructions for the system prompt (the agent's configured `system_prompt`, a
    /// profile's prompt).
    pub instructions: Option<String>,
    /// Model calls per turn (default 10).
    pub max_iterations: usize,
    /// Messages sent to the model (default 50, newest kept).
    pub max_history: usize,
    /// Reply language for the system prompt (`zh`, `en`, or a name like "Chinese"); `None` =
    /// the user's language. Chinese (`zh…`, "Chinese", "中文") also makes the tool-result
    /// markers Chinese (`[失败]`, `[部分输出]`, `[错误]`, seed 003).
    pub language: Option<String>,
    /// Sampling temperature sent with the turn's model calls (`None`: the provider's default).
    pub temperature: Option<f32>,
    /// Title a session and summarise each turn for memory with a short model call, falling
    /// back to the derived ones when the call fails (default off, so scripted tests see only
    /// the calls they script; the CLI turns it on).
    pub model_summaries: bool,
    /// Calls of the same tool with the same input in one turn before the user is asked (3).
    pub doom_loop_threshold: usize,
    /// The model's context window in tokens (default 200,000).
    pub context_limit: u64,
    /// Compact when input + output tokens of a call reach `context_limit - compaction_buffer`.
    pub compaction_buffer: u64,
    /// Tool outputs older than the newest this-many tokens of tool output are sent to the model
    /// as a marker (default 40,000). The log keeps them whole.
    pub prune_tool_tokens: usize,
    /// `shell` timeout in seconds (default 120).
    pub shell_timeout_secs: u64,
    /// Earlier-session summaries recalled into the system prompt (default 3; 0 = no memory).
    pub memory_recall: usize,
    /// Set to stop the session (and its sub-agents, which share the flag) at the next step.
    pub cancel: Arc<AtomicBool>,
    /// The parent session of a sub-agent.
    pub parent_session: Option<String>,
    /// Called around every tool call (the status lines of seed 003). [`LoopEvent`]s carry the
    /// same and more.
    pub on_tool: Option<ToolStatusFn>,
}

impl SessionOptions {
    pub fn new(provider: Arc<dyn Provider>, model: impl Into<String>) -> SessionOptions {
        SessionOptions {
            provider,
            model: model.into(),
            autonomy: Autonomy::Supervised,
            rules: Ruleset::default(),
            profile: None,
            instructions: None,
            max_iterations: 10,
            max_history: 50,
            language: None,
            temperature: None,
            model_summaries: false,
            doom_loop_threshold: 3,
            context_limit: 200_000,
            compaction_buffer: 20_000,
            prune_tool_tokens: 40_000,
            shell_timeout_secs: 120,
            memory_recall: 3,
            cancel: Arc::new(AtomicBool::new(false)),
            parent_session: None,
            on_tool: None,
        }
    }

    /// Options for the agent block `agent_block_id`: its configuration (provider built by
    /// `factory` — pass [`crate::invoke::default_provider_factory`] for the real ones, the key read
    /// from the configured env var — model, and its `system_prompt` as instructions).
    pub fn for_agent(
        file: &FileHandle,
        agent_block_id: &str,
        factory: &crate::invoke::ProviderFactory,
    ) -> Result<SessionOptions, LlmError> {
        let cfg = file
            .with_state(|s| {
                s.block(agent_block_id)
                    .map(|b| elfiee_capabilities::builtin::AgentConfig::of(&b.contents))
            })
            .unwrap_or_default();
        let provider = factory(&cfg)?;
        let mut o = SessionOptions::new(provider, cfg.model.clone());
        o.instructions = cfg.system_prompt.clone();
        o.temperature = cfg.temperature.map(|t| t as f32);
        o.language = cfg.language.clone();
        // The agent's default rules (validated by agent.configure).
        o.rules = Ruleset::new(
            cfg.rules
                .iter()
                .filter_map(|r| serde_json::from_value(r.clone()).ok())
                .collect(),
        );
        Ok(o)
    }

    /// Applies a profile: its autonomy, its rules (before the ones already set, so those win),
    /// its model if any, its prompt.
    pub fn with_profile(mut self, profile: &Profile) -> SessionOptions {
        self.autonomy = profile.autonomy;
        let mut rules = profile.rules.clone();
        rules.rules.extend(self.rules.rules);
        self.rules = rules;
        if let Some(m) = &profile.model {
            self.model = m.clone();
        }
        self.instructions = Some(match self.instructions.take() {
            Some(i) => format!("{}\n{i}", profile.prompt),
            None => profile.prompt.clone(),
        });
        self.profile = Some(profile.name.clone());
        self
    }
}

pub struct AgentSession {
    file: FileHandle,
    agent_block_id: String,
    agent_editor: String,
    /// The human (or host) talking to the agent.
    user_editor: String,
    session_id: String,
    title: Option<String>,
    history: Vec<Message>,
    session_rules: Ruleset,
    /// Summaries of the agent's other sessions (recall candidates).
    memories: Vec<Memory>,
    status: watch::Sender<SessionStatus>,
    opts: SessionOptions,
    /// The title call running in the background (seed 004: it must not hold up the first
    /// step); it records the `title` event itself when it is ready and returns the title.
    pending_title: Option<tokio::task::JoinHandle<Option<String>>>,
    /// A background title arrived during this turn and is still to be announced as
    /// [`LoopEvent::Title`].
    announce_title: bool,
    /// The number of the last step recorded (checkpoints, see [`crate::checkpoint`]).
    last_step: u64,
}

/// The result of one tool call before it is turned into text for the model.
enum ToolOutcome {
    Ok(String),
    /// The call ran (or was refused) and did not succeed; `partial` is output it produced.
    Failed {
        error: String,
        partial: Option<String>,
    },
    /// Something broke underneath (I/O, the engine); not the call's fault.
    Error(String),
}

impl ToolOutcome {
    fn failed(error: impl Into<String>) -> ToolOutcome {
        ToolOutcome::Failed {
            error: error.into(),
            partial: None,
        }
    }

    /// Seed 003's format: the output as is; `[failed] …` (+ `[partial output]`); `[error] …`.
    #[cfg(test)]
    fn render(&self) -> (String, bool) {
        self.render_in(&Markers::EN)
    }

    fn render_in(&self, m: &Markers) -> (String, bool) {
        match self {
            ToolOutcome::Ok(s) => (s.clone(), false),
            ToolOutcome::Failed {
                error,
                partial: None,
            } => (format!("{} {error}", m.failed), true),
            ToolOutcome::Failed {
                error,
                partial: Some(p),
            } => (format!("{} {error}\n{}\n{p}", m.failed, m.partial), true),
            ToolOutcome::Error(e) => (format!("{} {e}", m.error), true),
        }
    }
}

/// The result markers of seed 003 in the reply language.
pub struct Markers {
    pub failed: &'static str,
    pub partial: &'static str,
    pub error: &'static str,
}

impl Markers {
    pub const EN: Markers = Markers {
        failed: "[failed]",
        partial: "[partial output]",
        error: "[error]",
    };
    pub const ZH: Markers = Markers {
        failed: "[失败]",
        partial: "[部分输出]",
        error: "[错误]",
    };

    /// Chinese for `zh…`, "Chinese" or "中文"; English otherwise.
    pub fn for_language(language: Option<&str>) -> &'static Markers {
        match language.map(str::trim) {
            Some(l)
                if l.to_ascii_lowercase().starts_with("zh")
                    || l.eq_ignore_ascii_case("chinese")
                    || l.starts_with("中文") =>
            {
                &Markers::ZH
            }
            _ => &Markers::EN,
        }
    }
}

/// The first `lines` lines of `s`.
fn first_lines(s: &str, lines: usize) -> String {
    s.lines().take(lines).collect::<Vec<_>>().join("\n")
}

/// Messages kept verbatim after a compaction: the last assistant message and the tool results
/// that answer it, so tool calls stay paired.
const KEPT_AFTER_COMPACTION: usize = 2;

fn summary_message(summary: &str) -> Message {
    Message::user_text(format!(
        "Summary of the conversation so far (older messages were compacted):\n\n{summary}"
    ))
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

/// The block reads (`elfiee_block_get` results with the block whole) in `messages`:
/// `(message index, content index, block id, seq of the version read)`, oldest first.
fn block_reads(messages: &[Message]) -> Vec<(usize, usize, String, u64)> {
    let mut gets: HashMap<&str, ()> = HashMap::new();
    for m in messages {
        for b in &m.content {
            if let ContentBlock::ToolUse { id, name, .. } = b {
                if name == "elfiee_block_get" {
                    gets.insert(id.as_str(), ());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (mi, m) in messages.iter().enumerate() {
        for (bi, b) in m.content.iter().enumerate() {
            let ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error: false,
            } = b
            else {
                continue;
            };
            if !gets.contains_key(tool_use_id.as_str()) {
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(content) else {
                continue;
            };
            if let (Some(id), Some(seq), true) = (
                v.get("block_id").and_then(Value::as_str),
                v.get("seq").and_then(Value::as_u64),
                v.get("contents").is_some(),
            ) {
                out.push((mi, bi, id.to_owned(), seq));
            }
        }
    }
    out
}

/// Fits the tool outputs into `budget` tokens, by the context policy (docs/AGENT_LOOP.md):
/// first a block read again later loses its older reads (the newest version stays), then
/// outputs older than the newest `budget` tokens are replaced with a marker.
fn prune_tool_outputs(mut messages: Vec<Message>, budget: usize) -> Vec<Message> {
    let tokens_of = |messages: &[Message]| -> usize {
        messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|b| match b {
                ContentBlock::ToolResult { content, .. } => {
                    elfiee_projections::context::count_tokens(content)
                }
                _ => 0,
            })
            .sum()
    };
    if tokens_of(&messages) <= budget {
        return messages;
    }
    let reads = block_reads(&messages);
    let mut newest: HashMap<&str, usize> = HashMap::new();
    for (i, (_, _, id, _)) in reads.iter().enumerate() {
        newest.insert(id.as_str(), i);
    }
    for (i, (mi, bi, id, seq)) in reads.iter().enumerate() {
        if newest[id.as_str()] != i {
            if let ContentBlock::ToolResult { content, .. } = &mut messages[*mi].content[*bi] {
                *content = format!(
                    "[an older version of block {id} (seq {seq}); it was read again later in this conversation]"
                );
            }
        }
    }
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

fn is_plain_user(m: &Message) -> bool {
    m.role == Role::User
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

fn tool_use_ids(m: &Message) -> Vec<String> {
    if m.role != Role::Assistant {
        return Vec::new();
    }
    m.content
        .iter()
        .filter_map(|b| {
            if let ContentBlock::ToolUse { id, .. } = b {
                Some(id.clone())
            } else {
                None
            }
        })
        .collect()
}

/// Appends `m`, first answering tool calls left without results (a session closed mid-step),
/// so tool uses and results stay paired. Deterministic, so every reopen rebuilds the same.
fn push_paired(history: &mut Vec<Message>, m: Message) {
    if let Some(last) = history.last() {
        let ids = tool_use_ids(last);
        let answered = m.role == Role::User
            && m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }));
        if !ids.is_empty() && !answered {
            let results = ids
                .into_iter()
                .map(|id| ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: "[error] the session stopped before this call ran".into(),
                    is_error: true,
                })
                .collect();
            history.push(Message::new(Role::User, results));
        }
    }
    history.push(m);
}

/// The newest `max` messages, cut at a clean boundary: the window starts with a plain user
/// message (or a truncation note before an assistant step), never with orphaned tool results.
fn window(history: &[Message], max: usize) -> Vec<Message> {
    let start = history.len().saturating_sub(max);
    if start == 0 {
        return history.to_vec();
    }
    if let Some(i) = (start..history.len()).find(|&i| is_plain_user(&history[i])) {
        return history[i..].to_vec();
    }
    let mut out = vec![truncation_message()];
    if let Some(i) = (start..history.len()).find(|&i| history[i].role == Role::Assistant) {
        out.extend_from_slice(&history[i..]);
    }
    out
}

/// `YYYY-MM-DD HH:MM UTC` for the system prompt's environment section.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// A short title from the first user message (3–6 words, or 24 characters of CJK text).
fn title_of(message: &str) -> String {
    let words: Vec<&str> = message.split_whitespace().collect();
    if words.len() > 1 {
        return memory::clip(&words.into_iter().take(6).collect::<Vec<_>>().join(" "), 60);
    }
    memory::clip(message, 24)
}

/// What the title call asks for (seed 004: 3–6 words).
pub const TITLE_INSTRUCTION: &str =
    "Name this conversation: answer with a title of 3 to 6 words and nothing else.";

/// Temperature of the short calls (title, turn summary): low, so they stay plain and stable.
pub const SHORT_CALL_TEMPERATURE: f32 = 0.2;

/// A model's title answer without quotes, at most 80 characters; `None` if empty.
fn clean_title(answer: Option<String>) -> Option<String> {
    answer
        .map(|t| memory::clip(t.trim_matches(|c| c == '"' || c == '\''), 80))
        .filter(|t| !t.is_empty())
}

/// The text of a message's text blocks.
fn text_of(m: &Message) -> String {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One short model call without tools (owned, so it can run in a task): the answer's first
/// non-empty line, or `None` when the call fails or answers nothing.
async fn short_call_with(provider: Arc<dyn Provider>, req: LlmRequest) -> Option<String> {
    let resp = provider
        .complete(&req, &mut |_| {})
        .await
        .map_err(|e| tracing::debug!(error = %e, "short model call failed; using the derived text"))
        .ok()?;
    resp.joined_text()
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

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
                rejected(format!(
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

    /// The native tool definitions: the MCP catalogue + `shell`, `task`, `self_info`; only the
    /// reading ones when read-only; no `task` inside a sub-agent.
    pub fn tool_defs(autonomy: Autonomy, sub_agent: bool) -> Vec<ToolDef> {
        // Undo and redo of the loop's steps are the user's (`elfiee agent undo`), not the
        // agent's: it would be undoing the step that calls them.
        let mut tools: Vec<ToolDef> = crate::mcp::tools::catalogue()
            .into_iter()
            .filter(|t| !matches!(t.name, "elfiee_undo" | "elfiee_redo"))
            .map(|t| ToolDef {
                name: t.name.into(),
                description: t.description.into(),
                input_schema: t.input_schema,
            })
            .collect();
        tools.push(ToolDef {
            name: "shell".into(),
            description: "Run a shell command in the agent's terminal (timeout 120 s); returns stdout, stderr and the exit code.".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"], "additionalProperties": false}),
        });
        tools.push(ToolDef {
            name: "task".into(),
            description: "Hand a task to a sub-agent in a child session: `explore` (default) only reads and answers a question; `general` works on a multi-step task with your permission rules. Returns its final answer and its session_id; pass session_id to continue that child session.".into(),
            input_schema: json!({"type": "object", "properties": {
                "prompt": {"type": "string"},
                "agent": {"type": "string", "enum": ["explore", "general"]},
                "session_id": {"type": "string", "description": "A child session of yours to continue"}
            }, "required": ["prompt"], "additionalProperties": false}),
        });
        tools.push(ToolDef {
            name: "self_info".into(),
            description: "Your own configuration, grants, permission rules and limits.".into(),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        });
        tools.retain(|t| {
            (autonomy != Autonomy::ReadOnly || READ_ONLY_TOOLS.contains(&t.name.as_str()))
                && !(sub_agent && t.name == "task")
        });
        tools
    }

    fn tools(&self) -> Vec<ToolDef> {
        Self::tool_defs(self.opts.autonomy, self.opts.parent_session.is_some())
    }

    /// The system prompt (seed 003's six sections): identity, tools, safety, memory,
    /// environment, decision principles (+ reply language).
    fn system_prompt(&self, tools: &[ToolDef], recalled: &[&Memory]) -> String {
        let mut s = format!(
            "# Identity\nYou are an agent working inside an Elfiee document (agent block {}, editor {}, session {}). You act only through the tools; every change you make is recorded as yours.\n",
            self.agent_block_id, self.agent_editor, self.session_id
        );
        if let Some(i) = &self.opts.instructions {
            s.push_str(i.trim());
            s.push('\n');
        }
        s.push_str("\n# Tools\n");
        for t in tools {
            s.push_str(&format!(
                "- {}: {}\n",
                t.name,
                first_lines(&t.description, 1)
            ));
        }
        let safety = match self.opts.autonomy {
            Autonomy::ReadOnly => "Read-only: every tool that changes something is refused. Do not try to edit.",
            Autonomy::Supervised => "Supervised: changes may need the user's confirmation; a refused call comes back as a failure — do not retry it unchanged.",
            Autonomy::Full => "Full autonomy: you may act without confirmation, except where a rule forbids it. Be careful with destructive commands.",
        };
        s.push_str(&format!(
            "\n# Safety\n{safety}\nRepeating the same call three times in a turn asks the user.\n"
        ));
        // Knowledge seeds (seed 003 §4): the user's standing facts, always recalled, before
        // the summaries of earlier sessions that match this message.
        let knowledge = self.file.with_state(|st| {
            st.block(&self.agent_block_id)
                .map(|b| elfiee_capabilities::builtin::AgentConfig::of(&b.contents).knowledge)
                .unwrap_or_default()
        });
        if !knowledge.is_empty() || !recalled.is_empty() {
            s.push_str("\n# Memory\n");
        }
        if !knowledge.is_empty() {
            s.push_str("Knowledge (standing facts from the user; treat them as true):\n");
            for k in &knowledge {
                s.push_str(&format!("- {}\n", k.replace('\n', " ")));
            }
        }
        if !recalled.is_empty() {
            s.push_str("Earlier sessions:\n");
            for m in recalled {
                s.push_str(&format!("- {}\n", m.summary));
            }
        }
        s.push_str(&format!(
            "\n# Environment\nDocument: {}\nWorking directory: {}\nTime: {}\n",
            self.file.path().display(),
            self.shell_folder(),
            utc_now()
        ));
        s.push_str(
            "\n# Principles\n\
- Look before you act: when unsure, check with self_info or by reading blocks.\n\
- If you cannot find out, ask the user.\n\
- Say why before you call a tool.\n\
- Read before you write; keep changes small; link code to the requirement it implements with elfiee_block_link (relation \"implement\").\n\
- Tool results: success is the output itself; \"[failed] …\" means the call did not succeed (a \"[partial output]\" section may follow); \"[error] …\" is a system error. Reflect on a failure; after a second failure, ask the user.\n\
- Stop when the task is done.\n",
        );
        if let Some(lang) = &self.opts.language {
            let m = Markers::for_language(Some(lang));
            s.push_str(&format!("- Reply in {lang}.\n"));
            if m.failed != Markers::EN.failed {
                s.push_str(&format!(
                    "- In this language the tool-result markers are {} (failed), {} (partial output) and {} (system error).\n",
                    m.failed, m.partial, m.error
                ));
            }
        }
        s
    }

    /// Where the agent's `shell` runs, for the system prompt: the folder [`Self::agent_terminal`]
    /// would use (the terminal's cwd rule, `terminal::working_dir`), without creating anything.
    /// A referenced terminal → its linked directory's folder, else `<elf>/terminals/<id>`; a
    /// referenced directory (or target project) → its folder on disk; neither → the agent's own
    /// terminal's folder inside the document.
    fn shell_folder(&self) -> String {
        use elfiee_model::EXTERNAL_ROOT_PATH;
        let own_name = format!("shell: {}", self.agent_editor);
        let in_elf = |id: &str| {
            self.file
                .path()
                .join("terminals")
                .join(id)
                .display()
                .to_string()
        };
        self.file.with_state(|s| {
            let root_of = |dir: &str| -> String {
                match s.block(dir) {
                    Some(b) => match b.metadata.custom.get(EXTERNAL_ROOT_PATH).and_then(Value::as_str) {
                        Some(root) => format!("{root} (the project folder of directory \"{}\"; `shell` runs here)", b.name),
                        None => format!("none: directory \"{}\" has no folder on disk, so `shell` fails until it is exported or imported", b.name),
                    },
                    None => format!("none: the linked directory {dir} is gone, so `shell` fails"),
                }
            };
            let linked = |b: &elfiee_model::Block| {
                b.contents
                    .get("linked_directory_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            if let Some(t) = crate::service::agent_referenced(s, &self.agent_block_id, "terminal") {
                return match linked(t) {
                    Some(d) => root_of(&d),
                    None => format!("{} (inside the document: your terminal \"{}\" has no linked directory)", in_elf(&t.block_id), t.name),
                };
            }
            let directory = crate::service::agent_referenced(s, &self.agent_block_id, "directory");
            if let Some(d) = directory {
                return root_of(&d.block_id);
            }
            let own = s
                .blocks
                .values()
                .find(|b| b.block_type == "terminal" && b.name == own_name)
                .filter(|b| linked(b).is_none());
            let folder = match own {
                Some(t) => in_elf(&t.block_id),
                None => in_elf("<your terminal's id>"),
            };
            format!("{folder} (a folder inside the document: you reference no project directory; link one to work on a project)")
        })
    }

    /// The thing a rule's `pattern` is matched against for a call.
    pub fn subject(name: &str, input: &Value) -> String {
        let field = match name {
            "shell" | "elfiee_terminal_run" => "command",
            "elfiee_block_link" | "elfiee_block_unlink" => "from",
            "elfiee_directory_import" | "elfiee_directory_add" | "elfiee_directory_remove" => {
                "path"
            }
            "elfiee_directory_move" => "from",
            "task" => "prompt",
            _ => "block_id",
        };
        input
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    fn self_info(&self) -> Value {
        let mut rules = self.opts.rules.clone();
        rules.rules.extend(self.session_rules.rules.iter().cloned());
        self.file.with_state(|s| {
            let block = s.block(&self.agent_block_id);
            json!({
                "agent_block_id": self.agent_block_id,
                "name": block.map(|b| b.name.clone()),
                "editor_id": self.agent_editor,
                "session_id": self.session_id,
                "parent_session": self.opts.parent_session,
                "profile": self.opts.profile,
                "model": self.opts.model,
                "config": block.and_then(|b| b.contents.get("config")).cloned(),
                "grants": s.grants_of(&self.agent_editor).collect::<Vec<_>>(),
                "autonomy": self.opts.autonomy,
                "rules": rules.rules,
                "limits": {
                    "max_iterations": self.opts.max_iterations,
                    "max_history": self.opts.max_history,
                    "context_limit": self.opts.context_limit,
                    "compaction_buffer": self.opts.compaction_buffer,
                    "doom_loop_threshold": self.opts.doom_loop_threshold,
                    "shell_timeout_secs": self.opts.shell_timeout_secs,
                },
            })
        })
    }

    /// A re-read of a block this conversation already shows at its current version: said
    /// in a line instead of the whole block again (the context policy).
    fn unchanged_read(&self, input: &Value) -> Option<String> {
        let asked = input.get("block_id").and_then(Value::as_str)?;
        let (id, seq) = self.file.with_state(|s| {
            let id = if s.blocks.contains_key(asked) {
                asked.to_owned()
            } else {
                let mut named = s.blocks.values().filter(|b| b.name == asked);
                let one = named.next()?.block_id.clone();
                named.next().is_none().then_some(one)?
            };
            let seq = s.block_seq.get(&id).copied()?;
            Some((id, seq))
        })?;
        // Only what the model is sent counts: the window, after pruning.
        let sent = prune_tool_outputs(
            window(&self.history, self.opts.max_history),
            self.opts.prune_tool_tokens,
        );
        let shown = block_reads(&sent)
            .into_iter()
            .any(|(_, _, b, at)| b == id && at == seq);
        shown.then(|| {
            json!({
                "block_id": id,
                "unchanged_since_seq": seq,
                "note": format!("unchanged since seq {seq}: your earlier elfiee_block_get result in this conversation is current"),
            })
            .to_string()
        })
    }

    async fn execute(&self, name: &str, input: &Value) -> ToolOutcome {
        match name {
            "self_info" => ToolOutcome::Ok(self.self_info().to_string()),
            "elfiee_block_get" => match self.unchanged_read(input) {
                Some(note) => ToolOutcome::Ok(note),
                None => self.call_tool(name, input).await,
            },
            "shell" => {
                let Some(command) = input.get("command").and_then(Value::as_str) else {
                    return ToolOutcome::failed("shell needs {\"command\": string}");
                };
                let terminal = match self.agent_terminal().await {
                    Ok(t) => t,
                    Err(EngineError::Rejected(c)) => return ToolOutcome::failed(c.to_string()),
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                let exported = match self.export_for_shell(&terminal).await {
                    Ok(x) => x,
                    Err(EngineError::Rejected(c)) => return ToolOutcome::failed(c.to_string()),
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                let mut out = match crate::service::run_terminal(
                    &self.file,
                    &self.agent_editor,
                    &terminal,
                    command,
                    Some(self.opts.shell_timeout_secs),
                )
                .await
                {
                    Ok(o) => o,
                    Err(EngineError::Rejected(c)) => return ToolOutcome::failed(c.to_string()),
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                if let Some(err) = out.get("error").and_then(Value::as_str) {
                    return ToolOutcome::Error(err.to_owned());
                }
                if let Some(x) = exported {
                    out["export"] = json!({"written": x["written"], "removed": x["removed"], "refused": x["refused"]});
                }
                let text = |k: &str| {
                    out.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let (stdout, stderr) = (text("stdout"), text("stderr"));
                let code = out.get("exit_code").and_then(Value::as_i64);
                let timed_out = out
                    .get("timed_out")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if code == Some(0) && !timed_out {
                    return ToolOutcome::Ok(out.to_string());
                }
                let error = if timed_out {
                    format!("timed out after {} s", self.opts.shell_timeout_secs)
                } else {
                    match code {
                        Some(c) => format!(
                            "exit code {c}{}",
                            if stderr.trim().is_empty() {
                                String::new()
                            } else {
                                format!(": {}", first_lines(&stderr, 3))
                            }
                        ),
                        None => "killed by a signal".into(),
                    }
                };
                let partial = [stdout, stderr]
                    .into_iter()
                    .filter(|s| !s.trim().is_empty())
                    .collect::<Vec<_>>()
                    .join("\n");
                ToolOutcome::Failed {
                    error,
                    partial: (!partial.is_empty()).then_some(partial),
                }
            }
            "task" => {
                let Some(prompt) = input.get("prompt").and_then(Value::as_str) else {
                    return ToolOutcome::failed("task needs {\"prompt\": string}");
                };
                // A sub-agent in a child session that shares our cancel flag: `explore` reads
                // only; `general` keeps our rules (never more than we may: a read-only parent
                // gets explore only).
                let kind = input
                    .get("agent")
                    .and_then(Value::as_str)
                    .unwrap_or("explore");
                if !matches!(kind, "explore" | "general") {
                    return ToolOutcome::failed(format!(
                        "unknown sub-agent '{kind}'; use explore or general"
                    ));
                }
                if kind == "general" && self.opts.autonomy == Autonomy::ReadOnly {
                    return ToolOutcome::failed(
                        "a read-only session can only start explore sub-agents",
                    );
                }
                let resume = input.get("session_id").and_then(Value::as_str);
                if let Some(sid) = resume {
                    if !self.is_child_session(sid) {
                        return ToolOutcome::failed(format!(
                            "'{sid}' is not a child session of this session"
                        ));
                    }
                }
                let mut opts = self.opts.clone();
                if kind == "explore" {
                    opts.rules = Ruleset::default();
                }
                opts.instructions = None;
                opts = opts.with_profile(&Profile::builtin(kind).expect("built-in profile"));
                opts.parent_session = Some(self.session_id.clone());
                let mut child = match AgentSession::open(
                    &self.file,
                    &self.user_editor,
                    &self.agent_block_id,
                    resume,
                    opts,
                ) {
                    Ok(c) => c,
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                let mut refuse = DenyAll;
                let child_id = child.session_id().to_owned();
                match Box::pin(child.run_turn_with(prompt, &mut refuse, &mut |_| {})).await {
                    Ok(out) if out.stop_reason == StopReason::EndTurn => {
                        ToolOutcome::Ok(format!("{}\n[session_id: {child_id}]", out.text))
                    }
                    Ok(out) => ToolOutcome::Failed {
                        error: format!("the sub-agent {}", out.stop_reason),
                        partial: (!out.text.is_empty()).then_some(out.text),
                    },
                    Err(e) => ToolOutcome::Error(e.to_string()),
                }
            }
            _ => self.call_tool(name, input).await,
        }
    }

    /// A catalogue tool, run as the agent in this session.
    async fn call_tool(&self, name: &str, input: &Value) -> ToolOutcome {
        match crate::mcp::tools::call_in_session(
            &self.file,
            &self.agent_editor,
            Some(&self.session_id),
            name,
            input.clone(),
        )
        .await
        {
            Ok(v) => ToolOutcome::Ok(v.to_string()),
            // "failed" is the MCP layer's kind for engine errors that are not rejections.
            Err(e) if e.kind == "failed" => ToolOutcome::Error(e.message),
            Err(e) => ToolOutcome::failed(e.message),
        }
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

    /// Whether `sid` is a session whose events name this session as their parent.
    fn is_child_session(&self, sid: &str) -> bool {
        self.file.events(1).is_ok_and(|events| {
            events.iter().any(|e| {
                e.entity == self.agent_block_id
                    && e.value.get("session_id").and_then(Value::as_str) == Some(sid)
                    && e.value.get("parent_session").and_then(Value::as_str)
                        == Some(self.session_id.as_str())
            })
        })
    }

    /// Where the agent's shell runs, so its commands see the project it works on (seed 002
    /// §3): a terminal the agent references; else its own terminal linked to the directory it
    /// references (or its target project); else its own terminal in the `.elf`. Its own
    /// terminal is created by the user on first use and granted to the agent.
    async fn agent_terminal(&self) -> Result<String, EngineError> {
        let name = format!("shell: {}", self.agent_editor);
        let (referenced, directory, own) = self.file.with_state(|s| {
            let id_of = |ty| {
                crate::service::agent_referenced(s, &self.agent_block_id, ty)
                    .map(|b| b.block_id.clone())
            };
            let (terminal, directory) = (id_of("terminal"), id_of("directory"));
            let own = s
                .blocks
                .values()
                .find(|b| b.block_type == "terminal" && b.name == name)
                .map(|b| {
                    let linked = b
                        .contents
                        .get("linked_directory_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    (b.block_id.clone(), linked)
                });
            (terminal, directory, own)
        });
        if let Some(t) = referenced {
            return Ok(t);
        }
        if let Some((id, linked)) = own {
            if linked == directory {
                return Ok(id);
            }
        }
        let mut payload = json!({ "name": name });
        if let Some(d) = &directory {
            payload["linked_directory_id"] = json!(d);
        }
        let ev = self
            .file
            .submit(Command::new(
                &self.user_editor,
                "terminal.create",
                None,
                payload,
            ))
            .await?;
        let id = ev[0].entity.clone();
        self.file
            .submit(Command::new(
                &self.user_editor,
                "core.grant",
                Some(&id),
                json!({"editor_id": self.agent_editor, "cap_id": "terminal.execute"}),
            ))
            .await?;
        Ok(id)
    }

    /// Before the agent's shell runs in a terminal linked to a directory with changes not
    /// exported yet: export them by the terminal's rule. An agent cannot answer the "export &
    /// run / run / cancel" question, so `Ask` exports (its commands see what it wrote);
    /// `Never` runs as is. Conflicts are left on disk and named in the tool result.
    async fn export_for_shell(&self, terminal: &str) -> Result<Option<Value>, EngineError> {
        use crate::service::{export_rule, pending_export, ExportBeforeRun};
        let Some((dir, _)) = pending_export(&self.file, terminal) else {
            return Ok(None);
        };
        if export_rule(&self.file, terminal) == ExportBeforeRun::Never {
            return Ok(None);
        }
        crate::service::export_directory(&self.file, &self.user_editor, &dir)
            .await
            .map(Some)
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
                        summary: memory::clip(&first_lines(&content, 1), 200),
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
mod tests {
    use super::*;

    fn call(id: &str) -> Message {
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "elfiee_block_list".into(),
                input: json!({}),
            }],
        )
    }
    fn result(id: &str) -> Message {
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: "{}".into(),
                is_error: false,
            }],
        )
    }

    #[test]
    fn a_dangling_tool_call_gets_an_error_result_before_the_next_message() {
        let mut h = Vec::new();
        push_paired(&mut h, Message::user_text("go"));
        push_paired(&mut h, call("t1"));
        push_paired(&mut h, Message::user_text("are you there?"));
        assert_eq!(h.len(), 4);
        assert!(
            matches!(&h[2].content[0], ContentBlock::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "t1")
        );
        let mut ok = Vec::new();
        for m in [Message::user_text("go"), call("t1"), result("t1")] {
            push_paired(&mut ok, m);
        }
        assert_eq!(ok.len(), 3, "answered calls are left alone");
    }

    #[test]
    fn the_window_starts_at_a_plain_user_message_or_a_note() {
        let h = vec![
            Message::user_text("a"),
            call("t1"),
            result("t1"),
            Message::assistant_text("x"),
            Message::user_text("b"),
            call("t2"),
            result("t2"),
        ];
        let w = window(&h, 4);
        assert_eq!(w.len(), 3);
        assert!(is_plain_user(&w[0]));
        let only_tools = vec![
            Message::user_text("a"),
            call("t1"),
            result("t1"),
            call("t2"),
            result("t2"),
        ];
        let w = window(&only_tools, 3);
        assert_eq!(w[0], truncation_message());
        assert_eq!(w[1], call("t2"), "the note, then a whole call/result pair");
        assert_eq!(window(&only_tools, 50), only_tools);
    }

    #[test]
    fn titles_and_time_are_short_and_well_formed() {
        assert_eq!(
            title_of("Implement the parser for command blocks now please"),
            "Implement the parser for command blocks"
        );
        assert_eq!(
            title_of("实现命令块解析器并链接到需求"),
            "实现命令块解析器并链接到需求"
        );
        let t = utc_now();
        assert!(
            t.len() == 20 && t.ends_with(" UTC") && t.starts_with("20"),
            "{t}"
        );
    }

    #[test]
    fn results_render_in_the_seed_format() {
        assert_eq!(
            ToolOutcome::Ok("out".into()).render(),
            ("out".into(), false)
        );
        assert_eq!(
            ToolOutcome::failed("nope").render(),
            ("[failed] nope".into(), true)
        );
        assert_eq!(
            ToolOutcome::Failed {
                error: "exit code 1".into(),
                partial: Some("half".into())
            }
            .render()
            .0,
            "[failed] exit code 1\n[partial output]\nhalf"
        );
        assert_eq!(
            ToolOutcome::Error("disk".into()).render(),
            ("[error] disk".into(), true)
        );
    }

    #[test]
    fn chinese_replies_get_chinese_result_markers() {
        let zh = Markers::for_language(Some("zh-CN"));
        assert_eq!(
            ToolOutcome::Failed {
                error: "exit code 1".into(),
                partial: Some("half".into())
            }
            .render_in(zh)
            .0,
            "[失败] exit code 1\n[部分输出]\nhalf"
        );
        assert_eq!(
            ToolOutcome::Error("disk".into()).render_in(zh).0,
            "[错误] disk"
        );
        assert_eq!(Markers::for_language(Some("Chinese")).failed, "[失败]");
        assert_eq!(Markers::for_language(Some("en")).failed, "[failed]");
        assert_eq!(Markers::for_language(None).failed, "[failed]");
    }
}
