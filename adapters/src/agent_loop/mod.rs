//! The agent loop (issue 6, seeds 003/004): [`session::AgentSession`] runs turns of tool use
//! through the engine; [`permissions`] decides every tool call.

pub mod permissions;
pub mod session;

pub use permissions::{Action, Autonomy, Rule, Ruleset};
pub use session::{AgentSession, Confirm, SessionOptions, StopReason, TurnOutcome};
