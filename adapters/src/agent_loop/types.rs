//! The agent loop's public vocabulary: confirmations, loop events, stop reasons, status.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the user answered an `ask`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    /// Run this call.
    Once,
    /// Run it and allow such calls for the rest of the session (a session rule, recorded as an
    /// event): the same base command for `shell` (e.g. every `cargo …`), the tool otherwise.
    Always,
    Reject,
    /// Reject and tell the model why (the text is the tool result the model sees).
    RejectWithFeedback(String),
}

impl Confirm {
    pub fn as_str(&self) -> &'static str {
        match self {
            Confirm::Once => "once",
            Confirm::Always => "always",
            Confirm::Reject => "reject",
            Confirm::RejectWithFeedback(_) => "reject_with_feedback",
        }
    }
}

/// Why a call needs the user's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskReason {
    /// The rules (or no rule: the default) say `ask`.
    Rule,
    /// The same call (name + arguments) came again and again in one turn.
    DoomLoop,
}

/// A pending approval (also recorded as an `agent.session` `approval` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The model's tool-use id.
    pub call_id: String,
    pub tool: String,
    /// What rules match against (the shell command line, the target block id, …).
    pub subject: String,
    pub input: Value,
    pub reason: AskReason,
}

/// Answers `ask` decisions. Any `FnMut(&str /*tool*/, &Value /*input*/) -> Confirm + Send`
/// closure is one; [`ApproveAll`] and [`DenyAll`] are the `--approve-all` / `--deny-all` answers.
pub trait ConfirmCallback: Send {
    fn confirm(&mut self, request: &ApprovalRequest) -> Confirm;
}

impl<F> ConfirmCallback for F
where
    F: FnMut(&str, &Value) -> Confirm + Send,
{
    fn confirm(&mut self, request: &ApprovalRequest) -> Confirm {
        self(&request.tool, &request.input)
    }
}

/// Approves every asked call once (`--approve-all`). Explicit `deny` rules still hold: denied
/// calls are never asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

impl ConfirmCallback for ApproveAll {
    fn confirm(&mut self, _: &ApprovalRequest) -> Confirm {
        Confirm::Once
    }
}

/// Rejects every asked call (`--deny-all`); the model is told the user refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl ConfirmCallback for DenyAll {
    fn confirm(&mut self, _: &ApprovalRequest) -> Confirm {
        Confirm::Reject
    }
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
            StopReason::IterationCap { limit } => write!(
                f,
                "stopped after {limit} steps (the iteration cap); send another message to continue"
            ),
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

/// Session status (seed 004 §9), published on [`super::AgentSession::status`] and as
/// [`LoopEvent::Status`]. In memory only: a reopened session is idle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SessionStatus {
    Idle,
    Busy,
    /// The model call failed with a retryable error and is tried again.
    Retrying {
        attempt: u32,
        reason: String,
    },
}

/// What happens during a turn, as it happens (for status lines, streaming UIs).
#[derive(Debug, Clone, PartialEq)]
pub enum LoopEvent {
    Status(SessionStatus),
    /// The session's title: made during the first turn of a new session (in the background
    /// with `model_summaries`, announced when it is recorded).
    Title(String),
    /// A piece of the model's text as it streams.
    TextDelta(String),
    /// The model's full text of one step (may be empty when it only calls tools).
    AssistantText(String),
    /// Seed 003 `ToolStatus::Running`.
    ToolRunning {
        call_id: String,
        tool: String,
        subject: String,
    },
    /// Seed 003 `ToolStatus::Success` with a one-line preview of the output: a command's
    /// first line of output; for a JSON result, what it says beyond the call's arguments.
    ToolSuccess {
        call_id: String,
        tool: String,
        summary: String,
    },
    /// Seed 003 `ToolStatus::Failed` with the first lines of the error.
    ToolFailed {
        call_id: String,
        tool: String,
        error: String,
    },
    /// A call waits for the confirm callback.
    ApprovalAsked(ApprovalRequest),
    /// The history was compacted (`summarised`) or truncated (the summary call failed).
    Compacted {
        summarised: bool,
    },
    /// A step was checkpointed: its record (`step`, `doc_from`, `doc_to`, `files`, …; see
    /// [`crate::checkpoint`]).
    Step(serde_json::Value),
    Stopped(StopReason),
}
