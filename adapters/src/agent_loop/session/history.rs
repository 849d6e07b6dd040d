//! The conversation as it is sent: tool calls kept paired with their results, the window of
//! the newest messages, compaction notes, and the context policy's pruning of tool outputs.

use std::collections::HashMap;

use serde_json::Value;

use crate::llm::{ContentBlock, Message, Role};

/// The first `lines` lines of `s`.
pub(super) fn first_lines(s: &str, lines: usize) -> String {
    s.lines().take(lines).collect::<Vec<_>>().join("\n")
}

/// Messages kept verbatim after a compaction: the last assistant message and the tool results
/// that answer it, so tool calls stay paired.
pub(super) const KEPT_AFTER_COMPACTION: usize = 2;

pub(super) fn summary_message(summary: &str) -> Message {
    Message::user_text(format!(
        "Summary of the conversation so far (older messages were compacted):\n\n{summary}"
    ))
}

pub(super) fn truncation_message() -> Message {
    Message::user_text("[Older messages were dropped to stay within the context window; ask the user if you need them.]")
}

/// `note` followed by the last `kept` messages.
pub(super) fn compacted(history: Vec<Message>, note: Message, kept: usize) -> Vec<Message> {
    let start = history.len().saturating_sub(kept);
    let mut out = vec![note];
    out.extend(history.into_iter().skip(start));
    out
}

/// The block reads (`elfiee_block_get` results with the block whole) in `messages`:
/// `(message index, content index, block id, seq of the version read)`, oldest first.
pub(super) fn block_reads(messages: &[Message]) -> Vec<(usize, usize, String, u64)> {
    let mut gets: HashMap<&str, ()> = HashMap::new();
    for m in messages {
        for b in &m.content {
            if let ContentBlock::ToolUse { id, name, .. } = b {
                if name == "elfiee_block_get" {
                    gets.insert(id.as_str(), ());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (mi, m) in messages.iter().enumerate() {
        for (bi, b) in m.content.iter().enumerate() {
            let ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error: false,
            } = b
            else {
                continue;
            };
            if !gets.contains_key(tool_use_id.as_str()) {
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(content) else {
                continue;
            };
            if let (Some(id), Some(seq), true) = (
                v.get("block_id").and_then(Value::as_str),
                v.get("seq").and_then(Value::as_u64),
                v.get("contents").is_some(),
            ) {
                out.push((mi, bi, id.to_owned(), seq));
            }
        }
    }
    out
}

/// Fits the tool outputs into `budget` tokens, by the context policy (docs/AGENT_LOOP.md):
/// first a block read again later loses its older reads (the newest version stays), then
/// outputs older than the newest `budget` tokens are replaced with a marker.
pub(super) fn prune_tool_outputs(mut messages: Vec<Message>, budget: usize) -> Vec<Message> {
    let tokens_of = |messages: &[Message]| -> usize {
        messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|b| match b {
                ContentBlock::ToolResult { content, .. } => {
                    elfiee_projections::context::count_tokens(content)
                }
                _ => 0,
            })
            .sum()
    };
    if tokens_of(&messages) <= budget {
        return messages;
    }
    let reads = block_reads(&messages);
    let mut newest: HashMap<&str, usize> = HashMap::new();
    for (i, (_, _, id, _)) in reads.iter().enumerate() {
        newest.insert(id.as_str(), i);
    }
    for (i, (mi, bi, id, seq)) in reads.iter().enumerate() {
        if newest[id.as_str()] != i {
            if let ContentBlock::ToolResult { content, .. } = &mut messages[*mi].content[*bi] {
                *content = format!(
                    "[an older version of block {id} (seq {seq}); it was read again later in this conversation]"
                );
            }
        }
    }
    let mut seen = 0usize;
    for m in messages.iter_mut().rev() {
        for block in m.content.iter_mut().rev() {
            if let ContentBlock::ToolResult { content, .. } = block {
                let tokens = elfiee_projections::context::count_tokens(content);
                if seen + tokens > budget {
                    *content = format!("[older tool output pruned: {tokens} tokens; call the tool again if you need it]");
                } else {
                    seen += tokens;
                }
            }
        }
    }
    messages
}

pub(super) fn is_plain_user(m: &Message) -> bool {
    m.role == Role::User
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

pub(super) fn tool_use_ids(m: &Message) -> Vec<String> {
    if m.role != Role::Assistant {
        return Vec::new();
    }
    m.content
        .iter()
        .filter_map(|b| {
            if let ContentBlock::ToolUse { id, .. } = b {
                Some(id.clone())
            } else {
                None
            }
        })
        .collect()
}

/// Appends `m`, first answering tool calls left without results (a session closed mid-step),
/// so tool uses and results stay paired. Deterministic, so every reopen rebuilds the same.
pub(super) fn push_paired(history: &mut Vec<Message>, m: Message) {
    if let Some(last) = history.last() {
        let ids = tool_use_ids(last);
        let answered = m.role == Role::User
            && m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }));
        if !ids.is_empty() && !answered {
            let results = ids
                .into_iter()
                .map(|id| ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: "[error] the session stopped before this call ran".into(),
                    is_error: true,
                })
                .collect();
            history.push(Message::new(Role::User, results));
        }
    }
    history.push(m);
}

/// The newest `max` messages, cut at a clean boundary: the window starts with a plain user
/// message (or a truncation note before an assistant step), never with orphaned tool results.
pub(super) fn window(history: &[Message], max: usize) -> Vec<Message> {
    let start = history.len().saturating_sub(max);
    if start == 0 {
        return history.to_vec();
    }
    if let Some(i) = (start..history.len()).find(|&i| is_plain_user(&history[i])) {
        return history[i..].to_vec();
    }
    let mut out = vec![truncation_message()];
    if let Some(i) = (start..history.len()).find(|&i| history[i].role == Role::Assistant) {
        out.extend_from_slice(&history[i..]);
    }
    out
}
