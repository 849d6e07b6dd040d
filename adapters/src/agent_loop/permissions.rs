//! Permission rules for agent tool calls (seed 004 §5).
//!
//! A rule is `{permission, pattern, action}`: `permission` matches the tool name (e.g. `shell`,
//! `elfiee_markdown_write`, `elfiee_*`), `pattern` matches the call's subject (the shell command
//! line, the target block id, …). Both use wildcards: `*` (any run of characters, `/` included —
//! so `rm *` also denies `rm -rf /`), `**` (the same; accepted for path-style rules) and `?`
//! (one character). Rules are evaluated in order and the
//! **last matching rule wins**; with no match the answer is `ask`. The autonomy level is applied
//! on top: `ReadOnly` denies every tool that writes, `Full` turns `ask` into `allow` (explicit
//! `deny` rules still hold), `Supervised` leaves the rules' answer as it is.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Deny,
    Ask,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Autonomy {
    /// Only tools that read.
    ReadOnly,
    /// Rules decide; unmatched calls ask the user.
    #[default]
    Supervised,
    /// Everything not explicitly denied runs.
    Full,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub permission: String,
    pub pattern: String,
    pub action: Action,
}

impl Rule {
    pub fn new(permission: &str, pattern: &str, action: Action) -> Rule {
        Rule {
            permission: permission.into(),
            pattern: pattern.into(),
            action,
        }
    }
}

/// Tools of the shared catalogue that only read.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "elfiee_block_list",
    "elfiee_block_get",
    "elfiee_block_history",
    "elfiee_proposal_list",
    "elfiee_steps",
    "self_info",
    "task",
];

/// An ordered list of rules (later rules override earlier ones).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ruleset {
    pub rules: Vec<Rule>,
}

impl Ruleset {
    pub fn new(rules: Vec<Rule>) -> Ruleset {
        Ruleset { rules }
    }

    /// Appends a rule (e.g. an "always allow" answer); it wins over every earlier rule.
    pub fn push(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// The rules' answer for `tool` acting on `subject`: the last match, else `Ask`.
    pub fn evaluate(&self, tool: &str, subject: &str) -> Action {
        self.rules
            .iter()
            .rev()
            .find(|r| wildcard_match(&r.permission, tool) && wildcard_match(&r.pattern, subject))
            .map(|r| r.action)
            .unwrap_or(Action::Ask)
    }

    /// The final answer with the autonomy level applied.
    pub fn decide(&self, autonomy: Autonomy, tool: &str, subject: &str) -> Action {
        let ruled = self.evaluate(tool, subject);
        match autonomy {
            Autonomy::ReadOnly if !READ_ONLY_TOOLS.contains(&tool) => Action::Deny,
            Autonomy::ReadOnly => match ruled {
                Action::Deny => Action::Deny,
                _ => Action::Allow,
            },
            Autonomy::Supervised => ruled,
            Autonomy::Full => match ruled {
                Action::Deny => Action::Deny,
                _ => Action::Allow,
            },
        }
    }
}

/// Glob matching with `*` / `**` (any run, `/` included) and `?` (one char), on characters.
/// Iterative with backtracking over the last star: linear-ish, never exponential.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    match_from(&p, &t)
}

fn match_from(p: &[char], t: &[char]) -> bool {
    // (pattern index after the last star, text index that star has matched up to)
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            while pi < p.len() && p[pi] == '*' {
                pi += 1;
            }
            star = Some((pi, ti));
            continue;
        }
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
            continue;
        }
        match star {
            // Let the last star swallow one more character and retry from there.
            Some((spi, sti)) => {
                star = Some((spi, sti + 1));
                pi = spi;
                ti = sti + 1;
            }
            None => return false,
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_documented() {
        assert!(wildcard_match("rm *", "rm -rf build"));
        assert!(wildcard_match("*", "anything at all"));
        assert!(
            wildcard_match("*", "a/b"),
            "a star crosses '/': deny rules cannot be dodged with paths"
        );
        assert!(wildcard_match("**", "a/b/c"));
        assert!(wildcard_match("src/**/*.rs", "src/engine/log/codec.rs"));
        assert!(!wildcard_match("src/*.rs", "src/engine/codec.ts"));
        assert!(
            !wildcard_match("rm *", "git rm x"),
            "patterns are anchored at both ends"
        );
        assert!(wildcard_match("cargo ?est", "cargo test"));
        assert!(!wildcard_match("cargo ?est", "cargo tests"));
        assert!(wildcard_match("elfiee_*", "elfiee_markdown_write"));
        assert!(wildcard_match("", ""));
        assert!(!wildcard_match("", "x"));
        assert!(wildcard_match("é*✓", "été ✓"), "characters, not bytes");
    }

    #[test]
    fn a_deny_rule_blocks_shell_rm() {
        let rules = Ruleset::new(vec![
            Rule::new("shell", "*", Action::Allow),
            Rule::new("shell", "rm *", Action::Deny),
        ]);
        assert_eq!(rules.evaluate("shell", "rm -rf /tmp/x"), Action::Deny);
        assert_eq!(rules.evaluate("shell", "ls -la"), Action::Allow);
        assert_eq!(
            rules.decide(Autonomy::Full, "shell", "rm -rf x"),
            Action::Deny,
            "Full keeps explicit denies"
        );
    }

    #[test]
    fn the_last_matching_rule_wins() {
        let allow_then_deny = Ruleset::new(vec![
            Rule::new("**", "**", Action::Allow),
            Rule::new("shell", "**", Action::Deny),
        ]);
        assert_eq!(allow_then_deny.evaluate("shell", "ls"), Action::Deny);
        assert_eq!(
            allow_then_deny.evaluate("elfiee_block_list", ""),
            Action::Allow
        );
        let deny_then_allow = Ruleset::new(vec![
            Rule::new("shell", "**", Action::Deny),
            Rule::new("**", "**", Action::Allow),
        ]);
        assert_eq!(
            deny_then_allow.evaluate("shell", "ls"),
            Action::Allow,
            "order matters, not specificity"
        );
        let mut r = Ruleset::new(vec![Rule::new("shell", "git *", Action::Ask)]);
        r.push(Rule::new("shell", "git status", Action::Allow)); // an "always" answer
        assert_eq!(r.evaluate("shell", "git status"), Action::Allow);
        assert_eq!(r.evaluate("shell", "git push"), Action::Ask);
    }

    #[test]
    fn no_match_asks() {
        assert_eq!(
            Ruleset::default().evaluate("elfiee_code_write", "b1"),
            Action::Ask
        );
        assert_eq!(
            Ruleset::default().decide(Autonomy::Supervised, "shell", "ls"),
            Action::Ask
        );
    }

    #[test]
    fn autonomy_levels_bound_the_rules() {
        let allow_all = Ruleset::new(vec![Rule::new("**", "**", Action::Allow)]);
        assert_eq!(
            allow_all.decide(Autonomy::ReadOnly, "elfiee_markdown_write", "b"),
            Action::Deny
        );
        assert_eq!(
            allow_all.decide(Autonomy::ReadOnly, "shell", "ls"),
            Action::Deny
        );
        assert_eq!(
            Ruleset::default().decide(Autonomy::ReadOnly, "elfiee_block_get", "b"),
            Action::Allow
        );
        assert_eq!(
            Ruleset::default().decide(Autonomy::Full, "elfiee_markdown_write", "b"),
            Action::Allow
        );
        let deny_get = Ruleset::new(vec![Rule::new("elfiee_block_get", "secret*", Action::Deny)]);
        assert_eq!(
            deny_get.decide(Autonomy::ReadOnly, "elfiee_block_get", "secret-1"),
            Action::Deny
        );
    }

    /// Seed 003 `pre_validate`: full autonomy with a whitelist is rules — deny everything of a
    /// tool, then allow what is listed (the last match wins; full autonomy keeps a deny).
    #[test]
    fn a_full_autonomy_whitelist_is_a_deny_then_allow_rules() {
        let whitelist = Ruleset::new(vec![
            Rule::new("shell", "**", Action::Deny),
            Rule::new("shell", "cargo *", Action::Allow),
            Rule::new("shell", "git status", Action::Allow),
        ]);
        let d = |cmd| whitelist.decide(Autonomy::Full, "shell", cmd);
        assert_eq!(d("cargo test"), Action::Allow);
        assert_eq!(d("git status"), Action::Allow);
        assert_eq!(d("git push --force"), Action::Deny);
        assert_eq!(d("rm -rf /"), Action::Deny);
        // Other tools are not on the shell's list: full autonomy runs them.
        assert_eq!(
            whitelist.decide(Autonomy::Full, "elfiee_code_write", "b1"),
            Action::Allow
        );
    }

    #[test]
    fn matching_stays_fast_on_adversarial_patterns() {
        let text = "a".repeat(10_000);
        let pattern = format!("{}b", "*a".repeat(50));
        let t = std::time::Instant::now();
        assert!(!wildcard_match(&pattern, &text));
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "took {:?}",
            t.elapsed()
        );
    }
}
