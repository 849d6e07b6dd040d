//! Setup shared by the adapters' tests: a fresh document, Alice's commands, an LLM agent block
//! and scripted model answers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use elfiee_adapters::llm::{ContentBlock, LlmResponse, Message, Usage};
use elfiee_adapters::service::import_directory;
use elfiee_adapters::EffectsHandle;
use elfiee_engine::{Engine, EngineConfig, FileHandle};
use elfiee_model::{Command, Event};
use serde_json::{json, Value};
use tempfile::TempDir;

/// A new document and what keeps it alive.
pub struct Fresh {
    pub dir: TempDir,
    pub path: PathBuf,
    pub engine: Engine,
    pub file: FileHandle,
}

/// A new document `name` in a temporary folder, owned by Alice (editor `alice`), on an engine
/// whose node id is `node`.
pub async fn fresh_doc(node: &str, name: &str) -> Fresh {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    let engine = Engine::new(EngineConfig {
        node_id: node.into(),
        ..EngineConfig::default()
    });
    let file = engine.init(&path, "Alice").await.unwrap();
    Fresh {
        dir,
        path,
        engine,
        file,
    }
}

/// Alice runs `cap` on `block`; the events it committed.
pub async fn alice(
    file: &FileHandle,
    cap: &str,
    block: Option<&str>,
    payload: Value,
) -> Vec<Event> {
    file.submit(Command::new("alice", cap, block, payload))
        .await
        .unwrap()
}

/// Alice creates a block `name` of `block_type`; its id.
pub async fn create_block(file: &FileHandle, name: &str, block_type: &str) -> String {
    let ev = alice(
        file,
        "core.create",
        None,
        json!({ "name": name, "block_type": block_type }),
    )
    .await;
    ev[0].entity.clone()
}

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

/// Every tool result in `history`, in order: `(is_error, content)`.
pub fn tool_results(history: &[Message]) -> Vec<(bool, String)> {
    history
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((*is_error, content.clone())),
            _ => None,
        })
        .collect()
}

/// Waits (30 s at most) until the effects have handled every committed event, then closes the
/// document and its effects.
pub async fn settle_and_close(file: &FileHandle, fx: EffectsHandle) {
    fx.settle(file, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    file.close().await;
    fx.join().await;
}

/// Alice imports the folder `root` (default limits); the directory block's id.
pub async fn import_folder(file: &FileHandle, root: &Path) -> String {
    import_directory(file, "alice", root, None, &Default::default(), |_| {})
        .await
        .unwrap()
        .block_id
}

/// Alice links `from` to `to` as a reference.
pub async fn reference(file: &FileHandle, from: &str, to: &str) {
    alice(
        file,
        "core.link",
        Some(from),
        json!({ "to": to, "relation": "reference" }),
    )
    .await;
}

/// Alice's markdown block `req` ("Requirement") holding `text`.
pub async fn requirement(file: &FileHandle, text: &str) {
    let create = json!({"name": "Requirement", "block_type": "markdown", "block_id": "req"});
    alice(file, "core.create", None, create).await;
    alice(
        file,
        "markdown.write",
        Some("req"),
        json!({ "markdown": text }),
    )
    .await;
}
