//! Bounded reading of newline-delimited JSON-RPC from stdin.
//!
//! rmcp's line reader drops a line longer than its limit without answering it, so a client
//! that sent one would wait forever. This pump sits between stdin and rmcp: lines up to
//! [`MAX_MESSAGE_BYTES`] pass through unchanged; a longer line is never buffered whole — its
//! first bytes are kept to find the request `id`, the rest is skipped, and rmcp receives a small
//! stand-in request (method [`OVERSIZED_METHOD`]) with that id, which the server answers with an
//! error saying how large the message was and what the limit is. The connection stays open.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Largest JSON-RPC message (one line) the server reads. Bigger than the engine's 16 MiB
/// payload limit, so an oversized tool argument reaches the tool and gets a tool error that
/// names the payload limit; only lines beyond this are refused at the protocol level.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// Method of the stand-in request for a message that exceeded [`MAX_MESSAGE_BYTES`].
pub const OVERSIZED_METHOD: &str = "elfiee/message_too_large";

/// How many leading bytes of an oversized line are kept to look for its `id`.
const ID_SCAN_BYTES: usize = 64 * 1024;

/// Copies `input` to `output` line by line until `input` ends (or `output` is closed),
/// replacing lines longer than `max` by a stand-in request (or nothing, for notifications).
pub async fn pump<R, W>(input: R, mut output: W, max: usize)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::with_capacity(256 * 1024, input);
    // The current line (for an oversized line: only its first ID_SCAN_BYTES bytes), how many
    // bytes of it were read so far, and whether it is over the limit.
    let mut line: Vec<u8> = Vec::new();
    let mut total = 0usize;
    let mut oversized = false;
    loop {
        let buf = match input.fill_buf().await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "reading stdin failed; closing the MCP connection");
                break;
            }
        };
        if buf.is_empty() {
            break; // EOF; an unterminated last line is incomplete and dropped, as rmcp does
        }
        let newline = buf.iter().position(|b| *b == b'\n');
        let take = newline.map_or(buf.len(), |i| i + 1);
        total += take;
        if !oversized && total > max {
            oversized = true;
            line.truncate(ID_SCAN_BYTES);
        }
        let keep = if oversized {
            ID_SCAN_BYTES.saturating_sub(line.len()).min(take)
        } else {
            take
        };
        line.extend_from_slice(&buf[..keep]);
        input.consume(take);
        if newline.is_none() {
            continue;
        }
        let out = if oversized {
            stand_in(&line, total, max)
        } else {
            Some(std::mem::take(&mut line))
        };
        line.clear();
        total = 0;
        oversized = false;
        if let Some(out) = out {
            if output.write_all(&out).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    }
    let _ = output.shutdown().await;
}

/// The stand-in request for an oversized line whose first bytes are `head`, or `None` when the
/// line carries no request id (a notification or garbage: nothing to answer).
fn stand_in(head: &[u8], total: usize, max: usize) -> Option<Vec<u8>> {
    tracing::warn!(
        bytes = total,
        limit = max,
        "incoming MCP message is larger than the limit; refusing it"
    );
    let id = top_level_id(head)?;
    let mut s = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": OVERSIZED_METHOD,
        "params": {"bytes": total, "limit": max},
    })
    .to_string();
    s.push('\n');
    Some(s.into_bytes())
}

/// The value of the top-level `"id"` member of the JSON object that `head` starts, if it
/// appears within `head` and is a number or a string.
pub(crate) fn top_level_id(head: &[u8]) -> Option<serde_json::Value> {
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < head.len() && head[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    // Returns the end (exclusive) of the string starting at `i` (which is a quote).
    let string_end = |mut i: usize| -> Option<usize> {
        i += 1;
        while i < head.len() {
            match head[i] {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
        None
    };
    skip_ws(&mut i);
    if head.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        skip_ws(&mut i);
        if head.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(i)?;
        let key: String = serde_json::from_slice(&head[i..key_end]).ok()?;
        i = key_end;
        skip_ws(&mut i);
        if head.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        skip_ws(&mut i);
        let start = i;
        // Skip one value: a string, or anything up to the next ',' or '}' at depth 0.
        let mut depth = 0usize;
        while i < head.len() {
            match head[i] {
                b'"' => i = string_end(i)?,
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                b',' | b'}' if depth == 0 => break,
                _ => i += 1,
            }
        }
        if i >= head.len() {
            return None;
        }
        if key == "id" {
            let v: serde_json::Value = serde_json::from_slice(head[start..i].trim_ascii()).ok()?;
            return (v.is_string() || v.is_number()).then_some(v);
        }
        if head[i] == b'}' {
            return None;
        }
        i += 1; // ','
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_the_top_level_id() {
        assert_eq!(
            top_level_id(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":"#),
            Some(json!(7))
        );
        assert_eq!(
            top_level_id(
                br#" { "method" : "tools/call", "params": {"id": 3, "s": "}\"{"}, "id" : "abc" , "#
            ),
            Some(json!("abc"))
        );
        assert_eq!(
            top_level_id(br#"{"method":"x","params":{"id":3,"text":"aaaa"#),
            None
        );
        assert_eq!(
            top_level_id(br#"{"jsonrpc":"2.0","method":"notifications/x","params":{}}"#),
            None
        );
        assert_eq!(top_level_id(b"not json"), None);
        assert_eq!(top_level_id(br#"{"id":null,"#), None);
    }

    #[tokio::test]
    async fn long_lines_become_stand_ins_and_short_ones_pass() {
        let big = format!("{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{{\"s\":\"{}\"}}}}\n", "x".repeat(5000));
        let note = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":{{\"s\":\"{}\"}}}}\n",
            "y".repeat(5000)
        );
        let input = format!("{{\"a\":1}}\n{big}{note}{{\"b\":2}}\n");
        let mut out = Vec::new();
        pump(input.as_bytes(), &mut out, 1000).await;
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0], json!({"a": 1}));
        assert_eq!(lines[1]["id"], 9);
        assert_eq!(lines[1]["method"], OVERSIZED_METHOD);
        assert_eq!(lines[1]["params"]["bytes"], big.len());
        assert_eq!(lines[2], json!({"b": 2}));
    }
}
