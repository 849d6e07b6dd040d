//! A local stand-in of the Anthropic Messages API that scripts the model for the real Claude
//! Code CLI (`tools/claude-code`, 2.1.x) in tests.
//!
//! Include it from an integration test with
//! `#[path = "common/anthropic_standin.rs"] mod anthropic_standin;`.
//!
//! Point Claude Code at it with `ANTHROPIC_BASE_URL=<standin.base_url> ANTHROPIC_API_KEY=x`.
//! What Claude Code 2.1.332 sends (checked): one `HEAD /api/hello` probe, then
//! `POST /v1/messages?beta=true` with `"stream": true` and its tools for each model turn (a
//! sub-agent's turns too, with a smaller tool set). In `-p` mode it sent no tool-less side
//! request (no title request) and no `count_tokens`; both are answered anyway. It accepts any
//! `model` and missing `usage` fields; the stand-in echoes the requested model and fills usage.
//!
//! Each `/v1/messages` request that offers tools takes the next [`Scripted`] response (one per
//! request, in arrival order, whoever sends it: a sub-agent's requests take from the same
//! queue); a request without tools gets a short plain text. When the script is used up the
//! answer is the text [`EXHAUSTED_TEXT`] with `end_turn`, so Claude Code ends its turn.
//! Every request is recorded ([`StandIn::requests`]) so a test can read what the model saw,
//! e.g. the `tool_result` that carries a `PreToolUse` hook's deny reason.
//!
//! Only the standard library and `serde_json`: a thread accepts connections, one thread per
//! connection speaks HTTP/1.1 with keep-alive (request bodies by `Content-Length` or chunked).

#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The text answered once the script is used up.
pub const EXHAUSTED_TEXT: &str = "(stand-in: script exhausted)";
/// The text answered to a request that offers no tools (Claude Code's side requests).
pub const SIDE_TEXT: &str = "Stand-in title";

/// One tool call of a scripted response.
#[derive(Clone, Debug)]
pub struct ToolCall {
    pub name: String,
    pub input: Value,
    /// The `tool_use` id; `None` gives `toolu_<response index, 2 digits>_<call index>`,
    /// e.g. `toolu_00_0` for the first call of the first response.
    pub id: Option<String>,
}

/// One scripted model response.
#[derive(Clone, Debug)]
pub enum Scripted {
    /// A plain answer: `stop_reason: end_turn`.
    Text(String),
    /// Optional text, then one or more `tool_use` blocks (several = parallel calls):
    /// `stop_reason: tool_use`.
    Tools {
        text: Option<String>,
        calls: Vec<ToolCall>,
    },
}

impl Scripted {
    /// A final text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Scripted::Text(text.into())
    }

    /// One tool call.
    pub fn tool(name: impl Into<String>, input: Value) -> Self {
        Self::tools([(name, input)])
    }

    /// Several tool calls in one response (Claude Code's parallel tool calls).
    pub fn tools<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        Scripted::Tools {
            text: None,
            calls: calls
                .into_iter()
                .map(|(name, input)| ToolCall {
                    name: name.into(),
                    input,
                    id: None,
                })
                .collect(),
        }
    }

    /// Text before the tool calls (for `Tools`; replaces the text of `Text`).
    pub fn with_text(self, text: impl Into<String>) -> Self {
        match self {
            Scripted::Text(_) => Scripted::Text(text.into()),
            Scripted::Tools { calls, .. } => Scripted::Tools {
                text: Some(text.into()),
                calls,
            },
        }
    }

    /// Gives the `i`-th tool call of this response the `tool_use` id `id`.
    pub fn with_id(mut self, i: usize, id: impl Into<String>) -> Self {
        if let Scripted::Tools { calls, .. } = &mut self {
            calls[i].id = Some(id.into());
        }
        self
    }
}

/// One request the stand-in received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path with query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Null` when empty, a JSON string when it was not JSON.
    pub body: Value,
    /// Which scripted response answered it (`None`: side request, probe, or script exhausted).
    pub script_index: Option<usize>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A `POST …/v1/messages` request.
    pub fn is_messages(&self) -> bool {
        self.method == "POST" && path_only(&self.path).ends_with("/v1/messages")
    }

    /// The names of the tools the request offers.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

struct State {
    script: Vec<Scripted>,
    next: usize,
    requests: Vec<Request>,
    messages_sent: u64,
}

/// The running stand-in; stops accepting when dropped.
pub struct StandIn {
    /// `http://127.0.0.1:<port>`: the value for `ANTHROPIC_BASE_URL`.
    pub base_url: String,
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl StandIn {
    /// Listens on 127.0.0.1 on a free port and answers with `script`, in order.
    pub fn start(script: Vec<Scripted>) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stand-in");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            script,
            next: 0,
            requests: Vec::new(),
            messages_sent: 0,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name("anthropic-standin".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if sp.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (st, sp) = (st.clone(), sp.clone());
                    let _ = std::thread::Builder::new()
                        .name("anthropic-standin-conn".into())
                        .spawn(move || serve(conn, st, sp));
                }
            })
            .expect("spawn the stand-in");
        StandIn {
            base_url: format!("http://{addr}"),
            addr,
            state,
            stop,
        }
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The `/v1/messages` requests that offered tools (the model turns), in arrival order.
    pub fn model_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_messages() && !r.tool_names().is_empty())
            .collect()
    }

    /// How many scripted responses have been handed out.
    pub fn used(&self) -> usize {
        self.state.lock().unwrap().next
    }

    /// Every `tool_result` block the model was sent, once per `tool_use_id`, in the order first
    /// seen. Its `content` is a string (Claude Code's own tools, hook denials) or an array of
    /// `{"type":"text",…}` blocks (MCP tools); `is_error: true` marks a failed or denied call.
    pub fn tool_results(&self) -> Vec<Value> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for r in self.requests().iter().filter(|r| r.is_messages()) {
            for m in r.body["messages"].as_array().into_iter().flatten() {
                for c in m["content"].as_array().into_iter().flatten() {
                    if c["type"] == "tool_result" {
                        let id = c["tool_use_id"].as_str().unwrap_or_default().to_owned();
                        if seen.insert(id) {
                            out.push(c.clone());
                        }
                    }
                }
            }
        }
        out
    }

    /// The `tool_result` for `tool_use_id`, if the model was sent one.
    pub fn tool_result(&self, tool_use_id: &str) -> Option<Value> {
        self.tool_results()
            .into_iter()
            .find(|c| c["tool_use_id"] == tool_use_id)
    }

    /// The text of the `tool_result` for `tool_use_id` (text blocks joined).
    pub fn tool_result_text(&self, tool_use_id: &str) -> Option<String> {
        self.tool_result(tool_use_id)
            .map(|c| content_text(&c["content"]))
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// The text of a `content` value: a string, or the text blocks of an array joined.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn path_only(p: &str) -> &str {
    p.split('?').next().unwrap_or(p)
}

fn serve(conn: TcpStream, state: Arc<Mutex<State>>, stop: Arc<AtomicBool>) {
    let _ = conn.set_nodelay(true);
    // Idle keep-alive connections look at the stop flag now and then.
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    let Ok(write_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let mut out = write_half;
    loop {
        let req = match read_request(&mut reader, &stop) {
            Ok(Some(r)) => r,
            _ => return,
        };
        let close = req
            .headers
            .iter()
            .any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close"));
        let resp = respond(req, &state);
        if out.write_all(&resp).and_then(|_| out.flush()).is_err() || close {
            return;
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Reads one line, retrying on read timeouts while the stand-in runs. `Ok(None)` at EOF.
fn read_line(r: &mut BufReader<TcpStream>, stop: &AtomicBool) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    loop {
        match r.read_until(b'\n', &mut buf) {
            Ok(0) => return Ok(None),
            Ok(_) if buf.ends_with(b"\n") => {
                return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
            }
            Ok(_) => continue,
            Err(e) if is_timeout(&e) => {
                if stop.load(Ordering::SeqCst) {
                    return Ok(None);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn read_exact(
    r: &mut BufReader<TcpStream>,
    n: usize,
    stop: &AtomicBool,
) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => got += k,
            Err(e) if is_timeout(&e) && !stop.load(Ordering::SeqCst) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(buf)
}

struct RawRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_request(
    r: &mut BufReader<TcpStream>,
    stop: &AtomicBool,
) -> std::io::Result<Option<RawRequest>> {
    // Skip blank lines between requests.
    let start = loop {
        match read_line(r, stop)? {
            None => return Ok(None),
            Some(l) if l.trim().is_empty() => continue,
            Some(l) => break l,
        }
    };
    let mut parts = start.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or("/").to_owned();
    let mut headers = Vec::new();
    loop {
        let Some(l) = read_line(r, stop)? else {
            return Ok(None);
        };
        let l = l.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let body = if header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        let mut body = Vec::new();
        loop {
            let Some(size) = read_line(r, stop)? else {
                return Ok(None);
            };
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if size == 0 {
                // Trailers, up to the blank line.
                while let Some(l) = read_line(r, stop)? {
                    if l.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            body.extend(read_exact(r, size, stop)?);
            read_line(r, stop)?; // the CRLF after the chunk
        }
        body
    } else {
        let n = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        read_exact(r, n, stop)?
    };
    Ok(Some(RawRequest {
        method,
        path,
        headers,
        body,
    }))
}

fn http(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         connection: keep-alive\r\nrequest-id: req_standin\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn json_response(v: &Value) -> Vec<u8> {
    http("200 OK", "application/json", v.to_string().as_bytes())
}

fn respond(raw: RawRequest, state: &Mutex<State>) -> Vec<u8> {
    let body: Value = if raw.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&raw.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw.body).into_owned()))
    };
    let mut req = Request {
        method: raw.method,
        path: raw.path,
        headers: raw.headers,
        body,
        script_index: None,
    };
    let path = path_only(&req.path).to_owned();
    let mut st = state.lock().unwrap();
    if req.method == "HEAD" {
        st.requests.push(req);
        // No body; Claude Code's connectivity probe only looks at the status.
        return http("200 OK", "application/json", b"");
    }
    if req.method != "POST" {
        st.requests.push(req);
        return json_response(&json!({}));
    }
    if path.ends_with("/count_tokens") {
        st.requests.push(req);
        return json_response(&json!({"input_tokens": 100}));
    }
    if !path.ends_with("/v1/messages") {
        st.requests.push(req);
        return json_response(&json!({}));
    }
    let offers_tools = !req.tool_names().is_empty();
    let (index, scripted) = if offers_tools && st.next < st.script.len() {
        let i = st.next;
        st.next += 1;
        (Some(i), st.script[i].clone())
    } else if offers_tools {
        (None, Scripted::text(EXHAUSTED_TEXT))
    } else {
        (None, Scripted::text(SIDE_TEXT))
    };
    req.script_index = index;
    st.messages_sent += 1;
    let msg_id = format!("msg_standin_{:04}", st.messages_sent);
    let model = req.body["model"]
        .as_str()
        .unwrap_or("claude-standin")
        .to_owned();
    let stream = req.body["stream"].as_bool().unwrap_or(false);
    st.requests.push(req);
    drop(st);

    let mut blocks = Vec::new();
    let stop_reason = match &scripted {
        Scripted::Text(t) => {
            blocks.push(json!({"type": "text", "text": t}));
            "end_turn"
        }
        Scripted::Tools { text, calls } => {
            if let Some(t) = text {
                blocks.push(json!({"type": "text", "text": t}));
            }
            for (k, c) in calls.iter().enumerate() {
                let id =
                    c.id.clone()
                        .unwrap_or_else(|| format!("toolu_{:02}_{k}", index.unwrap_or(99)));
                blocks
                    .push(json!({"type": "tool_use", "id": id, "name": c.name, "input": c.input}));
            }
            if calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            }
        }
    };
    let usage = json!({"input_tokens": 10, "output_tokens": 5,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    if !stream {
        return json_response(&json!({
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop_reason, "stop_sequence": null, "usage": usage,
        }));
    }
    let mut sse = String::new();
    let mut event = |name: &str, data: Value| {
        sse.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
    );
    for (i, b) in blocks.iter().enumerate() {
        if b["type"] == "text" {
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}}),
            );
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": b["text"]}}),
            );
        } else {
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": i, "content_block":
                    {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}),
            );
            // The input in two pieces, as the real API streams partial JSON.
            let input = b["input"].to_string();
            let mut cut = input.len() / 2;
            while !input.is_char_boundary(cut) {
                cut += 1;
            }
            for part in [&input[..cut], &input[cut..]] {
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": part}}),
                );
            }
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    event(
        "message_delta",
        json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": 5}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
         content-length: {}\r\nconnection: keep-alive\r\nrequest-id: req_standin\r\n\r\n",
        sse.len()
    )
    .into_bytes();
    out.extend_from_slice(sse.as_bytes());
    out
}
