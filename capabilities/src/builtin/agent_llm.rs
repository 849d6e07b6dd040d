//! LLM agents (seeds 000, 002; DESIGN.md §8): `agent.configure`, `agent.invoke` (a request the
//! LLM effect answers with `agent.proposal`), and `agent.approve` (the human's decision).
//!
//! Approving runs the proposed commands as the agent's editor. The engine does that atomically:
//! the host submits `agent.approve` together with the proposed commands in one `submit_all`
//! batch, so either the decision and every command commit, or nothing does.

use elfiee_model::{CapError, Command, Ctx, Event};
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::spec::Builtin;
use super::support::on_block;
use super::support::record;
use crate::payload::parse;
use crate::{Handled, Target};
use elfiee_projections::fold_patch;

/// Providers `agent.configure` accepts: the one list of provider names. Each has its client in
/// `elfiee_adapters::llm::CLIENTS` (`adapters/tests/providers.rs` checks both name the same).
pub const PROVIDERS: &[&str] = &["anthropic", "openai"];

/// Payload of `agent.configure`: every field optional (partial update). The API key itself is
/// never stored: only the name of the environment variable that holds it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfigurePayload {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub system_prompt: Option<String>,
    pub max_context_tokens: Option<u64>,
    pub base_url: Option<String>,
    /// Sampling temperature, 0–2; a negative value clears it (the provider's default).
    pub temperature: Option<f64>,
    /// Reply language (`zh`, `en`, or a name like `Chinese`); empty clears it.
    pub language: Option<String>,
    /// Default permission rules of the agent loop: `[{"permission", "pattern", "action":
    /// "allow" | "deny" | "ask"}]`, later rules winning; `[]` clears them.
    #[cfg_attr(
        feature = "ts",
        ts(
            type = "Array<{ permission: string, pattern: string, action: \"allow\" | \"deny\" | \"ask\" }>"
        )
    )]
    pub rules: Option<Vec<Value>>,
    /// Knowledge seeds (seed 003 §4): standing facts the agent loop always recalls into the
    /// system prompt's memory section; replaces the list, `[]` clears it. At most
    /// `MAX_KNOWLEDGE` entries of at most `MAX_KNOWLEDGE_CHARS` characters each.
    pub knowledge: Option<Vec<String>>,
}

/// Most knowledge seeds an agent keeps.
pub const MAX_KNOWLEDGE: usize = 32;
/// Longest knowledge seed, in characters.
pub const MAX_KNOWLEDGE_CHARS: usize = 1000;

/// The agent's LLM configuration as stored in `contents.config`, with defaults.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    pub provider: String,
    pub model: String,
    pub api_key_env: String,
    #[serde(default)]
    pub system_prompt: Option<String>,
    pub max_context_tokens: u64,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub language: Option<String>,
    /// Default permission rules of the agent loop (see `AgentConfigurePayload::rules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "ts",
        ts(
            optional,
            type = "Array<{ permission: string, pattern: string, action: \"allow\" | \"deny\" | \"ask\" }>"
        )
    )]
    pub rules: Vec<Value>,
    /// Knowledge seeds: standing facts recalled into every agent-loop system prompt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", ts(optional, type = "Array<string>"))]
    pub knowledge: Vec<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            system_prompt: None,
            max_context_tokens: 8000,
            base_url: None,
            temperature: None,
            language: None,
            rules: Vec::new(),
            knowledge: Vec::new(),
        }
    }
}

impl AgentConfig {
    /// The configuration of an agent block (defaults where unset).
    pub fn of(contents: &Value) -> AgentConfig {
        contents
            .get("config")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default()
    }
}

const CONFIGURE: &str = "agent.configure";
const INVOKE: &str = "agent.invoke";
const PROPOSAL: &str = "agent.proposal";
const APPROVE: &str = "agent.approve";

pub(crate) const CAPABILITIES: &[Builtin] = &[
    Builtin::new(CONFIGURE, Target::Block(Some("agent")), handle_configure).fold(fold_patch),
    Builtin::new(INVOKE, Target::Block(Some("agent")), handle_invoke),
    Builtin::new(PROPOSAL, Target::Block(Some("agent")), handle_proposal)
        .authorized_by(|_| INVOKE)
        .fold(fold_proposal),
    Builtin::new(APPROVE, Target::Block(Some("agent")), handle_approve).fold(fold_decision),
];

fn handle_configure(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    if cmd.payload.get("editor_id").is_some() {
        return Err(CapError::rejected("an agent's editor_id cannot be changed"));
    }
    let p: AgentConfigurePayload = parse(CONFIGURE, &cmd.payload)?;
    let id = cmd.block_id.clone().unwrap_or_default();
    let mut cfg = state
        .block(&id)
        .map(|b| AgentConfig::of(&b.contents))
        .unwrap_or_default();
    if let Some(v) = p.provider {
        if !PROVIDERS.contains(&v.as_str()) {
            return Err(CapError::payload(
                CONFIGURE,
                format!(
                    "unknown provider '{v}'; use one of {}",
                    PROVIDERS.join(", ")
                ),
            ));
        }
        cfg.provider = v;
    }
    if let Some(v) = p.model {
        if v.trim().is_empty() {
            return Err(CapError::payload(CONFIGURE, "'model' must not be empty"));
        }
        cfg.model = v;
    }
    if let Some(v) = p.api_key_env {
        let ok = !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(CapError::payload(CONFIGURE, format!("'api_key_env' must name an environment variable (letters, digits, '_'), got {v:?}")));
        }
        cfg.api_key_env = v;
    }
    if let Some(v) = p.system_prompt {
        cfg.system_prompt = Some(v).filter(|s| !s.is_empty());
    }
    if let Some(v) = p.max_context_tokens {
        if !(256..=2_000_000).contains(&v) {
            return Err(CapError::payload(
                CONFIGURE,
                format!("'max_context_tokens' must be 256-2000000 (got {v})"),
            ));
        }
        cfg.max_context_tokens = v;
    }
    if let Some(v) = p.base_url {
        cfg.base_url = Some(v).filter(|s| !s.is_empty());
    }
    if let Some(t) = p.temperature {
        if t > 2.0 || t.is_nan() {
            return Err(CapError::payload(
                CONFIGURE,
                format!("'temperature' must be 0-2 (got {t}); a negative value clears it"),
            ));
        }
        cfg.temperature = (t >= 0.0).then_some(t);
    }
    if let Some(l) = p.language {
        if l.chars().count() > 32 {
            return Err(CapError::payload(
                CONFIGURE,
                "'language' must be at most 32 characters (e.g. zh, en, Chinese)",
            ));
        }
        cfg.language = Some(l.trim().to_owned()).filter(|s| !s.is_empty());
    }
    if let Some(rules) = p.rules {
        for (i, r) in rules.iter().enumerate() {
            let text = |k: &str| r.get(k).and_then(Value::as_str);
            let ok = text("permission").is_some_and(|s| !s.is_empty())
                && text("pattern").is_some()
                && matches!(text("action"), Some("allow" | "deny" | "ask"));
            if !ok {
                return Err(CapError::payload(
                    CONFIGURE,
                    format!("rule {} must be {{\"permission\", \"pattern\", \"action\": \"allow\" | \"deny\" | \"ask\"}} (got {r})", i + 1),
                ));
            }
        }
        cfg.rules = rules;
    }
    if let Some(knowledge) = p.knowledge {
        if knowledge.len() > MAX_KNOWLEDGE {
            return Err(CapError::payload(
                CONFIGURE,
                format!("'knowledge' holds at most {MAX_KNOWLEDGE} entries (got {}); merge related facts or drop old ones", knowledge.len()),
            ));
        }
        let mut kept = Vec::with_capacity(knowledge.len());
        for (i, k) in knowledge.iter().enumerate() {
            let k = k.trim();
            if k.is_empty() {
                return Err(CapError::payload(
                    CONFIGURE,
                    format!(
                        "knowledge entry {} is empty; give a fact, or pass [] to clear the list",
                        i + 1
                    ),
                ));
            }
            let n = k.chars().count();
            if n > MAX_KNOWLEDGE_CHARS {
                return Err(CapError::payload(
                    CONFIGURE,
                    format!("knowledge entry {} is {n} characters; at most {MAX_KNOWLEDGE_CHARS} (split it, or keep long material in a block the agent references)", i + 1),
                ));
            }
            kept.push(k.to_owned());
        }
        cfg.knowledge = kept;
    }
    on_block(cmd, CONFIGURE, json!({"contents": {"config": cfg}}))
}

/// Payload of `agent.invoke`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentInvokePayload {
    pub prompt: String,
    /// Extra blocks to start the context walk from (besides the agent's own references).
    #[serde(default)]
    pub context_block_ids: Vec<String>,
}

/// `agent.invoke`: records the request; the LLM effect calls the model and records exactly one
/// `agent.proposal` (or a failure) for it.
fn handle_invoke(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let p: AgentInvokePayload = parse(INVOKE, &cmd.payload)?;
    if p.prompt.trim().is_empty() {
        return Err(CapError::payload(INVOKE, "'prompt' must not be empty"));
    }
    for b in &p.context_block_ids {
        if !state.blocks.contains_key(b) {
            return Err(CapError::BlockNotFound(b.clone()));
        }
    }
    let proposal_id = ctx.new_id(0).to_string();
    on_block(
        cmd,
        INVOKE,
        json!({"prompt": p.prompt, "context_block_ids": p.context_block_ids, "proposal_id": proposal_id}),
    )
}

/// `agent.proposal`: the LLM effect's record of one invocation: `{trigger_seq, proposal_id,
/// status: "pending" | "failed", proposed_commands, prompt, raw_response, usage, parse_errors,
/// error?}`. Authorized by `agent.invoke`.
fn handle_proposal(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    if cmd
        .payload
        .get("proposal_id")
        .and_then(Value::as_str)
        .is_none()
    {
        return Err(CapError::payload(PROPOSAL, "expected 'proposal_id'"));
    }
    record(cmd, state, ctx)
}

/// Payload of `agent.approve`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentApprovePayload {
    pub proposal_id: String,
    pub approved: bool,
    #[serde(default)]
    pub feedback: Option<String>,
}

/// A proposal as the projection keeps it (`state.extensions["proposals"][id]`).
pub fn proposal<'s>(state: &'s State, id: &str) -> Option<&'s Map<String, Value>> {
    state.extensions.get("proposals")?.get(id)?.as_object()
}

/// `agent.approve`: the decision on a pending proposal. Approving a proposal twice, or deciding
/// on a rejected or failed one, is an error.
fn handle_approve(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    let p: AgentApprovePayload = parse(APPROVE, &cmd.payload)?;
    let agent = cmd.block_id.clone().unwrap_or_default();
    let prop = proposal(state, &p.proposal_id).ok_or_else(|| {
        CapError::rejected(format!(
            "proposal '{}' not found; list them with `elfiee agent proposals`",
            p.proposal_id
        ))
    })?;
    if prop.get("agent_block_id").and_then(Value::as_str) != Some(agent.as_str()) {
        return Err(CapError::rejected(format!(
            "proposal '{}' belongs to another agent",
            p.proposal_id
        )));
    }
    match prop.get("status").and_then(Value::as_str) {
        Some("pending") => {}
        Some(other) => {
            return Err(CapError::rejected(format!(
                "proposal '{}' is already {other}; only pending proposals can be decided",
                p.proposal_id
            )))
        }
        None => {
            return Err(CapError::rejected(format!(
                "proposal '{}' has no status",
                p.proposal_id
            )))
        }
    }
    let status = if p.approved { "approved" } else { "rejected" };
    on_block(
        cmd,
        APPROVE,
        json!({"proposal_id": p.proposal_id, "status": status, "feedback": p.feedback}),
    )
}

/// Proposals live in `extensions["proposals"][proposal_id]`.
fn fold_proposal(state: &mut State, event: &Event) -> Folded {
    if let Some(id) = event.value.get("proposal_id").and_then(Value::as_str) {
        let mut p = event.value.clone();
        if let Value::Object(obj) = &mut p {
            obj.insert("agent_block_id".into(), Value::String(event.entity.clone()));
            obj.insert("created_seq".into(), Value::from(event.seq));
            obj.insert(
                "editor_id".into(),
                Value::String(event.editor_id().to_owned()),
            );
            obj.entry("status")
                .or_insert_with(|| Value::String("pending".into()));
        }
        state.extension_mut("proposals").insert(id.to_owned(), p);
    }
    Folded::Done
}

/// A decision on a proposal: its status, who decided, when, and the feedback.
fn fold_decision(state: &mut State, event: &Event) -> Folded {
    let id = event
        .value
        .get("proposal_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(Value::Object(p)) = state.extension_mut("proposals").get_mut(&id) {
        p.insert(
            "status".into(),
            event.value.get("status").cloned().unwrap_or(Value::Null),
        );
        p.insert(
            "decided_by".into(),
            Value::String(event.editor_id().to_owned()),
        );
        p.insert("decided_seq".into(), Value::from(event.seq));
        if let Some(f) = event.value.get("feedback").filter(|f| !f.is_null()) {
            p.insert("feedback".into(), f.clone());
        }
    }
    Folded::Done
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    /// A file with one LLM agent (no project), and the agent's block id.
    fn llm_agent() -> (Kit, String) {
        let mut k = Kit::new();
        let a = k.agent(json!({"name": "writer"}));
        (k, a)
    }

    #[test]
    fn configure_is_a_partial_update_and_keeps_no_secret() {
        let (mut k, a) = llm_agent();
        k.ok(
            "agent.configure",
            Some(&a),
            json!({"model": "m1", "api_key_env": "MY_KEY"}),
        );
        k.ok(
            "agent.configure",
            Some(&a),
            json!({"system_prompt": "be brief"}),
        );
        let cfg = &k.state.blocks[&a].contents["config"];
        assert_eq!(
            (cfg["model"].as_str(), cfg["api_key_env"].as_str()),
            (Some("m1"), Some("MY_KEY"))
        );
        assert_eq!(cfg["system_prompt"], "be brief");
        assert_eq!(
            cfg["provider"], "anthropic",
            "defaults fill what was never set"
        );
        k.err_contains(
            "agent.configure",
            Some(&a),
            json!({"editor_id": "x"}),
            "cannot be changed",
        );
        for bad in [
            json!({"api_key": "sk-secret"}),
            json!({"provider": "nope"}),
            json!({"api_key_env": "NOT VALID"}),
            json!({"max_context_tokens": 1}),
        ] {
            k.err("agent.configure", Some(&a), bad);
        }
    }

    #[test]
    fn knowledge_seeds_are_set_replaced_cleared_and_bounded() {
        let (mut k, a) = llm_agent();
        k.ok(
            "agent.configure",
            Some(&a),
            json!({"knowledge": [" The API is in src/api.rs ", "Use tabs"]}),
        );
        assert_eq!(
            k.state.blocks[&a].contents["config"]["knowledge"],
            json!(["The API is in src/api.rs", "Use tabs"])
        );
        k.ok("agent.configure", Some(&a), json!({"model": "m2"}));
        assert_eq!(
            k.state.blocks[&a].contents["config"]["knowledge"],
            json!(["The API is in src/api.rs", "Use tabs"]),
            "other fields leave the knowledge alone"
        );
        let too_many: Vec<String> = (0..=super::MAX_KNOWLEDGE)
            .map(|i| format!("fact {i}"))
            .collect();
        k.err_contains(
            "agent.configure",
            Some(&a),
            json!({"knowledge": too_many}),
            "at most 32 entries (got 33)",
        );
        k.err_contains(
            "agent.configure",
            Some(&a),
            json!({"knowledge": ["ok", "x".repeat(super::MAX_KNOWLEDGE_CHARS + 1)]}),
            "knowledge entry 2 is 1001 characters; at most 1000",
        );
        k.err_contains(
            "agent.configure",
            Some(&a),
            json!({"knowledge": ["  "]}),
            "knowledge entry 1 is empty",
        );
        k.err(
            "agent.configure",
            Some(&a),
            json!({"knowledge": "one string"}),
        );
        k.ok("agent.configure", Some(&a), json!({"knowledge": []}));
        assert!(
            k.state.blocks[&a].contents["config"]
                .get("knowledge")
                .is_none(),
            "[] clears the list"
        );
        assert!(super::AgentConfig::of(&k.state.blocks[&a].contents)
            .knowledge
            .is_empty());
    }

    #[test]
    fn proposals_are_decided_once() {
        let (mut k, a) = llm_agent();
        let inv = k.ok("agent.invoke", Some(&a), json!({"prompt": "write a spec"}));
        let pid = inv[0].value["proposal_id"].as_str().unwrap().to_owned();
        k.err("agent.invoke", Some(&a), json!({"prompt": " "}));
        k.err(
            "agent.invoke",
            Some(&a),
            json!({"prompt": "x", "context_block_ids": ["ghost"]}),
        );
        k.err_contains(
            "agent.approve",
            Some(&a),
            json!({"proposal_id": pid, "approved": true}),
            "not found",
        );
        k.ok("agent.proposal", Some(&a), json!({"trigger_seq": inv[0].seq, "proposal_id": pid, "status": "pending", "proposed_commands": []}));
        assert_eq!(
            crate::builtin::proposal(&k.state, &pid).unwrap()["status"],
            "pending"
        );
        k.ok(
            "agent.approve",
            Some(&a),
            json!({"proposal_id": pid, "approved": true}),
        );
        assert_eq!(
            crate::builtin::proposal(&k.state, &pid).unwrap()["status"],
            "approved"
        );
        k.err_contains(
            "agent.approve",
            Some(&a),
            json!({"proposal_id": pid, "approved": true}),
            "already approved",
        );
        k.err_contains(
            "agent.approve",
            Some(&a),
            json!({"proposal_id": pid, "approved": false}),
            "already approved",
        );
    }

    #[test]
    fn a_rejected_proposal_cannot_be_approved_later() {
        let (mut k, a) = llm_agent();
        k.ok(
            "agent.proposal",
            Some(&a),
            json!({"trigger_seq": 1, "proposal_id": "p1", "proposed_commands": []}),
        );
        k.ok(
            "agent.approve",
            Some(&a),
            json!({"proposal_id": "p1", "approved": false, "feedback": "no"}),
        );
        let p = crate::builtin::proposal(&k.state, "p1").unwrap();
        assert_eq!(
            (p["status"].as_str(), p["feedback"].as_str()),
            (Some("rejected"), Some("no"))
        );
        k.err_contains(
            "agent.approve",
            Some(&a),
            json!({"proposal_id": "p1", "approved": true}),
            "already rejected",
        );
        k.ok(
            "agent.proposal",
            Some(&a),
            json!({"trigger_seq": 2, "proposal_id": "p2", "status": "failed", "error": "401"}),
        );
        k.err_contains(
            "agent.approve",
            Some(&a),
            json!({"proposal_id": "p2", "approved": true}),
            "already failed",
        );
    }
}
