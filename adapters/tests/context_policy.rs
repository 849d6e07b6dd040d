//! The agent loop's context policy (issue 26, seed 000 §3.12): what the model is sent is
//! chosen by the log, not by position — a block read again later loses its older reads first,
//! and a re-read of a block the conversation already shows at its current version is a line.

mod support;

use std::sync::Arc;

use elfiee_adapters::agent_loop::{AgentSession, Autonomy, Confirm, SessionOptions};
use elfiee_adapters::llm::{ContentBlock, LlmResponse, ScriptedProvider};
use elfiee_engine::{Engine, EngineConfig};
use elfiee_projections::count_tokens;
use serde_json::{json, Value};

fn call(id: &str, name: &str, input: Value) -> LlmResponse {
    support::tool_calls(&[(id, name, input)])
}

fn no_ask(tool: &str, _: &Value) -> Confirm {
    panic!("unexpected confirmation for {tool}")
}

/// The text of the tool result answering `call_id` in the last request.
fn result_of(p: &ScriptedProvider, call_id: &str) -> String {
    let last = p.requests().last().cloned().unwrap();
    last.messages
        .iter()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } if tool_use_id == call_id => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_versions_go_first_and_an_unchanged_reread_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(EngineConfig::default());
    let file = engine
        .init(dir.path().join("c.elf"), "Alice")
        .await
        .unwrap();
    for (id, text) in [
        ("spec", "The parser reads <command> blocks. ".repeat(40)),
        ("notes", "Notes on error handling and retries. ".repeat(40)),
    ] {
        support::alice(
            &file,
            "core.create",
            None,
            json!({"name": id, "block_type": "markdown", "block_id": id}),
        )
        .await;
        support::alice(&file, "markdown.write", Some(id), json!({"markdown": text})).await;
    }
    let (agent, _) = support::create_agent(&file, "alice", "reader").await;
    let v2 = "The parser reads <command> blocks and reports malformed ones. ".repeat(40);
    let p = Arc::new(ScriptedProvider::new([
        call("r1", "elfiee_block_get", json!({"block_id": "spec"})),
        call("r2", "elfiee_block_get", json!({"block_id": "spec"})),
        call(
            "w1",
            "elfiee_markdown_write",
            json!({"block_id": "spec", "markdown": v2}),
        ),
        call("r3", "elfiee_block_get", json!({"block_id": "spec"})),
        call("r4", "elfiee_block_get", json!({"block_id": "notes"})),
        LlmResponse::text("scripted", "done"),
    ]));
    let mut opts = SessionOptions::new(p.clone(), "scripted");
    opts.autonomy = Autonomy::Full;
    // Three reads of one block in a turn is what the doom-loop guard asks about.
    opts.doom_loop_threshold = 10;
    // Room for about two whole reads of tool output.
    let one_read =
        count_tokens(&"The parser reads <command> blocks and reports malformed ones. ".repeat(40));
    opts.prune_tool_tokens = one_read * 2 + 200;
    let budget = opts.prune_tool_tokens;
    let mut s = AgentSession::open(&file, "alice", &agent, None, opts).unwrap();
    s.run_turn("read the spec twice, update it, read again", &mut no_ask)
        .await
        .unwrap();

    // The unchanged re-read is one line naming the seq of the version already shown.
    let r2: Value = serde_json::from_str(&result_of(&p, "r2")).unwrap();
    assert!(r2["unchanged_since_seq"].as_u64().is_some(), "{r2}");
    assert!(r2.get("contents").is_none());
    // After the write, the read is whole again: the version changed.
    let r3: Value = serde_json::from_str(&result_of(&p, "r3")).unwrap();
    assert_eq!(r3["contents"]["markdown"], v2.as_str());
    // Over the budget, the older version goes first; the newest read and the other block stay.
    let r1 = result_of(&p, "r1");
    assert!(r1.starts_with("[an older version of block spec"), "{r1}");
    let r4: Value = serde_json::from_str(&result_of(&p, "r4")).unwrap();
    assert!(r4["contents"]["markdown"].as_str().is_some(), "{r4}");
    // What was sent stays under the budget.
    let last = p.requests().last().cloned().unwrap();
    let sent: usize = last
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .map(|b| match b {
            ContentBlock::ToolResult { content, .. } => count_tokens(content),
            _ => 0,
        })
        .sum();
    assert!(sent <= budget, "{sent} > {budget}");
}
