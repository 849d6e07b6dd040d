//! `agent.invoke` → pending proposal → `agent.approve`, against a local server speaking the
//! Anthropic Messages API (SSE). Replaying or reopening afterwards makes no HTTP request.

mod llm_support;
mod support;

use std::sync::{Arc, Mutex};

use elfiee_adapters::service::{
    decide_proposal, invoke_agent, list_proposals, proposals, ProposalStatus,
};
use elfiee_adapters::{attach, EffectsConfig};
use elfiee_engine::{Engine, EngineConfig};
use llm_support::{answer_stream, MockServer, Reply};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_proposes_approve_applies_as_the_agent_and_replay_calls_nothing() {
    std::env::set_var("ELFIEE_INVOKE_TEST_KEY", "sk-test-secret");
    let reply = "<thinking>The requirement asks for a parser.</thinking>\n\
<command><cap_id>core.create</cap_id><payload>{\"name\": \"parser.rs\", \"block_type\": \"code\", \"block_id\": \"impl1\"}</payload><description>create the code block</description></command>\n\
<command><cap_id>code.write</cap_id><block_id>impl1</block_id><payload>{\"text\": \"fn parse() {}\", \"language\": \"rust\"}</payload><description>write it</description></command>\n\
<command><cap_id>core.link</cap_id><block_id>impl1</block_id><payload>{\"to\": \"req\", \"relation\": \"implement\"}</payload><description>it implements the requirement</description></command>";
    let server = MockServer::start(vec![Reply::sse(&answer_stream(reply), 17), Reply::status(401, r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#)]).await;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.elf");
    let engine = Engine::new(EngineConfig {
        node_id: "i".into(),
        ..EngineConfig::default()
    });
    let file = engine.init(&path, "Alice").await.unwrap();
    let fx = attach(&file, EffectsConfig::default()).await.unwrap();
    support::requirement(&file, "The parser must accept <command> blocks.").await;
    let (agent, agent_editor) = support::create_agent(&file, "alice", "writer").await;
    support::reference(&file, &agent, "req").await;
    support::alice(&file, "agent.configure", Some(&agent), json!({"base_url": server.base_url, "api_key_env": "ELFIEE_INVOKE_TEST_KEY", "model": "claude-test"})).await;

    let streamed = Arc::new(Mutex::new(String::new()));
    let sink = streamed.clone();
    let p = invoke_agent(
        &file,
        "alice",
        &agent,
        "Implement the requirement.",
        &[],
        move |d| sink.lock().unwrap().push_str(d),
    )
    .await
    .unwrap();
    assert_eq!(p["status"], "pending", "{p}");
    assert_eq!(p["proposed_commands"].as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p["parse_errors"], json!([]));
    assert_eq!(p["usage"]["input_tokens"], 42);
    assert_eq!(
        *streamed.lock().unwrap(),
        reply,
        "the answer was streamed live, in full"
    );
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some("sk-test-secret"));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    let sent = req.body.to_string();
    assert!(
        sent.contains("The parser must accept"),
        "the referenced block is in the context"
    );
    assert!(
        sent.contains("- req: Requirement (markdown)"),
        "the prompt names the blocks it may target"
    );
    let log = serde_json::to_string(&file.events(1).unwrap()).unwrap();
    assert!(!log.contains("sk-test-secret"), "the key is never stored");

    let pid = p["proposal_id"].as_str().unwrap();
    decide_proposal(&file, "alice", pid, true, None)
        .await
        .unwrap();
    let code = file.block("impl1").unwrap();
    assert_eq!(
        (code.owner.as_str(), code.contents["text"].as_str()),
        (agent_editor.as_str(), Some("fn parse() {}"))
    );
    assert_eq!(code.children["implement"], vec!["req".to_string()]);
    let authored: Vec<String> = file
        .events(1)
        .unwrap()
        .iter()
        .filter(|e| e.entity == "impl1")
        .map(|e| e.editor_id().to_owned())
        .collect();
    assert!(authored.iter().all(|e| *e == agent_editor), "{authored:?}");

    // A failing call records a failed proposal with the error; exactly one request for it.
    let failed = invoke_agent(&file, "alice", &agent, "again", &[], |_| {})
        .await
        .unwrap();
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("unauthorized")
            || failed["error"].as_str().unwrap().contains("401"),
        "{failed}"
    );
    assert_eq!(server.request_count(), 2, "401 is not retried");
    assert_eq!(list_proposals(&file, Some(&agent)).len(), 2);
    // The same, typed (what bindings/elfiee.ts's `Proposal` describes).
    let typed = proposals(&file, Some(&agent));
    assert_eq!(typed.len(), 2, "every stored proposal reads as a Proposal");
    assert_eq!(typed[0].status, ProposalStatus::Approved);
    assert_eq!(typed[0].proposed_commands.len(), 3);
    assert_eq!(typed[0].proposed_commands[0].cap_id, "core.create");
    assert_eq!(typed[0].decided_by.as_deref(), Some("alice"));
    assert_eq!(typed[1].status, ProposalStatus::Failed);
    assert!(typed[1].error.is_some());

    fx.settle(&file, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let digest = file.state_digest();
    file.close().await;
    fx.join().await;
    // Replay and reopen (with effects) call no model.
    let (report, _) = elfiee_engine::replay(&path, |_, _| {}).unwrap();
    assert_eq!(report.state_digest, digest);
    let file = engine.open(&path).await.unwrap();
    let fx = attach(&file, EffectsConfig::default()).await.unwrap();
    fx.settle(&file, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    file.close().await;
    fx.join().await;
    assert_eq!(
        server.request_count(),
        2,
        "replay and reopen made no HTTP request"
    );
}

/// The agent's configured temperature and reply language reach the model call of
/// `agent.invoke` (and nothing is sent when they are not configured).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_sends_the_configured_temperature_and_reply_language() {
    use elfiee_adapters::llm::{LlmResponse, Provider, ScriptedProvider};
    let scripted = Arc::new(ScriptedProvider::new([
        LlmResponse::text("m", "<thinking>ok</thinking>"),
        LlmResponse::text("m", "<thinking>ok</thinking>"),
    ]));
    let shared = scripted.clone();
    let factory: elfiee_adapters::invoke::ProviderFactory =
        Arc::new(move |_| Ok(shared.clone() as Arc<dyn Provider>));
    let doc = support::fresh_doc("t", "t.elf").await;
    let file = doc.file.clone();
    let fx = attach(
        &file,
        EffectsConfig {
            provider_factory: Some(factory),
            ..EffectsConfig::default()
        },
    )
    .await
    .unwrap();
    let (agent, _) = support::create_agent(&file, "alice", "writer").await;
    invoke_agent(&file, "alice", &agent, "plain", &[], |_| {})
        .await
        .unwrap();
    support::alice(
        &file,
        "agent.configure",
        Some(&agent),
        json!({"temperature": 0.4, "language": "zh"}),
    )
    .await;
    let p = invoke_agent(&file, "alice", &agent, "写一个需求", &[], |_| {})
        .await
        .unwrap();
    assert_eq!(p["status"], "pending", "{p}");
    let reqs = scripted.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].temperature, None,
        "not configured: the provider's default"
    );
    assert!(!reqs[0].system.contains("Reply in"), "{}", reqs[0].system);
    let t = reqs[1]
        .temperature
        .expect("the configured temperature is sent");
    assert!((t - 0.4).abs() < 1e-6, "{t}");
    assert!(reqs[1].system.contains("Reply in zh"), "{}", reqs[1].system);
    fx.settle(&file, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    file.close().await;
}
