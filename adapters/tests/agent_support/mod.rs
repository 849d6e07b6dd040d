//! Setup shared by the agent tests: creating an LLM agent block.

#![allow(dead_code)]

use elfiee_adapters::llm::{ContentBlock, LlmResponse, Usage};
use elfiee_engine::FileHandle;
use elfiee_model::Command;
use serde_json::json;

/// `owner` creates an agent named `name`; returns `(agent block id, agent editor id)`.
pub async fn create_agent(file: &FileHandle, owner: &str, name: &str) -> (String, String) {
    let ev = file
        .submit(Command::new(
            owner,
            "agent.create",
            None,
            json!({ "name": name }),
        ))
        .await
        .unwrap();
    let agent = ev
        .iter()
        .find(|e| e.cap_id() == "core.create")
        .expect("agent.create creates the agent block")
        .entity
        .clone();
    (agent, ev[0].entity.clone())
}

/// A scripted model answer that calls the tools `uses` (`(call id, tool, input)`) in one step.
pub fn tool_calls(uses: &[(&str, &str, serde_json::Value)]) -> LlmResponse {
    LlmResponse {
        content: uses
            .iter()
            .map(|(id, name, input)| ContentBlock::ToolUse {
                id: (*id).into(),
                name: (*name).into(),
                input: input.clone(),
            })
            .collect(),
        stop_reason: Some("tool_use".into()),
        usage: Usage::default(),
        model: "scripted".into(),
    }
}
