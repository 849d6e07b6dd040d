//! Claude Code's own work, recorded: its hooks (seed 001 §14.2 "session sync").
//!
//! `agent enable` puts hook entries into the project's `.claude/settings.local.json`
//! ([`settings`]): each runs `elfiee hook --elf DOC --editor AGENT`, which reads Claude Code's
//! JSON on stdin and hands it to the document's owner (the `elfiee mcp-server` Claude Code
//! started, or `elfiee serve`) through the owner socket ([`SERVICE`]); with no owner to ask, the
//! hook opens the document itself and records alone ([`Recorder`] one-shot).
//!
//! What is recorded, as `agent.session` entries of a session named by Claude Code's
//! `session_id` (`"source": "claude-code"`):
//! - the user's prompts (`UserPromptSubmit`, by the agent block's owner) and the title from
//!   the first; the model's text, tool calls and tool results from the transcript, read
//!   incrementally ([`transcript`]), large bodies in the content store;
//! - each call of a tool that can change files (`Write`, `Edit`, `MultiEdit`,
//!   `NotebookEdit`, `Bash`, MCP tools that write) as a **step**: the issue-26 checkpoint
//!   around it (files created, modified, deleted, their bytes kept), the changes entered
//!   into the directory block as the agent's events (`directory.sync`; new files linked from
//!   the agent, `implement`), and what the agent had no grant for (`outside_grants`);
//! - before a file tool writes, its `PreToolUse` hook asks the grants ([`govern`]): a refusal
//!   denies the call with a reason naming the missing grant and the command that gives it.
//!
//! Never in the way: a document that is gone, an owner that does not answer, a binary that
//! moved — the hook lets Claude Code go on (one non-blocking message per session); only a
//! grant denial blocks a call.

pub mod govern;
mod lookup;
mod recorder;
pub mod settings;
pub mod transcript;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use elfiee_engine::remote::{call_service, CallError};
use elfiee_engine::FileHandle;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use recorder::Recorder;

/// The owner-socket service the hooks call.
pub const SERVICE: &str = "claude-code-hooks";

/// How long a hook waits for the owner's answer before it lets Claude Code go on.
pub const OWNER_TIMEOUT: Duration = Duration::from_secs(3);

/// The JSON object Claude Code gives a hook on stdin (the fields elfiee reads; others are
/// ignored).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HookInput {
    pub session_id: String,
    #[serde(default)]
    pub hook_event_name: String,
    #[serde(default)]
    pub transcript_path: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_input: Option<Value>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    #[serde(default)]
    pub prompt: Option<String>,
    /// A sub-agent's id (its hooks and `SubagentStop`).
    #[serde(default)]
    pub agent_id: Option<String>,
    /// `SubagentStop`: the sub-agent's own transcript.
    #[serde(default)]
    pub agent_transcript_path: Option<String>,
}

impl HookInput {
    /// Reads a hook payload; says what is wrong with one that is not.
    pub fn parse(bytes: &[u8]) -> Result<HookInput, String> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("the hook's input is not JSON ({e})"))?;
        let input: HookInput = serde_json::from_value(v)
            .map_err(|e| format!("the hook's input is not a Claude Code hook payload ({e})"))?;
        if input.session_id.is_empty() {
            return Err("the hook's input has no session_id".into());
        }
        Ok(input)
    }

    /// Whether this call needs the document at all (a tool the hook matcher let through that
    /// cannot change files needs nothing).
    pub fn wanted(&self) -> bool {
        match self.hook_event_name.as_str() {
            "PreToolUse" | "PostToolUse" | "PostToolUseFailure" => {
                self.tool_name.as_deref().is_some_and(govern::records_steps)
            }
            _ => true,
        }
    }
}

/// What the recorder answers a hook.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookReply {
    /// `PreToolUse`: the call is denied, for this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<String>,
    /// Something the user should know (shown once per session, never blocking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn: Option<String>,
}

impl HookReply {
    pub fn deny(reason: String) -> HookReply {
        HookReply {
            deny: Some(reason),
            warn: None,
        }
    }

    pub fn warn(msg: String) -> HookReply {
        HookReply {
            deny: None,
            warn: Some(msg),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Request {
    editor: String,
    input: HookInput,
}

/// Offers the hook service on `file`'s owner socket (a long-lived process: the MCP server,
/// `serve`), with one [`Recorder`] for every hook that reaches it.
pub fn provide(file: &FileHandle) {
    let recorder = Arc::new(Recorder::new(file));
    file.provide(
        SERVICE,
        Arc::new(move |body| {
            let recorder = recorder.clone();
            Box::pin(async move {
                let req: Request = serde_json::from_slice(&body)
                    .map_err(|e| format!("a bad hook request ({e})"))?;
                let reply = recorder
                    .handle(&req.editor, &req.input)
                    .await
                    .map_err(|e| e.to_string())?;
                serde_json::to_vec(&reply).map_err(|e| e.to_string())
            })
        }),
    );
}

/// Asks the owner of the document at `elf` to record `input` (blocking, at most
/// [`OWNER_TIMEOUT`]).
pub fn ask_owner(elf: &Path, editor: &str, input: &HookInput) -> Result<HookReply, CallError> {
    let body = serde_json::to_vec(&Request {
        editor: editor.to_owned(),
        input: input.clone(),
    })
    .map_err(|e| CallError::Failed(e.to_string()))?;
    let reply = call_service(elf, SERVICE, body, OWNER_TIMEOUT)?;
    serde_json::from_slice(&reply).map_err(|e| CallError::Failed(e.to_string()))
}

/// What the hook process prints and exits with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookExit {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

/// Turns a reply into the hook's output: a denial as Claude Code's `PreToolUse` decision on
/// stdout (exit 0); a warning on stderr with exit 1 (shown, never blocking) the first time in
/// a session, silence after.
pub fn exit_for(input: &HookInput, reply: &HookReply) -> HookExit {
    if let (Some(reason), "PreToolUse") = (&reply.deny, input.hook_event_name.as_str()) {
        return HookExit {
            stdout: json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }})
            .to_string(),
            stderr: String::new(),
            code: 0,
        };
    }
    match &reply.warn {
        Some(msg) if first_warning(&input.session_id) => HookExit {
            stdout: String::new(),
            stderr: msg.clone(),
            code: 1,
        },
        _ => HookExit {
            stdout: String::new(),
            stderr: String::new(),
            code: 0,
        },
    }
}

/// True the first time it is asked for `session` on this machine (a marker file in the
/// temporary folder).
fn first_warning(session: &str) -> bool {
    let safe: String = session
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(80)
        .collect();
    let marker = std::env::temp_dir().join(format!("elfiee-hook-{safe}.warned"));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(marker)
        .is_ok()
}

/// Whether `agent_block_id`'s enable installed the hooks (then Claude Code's MCP calls are
/// steps of its own sessions, recorded by the hooks, not of the MCP server's session).
pub fn installed(file: &FileHandle, agent_block_id: &str) -> bool {
    file.with_state(|s| {
        s.block(agent_block_id)
            .and_then(|b| b.metadata.custom.get("integration"))
            .and_then(|i| i.get("artifacts"))
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter()
                    .any(|x| x.get("kind").and_then(Value::as_str) == Some("hooks"))
            })
    })
}

/// Claude Code sessions that just called one of the `elfiee` server's step tools
/// (`elfiee_steps`, `elfiee_undo`, `elfiee_redo`), by agent block: the recorder notes the
/// call's `PreToolUse`, so the MCP server in the same process acts on the caller's session.
static CALLING: std::sync::Mutex<Vec<(String, String, std::time::Instant)>> =
    std::sync::Mutex::new(Vec::new());

pub(crate) fn note_step_tool_call(agent_block_id: &str, session_id: &str) {
    let mut calling = CALLING.lock().unwrap_or_else(|p| p.into_inner());
    calling.retain(|(a, _, at)| a != agent_block_id && at.elapsed() < Duration::from_secs(60));
    calling.push((
        agent_block_id.to_owned(),
        session_id.to_owned(),
        std::time::Instant::now(),
    ));
}

/// The Claude Code session whose steps the MCP server's `elfiee_steps` / `elfiee_undo` /
/// `elfiee_redo` act on for `agent_block_id`: the session that started this MCP server
/// (`CLAUDE_CODE_SESSION_ID`), else the session whose hook announced the call (when this
/// process records the hooks), else the session that recorded last.
pub fn claude_session(file: &FileHandle, agent_block_id: &str) -> Option<String> {
    // Claude Code names its session in the environment of the MCP server it starts.
    if let Some(id) = std::env::var("CLAUDE_CODE_SESSION_ID")
        .ok()
        .filter(|s| !s.is_empty())
    {
        return Some(id);
    }
    let noted = CALLING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .rev()
        .find(|(a, _, at)| a == agent_block_id && at.elapsed() < Duration::from_secs(60))
        .map(|(_, s, _)| s.clone());
    noted.or_else(|| {
        file.events(1).ok()?.iter().rev().find_map(|e| {
            (e.entity == agent_block_id
                && e.cap_id() == "agent.session"
                && e.value.get("source").and_then(Value::as_str) == Some("claude-code"))
            .then(|| e.value.get("session_id")?.as_str().map(str::to_owned))
            .flatten()
        })
    })
}

/// The ids of `agent_block_id`'s sessions that Claude Code's hooks recorded.
pub fn claude_sessions(
    file: &FileHandle,
    agent_block_id: &str,
) -> std::collections::BTreeSet<String> {
    file.events(1)
        .unwrap_or_default()
        .iter()
        .filter(|e| e.entity == agent_block_id && e.cap_id() == "agent.session")
        .filter(|e| e.value.get("source").and_then(Value::as_str) == Some("claude-code"))
        .filter_map(|e| e.value.get("session_id")?.as_str().map(str::to_owned))
        .collect()
}
