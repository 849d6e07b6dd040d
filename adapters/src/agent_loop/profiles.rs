//! Agent profiles (seed 004 §1): a name + a permission preset + an optional model + a prompt.
//!
//! | profile | autonomy | rules | use |
//! |---|---|---|---|
//! | `build` | supervised | reads allowed, everything else asks | the default, every tool |
//! | `plan` | read-only | — | planning: no edits, no shell |
//! | `explore` | read-only | — | the `task` sub-agent: look around and report |
//! | `general` | supervised | reads allowed | a general sub-agent for multi-step work |

use super::permissions::{Action, Autonomy, Rule, Ruleset, READ_ONLY_TOOLS};

#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub autonomy: Autonomy,
    pub rules: Ruleset,
    /// Overrides the session's model when set.
    pub model: Option<String>,
    /// Added to the system prompt.
    pub prompt: String,
}

pub const PROFILES: &[&str] = &["build", "plan", "explore", "general"];

fn reads_allowed() -> Ruleset {
    Ruleset::new(
        READ_ONLY_TOOLS
            .iter()
            .map(|t| Rule::new(t, "**", Action::Allow))
            .collect(),
    )
}

impl Profile {
    /// A built-in profile by name (`build`, `plan`, `explore`, `general`).
    pub fn builtin(name: &str) -> Option<Profile> {
        let (autonomy, rules, prompt) = match name {
            "build" => (Autonomy::Supervised, reads_allowed(), "Profile build: you may use every tool to carry out the task."),
            "plan" => (
                Autonomy::ReadOnly,
                Ruleset::default(),
                "Profile plan: read and think only. Produce a numbered plan of the changes (blocks, code, links); do not edit anything.",
            ),
            "explore" => (
                Autonomy::ReadOnly,
                Ruleset::default(),
                "Profile explore: you are a read-only sub-agent. Look through the document to answer the question, then reply with a concise, specific answer (block ids, names, facts).",
            ),
            "general" => (Autonomy::Supervised, reads_allowed(), "Profile general: a sub-agent for a multi-step task; report what you did at the end."),
            _ => return None,
        };
        Some(Profile {
            name: name.into(),
            autonomy,
            rules,
            model: None,
            prompt: prompt.into(),
        })
    }
}
