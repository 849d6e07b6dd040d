//! A hand-written HTTP/1.1 server on 127.0.0.1 for the LLM provider tests: it records each
//! request and answers from a script, writing the body as chunked transfer encoding with one
//! HTTP chunk per scripted piece — so the client sees the stream split exactly where the test
//! says (one byte, seven bytes, inside a UTF-8 character, …).

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub pieces: Vec<Vec<u8>>,
    /// Stop after the pieces without finishing the chunked body (a cut connection).
    pub cut: bool,
    /// Send the headers, then stay silent this long before the body.
    pub stall: Duration,
}

impl Reply {
    /// An event stream, split into pieces of `size` bytes (boundaries anywhere, also inside
    /// multi-byte characters).
    pub fn sse(body: &str, size: usize) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            pieces: body
                .as_bytes()
                .chunks(size.max(1))
                .map(<[u8]>::to_vec)
                .collect(),
            cut: false,
            stall: Duration::ZERO,
        }
    }

    pub fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            pieces: vec![body.as_bytes().to_vec()],
            cut: false,
            stall: Duration::ZERO,
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
}

pub struct MockServer {
    pub base_url: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    pub connections: Arc<AtomicUsize>,
}

impl MockServer {
    /// Serves `script[i]` to the i-th request; the last reply repeats.
    pub async fn start(script: Vec<Reply>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (reqs, conns) = (requests.clone(), connections.clone());
        let script = Arc::new(script);
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                conns.fetch_add(1, Ordering::SeqCst);
                let (reqs, script) = (reqs.clone(), script.clone());
                tokio::spawn(async move {
                    let _ = serve_one(sock, reqs, script).await;
                });
            }
        });
        MockServer {
            base_url,
            requests,
            connections,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

async fn serve_one(
    mut sock: TcpStream,
    reqs: Arc<Mutex<Vec<Recorded>>>,
    script: Arc<Vec<Reply>>,
) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut buf = Vec::new();
    let head_end = loop {
        let mut tmp = [0u8; 4096];
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (method, path) = (
        first.next().unwrap_or_default().to_owned(),
        first.next().unwrap_or_default().to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let mut tmp = [0u8; 4096];
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..(head_end + len).min(buf.len())])
        .unwrap_or(serde_json::Value::Null);
    let index = {
        let mut r = reqs.lock().unwrap();
        r.push(Recorded {
            method,
            path,
            headers,
            body,
            at: Instant::now(),
        });
        r.len() - 1
    };
    let reply = script[index.min(script.len() - 1)].clone();

    let mut out = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
    sock.write_all(out.as_bytes()).await?;
    sock.flush().await?;
    if !reply.stall.is_zero() {
        tokio::time::sleep(reply.stall).await;
    }
    for piece in &reply.pieces {
        let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
        chunk.extend_from_slice(piece);
        chunk.extend_from_slice(b"\r\n");
        sock.write_all(&chunk).await?;
        sock.flush().await?;
        tokio::task::yield_now().await;
    }
    if !reply.cut {
        sock.write_all(b"0\r\n\r\n").await?;
    }
    sock.flush().await?;
    sock.shutdown().await?;
    Ok(())
}

/// Builds an Anthropic event stream: `(event name, data JSON)` pairs.
pub fn anthropic_stream(events: &[(&str, serde_json::Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// A whole Anthropic answer streamed as text deltas of 40 bytes.
pub fn answer_stream(text: &str) -> String {
    use serde_json::json;
    let mut events = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "m1", "type": "message", "role": "assistant", "model": "claude-test", "content": [], "usage": {"input_tokens": 42, "output_tokens": 0}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
    ];
    for piece in text.as_bytes().chunks(40) {
        let piece = String::from_utf8_lossy(piece).to_string();
        events.push(("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 99}})));
    events.push(("message_stop", json!({"type": "message_stop"})));
    anthropic_stream(&events)
}
