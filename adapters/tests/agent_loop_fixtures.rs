//! Agent-loop behaviour driven by JSON trace fixtures (tests/fixtures/agent_loop/*.json):
//! turns → scripted model responses → expected confirmations, tool results, events and stop
//! reasons, over the real engine.

mod support;
use std::sync::{Arc, Mutex};

use elfiee_adapters::agent_loop::{AgentSession, Autonomy, Confirm, Rule, Ruleset, SessionOptions};
use elfiee_adapters::llm::{ContentBlock, LlmResponse, ScriptedProvider, Usage};
use serde_json::{json, Value};

fn response(r: &Value, i: usize) -> LlmResponse {
    match (r.get("tool"), r.get("text")) {
        (Some(name), _) => LlmResponse {
            content: vec![ContentBlock::ToolUse {
                id: format!("t{i}"),
                name: name.as_str().unwrap().into(),
                input: r["input"].clone(),
            }],
            stop_reason: Some("tool_use".into()),
            usage: Usage::default(),
            model: "fixture".into(),
        },
        (None, Some(text)) => LlmResponse::text("fixture", text.as_str().unwrap()),
        _ => panic!("a response needs 'tool' or 'text': {r}"),
    }
}

async fn run_fixture(path: &std::path::Path) {
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let d = support::fresh_doc("fixture", "f.elf").await;
    let file = d.file.clone();
    for (id, ty) in [("req", "markdown"), ("impl", "code")] {
        let payload = json!({"name": id, "block_type": ty, "block_id": id});
        support::alice(&file, "core.create", None, payload).await;
    }
    let (agent, agent_editor) = support::create_agent(&file, "alice", "fixture-agent").await;
    let autonomy: Autonomy = serde_json::from_value(fx["autonomy"].clone()).unwrap();
    let rules: Vec<Rule> = serde_json::from_value(fx["rules"].clone()).unwrap();
    for turn in fx["turns"].as_array().unwrap() {
        let responses: Vec<LlmResponse> = turn["responses"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, r)| response(r, i))
            .collect();
        let provider = Arc::new(ScriptedProvider::new(responses));
        let mut opts = SessionOptions::new(provider.clone(), "fixture");
        opts.autonomy = autonomy;
        opts.rules = Ruleset::new(rules.clone());
        if let Some(n) = fx.get("max_iterations").and_then(Value::as_u64) {
            opts.max_iterations = n as usize;
        }
        if let Some(n) = fx.get("doom_loop_threshold").and_then(Value::as_u64) {
            opts.doom_loop_threshold = n as usize;
        }
        let mut session = AgentSession::open(&file, "alice", &agent, None, opts).unwrap();
        let expected_confirms: Vec<Value> = turn["confirm"].as_array().unwrap().clone();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let fixture = name.clone();
        let mut confirm = move |tool: &str, _: &Value| {
            let name = &fixture;
            let mut log = log.lock().unwrap();
            let step = expected_confirms
                .get(log.len())
                .unwrap_or_else(|| panic!("{name}: unexpected confirmation for {tool}"))
                .clone();
            log.push(tool.to_owned());
            assert_eq!(step["tool"], tool, "{name}: confirmation order");
            match step["answer"].as_str().unwrap() {
                "once" => Confirm::Once,
                "always" => Confirm::Always,
                "reject" => Confirm::Reject,
                "feedback" => {
                    Confirm::RejectWithFeedback(step["feedback"].as_str().unwrap().into())
                }
                other => panic!("{name}: unknown answer {other}"),
            }
        };
        let seq_before = file.last_seq();
        let out = session
            .run_turn(turn["user"].as_str().unwrap(), &mut confirm)
            .await
            .unwrap();
        let expect = &turn["expect"];
        assert_eq!(
            asked.lock().unwrap().len(),
            turn["confirm"].as_array().unwrap().len(),
            "{name}: every expected confirmation was asked"
        );
        let stop = serde_json::to_value(&out.stop_reason).unwrap();
        assert_eq!(stop["kind"], expect["stop_reason"], "{name}: stop reason");
        if let Some(text) = expect.get("text") {
            assert_eq!(out.text, text.as_str().unwrap(), "{name}: final text");
        }
        let results = support::tool_results(session.history());
        let wanted = expect["tool_results"].as_array().unwrap();
        assert_eq!(
            results.len(),
            wanted.len(),
            "{name}: number of tool results"
        );
        for ((is_error, content), w) in results.iter().zip(wanted) {
            assert_eq!(
                *is_error,
                w["is_error"].as_bool().unwrap(),
                "{name}: {content}"
            );
            if let Some(c) = w.get("contains") {
                assert!(
                    content.contains(c.as_str().unwrap()),
                    "{name}: {content:?} should contain {c}"
                );
            }
        }
        let events = file.events(seq_before + 1).unwrap();
        for kind in expect
            .get("no_event_kinds")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            assert!(
                !events.iter().any(|e| e.cap_id() == kind.as_str().unwrap()),
                "{name}: unexpected {kind} event"
            );
        }
        if let Some(kinds) = expect.get("event_kinds_by_agent") {
            let by_agent: Vec<&str> = events
                .iter()
                .filter(|e| e.editor_id() == agent_editor && e.cap_id() != "agent.session")
                .map(|e| e.cap_id())
                .collect();
            let kinds: Vec<&str> = kinds
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            assert_eq!(by_agent, kinds, "{name}: changes authored by the agent");
        }
        for (block, md) in expect
            .get("block_markdown")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            assert_eq!(
                file.block(block).unwrap().contents["markdown"],
                *md,
                "{name}: block {block}"
            );
        }
        if let Some(wanted) = expect.get("approvals").and_then(Value::as_array) {
            let got: Vec<Value> = events
                .iter()
                .filter(|e| e.cap_id() == "agent.session" && e.value["entry"] == "approval")
                .map(|e| json!({"tool": e.value["request"]["tool"], "reason": e.value["request"]["reason"]}))
                .collect();
            assert_eq!(&got, wanted, "{name}: approval events");
        }
        for link in expect
            .get("links")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let from = file.block(link["from"].as_str().unwrap()).unwrap();
            let to = link["to"].as_str().unwrap().to_owned();
            assert!(
                from.children
                    .get(link["relation"].as_str().unwrap())
                    .is_some_and(|c| c.contains(&to)),
                "{name}: link {link}"
            );
        }
        if let Some(n) = expect.get("requests").and_then(Value::as_u64) {
            assert_eq!(
                provider.requests().len() as u64,
                n,
                "{name}: provider calls"
            );
        }
        if let Some(c) = expect.get("last_request_contains").and_then(Value::as_str) {
            let last = provider.requests().last().cloned().unwrap();
            assert!(
                serde_json::to_string(&last.messages).unwrap().contains(c),
                "{name}: the last request should contain {c:?}"
            );
        }
    }
    file.close().await;
}

#[tokio::test]
async fn every_agent_loop_fixture_behaves_as_recorded() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_loop");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "fixtures found: {paths:?}");
    for p in paths {
        run_fixture(&p).await;
    }
}
