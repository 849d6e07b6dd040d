//! The agent loop (issue 6, seeds 003/004): [`session::AgentSession`] runs turns of tool use
//! through the engine; [`permissions`] decides every tool call; [`memory`] recalls earlier
//! sessions; [`profiles`] are the built-in presets. See docs/AGENT_LOOP.md.

pub mod memory;
pub mod permissions;
pub mod profiles;
pub mod session;
pub mod types;

pub use permissions::{Action, Autonomy, Rule, Ruleset};
pub use profiles::{Profile, PROFILES};
pub use session::{always_rules, AgentSession, Markers, SessionOptions, ToolStatusFn};
pub use types::{
    ApprovalRequest, ApproveAll, AskReason, Confirm, ConfirmCallback, DenyAll, LoopEvent,
    SessionStatus, StopReason, TurnOutcome,
};
