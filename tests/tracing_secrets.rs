//! No API key, and no `Authorization` / `x-api-key` value, ever appears in tracing output, at
//! any level — through real provider calls (retries and failures included) against a local
//! server speaking the Anthropic and OpenAI streaming APIs.

use std::sync::{Arc, Mutex};

mod common;
use common::Captured;

use elfiee::adapters::service::invoke_agent;
use elfiee::adapters::{attach, EffectsConfig};
use elfiee::{Command, Engine, EngineConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers requests in order with the given raw HTTP responses; records request heads.
async fn server(responses: Vec<String>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        for resp in responses {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read the head, then the body by content-length.
            loop {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| {
                            l.strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        log.lock().unwrap().push(head);
                        break;
                    }
                }
            }
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (url, seen)
}

fn http(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut s = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s.push_str(body);
    s
}

fn anthropic_answer(text: &str) -> String {
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let body: String = events
        .iter()
        .map(|(n, d)| format!("event: {n}\ndata: {d}\n\n"))
        .collect();
    http("200 OK", &[("content-type", "text/event-stream")], &body)
}

fn openai_answer(text: &str) -> String {
    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
    let done = json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let body = format!("data: {chunk}\n\ndata: {done}\n\ndata: [DONE]\n\n");
    http("200 OK", &[("content-type", "text/event-stream")], &body)
}

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

    let (anthropic, a_seen) = server(vec![
        http("429 Too Many Requests", &[("retry-after-ms", "20"), ("content-type", "application/json")], r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#),
        anthropic_answer("hello"),
        http("401 Unauthorized", &[("content-type", "application/json")], r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#),
    ])
    .await;
    let (openai, o_seen) = server(vec![openai_answer("hi")]).await;

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
