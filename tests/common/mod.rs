//! Helpers shared by the root integration tests (each test uses some of them).

#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

/// A `tracing_subscriber` writer that keeps everything written to it.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything captured so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The `elfiee` binary under test: cargo's, unless `ELFIEE_TEST_BIN` names a copy of it
/// (where several checkouts build into one target folder, each test run can pin its own).
pub fn elfiee_bin() -> std::path::PathBuf {
    std::env::var_os("ELFIEE_TEST_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_elfiee").into())
}

/// Runs the `elfiee` binary on `elf` with `args` (and `RUST_LOG` unset, so stderr holds only
/// what the command itself says), with the extra environment variables `env`.
pub fn run_elfiee(
    elf: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    std::process::Command::new(elfiee_bin())
        .args(args)
        .env("ELFIEE_ELF", elf)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .output()
        .expect("run elfiee")
}

/// [`run_elfiee`] off the async runtime's threads (a CLI call may wait on a server the test
/// runs on that runtime).
pub async fn run_elfiee_async(
    elf: &std::path::Path,
    args: &[&str],
    env: &[(&'static str, &'static str)],
) -> std::process::Output {
    let elf = elf.to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env = env.to_vec();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_elfiee(&elf, &args, &env)
    })
    .await
    .expect("the CLI call's thread")
}

/// `elfiee --json ARGS` on `elf` (no extra environment); its JSON, or a panic with its stderr
/// when it failed.
pub fn elfiee_json(elf: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    success_json(&all, &run_elfiee(elf, &all, &[]))
}

/// The JSON a successful run printed; panics with its stderr when it failed.
pub fn success_json(args: &[&str], out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A local LLM provider: answers requests in order with the given raw HTTP responses and
/// records each request as its head (lower case), a blank line and its body.
pub async fn llm_server(responses: Vec<String>) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
                        let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]);
                        log.lock().unwrap().push(format!("{head}\r\n\r\n{body}"));
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

pub fn http(status: &str, headers: &[(&str, &str)], body: &str) -> String {
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

pub fn anthropic_answer(text: &str) -> String {
    let events = [
        (
            "message_start",
            serde_json::json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ),
        (
            "content_block_start",
            serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        (
            "content_block_stop",
            serde_json::json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        ),
        ("message_stop", serde_json::json!({"type": "message_stop"})),
    ];
    let body: String = events
        .iter()
        .map(|(n, d)| format!("event: {n}\ndata: {d}\n\n"))
        .collect();
    http("200 OK", &[("content-type", "text/event-stream")], &body)
}

pub fn openai_answer(text: &str) -> String {
    let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
    let done = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let body = format!("data: {chunk}\n\ndata: {done}\n\ndata: [DONE]\n\n");
    http("200 OK", &[("content-type", "text/event-stream")], &body)
}

/// An Anthropic stream whose answer is one call of tool `name` with `input`.
pub fn anthropic_tool_call(id: &str, name: &str, input: &serde_json::Value) -> String {
    anthropic_tool_calls(&[(id, name, input.clone())])
}

/// An Anthropic stream whose answer calls several tools (one step with several calls).
pub fn anthropic_tool_calls(calls: &[(&str, &str, serde_json::Value)]) -> String {
    use serde_json::json;
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "usage": {"input_tokens": 1, "output_tokens": 0}}}),
    )];
    for (i, (id, name, input)) in calls.iter().enumerate() {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        ));
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    let body: String = events
        .iter()
        .map(|(n, d)| format!("event: {n}\ndata: {d}\n\n"))
        .collect();
    http("200 OK", &[("content-type", "text/event-stream")], &body)
}

/// A local LLM provider for the agent loop whose short calls (titles, summaries: requests
/// without tools) may come in any order, concurrently with the turn: requests with tools get
/// `turn` in order, the others `short`. Records every request body.
pub async fn llm_turns(turn: Vec<String>, short: String) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let queue = Arc::new(Mutex::new(std::collections::VecDeque::from(turn)));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (log, queue, short) = (log.clone(), queue.clone(), short.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let body = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                    }
                };
                let tools = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| {
                        v.get("tools")
                            .and_then(|t| t.as_array())
                            .map(|t| !t.is_empty())
                    })
                    .unwrap_or(false);
                log.lock().unwrap().push(body);
                let resp = match tools {
                    true => queue
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or_else(|| anthropic_answer("(script ended)")),
                    false => short,
                };
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (url, seen)
}

/// The id of a new block `name` of `block_type`, created with `run` (a test file's JSON
/// runner: `elfiee --json …` on `elf`, panicking on failure).
pub fn new_block(
    run: impl Fn(&std::path::Path, &[&str]) -> serde_json::Value,
    elf: &std::path::Path,
    block_type: &str,
    name: &str,
) -> String {
    let v = run(
        elf,
        &["block", "create", "--type", block_type, "--name", name],
    );
    v["block_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no block_id in {v}"))
        .to_owned()
}

/// A new document at `dir/d.elf` with `n` markdown blocks `b0…`, each written once.
pub fn markdown_document(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let elf = dir.join("d.elf");
    elfiee_json(&elf, &["init", elf.to_str().unwrap()]);
    for i in 0..n {
        let id = new_block(elfiee_json, &elf, "markdown", &format!("b{i}"));
        elfiee_json(
            &elf,
            &["markdown", "write", &id, "--text", &format!("text {i}")],
        );
    }
    elf
}

/// Runs `cmd` to the end; panics with its stderr unless it succeeded.
pub fn output_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Copies the folder `from` to `to` (regular files and folders; anything else is skipped).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else if p.is_file() {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// Every file the steps of `session` (in `elf`) created, step by step (`agent steps`).
pub fn session_files_created(
    elf: &std::path::Path,
    session: &str,
) -> (Vec<String>, serde_json::Value) {
    let steps = elfiee_json(elf, &["agent", "steps", session]);
    let created = steps["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["files_created"].as_array().into_iter().flatten())
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    (created, steps)
}

/// Waits up to `within` for the owner socket of `elf` (a serving process started it);
/// whether it appeared.
pub fn owner_socket_appears(elf: &std::path::Path, within: std::time::Duration) -> bool {
    let sock = elf.join("owner.sock");
    let deadline = std::time::Instant::now() + within;
    while !sock.exists() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}
