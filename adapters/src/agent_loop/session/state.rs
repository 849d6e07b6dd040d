//! What a session is made of: its settings ([`SessionOptions`]) and its state
//! ([`AgentSession`]); the turn (`mod.rs`), the prompt, the tools and the history are `impl`s
//! on it in the files beside this one.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use elfiee_engine::FileHandle;
use tokio::sync::watch;

use super::super::memory::Memory;
use super::super::permissions::{Autonomy, Ruleset};
use super::super::profiles::Profile;
use super::super::types::*;
use crate::llm::{LlmError, Message, Provider};

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
    pub(super) file: FileHandle,
    pub(super) agent_block_id: String,
    pub(super) agent_editor: String,
    /// The human (or host) talking to the agent.
    pub(super) user_editor: String,
    pub(super) session_id: String,
    pub(super) title: Option<String>,
    pub(super) history: Vec<Message>,
    pub(super) session_rules: Ruleset,
    /// Summaries of the agent's other sessions (recall candidates).
    pub(super) memories: Vec<Memory>,
    pub(super) status: watch::Sender<SessionStatus>,
    pub(super) opts: SessionOptions,
    /// The title call running in the background (seed 004: it must not hold up the first
    /// step); it records the `title` event itself when it is ready and returns the title.
    pub(super) pending_title: Option<tokio::task::JoinHandle<Option<String>>>,
    /// A background title arrived during this turn and is still to be announced as
    /// [`LoopEvent::Title`].
    pub(super) announce_title: bool,
    /// The number of the last step recorded (checkpoints, see [`crate::checkpoint`]).
    pub(super) last_step: u64,
}
