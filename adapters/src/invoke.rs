//! The LLM effect: answers `agent.invoke` with exactly one `agent.proposal` (DESIGN.md §8).
//!
//! It collects context from the agent's referenced blocks and the invocation's
//! `context_block_ids` (walking `reference`/`implement` links, fitted to the token budget),
//! builds the prompt (seed 000 appendix template), calls the configured provider with the key
//! read from the configured environment variable *at call time*, streams text deltas live (to
//! [`live_deltas`] subscribers — not as events), parses `<command>` blocks, and records a
//! pending proposal — or a failed one carrying the error. Replay never calls a model.

use std::sync::{Arc, OnceLock};

use elfiee_capabilities::builtin::AgentConfig;
use elfiee_engine::EngineError;
use elfiee_model::Event;
use elfiee_projections::context::{collect_context_with, ContextOptions};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::broadcast;

use crate::effects::{BoxFuture, Effect, EffectCx, FailedOutcome};
use crate::llm::{
    build_provider, parse_structured_output, ContentBlock, LlmError, LlmRequest, Message, Provider,
    ProviderConfig, Role, StreamEvent,
};
use crate::payload::{str_field, str_list};

/// Builds the provider for an agent's configuration.
pub type ProviderFactory =
    Arc<dyn Fn(&AgentConfig) -> Result<Arc<dyn Provider>, LlmError> + Send + Sync>;

/// The real providers ([`crate::llm::CLIENTS`]), by the agent's `provider`, key from
/// `config.api_key_env`; an unknown provider is an error, not another provider.
pub fn default_provider_factory() -> ProviderFactory {
    Arc::new(|cfg: &AgentConfig| {
        let pc = ProviderConfig {
            base_url: cfg.base_url.clone(),
            ..ProviderConfig::default()
        };
        build_provider(&cfg.provider, &cfg.api_key_env, pc)
    })
}

/// A piece of an agent's answer, live while the model writes it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveDelta {
    pub agent_block_id: String,
    pub proposal_id: String,
    pub text: String,
}

/// Subscribes to live text deltas of every invocation in this process.
pub fn live_deltas() -> broadcast::Receiver<LiveDelta> {
    live().subscribe()
}

fn live() -> &'static broadcast::Sender<LiveDelta> {
    static LIVE: OnceLock<broadcast::Sender<LiveDelta>> = OnceLock::new();
    LIVE.get_or_init(|| broadcast::channel(4096).0)
}

/// The system prompt (seed 000 appendix, with our payload shapes and the agent's own prompt).
pub fn system_prompt(cfg: &AgentConfig, block_ids: &[(String, String, String)]) -> String {
    let mut s = String::from(
        "You are the AI assistant inside the Elfiee editor. You help the user edit documents, write code and manage knowledge blocks.\n\n\
When the user asks for changes, answer with structured command proposals; a human approves them before they run. Use this format:\n\n\
<thinking>\nAnalyse the request and state your plan.\n</thinking>\n\n\
<command>\n  <cap_id>capability.name</cap_id>\n  <block_id>id of the target block (omit for core.create)</block_id>\n  <payload>{\"key\": \"value\"}</payload>\n  <description>what this does, for the reviewer</description>\n</command>\n\n\
Available capabilities and their payloads:\n\
- markdown.write on a markdown block: {\"markdown\": \"...\"}\n\
- code.write on a code block: {\"text\": \"...\", \"language\": \"rust\"}\n\
- core.create (no block_id): {\"name\": \"...\", \"block_type\": \"markdown\" | \"code\", \"block_id\": \"optional-id-you-choose\"}\n\
- core.link on the source block: {\"to\": \"target block id\", \"relation\": \"reference\" | \"implement\"}\n\
- core.rename on a block: {\"name\": \"...\"}\n\n\
To create a block and then write it, give it a block_id in core.create and use that id in the next command.\n\
Payloads must be valid JSON objects.\n",
    );
    if !block_ids.is_empty() {
        s.push_str("\nBlocks you may target:\n");
        for (id, name, ty) in block_ids {
            s.push_str(&format!("- {id}: {name} ({ty})\n"));
        }
    }
    if let Some(extra) = &cfg.system_prompt {
        s.push('\n');
        s.push_str(extra);
        s.push('\n');
    }
    if let Some(lang) = &cfg.language {
        s.push_str(&format!(
            "\nReply in {lang}: your thinking, the descriptions and any prose you write; keep capability ids, block ids and JSON keys as they are.\n"
        ));
    }
    s
}

/// The LLM effect; `providers` builds the provider for an agent's configuration.
pub struct InvokeEffect {
    pub providers: ProviderFactory,
}

fn proposal_id(e: &Event) -> String {
    str_field(&e.value, "proposal_id")
}

impl Effect for InvokeEffect {
    fn name(&self) -> &'static str {
        "llm"
    }
    fn wants(&self, e: &Event) -> bool {
        e.cap_id() == "agent.invoke"
    }
    /// Every invocation is its own proposal: calls of different agents, and different calls
    /// of one agent, run at the same time.
    fn order_key(&self, e: &Event) -> String {
        proposal_id(e)
    }
    fn failed_outcome(&self, e: &Event, why: &str) -> FailedOutcome {
        FailedOutcome {
            cap_id: "agent.proposal",
            block_id: e.entity.clone(),
            payload: json!({
                "trigger_seq": e.seq, "proposal_id": proposal_id(e), "status": "failed",
                "prompt": e.value.get("prompt"), "error": why, "proposed_commands": [],
            }),
        }
    }
    fn run<'a>(&'a self, cx: &'a EffectCx, e: &'a Event) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let agent_id = e.entity.clone();
            let prompt = str_field(&e.value, "prompt");
            let proposal_id = proposal_id(e);
            let extra: Vec<String> = str_list(&e.value, "context_block_ids");
            // Everything the model sees comes from the committed state: pure, repeatable.
            let (cfg, context, targets) = cx.file.with_state(|s| {
                let cfg = s
                    .block(&agent_id)
                    .map(|b| AgentConfig::of(&b.contents))
                    .unwrap_or_default();
                let mut roots: Vec<String> = s
                    .children_of(&agent_id)
                    .map(|(_, c)| c.to_owned())
                    .collect();
                roots.extend(extra.iter().cloned());
                // The context policy (docs/AGENT_LOOP.md): referenced blocks, their
                // `implement` neighbours, then a referenced directory's files most relevant
                // to the request, then the rest of the walk.
                let opts = ContextOptions {
                    max_tokens: cfg.max_context_tokens as usize,
                    query: Some(prompt.clone()),
                    directory_files: true,
                    ..ContextOptions::default()
                };
                let fetch = |r: &elfiee_model::ContentRef| cx.file.content(r).ok();
                let context = collect_context_with(s, &roots, &opts, &fetch);
                let targets: Vec<(String, String, String)> = context
                    .items
                    .iter()
                    .map(|i| (i.block_id.clone(), i.name.clone(), i.block_type.clone()))
                    .collect();
                (cfg, context, targets)
            });
            let mut user = String::new();
            if !context.items.is_empty() {
                user.push_str("# Context\n\n");
                user.push_str(&context.to_markdown());
                user.push_str("\n# Request\n\n");
            }
            user.push_str(&prompt);
            let req = LlmRequest {
                model: cfg.model.clone(),
                system: system_prompt(&cfg, &targets),
                messages: vec![Message {
                    role: Role::User,
                    content: vec![ContentBlock::Text { text: user }],
                }],
                tools: Vec::new(),
                max_tokens: 4096,
                // The agent's configured temperature (`None`: the provider's default).
                temperature: cfg.temperature.map(|t| t as f32),
            };
            let result = match (self.providers)(&cfg) {
                Ok(provider) => {
                    let tx = live();
                    let (aid, pid) = (agent_id.clone(), proposal_id.clone());
                    let mut on_event = move |ev: StreamEvent| {
                        if let StreamEvent::TextDelta(text) = ev {
                            let _ = tx.send(LiveDelta {
                                agent_block_id: aid.clone(),
                                proposal_id: pid.clone(),
                                text,
                            });
                        }
                    };
                    provider.complete(&req, &mut on_event).await
                }
                Err(err) => Err(err),
            };
            let record = match result {
                Ok(resp) => {
                    let raw = resp.joined_text();
                    let parsed = parse_structured_output(&raw);
                    json!({
                        "trigger_seq": e.seq, "proposal_id": proposal_id, "status": "pending",
                        "prompt": prompt, "model": resp.model, "raw_response": raw,
                        "proposed_commands": parsed.commands, "parse_errors": parsed.errors,
                        "usage": resp.usage, "context_blocks": targets.iter().map(|t| &t.0).collect::<Vec<_>>(),
                        "context_tokens": context.total_tokens,
                    })
                }
                Err(err) => json!({
                    "trigger_seq": e.seq, "proposal_id": proposal_id, "status": "failed",
                    "prompt": prompt, "error": err.to_string(), "proposed_commands": [],
                }),
            };
            cx.record(e, "outcome", "agent.proposal", &agent_id, record)
                .await?;
            Ok(())
        })
    }
}
