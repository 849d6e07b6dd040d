//! The agent loop (issue 6, seeds 003/004) — first piece: the permission rules every tool call
//! of the loop will pass through. The session loop itself is not built yet.

pub mod permissions;

pub use permissions::{Action, Autonomy, Rule, Ruleset};
