//! The Anthropic and OpenAI providers against a raw HTTP/1.1 server on 127.0.0.1: streaming at
//! odd byte boundaries, tool calls, stream errors, status mapping, retries and key hygiene.

mod llm_support;

use std::time::{Duration, Instant};

use elfiee_adapters::llm::{
    AnthropicProvider, ApiKey, ContentBlock, LlmError, LlmRequest, LlmResponse, Message,
    OpenAiProvider, Provider, ProviderConfig, RetryPolicy, Role, StreamEvent, ToolDef, Usage,
};
use llm_support::{anthropic_stream, MockServer, Reply};
use serde_json::{json, Value};

const KEY: &str = "sk-ant-test-SECRET-0123456789";

fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(5),
    }
}

fn config(server: &MockServer, max_attempts: u32) -> ProviderConfig {
    ProviderConfig {
        base_url: Some(server.base_url.clone()),
        retry: fast_retry(max_attempts),
        ..ProviderConfig::default()
    }
}

fn anthropic(server: &MockServer, max_attempts: u32) -> AnthropicProvider {
    AnthropicProvider::new(ApiKey::new(KEY), config(server, max_attempts)).unwrap()
}

fn request() -> LlmRequest {
    LlmRequest::new(
        "claude-test",
        "You are Elfiee's assistant.",
        "写一个标题",
        512,
    )
}

async fn run(
    p: &dyn Provider,
    req: &LlmRequest,
) -> (Result<LlmResponse, LlmError>, Vec<StreamEvent>) {
    let mut events = Vec::new();
    let mut sink = |e: StreamEvent| events.push(e);
    let r = p.complete(req, &mut sink).await;
    (r, events)
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn message_start() -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-test-20250101", "content": [], "stop_reason": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
    )
}

fn message_end(stop_reason: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 15}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

/// A text answer in the given deltas, with a ping and an unknown event mixed in.
fn text_stream(pieces: &[&str]) -> String {
    let mut ev = vec![
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
    ];
    for p in pieces {
        ev.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    ev.push((
        "some_future_event",
        json!({"type": "some_future_event", "whatever": [1, 2]}),
    ));
    ev.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    ev.extend(message_end("end_turn"));
    anthropic_stream(&ev)
}

const PIECES: [&str; 4] = ["# 你好", "，世界 🌍", "\nnaïve café ", "— done ✓"];

async fn assert_text_stream_assembles(chunk_size: usize, crlf: bool) {
    let mut body = text_stream(&PIECES);
    if crlf {
        body = body.replace('\n', "\r\n");
    }
    let server = MockServer::start(vec![Reply::sse(&body, chunk_size)]).await;
    let (r, events) = run(&anthropic(&server, 1), &request()).await;
    let resp = r.unwrap();
    let expected = PIECES.concat();
    assert_eq!(resp.content, vec![ContentBlock::text(expected.clone())]);
    assert_eq!(
        text_of(&events),
        expected,
        "deltas reach the callback in order"
    );
    assert_eq!(resp.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 25,
            output_tokens: 15
        }
    );
    assert_eq!(resp.model, "claude-test-20250101");
    assert!(events.contains(&StreamEvent::Usage(Usage {
        input_tokens: 25,
        output_tokens: 15
    })));
}

#[tokio::test]
async fn text_stream_in_one_byte_chunks_assembles_across_utf8_boundaries() {
    assert_text_stream_assembles(1, false).await;
}

#[tokio::test]
async fn text_stream_in_seven_byte_chunks_with_crlf_lines_assembles() {
    // 7-byte pieces split "\r\n" pairs and 3- and 4-byte characters at varying offsets.
    assert_text_stream_assembles(7, true).await;
}

#[tokio::test]
async fn request_has_the_messages_api_shape_and_headers() {
    let server = MockServer::start(vec![Reply::sse(&text_stream(&["ok"]), 64)]).await;
    let mut req = request();
    req.temperature = Some(0.5);
    req.tools = vec![ToolDef {
        name: "read_block".into(),
        description: "Read a block".into(),
        input_schema: json!({"type": "object"}),
    }];
    req.messages = vec![
        Message::user_text("read b1"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "tu_1".into(),
                name: "read_block".into(),
                input: json!({"id": "b1"}),
            }],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "tu_1".into(),
                content: "# B1".into(),
                is_error: false,
            }],
        ),
    ];
    run(&anthropic(&server, 1), &req).await.0.unwrap();
    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    let r = &recorded[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.body,
        json!({
            "model": "claude-test", "max_tokens": 512, "system": "You are Elfiee's assistant.", "temperature": 0.5, "stream": true,
            "tools": [{"name": "read_block", "description": "Read a block", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "read b1"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "read_block", "input": {"id": "b1"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "# B1", "is_error": false}]}
            ]
        })
    );
}

#[tokio::test]
async fn tool_use_stream_accumulates_input_json_deltas_into_parsed_input() {
    let mut ev = vec![
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me look."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "markdown_write", "input": {}}}),
        ),
    ];
    for piece in [
        "",
        "{\"block_",
        "id\": \"b-1\", \"mark",
        "down\": \"# 标",
        "题\\n\"}",
    ] {
        ev.push(("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": piece}})));
    }
    ev.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 1}),
    ));
    ev.extend(message_end("tool_use"));
    let server = MockServer::start(vec![Reply::sse(&anthropic_stream(&ev), 5)]).await;
    let (r, events) = run(&anthropic(&server, 1), &request()).await;
    let resp = r.unwrap();
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::text("Let me look."),
            ContentBlock::ToolUse {
                id: "toolu_01".into(),
                name: "markdown_write".into(),
                input: json!({"block_id": "b-1", "markdown": "# 标题\n"})
            },
        ]
    );
    assert_eq!(resp.stop_reason.as_deref(), Some("tool_use"));
    assert!(events.contains(&StreamEvent::ToolUseStart {
        id: "toolu_01".into(),
        name: "markdown_write".into()
    }));
    let input: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolInputDelta(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"block_id": "b-1", "markdown": "# 标题\n"})
    );
}

#[tokio::test]
async fn ping_and_unknown_events_and_comments_are_ignored() {
    let with_noise = format!(
        ": keep-alive comment\n\nevent: ping\ndata: {{\"type\": \"ping\"}}\n\n{}",
        text_stream(&["plain"])
    );
    let server = MockServer::start(vec![Reply::sse(&with_noise, 3)]).await;
    let resp = run(&anthropic(&server, 1), &request()).await.0.unwrap();
    assert_eq!(resp.joined_text(), "plain");
}

#[tokio::test]
async fn error_event_after_http_200_is_a_stream_error_and_not_retried() {
    let body = anthropic_stream(&[
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let server = MockServer::start(vec![Reply::sse(&body, 11)]).await;
    let (r, _) = run(&anthropic(&server, 4), &request()).await;
    let err = r.unwrap_err();
    assert_eq!(
        err,
        LlmError::StreamError {
            kind: "overloaded_error".into(),
            message: "Overloaded".into()
        }
    );
    assert!(err.to_string().contains("mid-stream"), "{err}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_says_where_the_key_comes_from() {
    let server = MockServer::start(vec![Reply::status(
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
    )])
    .await;
    let (r, _) = run(&anthropic(&server, 4), &request()).await;
    let err = r.unwrap_err();
    assert!(matches!(err, LlmError::Unauthorized { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("api_key_env") && msg.contains("invalid x-api-key"),
        "{msg}"
    );
    assert_eq!(
        server.request_count(),
        1,
        "exactly one request reached the server"
    );
    assert_eq!(
        server.connections.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[tokio::test]
async fn client_errors_are_not_retried_and_carry_the_body_message() {
    for (status, check) in [
        (
            400u16,
            (|e: &LlmError| matches!(e, LlmError::BadRequest { status: 400, .. }))
                as fn(&LlmError) -> bool,
        ),
        (403, |e| matches!(e, LlmError::Forbidden { .. })),
        (404, |e| matches!(e, LlmError::NotFound { .. })),
        (413, |e| matches!(e, LlmError::TooLarge { .. })),
    ] {
        let body =
            format!(r#"{{"type":"error","error":{{"type":"x","message":"reason for {status}"}}}}"#);
        let server = MockServer::start(vec![Reply::status(status, &body)]).await;
        let err = run(&anthropic(&server, 4), &request()).await.0.unwrap_err();
        assert!(check(&err), "{status}: {err:?}");
        assert!(
            err.to_string().contains(&format!("reason for {status}")),
            "{err}"
        );
        assert_eq!(server.request_count(), 1, "{status} must not be retried");
    }
}

async fn assert_honours_retry_after(header: &str, value: &str, min: Duration) {
    let server = MockServer::start(vec![
        Reply::status(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        )
        .header(header, value),
        Reply::sse(&text_stream(&["after the wait"]), 64),
    ])
    .await;
    let (r, events) = run(&anthropic(&server, 4), &request()).await;
    assert_eq!(r.unwrap().joined_text(), "after the wait");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let waited = reqs[1].at - reqs[0].at;
    assert!(
        waited >= min,
        "waited {waited:?}, the server asked for {min:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::Retrying { attempt: 1, delay, .. } if *delay == min)),
        "{events:?}"
    );
}

#[tokio::test]
async fn rate_limit_with_retry_after_seconds_waits_that_long_then_succeeds() {
    assert_honours_retry_after("retry-after", "1", Duration::from_secs(1)).await;
}

#[tokio::test]
async fn rate_limit_with_retry_after_ms_waits_that_long_then_succeeds() {
    assert_honours_retry_after("retry-after-ms", "300", Duration::from_millis(300)).await;
}

#[tokio::test]
async fn overloaded_every_time_gives_retries_exhausted_after_max_attempts() {
    let server = MockServer::start(vec![Reply::status(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    )])
    .await;
    let err = run(&anthropic(&server, 3), &request()).await.0.unwrap_err();
    match &err {
        LlmError::RetriesExhausted { attempts: 3, last } => {
            assert!(matches!(**last, LlmError::Overloaded { .. }), "{last:?}")
        }
        other => panic!("expected RetriesExhausted after 3 attempts, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("gave up after 3 attempts")
            && msg.contains("overloaded")
            && msg.contains("try again later"),
        "{msg}"
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn server_error_then_success_retries_with_backoff() {
    let server = MockServer::start(vec![
        Reply::status(500, "internal"),
        Reply::status(503, "unavailable"),
        Reply::sse(&text_stream(&["third time"]), 64),
    ])
    .await;
    let (r, events) = run(&anthropic(&server, 4), &request()).await;
    assert_eq!(r.unwrap().joined_text(), "third time");
    assert_eq!(server.request_count(), 3);
    let retries: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Retrying { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [1, 2]);
}

#[tokio::test]
async fn malformed_json_in_a_data_line_is_malformed_not_a_panic() {
    let body = format!(
        "{}event: content_block_delta\ndata: {{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {{\"type\": \"text_delta\", \"text\": \"unterminated\n\n",
        anthropic_stream(&[
            message_start(),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        ])
    );
    let server = MockServer::start(vec![Reply::sse(&body, 13)]).await;
    let err = run(&anthropic(&server, 4), &request()).await.0.unwrap_err();
    assert!(matches!(err, LlmError::Malformed(_)), "{err:?}");
    assert!(err.to_string().contains("content_block_delta"), "{err}");
    assert_eq!(
        server.request_count(),
        1,
        "a malformed answer is not retried"
    );
}

#[tokio::test]
async fn tool_input_that_is_not_json_is_malformed() {
    let mut ev = vec![
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": "}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
    ];
    ev.extend(message_end("tool_use"));
    let server = MockServer::start(vec![Reply::sse(&anthropic_stream(&ev), 64)]).await;
    let err = run(&anthropic(&server, 1), &request()).await.0.unwrap_err();
    assert!(
        matches!(err, LlmError::Malformed(ref m) if m.contains("tool call n")),
        "{err:?}"
    );
}

#[tokio::test]
async fn stream_cut_after_text_is_a_network_error_and_not_replayed() {
    let full = text_stream(&["first part", " never arrives"]);
    let cut_at = full.find(" never").unwrap();
    let mut reply = Reply::sse(&full[..cut_at], 64);
    reply.cut = true;
    let server = MockServer::start(vec![reply]).await;
    let (r, events) = run(&anthropic(&server, 4), &request()).await;
    assert!(matches!(r, Err(LlmError::Network(_))), "{r:?}");
    assert_eq!(text_of(&events), "first part");
    assert_eq!(
        server.request_count(),
        1,
        "text already went out: retrying would duplicate it"
    );
}

#[tokio::test]
async fn stalled_stream_times_out() {
    let mut reply = Reply::sse(&text_stream(&["late"]), 64);
    reply.stall = Duration::from_secs(3);
    let server = MockServer::start(vec![reply]).await;
    let cfg = ProviderConfig {
        read_timeout: Duration::from_millis(300),
        ..config(&server, 1)
    };
    let p = AnthropicProvider::new(ApiKey::new(KEY), cfg).unwrap();
    let t = Instant::now();
    let err = run(&p, &request()).await.0.unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "gave up only after {:?}",
        t.elapsed()
    );
    match err {
        LlmError::RetriesExhausted { attempts: 1, last } => {
            assert!(matches!(*last, LlmError::Timeout(_)), "{last:?}")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_server_is_retried_then_reported_as_network_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: connections are refused
    let cfg = ProviderConfig {
        base_url: Some(format!("http://127.0.0.1:{port}")),
        retry: fast_retry(2),
        ..ProviderConfig::default()
    };
    let p = AnthropicProvider::new(ApiKey::new(KEY), cfg).unwrap();
    let (r, events) = run(&p, &request()).await;
    match r.unwrap_err() {
        LlmError::RetriesExhausted { attempts: 2, last } => {
            assert!(matches!(*last, LlmError::Network(_)), "{last:?}")
        }
        other => panic!("expected RetriesExhausted(Network), got {other:?}"),
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Retrying { .. }))
            .count(),
        1
    );
}

#[tokio::test]
async fn base_url_with_trailing_v1_is_accepted() {
    let server = MockServer::start(vec![Reply::sse(&text_stream(&["ok"]), 64)]).await;
    let cfg = ProviderConfig {
        base_url: Some(format!("{}/v1/", server.base_url)),
        ..config(&server, 1)
    };
    let p = AnthropicProvider::new(ApiKey::new(KEY), cfg).unwrap();
    run(&p, &request()).await.0.unwrap();
    assert_eq!(server.requests()[0].path, "/v1/messages");
}

#[tokio::test]
async fn api_key_never_appears_in_debug_output_or_errors() {
    let server = MockServer::start(vec![Reply::status(401, "{}")]).await;
    let p = anthropic(&server, 1);
    let o = OpenAiProvider::new(Some(ApiKey::new(KEY)), config(&server, 1)).unwrap();
    let err = run(&p, &request()).await.0.unwrap_err();
    for shown in [
        format!("{p:?}"),
        format!("{p:#?}"),
        format!("{o:?}"),
        format!("{:?}", ApiKey::new(KEY)),
        format!("{:?}", request()),
        format!("{err:?}"),
        err.to_string(),
    ] {
        assert!(
            !shown.contains(KEY) && !shown.contains("SECRET"),
            "key leaked in: {shown}"
        );
    }
    assert!(format!("{p:?}").contains("<redacted>"));
}

// ---- OpenAI chat completions ------------------------------------------------------------

fn openai_chunks(chunks: &[Value]) -> String {
    let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

fn openai(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(Some(ApiKey::new(KEY)), config(server, 1)).unwrap()
}

#[tokio::test]
async fn openai_streamed_text_assembles_and_request_uses_chat_format() {
    let body = openai_chunks(&[
        json!({"id": "c1", "model": "gpt-test", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
        json!({"id": "c1", "model": "gpt-test", "choices": [{"index": 0, "delta": {"content": "你好，"}, "finish_reason": null}]}),
        json!({"id": "c1", "model": "gpt-test", "choices": [{"index": 0, "delta": {"content": "world 🌍"}, "finish_reason": null}]}),
        json!({"id": "c1", "model": "gpt-test", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"id": "c1", "model": "gpt-test", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}}),
    ]);
    let server = MockServer::start(vec![Reply::sse(&body, 1)]).await;
    let (r, events) = run(&openai(&server), &request()).await;
    let resp = r.unwrap();
    assert_eq!(resp.content, vec![ContentBlock::text("你好，world 🌍")]);
    assert_eq!(text_of(&events), "你好，world 🌍");
    assert_eq!(resp.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 9,
            output_tokens: 4
        }
    );
    assert_eq!(resp.model, "gpt-test");
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(req.body["stream"], true);
    assert_eq!(
        req.body["messages"],
        json!([{"role": "system", "content": "You are Elfiee's assistant."}, {"role": "user", "content": "写一个标题"}])
    );
}

#[tokio::test]
async fn openai_tool_call_deltas_assemble_and_tool_results_map_to_tool_messages() {
    let body = openai_chunks(&[
        json!({"model": "gpt-test", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_abc", "type": "function", "function": {"name": "core_create", "arguments": ""}}]}, "finish_reason": null}]}),
        json!({"model": "gpt-test", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"name\": \"笔"}}]}, "finish_reason": null}]}),
        json!({"model": "gpt-test", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "记\", \"block_type\": \"markdown\"}"}}]}, "finish_reason": null}]}),
        json!({"model": "gpt-test", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    let server = MockServer::start(vec![Reply::sse(&body, 7)]).await;
    let mut req = request();
    req.tools = vec![ToolDef {
        name: "core_create".into(),
        description: "Create a block".into(),
        input_schema: json!({"type": "object"}),
    }];
    req.messages = vec![
        Message::user_text("make notes"),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("Checking."),
                ContentBlock::ToolUse {
                    id: "call_0".into(),
                    name: "list".into(),
                    input: json!({}),
                },
            ],
        ),
        Message::new(
            Role::User,
            vec![
                ContentBlock::ToolResult {
                    tool_use_id: "call_0".into(),
                    content: "no such block".into(),
                    is_error: true,
                },
                ContentBlock::text("go on"),
            ],
        ),
    ];
    let (r, events) = run(&openai(&server), &req).await;
    let resp = r.unwrap();
    assert_eq!(
        resp.content,
        vec![ContentBlock::ToolUse {
            id: "call_abc".into(),
            name: "core_create".into(),
            input: json!({"name": "笔记", "block_type": "markdown"})
        }]
    );
    assert_eq!(resp.stop_reason.as_deref(), Some("tool_use"));
    assert!(events.contains(&StreamEvent::ToolUseStart {
        id: "call_abc".into(),
        name: "core_create".into()
    }));
    let body = &server.requests()[0].body;
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "core_create", "description": "Create a block", "parameters": {"type": "object"}}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are Elfiee's assistant."},
            {"role": "user", "content": "make notes"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "list", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "Error: no such block"},
            {"role": "user", "content": "go on"}
        ])
    );
}

#[tokio::test]
async fn openai_error_chunk_is_a_stream_error() {
    let body = "data: {\"error\": {\"message\": \"context too long\", \"type\": \"invalid_request_error\"}}\n\n";
    let server = MockServer::start(vec![Reply::sse(body, 64)]).await;
    let err = run(&openai(&server), &request()).await.0.unwrap_err();
    assert_eq!(
        err,
        LlmError::StreamError {
            kind: "invalid_request_error".into(),
            message: "context too long".into()
        }
    );
}
