//! No API key, and no `Authorization` / `x-api-key` value, ever appears in tracing output, at
//! any level — through real provider calls (retries and failures included) against a local
//! server speaking the Anthropic and OpenAI streaming APIs.

mod common;
use common::{anthropic_answer, http, Captured};

use elfiee::adapters::service::invoke_agent;
use elfiee::adapters::{attach, EffectsConfig};
use elfiee::{Command, Engine, EngineConfig};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_or_auth_header_value_reaches_tracing_output() {
    const KEY: &str = "sk-ant-SECRET-0123456789abcdef";
    const BEARER: &str = "sk-openai-SECRET-fedcba9876543210";
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    std::env::set_var("ELFIEE_TRACE_TEST_ANTHROPIC", KEY);
    std::env::set_var("ELFIEE_TRACE_TEST_OPENAI", BEARER);

    let (anthropic, a_seen) = common::llm_server(vec![
        http("429 Too Many Requests", &[("retry-after-ms", "20"), ("content-type", "application/json")], r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#),
        anthropic_answer("hello"),
        http("401 Unauthorized", &[("content-type", "application/json")], r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#),
    ])
    .await;
    let (openai, o_seen) = common::llm_server(vec![common::openai_answer("hi")]).await;

    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(EngineConfig {
        node_id: "t".into(),
        ..EngineConfig::default()
    });
    let file = engine
        .init(dir.path().join("t.elf"), "Alice")
        .await
        .unwrap();
    let fx = attach(&file, EffectsConfig::default()).await.unwrap();
    let mut agents = Vec::new();
    for (name, provider, base, var) in [
        ("a", "anthropic", &anthropic, "ELFIEE_TRACE_TEST_ANTHROPIC"),
        ("o", "openai", &openai, "ELFIEE_TRACE_TEST_OPENAI"),
    ] {
        let ev = file
            .submit(Command::new(
                "alice",
                "agent.create",
                None,
                json!({"name": name}),
            ))
            .await
            .unwrap();
        let id = ev
            .iter()
            .find(|e| e.cap_id() == "core.create")
            .unwrap()
            .entity
            .clone();
        file.submit(Command::new(
            "alice",
            "agent.configure",
            Some(&id),
            json!({"provider": provider, "base_url": base, "api_key_env": var, "model": "m"}),
        ))
        .await
        .unwrap();
        agents.push(id);
    }
    let ok = invoke_agent(&file, "alice", &agents[0], "say hello", &[], |_| {})
        .await
        .unwrap();
    assert_eq!(ok["status"], "pending", "{ok}");
    let failed = invoke_agent(&file, "alice", &agents[0], "again", &[], |_| {})
        .await
        .unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    let o = invoke_agent(&file, "alice", &agents[1], "say hi", &[], |_| {})
        .await
        .unwrap();
    assert_eq!(o["status"], "pending", "{o}");
    fx.settle(&file, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    file.close().await;
    fx.join().await;

    // The secrets did go out, in the headers the providers require...
    assert_eq!(
        a_seen.lock().unwrap().len(),
        3,
        "429 retried once, then 401 not retried"
    );
    assert!(a_seen
        .lock()
        .unwrap()
        .iter()
        .all(|h| h.contains(&format!("x-api-key: {}", KEY.to_lowercase()))));
    assert!(o_seen.lock().unwrap()[0]
        .contains(&format!("authorization: bearer {}", BEARER.to_lowercase())));
    // ...and never into tracing output.
    let out = captured.text();
    assert!(
        out.len() > 1000,
        "tracing captured the run ({} bytes)",
        out.len()
    );
    assert!(
        out.contains("TRACE") || out.contains("DEBUG"),
        "verbose levels were captured"
    );
    // One span per LLM attempt: three Anthropic attempts (429, retry, then the 401) + OpenAI.
    for (provider, attempt) in [("anthropic", 1), ("anthropic", 2), ("openai", 1)] {
        let span = format!("llm_attempt{{provider=\"{provider}\" model=m attempt={attempt}}}");
        assert!(
            out.lines()
                .any(|l| l.contains(&span) && l.contains("attempt finished")),
            "no finished {span} in the trace"
        );
    }
    for secret in [KEY, BEARER, "SECRET"] {
        assert!(!out.contains(secret), "{secret} leaked into tracing output");
    }
    let lower = out.to_lowercase();
    for header in [
        "x-api-key: sk",
        "authorization: bearer",
        "\"x-api-key\": \"sk",
        "authorization\": \"bearer",
    ] {
        assert!(!lower.contains(header), "header value leaked: {header}");
    }
}
