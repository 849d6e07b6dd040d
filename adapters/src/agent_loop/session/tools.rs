//! The tools of a session and how a call runs: the catalogue plus `shell`, `task` and
//! `self_info`, executed as the agent's editor; results in seed 003's format.

use elfiee_engine::EngineError;
use elfiee_model::Command;
use serde_json::{json, Value};

use super::super::permissions::{Autonomy, Ruleset, READ_ONLY_TOOLS};
use super::super::profiles::Profile;
use super::super::types::*;
use super::history::*;
use super::state::*;
use crate::llm::ToolDef;

/// The result of one tool call before it is turned into text for the model.
pub(super) enum ToolOutcome {
    Ok(String),
    /// The call ran (or was refused) and did not succeed; `partial` is output it produced.
    Failed {
        error: String,
        partial: Option<String>,
    },
    /// Something broke underneath (I/O, the engine); not the call's fault.
    Error(String),
}

impl ToolOutcome {
    pub(super) fn failed(error: impl Into<String>) -> ToolOutcome {
        ToolOutcome::Failed {
            error: error.into(),
            partial: None,
        }
    }

    /// Seed 003's format: the output as is; `[failed] …` (+ `[partial output]`); `[error] …`.
    #[cfg(test)]
    pub(super) fn render(&self) -> (String, bool) {
        self.render_in(&Markers::EN)
    }

    pub(super) fn render_in(&self, m: &Markers) -> (String, bool) {
        match self {
            ToolOutcome::Ok(s) => (s.clone(), false),
            ToolOutcome::Failed {
                error,
                partial: None,
            } => (format!("{} {error}", m.failed), true),
            ToolOutcome::Failed {
                error,
                partial: Some(p),
            } => (format!("{} {error}\n{}\n{p}", m.failed, m.partial), true),
            ToolOutcome::Error(e) => (format!("{} {e}", m.error), true),
        }
    }
}

/// The result markers of seed 003 in the reply language.
pub struct Markers {
    pub failed: &'static str,
    pub partial: &'static str,
    pub error: &'static str,
}

impl Markers {
    pub const EN: Markers = Markers {
        failed: "[failed]",
        partial: "[partial output]",
        error: "[error]",
    };
    pub const ZH: Markers = Markers {
        failed: "[失败]",
        partial: "[部分输出]",
        error: "[错误]",
    };

    /// Chinese for `zh…`, "Chinese" or "中文"; English otherwise.
    pub fn for_language(language: Option<&str>) -> &'static Markers {
        match language.map(str::trim) {
            Some(l)
                if l.to_ascii_lowercase().starts_with("zh")
                    || l.eq_ignore_ascii_case("chinese")
                    || l.starts_with("中文") =>
            {
                &Markers::ZH
            }
            _ => &Markers::EN,
        }
    }
}

/// The first non-blank line of `s`, trimmed.
fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// The one-line preview of a successful call (seed 003's `Success(summary)`, the first line
/// of its output): for `shell` (and `elfiee_terminal_run`) the first line the command printed
/// (stdout, else stderr; else its exit code); for a JSON result, what it says beyond the
/// call's own arguments (`key: value`, each argument it repeats left out); else its first
/// line.
pub(super) fn success_preview(tool: &str, input: &Value, output: &str) -> String {
    let Ok(Value::Object(out)) = serde_json::from_str::<Value>(output) else {
        return first_line(output);
    };
    if matches!(tool, "shell" | "elfiee_terminal_run") {
        let printed = |k: &str| {
            out.get(k)
                .and_then(Value::as_str)
                .map(first_line)
                .filter(|l| !l.is_empty())
        };
        return printed("stdout")
            .or_else(|| printed("stderr"))
            .unwrap_or_else(|| match out.get("exit_code").and_then(Value::as_i64) {
                Some(c) => format!("no output (exit code {c})"),
                None => "no output".into(),
            });
    }
    let parts: Vec<String> = out
        .iter()
        .filter(|(k, v)| input.get(k.as_str()) != Some(*v))
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}: {}", first_line(s)),
            other => format!("{k}: {other}"),
        })
        .collect();
    match parts.is_empty() {
        true => "done".into(),
        false => parts.join(", "),
    }
}

impl AgentSession {
    /// The native tool definitions: the MCP catalogue + `shell`, `task`, `self_info`; only the
    /// reading ones when read-only; no `task` inside a sub-agent.
    pub fn tool_defs(autonomy: Autonomy, sub_agent: bool) -> Vec<ToolDef> {
        // Undo and redo of the loop's steps are the user's (`elfiee agent undo`), not the
        // agent's: it would be undoing the step that calls them.
        let mut tools: Vec<ToolDef> = crate::mcp::tools::catalogue()
            .into_iter()
            .filter(|t| !matches!(t.name, "elfiee_undo" | "elfiee_redo"))
            .map(|t| ToolDef {
                name: t.name.into(),
                description: t.description.into(),
                input_schema: t.input_schema,
            })
            .collect();
        tools.push(ToolDef {
            name: "shell".into(),
            description: "Run a shell command in the agent's terminal (timeout 120 s); returns stdout, stderr and the exit code.".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"], "additionalProperties": false}),
        });
        tools.push(ToolDef {
            name: "task".into(),
            description: "Hand a task to a sub-agent in a child session: `explore` (default) only reads and answers a question; `general` works on a multi-step task with your permission rules. Returns its final answer and its session_id; pass session_id to continue that child session.".into(),
            input_schema: json!({"type": "object", "properties": {
                "prompt": {"type": "string"},
                "agent": {"type": "string", "enum": ["explore", "general"]},
                "session_id": {"type": "string", "description": "A child session of yours to continue"}
            }, "required": ["prompt"], "additionalProperties": false}),
        });
        tools.push(ToolDef {
            name: "self_info".into(),
            description: "Your own configuration, grants, permission rules and limits.".into(),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        });
        tools.retain(|t| {
            (autonomy != Autonomy::ReadOnly || READ_ONLY_TOOLS.contains(&t.name.as_str()))
                && !(sub_agent && t.name == "task")
        });
        tools
    }

    pub(super) fn tools(&self) -> Vec<ToolDef> {
        Self::tool_defs(self.opts.autonomy, self.opts.parent_session.is_some())
    }

    /// The thing a rule's `pattern` is matched against for a call.
    pub fn subject(name: &str, input: &Value) -> String {
        let field = match name {
            "shell" | "elfiee_terminal_run" => "command",
            "elfiee_block_link" | "elfiee_block_unlink" => "from",
            "elfiee_directory_import" | "elfiee_directory_add" | "elfiee_directory_remove" => {
                "path"
            }
            "elfiee_directory_move" => "from",
            "task" => "prompt",
            _ => "block_id",
        };
        input
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    pub(super) fn self_info(&self) -> Value {
        let mut rules = self.opts.rules.clone();
        rules.rules.extend(self.session_rules.rules.iter().cloned());
        self.file.with_state(|s| {
            let block = s.block(&self.agent_block_id);
            json!({
                "agent_block_id": self.agent_block_id,
                "name": block.map(|b| b.name.clone()),
                "editor_id": self.agent_editor,
                "session_id": self.session_id,
                "parent_session": self.opts.parent_session,
                "profile": self.opts.profile,
                "model": self.opts.model,
                "config": block.and_then(|b| b.contents.get("config")).cloned(),
                "grants": s.grants_of(&self.agent_editor).collect::<Vec<_>>(),
                "autonomy": self.opts.autonomy,
                "rules": rules.rules,
                "limits": {
                    "max_iterations": self.opts.max_iterations,
                    "max_history": self.opts.max_history,
                    "context_limit": self.opts.context_limit,
                    "compaction_buffer": self.opts.compaction_buffer,
                    "doom_loop_threshold": self.opts.doom_loop_threshold,
                    "shell_timeout_secs": self.opts.shell_timeout_secs,
                },
            })
        })
    }

    /// A re-read of a block this conversation already shows at its current version: said
    /// in a line instead of the whole block again (the context policy).
    pub(super) fn unchanged_read(&self, input: &Value) -> Option<String> {
        let asked = input.get("block_id").and_then(Value::as_str)?;
        let (id, seq) = self.file.with_state(|s| {
            let id = if s.blocks.contains_key(asked) {
                asked.to_owned()
            } else {
                let mut named = s.blocks.values().filter(|b| b.name == asked);
                let one = named.next()?.block_id.clone();
                named.next().is_none().then_some(one)?
            };
            let seq = s.block_seq.get(&id).copied()?;
            Some((id, seq))
        })?;
        // Only what the model is sent counts: the window, after pruning.
        let sent = prune_tool_outputs(
            window(&self.history, self.opts.max_history),
            self.opts.prune_tool_tokens,
        );
        let shown = block_reads(&sent)
            .into_iter()
            .any(|(_, _, b, at)| b == id && at == seq);
        shown.then(|| {
            json!({
                "block_id": id,
                "unchanged_since_seq": seq,
                "note": format!("unchanged since seq {seq}: your earlier elfiee_block_get result in this conversation is current"),
            })
            .to_string()
        })
    }

    pub(super) async fn execute(&self, name: &str, input: &Value) -> ToolOutcome {
        match name {
            "self_info" => ToolOutcome::Ok(self.self_info().to_string()),
            "elfiee_block_get" => match self.unchanged_read(input) {
                Some(note) => ToolOutcome::Ok(note),
                None => self.call_tool(name, input).await,
            },
            "shell" => {
                let Some(command) = input.get("command").and_then(Value::as_str) else {
                    return ToolOutcome::failed("shell needs {\"command\": string}");
                };
                let terminal = match self.agent_terminal().await {
                    Ok(t) => t,
                    Err(EngineError::Rejected(c)) => return ToolOutcome::failed(c.to_string()),
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                let exported = match self.export_for_shell(&terminal).await {
                    Ok(x) => x,
                    Err(EngineError::Rejected(c)) => return ToolOutcome::failed(c.to_string()),
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                let mut out = match crate::service::run_terminal(
                    &self.file,
                    &self.agent_editor,
                    &terminal,
                    command,
                    Some(self.opts.shell_timeout_secs),
                )
                .await
                {
                    Ok(o) => o,
                    Err(EngineError::Rejected(c)) => return ToolOutcome::failed(c.to_string()),
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                if let Some(err) = out.get("error").and_then(Value::as_str) {
                    return ToolOutcome::Error(err.to_owned());
                }
                if let Some(x) = exported {
                    out["export"] = json!({"written": x["written"], "removed": x["removed"], "refused": x["refused"]});
                    if let Some(left) = x.get("pending_of_others") {
                        out["export"]["pending_of_others"] = left.clone();
                        out["export"]["note"] = json!("pending_of_others: changes other editors made in the document and did not export; not written, so the command does not see them");
                    }
                }
                let text = |k: &str| {
                    out.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let (stdout, stderr) = (text("stdout"), text("stderr"));
                let code = out.get("exit_code").and_then(Value::as_i64);
                let timed_out = out
                    .get("timed_out")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if code == Some(0) && !timed_out {
                    return ToolOutcome::Ok(out.to_string());
                }
                let error = if timed_out {
                    format!("timed out after {} s", self.opts.shell_timeout_secs)
                } else {
                    match code {
                        Some(c) => format!(
                            "exit code {c}{}",
                            if stderr.trim().is_empty() {
                                String::new()
                            } else {
                                format!(": {}", first_lines(&stderr, 3))
                            }
                        ),
                        None => "killed by a signal".into(),
                    }
                };
                let partial = [stdout, stderr]
                    .into_iter()
                    .filter(|s| !s.trim().is_empty())
                    .collect::<Vec<_>>()
                    .join("\n");
                ToolOutcome::Failed {
                    error,
                    partial: (!partial.is_empty()).then_some(partial),
                }
            }
            "task" => {
                let Some(prompt) = input.get("prompt").and_then(Value::as_str) else {
                    return ToolOutcome::failed("task needs {\"prompt\": string}");
                };
                // A sub-agent in a child session that shares our cancel flag: `explore` reads
                // only; `general` keeps our rules (never more than we may: a read-only parent
                // gets explore only).
                let kind = input
                    .get("agent")
                    .and_then(Value::as_str)
                    .unwrap_or("explore");
                if !matches!(kind, "explore" | "general") {
                    return ToolOutcome::failed(format!(
                        "unknown sub-agent '{kind}'; use explore or general"
                    ));
                }
                if kind == "general" && self.opts.autonomy == Autonomy::ReadOnly {
                    return ToolOutcome::failed(
                        "a read-only session can only start explore sub-agents",
                    );
                }
                let resume = input.get("session_id").and_then(Value::as_str);
                if let Some(sid) = resume {
                    if !self.is_child_session(sid) {
                        return ToolOutcome::failed(format!(
                            "'{sid}' is not a child session of this session"
                        ));
                    }
                }
                let mut opts = self.opts.clone();
                if kind == "explore" {
                    opts.rules = Ruleset::default();
                }
                opts.instructions = None;
                opts = opts.with_profile(&Profile::builtin(kind).expect("built-in profile"));
                opts.parent_session = Some(self.session_id.clone());
                let mut child = match AgentSession::open(
                    &self.file,
                    &self.user_editor,
                    &self.agent_block_id,
                    resume,
                    opts,
                ) {
                    Ok(c) => c,
                    Err(e) => return ToolOutcome::Error(e.to_string()),
                };
                let mut refuse = DenyAll;
                let child_id = child.session_id().to_owned();
                match Box::pin(child.run_turn_with(prompt, &mut refuse, &mut |_| {})).await {
                    Ok(out) if out.stop_reason == StopReason::EndTurn => {
                        ToolOutcome::Ok(format!("{}\n[session_id: {child_id}]", out.text))
                    }
                    Ok(out) => ToolOutcome::Failed {
                        error: format!("the sub-agent {}", out.stop_reason),
                        partial: (!out.text.is_empty()).then_some(out.text),
                    },
                    Err(e) => ToolOutcome::Error(e.to_string()),
                }
            }
            _ => self.call_tool(name, input).await,
        }
    }

    /// A catalogue tool, run as the agent in this session.
    pub(super) async fn call_tool(&self, name: &str, input: &Value) -> ToolOutcome {
        match crate::mcp::tools::call_in_session(
            &self.file,
            &self.agent_editor,
            Some(&self.session_id),
            name,
            input.clone(),
        )
        .await
        {
            Ok(v) => ToolOutcome::Ok(v.to_string()),
            // "failed" is the MCP layer's kind for engine errors that are not rejections.
            Err(e) if e.kind == "failed" => ToolOutcome::Error(e.message),
            Err(e) => ToolOutcome::failed(e.message),
        }
    }

    /// Whether `sid` is a session whose events name this session as their parent.
    pub(super) fn is_child_session(&self, sid: &str) -> bool {
        self.file.events(1).is_ok_and(|events| {
            events.iter().any(|e| {
                e.entity == self.agent_block_id
                    && e.value.get("session_id").and_then(Value::as_str) == Some(sid)
                    && e.value.get("parent_session").and_then(Value::as_str)
                        == Some(self.session_id.as_str())
            })
        })
    }

    /// Where the agent's shell runs, so its commands see the project it works on (seed 002
    /// §3): a terminal the agent references; else its own terminal linked to the directory it
    /// references (or its target project); else its own terminal in the `.elf`. Its own
    /// terminal is created by the user on first use and granted to the agent.
    pub(super) async fn agent_terminal(&self) -> Result<String, EngineError> {
        let name = format!("shell: {}", self.agent_editor);
        let (referenced, directory, own) = self.file.with_state(|s| {
            let id_of = |ty| {
                crate::service::agent_referenced(s, &self.agent_block_id, ty)
                    .map(|b| b.block_id.clone())
            };
            let (terminal, directory) = (id_of("terminal"), id_of("directory"));
            let own = s
                .blocks
                .values()
                .find(|b| b.block_type == "terminal" && b.name == name)
                .map(|b| {
                    let linked = b
                        .contents
                        .get("linked_directory_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    (b.block_id.clone(), linked)
                });
            (terminal, directory, own)
        });
        if let Some(t) = referenced {
            return Ok(t);
        }
        if let Some((id, linked)) = own {
            if linked == directory {
                return Ok(id);
            }
        }
        let mut payload = json!({ "name": name });
        if let Some(d) = &directory {
            payload["linked_directory_id"] = json!(d);
        }
        let ev = self
            .file
            .submit(Command::new(
                &self.user_editor,
                "terminal.create",
                None,
                payload,
            ))
            .await?;
        let id = ev[0].entity.clone();
        self.file
            .submit(Command::new(
                &self.user_editor,
                "core.grant",
                Some(&id),
                json!({"editor_id": self.agent_editor, "cap_id": "terminal.execute"}),
            ))
            .await?;
        Ok(id)
    }

    /// Before the agent's shell runs in a terminal linked to a directory with changes not
    /// exported yet: export this session's by the terminal's rule. An agent cannot answer the
    /// "export & run / run / cancel" question, so `Ask` exports (its commands see what it
    /// wrote); `Never` runs as is. Only the changes this agent or the session's user made
    /// last are written (the export runs as that user, who asked for the work): what other
    /// editors left pending — another agent's approved proposal, another person's edits —
    /// stays pending for them, named in the result (`pending_of_others`). Conflicts are left
    /// on disk and named in the tool result.
    pub(super) async fn export_for_shell(
        &self,
        terminal: &str,
    ) -> Result<Option<Value>, EngineError> {
        use crate::service::{export_rule, pending_export, ExportBeforeRun};
        let Some((dir, _)) = pending_export(&self.file, terminal) else {
            return Ok(None);
        };
        if export_rule(&self.file, terminal) == ExportBeforeRun::Never {
            return Ok(None);
        }
        let (own, others): (Vec<_>, Vec<_>) = crate::service::pending_changes_by(&self.file, &dir)?
            .into_iter()
            .partition(|(_, by)| *by == self.agent_editor || *by == self.user_editor);
        let own: Vec<String> = own.into_iter().map(|(p, _)| p).collect();
        let others: Vec<String> = others.into_iter().map(|(p, _)| p).collect();
        let mut out = match own.is_empty() {
            true => json!({"written": [], "removed": [], "refused": []}),
            false => {
                crate::service::export_directory_paths(&self.file, &self.user_editor, &dir, &own)
                    .await?
            }
        };
        if !others.is_empty() {
            out["pending_of_others"] = json!(others);
        }
        Ok(Some(out))
    }
}
