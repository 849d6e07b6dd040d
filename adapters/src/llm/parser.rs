//! Parses the `<command>` blocks of a model's answer (seed 000 §3.5) into proposed commands.
//!
//! ```text
//! <thinking>…ignored…</thinking>
//! <command>
//!   <cap_id>markdown.write</cap_id>
//!   <block_id>block-xxx</block_id>
//!   <payload>{"content": "# Hello"}</payload>
//!   <description>Write a heading</description>
//! </command>
//! ```
//!
//! The parser never fails as a whole and never panics: a command with a problem (missing
//! `<cap_id>`, payload that is not a JSON object, unclosed tag) is left out and described in
//! [`ParseResult::errors`] by its 1-based position; the other commands are still returned.
//!
//! It is a single left-to-right scan (no regular expressions), linear in the input: a 1 MB
//! answer parses in milliseconds. The payload is read as JSON *first* and its closing tag looked
//! for after the JSON value, so a payload whose strings contain `</payload>`, `</command>` or
//! `<cap_id>` (say, a document about this very format) is parsed correctly. A payload wrapped
//! in a Markdown code fence (```` ```json ````) is accepted.
//!
//! ```
//! use elfiee_adapters::llm::parse_structured_output;
//! let r = parse_structured_output(r#"<command><cap_id>core.create</cap_id>
//!   <payload>{"name": "notes", "block_type": "markdown"}</payload></command>"#);
//! assert!(r.errors.is_empty());
//! assert_eq!(r.commands[0].cap_id, "core.create");
//! assert_eq!(r.commands[0].block_id, None);
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A command the model proposes; it runs only if a human approves it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposedCommand {
    pub cap_id: String,
    /// Target block; `None` for commands without one (`core.create`, …).
    #[serde(default)]
    pub block_id: Option<String>,
    /// A JSON object (`{}` when the command has no `<payload>`).
    pub payload: Value,
    #[serde(default)]
    pub description: Option<String>,
}

/// The well-formed commands, in order, and one message per problem found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ParseResult {
    pub commands: Vec<ProposedCommand>,
    pub errors: Vec<String>,
}

const THINKING_OPEN: &str = "<thinking>";
const THINKING_CLOSE: &str = "</thinking>";
const COMMAND_OPEN: &str = "<command>";
const COMMAND_CLOSE: &str = "</command>";
const PAYLOAD_OPEN: &str = "<payload>";
const PAYLOAD_CLOSE: &str = "</payload>";
const TEXT_FIELDS: [&str; 3] = ["cap_id", "block_id", "description"];

/// Extracts every `<command>` outside `<thinking>` sections.
pub fn parse_structured_output(text: &str) -> ParseResult {
    let mut result = ParseResult::default();
    let mut pos = 0;
    let mut index = 0;
    while let Some(lt) = find_from(text, pos, "<") {
        let rest = &text[lt..];
        if rest.starts_with(THINKING_OPEN) {
            let body = lt + THINKING_OPEN.len();
            match find_from(text, body, THINKING_CLOSE) {
                Some(close) => pos = close + THINKING_CLOSE.len(),
                None => {
                    let hidden = count(&text[body..], COMMAND_OPEN);
                    if hidden > 0 {
                        result.errors.push(format!(
                            "<thinking> is never closed; {hidden} <command> block(s) after it were ignored"
                        ));
                    }
                    break;
                }
            }
        } else if rest.starts_with(COMMAND_OPEN) {
            index += 1;
            let (command, next) =
                parse_command(text, lt + COMMAND_OPEN.len(), index, &mut result.errors);
            result.commands.extend(command);
            pos = next;
        } else {
            pos = lt + 1;
        }
    }
    result
}

/// Parses one command whose body starts at `start`. Returns the command (if it had no
/// problems) and where the outer scan goes on.
fn parse_command(
    text: &str,
    start: usize,
    index: usize,
    errors: &mut Vec<String>,
) -> (Option<ProposedCommand>, usize) {
    let mut errs: Vec<String> = Vec::new();
    let mut fields: [Option<String>; 3] = [None, None, None];
    let mut payload: Option<Value> = None;
    let mut region = region_end(text, start);
    let mut p = start;
    let end = loop {
        if p > region {
            region = region_end(text, p);
        }
        // `region` itself is the `<` of the next command tag, so this finds one unless the text ends.
        let Some(lt) = find_bounded(text, p, region, "<") else {
            // Cut off (a truncated answer): that is the one thing worth saying about it.
            push_errors(errors, index, vec![format!("no closing {COMMAND_CLOSE}")]);
            return (None, text.len());
        };
        let rest = &text[lt..];
        if rest.starts_with(COMMAND_CLOSE) {
            break lt + COMMAND_CLOSE.len();
        }
        if rest.starts_with(COMMAND_OPEN) {
            errs.push(format!(
                "not closed with {COMMAND_CLOSE} before the next {COMMAND_OPEN}"
            ));
            push_errors(errors, index, errs);
            return (None, lt);
        }
        if rest.starts_with(THINKING_OPEN) {
            let body = lt + THINKING_OPEN.len();
            p = find_bounded(text, body, region, THINKING_CLOSE)
                .map_or(body, |c| c + THINKING_CLOSE.len());
            continue;
        }
        if rest.starts_with(PAYLOAD_OPEN) {
            let body = lt + PAYLOAD_OPEN.len();
            if payload.is_some() {
                errs.push("more than one <payload>".into());
            }
            match read_payload(text, body, region) {
                Ok((value, next)) => {
                    payload = Some(value);
                    p = next;
                }
                Err((msg, next)) => {
                    errs.push(msg);
                    payload = Some(Value::Null);
                    p = next;
                }
            }
            continue;
        }
        let field = TEXT_FIELDS.iter().position(|f| {
            rest.strip_prefix('<')
                .and_then(|r| r.strip_prefix(f))
                .is_some_and(|r| r.starts_with('>'))
        });
        if let Some(i) = field {
            let name = TEXT_FIELDS[i];
            let body = lt + name.len() + 2;
            let close = format!("</{name}>");
            match find_bounded(text, body, region, &close) {
                Some(c) => {
                    if fields[i].is_some() {
                        errs.push(format!("more than one <{name}>"));
                    }
                    fields[i] = Some(text[body..c].trim().to_owned());
                    p = c + close.len();
                }
                None => {
                    errs.push(format!("<{name}> is not closed with {close}"));
                    p = body;
                }
            }
            continue;
        }
        p = lt + 1; // any other tag or a stray '<'
    };

    let [cap_id, block_id, description] = fields;
    match cap_id.as_deref() {
        None => errs.push("missing <cap_id>".into()),
        Some("") => errs.push("<cap_id> is empty".into()),
        Some(c) if c.chars().any(char::is_whitespace) => {
            errs.push(format!("<cap_id> {c:?} is not a capability id"))
        }
        Some(_) => {}
    }
    if !errs.is_empty() {
        push_errors(errors, index, errs);
        return (None, end);
    }
    let command = ProposedCommand {
        cap_id: cap_id.unwrap_or_default(),
        block_id: block_id.filter(|b| !b.is_empty()),
        payload: payload.unwrap_or_else(|| Value::Object(Map::new())),
        description: description.filter(|d| !d.is_empty()),
    };
    (Some(command), end)
}

/// Reads a payload starting right after `<payload>`. Ok: the value and the position after
/// `</payload>`. Err: the message and where to go on.
fn read_payload(text: &str, body: usize, region: usize) -> Result<(Value, usize), (String, usize)> {
    let mut j = skip_ws(text, body);
    let fenced = text[j..].starts_with("```");
    if fenced {
        j = find_from(text, j, "\n").map_or(text.len(), |n| n + 1);
    }
    // First try: the JSON value as it stands, wherever it ends (it may contain tag-like text).
    let mut stream = serde_json::Deserializer::from_str(&text[j..]).into_iter::<Value>();
    if let Some(Ok(value)) = stream.next() {
        let mut k = skip_ws(text, j + stream.byte_offset());
        if fenced && text[k..].starts_with("```") {
            k = skip_ws(text, k + 3);
        }
        if text[k..].starts_with(PAYLOAD_CLOSE) {
            return check_object(value)
                .map(|v| (v, k + PAYLOAD_CLOSE.len()))
                .map_err(|m| (m, k + PAYLOAD_CLOSE.len()));
        }
    }
    // Otherwise: the text up to the closing tag.
    let Some(close) = find_bounded(text, body, region, PAYLOAD_CLOSE) else {
        return Err((
            format!("<payload> is not closed with {PAYLOAD_CLOSE}"),
            body,
        ));
    };
    let mut inner = text[body..close].trim();
    if let Some(stripped) = inner.strip_prefix("```") {
        inner = stripped.split_once('\n').map_or("", |(_, rest)| rest);
        inner = inner.trim_end().strip_suffix("```").unwrap_or(inner).trim();
    }
    let next = close + PAYLOAD_CLOSE.len();
    if inner.is_empty() {
        return Ok((Value::Object(Map::new()), next));
    }
    match serde_json::from_str::<Value>(inner) {
        Ok(v) => check_object(v).map(|v| (v, next)).map_err(|m| (m, next)),
        Err(e) => Err((format!("<payload> is not valid JSON ({e})"), next)),
    }
}

fn check_object(v: Value) -> Result<Value, String> {
    if v.is_object() {
        Ok(v)
    } else {
        Err(format!("<payload> must be a JSON object, got {}", kind(&v)))
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn push_errors(errors: &mut Vec<String>, index: usize, errs: Vec<String>) {
    errors.extend(errs.into_iter().map(|e| format!("command #{index}: {e}")));
}

/// Where the current command's tags can be: up to the next `</command>` or `<command>`.
/// The close tag is only searched for before the next open tag, so that many unclosed commands
/// do not make every one of them scan to the end of the text.
fn region_end(text: &str, from: usize) -> usize {
    let open = find_from(text, from, COMMAND_OPEN).unwrap_or(text.len());
    find_bounded(text, from, open, COMMAND_CLOSE)
        .filter(|&c| c < open)
        .unwrap_or(open)
}

fn find_from(text: &str, from: usize, needle: &str) -> Option<usize> {
    text.get(from..)?.find(needle).map(|i| from + i)
}

/// Finds `needle` starting in `[from, to)` (it may end after `to` only if it starts before).
fn find_bounded(text: &str, from: usize, to: usize, needle: &str) -> Option<usize> {
    let mut to = (to + needle.len()).min(text.len());
    // A match ends at a char boundary, so flooring `to` to one loses nothing (and keeps `get` Some).
    while !text.is_char_boundary(to) {
        to -= 1;
    }
    if from >= to {
        return None;
    }
    text.get(from..to)?.find(needle).map(|i| from + i)
}

fn skip_ws(text: &str, from: usize) -> usize {
    let rest = &text[from..];
    from + (rest.len() - rest.trim_start().len())
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}
