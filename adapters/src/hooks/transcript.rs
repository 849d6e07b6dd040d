//! Claude Code's transcript (`transcript_path`, one JSON object per line, appended as the
//! session goes), read incrementally into `agent.session` `message` entries.
//!
//! Only whole lines are taken (a line still being written waits for the next read). Large
//! bodies — a tool's input (a `Write` of a big file), a tool's result (a `Read`), a long text —
//! go to the document's content store; the entry keeps a preview and the reference.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use elfiee_engine::{EngineError, FileHandle};
use serde_json::{json, Map, Value};

/// Bodies longer than this (bytes) are kept in the content store with a preview this long.
pub const PREVIEW_BYTES: usize = 2048;

/// At most this much of the transcript is read at once (the rest waits for the next hook).
const MAX_READ: u64 = 64 * 1024 * 1024;

/// New whole lines of the transcript from byte `offset`: the lines and the offset after them.
pub fn read_new_lines(path: &Path, offset: u64) -> std::io::Result<(Vec<Value>, u64)> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    // A transcript shorter than what was read before was rewritten: start again.
    let offset = if len < offset { 0 } else { offset };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(MAX_READ).read_to_end(&mut buf)?;
    let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
        return Ok((Vec::new(), offset));
    };
    let lines = buf[..end]
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .collect();
    Ok((lines, offset + end as u64 + 1))
}

/// `s` cut to at most `max` bytes at a character boundary.
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A body kept whole when short, else as `{<field>: preview, <field>_ref: {hash, len}}` with
/// the whole in the content store.
fn keep(file: &FileHandle, out: &mut Map<String, Value>, field: &str, body: &str) {
    if body.len() <= PREVIEW_BYTES {
        out.insert(field.to_owned(), json!(body));
        return;
    }
    out.insert(field.to_owned(), json!(cut(body, PREVIEW_BYTES)));
    match file.put_bytes(body.as_bytes()) {
        Ok(r) => {
            out.insert(
                format!("{field}_ref"),
                json!({"hash": r.hash.to_hex(), "len": r.len}),
            );
        }
        Err(e) => tracing::warn!(error = %e, "a transcript body was not kept whole"),
    }
}

/// The text of a tool result's `content` (a string, or a list of text and image parts).
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => p
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                Some(other) => format!("[{other}]"),
                None => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One content block as the document keeps it (`None`: not kept, e.g. thinking).
fn block(file: &FileHandle, b: &Value) -> Option<Value> {
    let mut out = Map::new();
    let kind = b.get("type").and_then(Value::as_str)?;
    out.insert("type".into(), json!(kind));
    match kind {
        "text" => keep(
            file,
            &mut out,
            "text",
            b.get("text").and_then(Value::as_str).unwrap_or(""),
        ),
        "tool_use" => {
            out.insert("id".into(), b.get("id").cloned().unwrap_or(Value::Null));
            out.insert("name".into(), b.get("name").cloned().unwrap_or(Value::Null));
            let input = b.get("input").cloned().unwrap_or(Value::Null);
            let text = input.to_string();
            if text.len() <= PREVIEW_BYTES {
                out.insert("input".into(), input);
            } else {
                keep(file, &mut out, "input_json", &text);
            }
        }
        "tool_result" => {
            out.insert(
                "tool_use_id".into(),
                b.get("tool_use_id").cloned().unwrap_or(Value::Null),
            );
            if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                out.insert("is_error".into(), json!(true));
            }
            keep(
                file,
                &mut out,
                "content",
                &result_text(b.get("content").unwrap_or(&Value::Null)),
            );
        }
        _ => return None,
    }
    Some(Value::Object(out))
}

/// The `message` entry for one transcript line, if it is a message worth keeping: the
/// model's text and tool calls, tool results. Users' prompts come from the
/// `UserPromptSubmit` hook (with their author), so plain user text here is skipped, as are
/// Claude Code's own notes (`isMeta`), summaries and snapshots.
pub fn entry_of(file: &FileHandle, line: &Value) -> Option<Value> {
    let kind = line.get("type").and_then(Value::as_str)?;
    if !matches!(kind, "user" | "assistant")
        || line.get("isMeta").and_then(Value::as_bool) == Some(true)
    {
        return None;
    }
    let message = line.get("message")?;
    let role = message.get("role").and_then(Value::as_str).unwrap_or(kind);
    let content: Vec<Value> = match message.get("content")? {
        Value::String(_) => return None, // a prompt: recorded from its hook
        Value::Array(blocks) => blocks.iter().filter_map(|b| block(file, b)).collect(),
        _ => return None,
    };
    if content.is_empty()
        || (role == "user"
            && !content
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")))
    {
        return None;
    }
    let mut entry = json!({
        "entry": "message",
        "source": "claude-code",
        "message": {"role": role, "content": content},
    });
    if let Some(uuid) = line.get("uuid") {
        entry["uuid"] = uuid.clone();
    }
    if line.get("isSidechain").and_then(Value::as_bool) == Some(true) {
        entry["sidechain"] = json!(true);
    }
    Some(entry)
}

/// The bytes a stored body had (`<field>_ref` of an entry), or the inline value.
pub fn body(file: &FileHandle, v: &Value, field: &str) -> Result<String, EngineError> {
    if let Some(r) = v.get(format!("{field}_ref")) {
        let hash = r.get("hash").and_then(Value::as_str).unwrap_or("");
        let len = r.get("len").and_then(Value::as_u64).unwrap_or(0);
        let r = elfiee_model::ContentRef {
            hash: elfiee_model::EventHash::from_hex(hash)
                .ok_or_else(|| EngineError::Storage(format!("a bad body hash '{hash}'")))?,
            len,
        };
        return String::from_utf8(file.bytes(&r)?)
            .map_err(|_| EngineError::Storage("a stored body is not UTF-8".into()));
    }
    Ok(v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_lines_are_read_and_the_offset_follows_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"a\":1}\n{\"b\":2}\n{\"c\":").unwrap();
        let (lines, off) = read_new_lines(&p, 0).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(off, 16);
        let (none, same) = read_new_lines(&p, off).unwrap();
        assert!(none.is_empty());
        assert_eq!(same, off);
        std::fs::write(&p, "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\r\n").unwrap();
        let (last, end) = read_new_lines(&p, off).unwrap();
        assert_eq!(last, vec![json!({"c": 3})]);
        assert_eq!(end, std::fs::metadata(&p).unwrap().len());
    }

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
    }
}
