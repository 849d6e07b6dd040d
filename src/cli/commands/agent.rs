//! `elfiee agent …`, `elfiee undo` / `redo`: agents, their loop sessions, proposals, steps and
//! undo, and how the CLI shows them.

use std::path::Path;

use crate::capabilities::builtin::agent_editor;
use elfiee_adapters::service;
use serde_json::{json, Value};

use crate::cli::output::Out;
use crate::cli::session::Session;
use crate::cli::{AgentCmd, CliError};

pub(super) async fn agent(s: &Session, cmd: &AgentCmd, out: &Out) -> Result<(), CliError> {
    let show = |r: &service::AgentResult| {
        let v = serde_json::to_value(r).unwrap_or_default();
        out.print(&v, || {
            let mut t = format!(
                "agent {} ({}) is {}: {}",
                r.agent_block_id, r.editor_id, r.status, r.message
            );
            for w in &r.warnings {
                t.push_str(&format!("\nwarning: {w}"));
            }
            t
        });
    };
    match cmd {
        AgentCmd::Create { target, name } => {
            // A target that names no block is the handler's to refuse, in the seed's words
            // ("Target project block not found: …", seed 001 §12.2).
            let target = target
                .as_deref()
                .map(|t| s.block_id(t).unwrap_or_else(|_| t.to_owned()));
            let r = service::create_agent(&s.file, &s.editor, target.as_deref(), name.as_deref())
                .await?;
            show(&r);
        }
        AgentCmd::Enable { id } | AgentCmd::Disable { id } => {
            let action = if matches!(cmd, AgentCmd::Enable { .. }) {
                "enable"
            } else {
                "disable"
            };
            // Seed 001 §12.1: "Block required for agent.{action}".
            let id = s.block_id(id).map_err(|_| {
                CliError::failed(
                    "not_found",
                    format!(
                        "Block required for agent.{action}: no block '{id}'; list agents with `elfiee agent list`"
                    ),
                )
            })?;
            let r = service::set_agent_enabled(
                &s.file,
                &s.editor,
                &id,
                matches!(cmd, AgentCmd::Enable { .. }),
            )
            .await?;
            show(&r);
        }
        AgentCmd::Configure {
            id,
            provider,
            model,
            api_key_env,
            system_prompt,
            max_context_tokens,
            base_url,
            temperature,
            language,
            rules,
            knowledge,
            clear_knowledge,
        } => {
            let id = s.block_id(id)?;
            let mut cfg = serde_json::Map::new();
            if *clear_knowledge || !knowledge.is_empty() {
                cfg.insert("knowledge".into(), json!(knowledge));
            }
            if let Some(t) = temperature {
                cfg.insert("temperature".into(), json!(t));
            }
            if let Some(l) = language {
                cfg.insert("language".into(), json!(l));
            }
            if let Some(f) = rules {
                cfg.insert("rules".into(), json!(read_rules(f)?));
            }
            for (k, v) in [
                ("provider", provider),
                ("model", model),
                ("api_key_env", api_key_env),
                ("system_prompt", system_prompt),
                ("base_url", base_url),
            ] {
                if let Some(v) = v {
                    cfg.insert(k.into(), json!(v));
                }
            }
            if let Some(n) = max_context_tokens {
                cfg.insert("max_context_tokens".into(), json!(n));
            }
            if cfg.is_empty() {
                return Err(CliError::usage("nothing to configure: give at least one of --provider, --model, --api-key-env, --system-prompt, --max-context-tokens, --base-url, --temperature, --language, --rules, --knowledge, --clear-knowledge"));
            }
            let v = service::configure_agent(&s.file, &s.editor, &id, Value::Object(cfg)).await?;
            out.print(&v, || serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        AgentCmd::Invoke {
            id,
            prompt,
            context,
        } => {
            let id = s.block_id(id)?;
            let context: Vec<String> = context
                .iter()
                .map(|c| s.block_id(c))
                .collect::<Result<_, _>>()?;
            let json_out = out.json;
            let p = service::invoke_agent(&s.file, &s.editor, &id, prompt, &context, |d| {
                use std::io::Write;
                // The answer as it arrives: on stdout for people, on stderr with --json.
                if json_out {
                    eprint!("{d}");
                    let _ = std::io::stderr().flush();
                } else {
                    print!("{d}");
                    let _ = std::io::stdout().flush();
                }
            })
            .await?;
            if p["status"] == "failed" {
                return Err(CliError::failed(
                    "llm_failed",
                    format!(
                        "the model call failed: {}",
                        p["error"].as_str().unwrap_or("unknown error")
                    ),
                ));
            }
            out.print(&p, || {
                let mut t = format!(
                    "\n\nproposal {} ({}):",
                    p["proposal_id"].as_str().unwrap_or(""),
                    p["status"].as_str().unwrap_or("")
                );
                for (i, c) in p["proposed_commands"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    t.push_str(&format!(
                        "\n  {}. {} {} {}",
                        i + 1,
                        c["cap_id"].as_str().unwrap_or(""),
                        c["block_id"].as_str().unwrap_or("*"),
                        c["description"].as_str().unwrap_or("")
                    ));
                }
                for e in p["parse_errors"].as_array().into_iter().flatten() {
                    t.push_str(&format!("\n  parse error: {}", e.as_str().unwrap_or("")));
                }
                t.push_str(&format!(
                    "\napprove with `elfiee agent approve {}`",
                    p["proposal_id"].as_str().unwrap_or("")
                ));
                t
            });
        }
        AgentCmd::Chat { id, session, perms } => {
            use elfiee_adapters::agent_loop::{AgentSession, Confirm};
            use std::io::{BufRead, Write};
            let id = s.block_id(id)?;
            let opts = session_options(s, &id, perms)?;
            let mut chat = AgentSession::open(&s.file, &s.editor, &id, session.as_deref(), opts)?;
            eprintln!(
                "session {} — empty line or Ctrl-D to leave",
                chat.session_id()
            );
            let stdin = std::io::stdin();
            loop {
                eprint!("> ");
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                let mut confirm = |tool: &str, input: &Value| {
                    eprint!("Allow {tool} {input}? [y/N/a] ");
                    let _ = std::io::stderr().flush();
                    let mut answer = String::new();
                    let _ = std::io::stdin().lock().read_line(&mut answer);
                    match answer.trim() {
                        "y" | "Y" | "yes" => Confirm::Once,
                        "a" | "A" | "always" => Confirm::Always,
                        "" | "n" | "N" | "no" => Confirm::Reject,
                        other => Confirm::RejectWithFeedback(other.to_owned()),
                    }
                };
                // What happens, as it happens (seed 003's ToolStatus lines), on stderr.
                let mut steps = Vec::new();
                let mut show = |e: elfiee_adapters::agent_loop::LoopEvent| {
                    if let elfiee_adapters::agent_loop::LoopEvent::Step(v) = &e {
                        steps.extend(v.get("step").and_then(Value::as_u64));
                    }
                    if let Some(l) = chat_event_line(&e) {
                        eprintln!("{l}");
                    }
                };
                let out = chat
                    .run_turn_with(line.trim(), &mut confirm, &mut show)
                    .await?;
                println!("{}", out.text);
                if out.stop_reason != elfiee_adapters::agent_loop::StopReason::EndTurn {
                    eprintln!("[{}]", out.stop_reason);
                }
                // The turn's steps, as `agent steps` shows them (undo with `agent undo`).
                print_turn_steps(s, chat.session_id(), &steps);
            }
        }
        AgentCmd::Run {
            id,
            message,
            session,
            approve_all,
            deny_all: _,
            max_iterations,
            perms,
        } => {
            use elfiee_adapters::agent_loop::{AgentSession, Confirm};
            let id = s.block_id(id)?;
            let mut opts = session_options(s, &id, perms)?;
            if let Some(n) = max_iterations {
                opts.max_iterations = (*n).max(1);
            }
            let mut session =
                AgentSession::open(&s.file, &s.editor, &id, session.as_deref(), opts)?;
            let approve = *approve_all;
            let mut confirm = move |tool: &str, input: &Value| {
                eprintln!(
                    "{} {tool} {input}",
                    if approve {
                        "approved:"
                    } else {
                        "denied (pass --approve-all to allow):"
                    }
                );
                if approve {
                    Confirm::Once
                } else {
                    Confirm::Reject
                }
            };
            // What happens, as it happens, and the turn's steps, on stderr (as `agent chat`).
            let mut steps = Vec::new();
            let mut show = |e: elfiee_adapters::agent_loop::LoopEvent| {
                if let elfiee_adapters::agent_loop::LoopEvent::Step(v) = &e {
                    steps.extend(v.get("step").and_then(Value::as_u64));
                }
                if let Some(l) = chat_event_line(&e) {
                    eprintln!("{l}");
                }
            };
            let outcome = session
                .run_turn_with(message, &mut confirm, &mut show)
                .await?;
            print_turn_steps(s, session.session_id(), &steps);
            if let elfiee_adapters::agent_loop::StopReason::Error { message } = &outcome.stop_reason
            {
                return Err(CliError::failed(
                    "llm_failed",
                    format!(
                        "the model call failed: {message}; the session is {} (`--session {}` continues it)",
                        session.session_id(),
                        session.session_id()
                    ),
                ));
            }
            let v = json!({"session_id": session.session_id(), "stop_reason": outcome.stop_reason, "text": outcome.text, "tool_calls": outcome.tool_calls});
            out.print(&v, || {
                format!(
                    "{}\n[{} · {} tool call(s) · session {}]",
                    outcome.text,
                    outcome.stop_reason,
                    outcome.tool_calls,
                    session.session_id()
                )
            });
        }
        AgentCmd::Proposals { id } => {
            let id = s.block_id(id)?;
            let list = service::list_proposals(&s.file, Some(&id));
            out.print(&json!(list), || {
                list.iter()
                    .map(|p| {
                        let n = p["proposed_commands"].as_array().map(Vec::len).unwrap_or(0);
                        format!(
                            "{}  {:<9} {n} command(s)  {}",
                            p["proposal_id"].as_str().unwrap_or(""),
                            p["status"].as_str().unwrap_or(""),
                            p["prompt"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        AgentCmd::Approve { proposal_id } | AgentCmd::Reject { proposal_id, .. } => {
            let approved = matches!(cmd, AgentCmd::Approve { .. });
            let feedback = match cmd {
                AgentCmd::Reject { feedback, .. } => feedback.as_deref(),
                _ => None,
            };
            let ev = service::decide_proposal(&s.file, &s.editor, proposal_id, approved, feedback)
                .await?;
            let verb = if approved { "approved" } else { "rejected" };
            out.print(
                &json!({"proposal_id": proposal_id, "status": verb, "events": ev.len()}),
                || format!("{verb} {proposal_id}; {} event(s) committed", ev.len()),
            );
        }
        AgentCmd::Sessions { id } => {
            let id = s.block_id(id)?;
            let list = elfiee_adapters::agent_loop::AgentSession::list(&s.file, &id)?;
            // Claude Code's sessions (recorded by its hooks) beside the loop's.
            let claude = elfiee_adapters::hooks::claude_sessions(&s.file, &id);
            let source = |sid: &str| {
                if claude.contains(sid) {
                    "claude-code"
                } else {
                    "agent-loop"
                }
            };
            let v: Vec<Value> = list
                .iter()
                .map(|(sid, title)| json!({"session_id": sid, "title": title, "source": source(sid)}))
                .collect();
            out.print(&json!(v), || {
                list.iter()
                    .map(|(sid, t)| {
                        format!("{sid}  {:<11}  {}", source(sid), t.as_deref().unwrap_or(""))
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        AgentCmd::Steps { session } => {
            let session = session_arg(s, session)?;
            let h = elfiee_adapters::checkpoint::History::load(&s.file, &session)?;
            let steps = h.infos(&s.file);
            out.print(&json!({"session_id": session, "steps": steps}), || {
                steps_text(&steps)
            });
        }
        AgentCmd::Undo {
            session,
            to,
            steps,
            force,
        } => {
            use elfiee_adapters::checkpoint::{undo, Selection};
            let sel = match (to, steps) {
                (Some(t), _) => Selection::To(*t),
                (None, n) => Selection::Last(n.unwrap_or(1)),
            };
            let session = session_arg(s, session)?;
            let r = undo(&s.file, &s.editor, &session, sel, *force).await?;
            out.print(&json!(r), || undo_text("undid", &r));
        }
        AgentCmd::Redo { session, force } => {
            let session = session_arg(s, session)?;
            let r = elfiee_adapters::checkpoint::redo(&s.file, &s.editor, &session, *force).await?;
            out.print(&json!(r), || undo_text("redid", &r));
        }
        AgentCmd::List => {
            let agents = service::list_agents(&s.file);
            out.print(&json!(agents), || {
                agents
                    .iter()
                    .map(|a| {
                        format!(
                            "{}  {:<10} {:<8} {}",
                            a["agent_block_id"].as_str().unwrap_or(""),
                            a["name"].as_str().unwrap_or(""),
                            a["status"].as_str().unwrap_or(""),
                            a["editor_id"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}

/// The turn's steps (`steps`: their numbers), as `agent steps` shows them, on stderr.
fn print_turn_steps(s: &Session, session_id: &str, steps: &[u64]) {
    if steps.is_empty() {
        return;
    }
    if let Ok(h) = elfiee_adapters::checkpoint::History::load(&s.file, session_id) {
        let turn: Vec<_> = h
            .infos(&s.file)
            .into_iter()
            .filter(|i| steps.contains(&i.step))
            .collect();
        eprintln!("{}", steps_text(&turn));
    }
}

/// The session an `agent steps / undo / redo` argument names: a session id; an agent — its
/// name, block id or editor id (or a unique block id prefix, as for any block) — for the
/// session it worked in last (the one with its newest entry); or a unique prefix of a
/// session id. Sub-agents' sessions are not counted.
pub(super) fn session_arg(s: &Session, arg: &str) -> Result<String, CliError> {
    if arg.trim().is_empty() {
        return Err(CliError::usage(
            "give a session id (or the start of one) or an agent's name or id; see `elfiee agent sessions AGENT`",
        ));
    }
    // Top-level sessions: id → (agent block, seq of its newest entry), in first-seen order.
    let mut sessions: Vec<(String, String, u64)> = Vec::new();
    for e in s.file.events(1)? {
        if e.cap_id() != "agent.session" || e.value.get("parent_session").is_some() {
            continue;
        }
        let Some(sid) = e.value.get("session_id").and_then(Value::as_str) else {
            continue;
        };
        match sessions.iter_mut().find(|(id, _, _)| id == sid) {
            Some(x) => x.2 = e.seq,
            None => sessions.push((sid.to_owned(), e.entity.clone(), e.seq)),
        }
    }
    if sessions.iter().any(|(id, _, _)| id == arg) {
        return Ok(arg.to_owned());
    }
    let newest_of = |agent: &str, name: &str| {
        sessions
            .iter()
            .filter(|(_, a, _)| a == agent)
            .max_by_key(|(_, _, seq)| *seq)
            .map(|(id, _, _)| id.clone())
            .ok_or_else(|| {
                CliError::failed(
                    "not_found",
                    format!("agent '{name}' has no session yet; start one with `elfiee agent run {name} --message …`"),
                )
            })
    };
    // An agent named exactly: its name, block id or editor id.
    let agents: Vec<(String, String)> = s.file.with_state(|st| {
        st.blocks
            .values()
            .filter(|b| b.block_type == "agent")
            .filter(|b| b.block_id == arg || b.name == arg || agent_editor(b) == Some(arg))
            .map(|b| (b.block_id.clone(), b.name.clone()))
            .collect()
    });
    match agents.as_slice() {
        [(id, name)] => return newest_of(id, name),
        [] => {}
        several => {
            let names: Vec<String> = several
                .iter()
                .map(|(id, name)| format!("{id} ({name})"))
                .collect();
            return Err(CliError::failed(
                "ambiguous",
                format!(
                    "'{arg}' names several agents ({}); give the agent's block id",
                    names.join(", ")
                ),
            ));
        }
    }
    let by_prefix: Vec<&(String, String, u64)> = sessions
        .iter()
        .filter(|(id, _, _)| id.starts_with(arg))
        .collect();
    match by_prefix.as_slice() {
        [(id, _, _)] => return Ok(id.clone()),
        [] => {}
        several => {
            let list: Vec<String> = several
                .iter()
                .map(|(id, agent, _)| {
                    let name = s
                        .file
                        .with_state(|st| st.block(agent).map(|b| b.name.clone()))
                        .unwrap_or_default();
                    format!("{id} (agent {name})")
                })
                .collect();
            return Err(CliError::failed(
                "ambiguous",
                format!(
                    "'{arg}' is the start of several sessions: {}; give more of the id",
                    list.join(", ")
                ),
            ));
        }
    }
    // A unique block id prefix of an agent.
    if let Ok(id) = s.block_id(arg) {
        if let Some(name) = s.file.with_state(|st| {
            st.block(&id)
                .filter(|b| b.block_type == "agent")
                .map(|b| b.name.clone())
        }) {
            return newest_of(&id, &name);
        }
    }
    Err(CliError::failed(
        "not_found",
        format!(
            "no agent session or agent '{arg}'; give a session id (or the start of one) from `elfiee agent sessions AGENT`, or an agent's name or id"
        ),
    ))
}

/// Agent-loop options: the agent's configuration (system prompt, model, temperature, language,
/// its default rules; provider built now, key from its env var), then the profile, the rules
/// file and the autonomy given on the command line.
pub(super) fn session_options(
    s: &Session,
    agent: &str,
    perms: &crate::cli::LoopPermissions,
) -> Result<elfiee_adapters::agent_loop::SessionOptions, CliError> {
    use elfiee_adapters::agent_loop::{Autonomy, Profile, SessionOptions, PROFILES};
    let opts = SessionOptions::for_agent(
        &s.file,
        agent,
        &elfiee_adapters::invoke::default_provider_factory(),
    )
    .map_err(|e| CliError::failed("llm", e.to_string()))?;
    let profile = Profile::builtin(&perms.profile).ok_or_else(|| {
        CliError::usage(format!(
            "unknown profile '{}'; use one of {}",
            perms.profile,
            PROFILES.join(", ")
        ))
    })?;
    let mut opts = opts.with_profile(&profile);
    // Titles and memory summaries from a short model call (derived when it fails).
    opts.model_summaries = true;
    if let Some(f) = &perms.rules {
        let extra: Vec<elfiee_adapters::agent_loop::Rule> =
            serde_json::from_value(Value::Array(read_rules(f)?)).map_err(|e| {
                CliError::usage(format!("{}: not a list of rules: {e}", f.display()))
            })?;
        opts.rules.rules.extend(extra);
    }
    if let Some(a) = &perms.autonomy {
        opts.autonomy = serde_json::from_value::<Autonomy>(json!(a)).map_err(|_| {
            CliError::usage(format!(
                "unknown autonomy '{a}'; use read_only, supervised or full"
            ))
        })?;
    }
    Ok(opts)
}

/// A rules file: a JSON list of `{"permission", "pattern", "action"}` (or `{"rules": [...]}`).
pub(super) fn read_rules(path: &Path) -> Result<Vec<Value>, CliError> {
    let file = std::fs::File::open(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
    let text =
        crate::cli::session::read_bounded(file, &path.display().to_string(), "a smaller file")?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("{} is not JSON: {e}", path.display())))?;
    let list = match v {
        Value::Array(a) => a,
        Value::Object(mut o) => match o.remove("rules") {
            Some(Value::Array(a)) => a,
            _ => {
                return Err(CliError::usage(format!(
                    "{}: expected a list of rules or {{\"rules\": [...]}}",
                    path.display()
                )))
            }
        },
        _ => {
            return Err(CliError::usage(format!(
                "{}: expected a list of rules",
                path.display()
            )))
        }
    };
    Ok(list)
}

/// The line `agent chat` and `agent run` print for a loop event (seed 003's ToolStatus): a
/// tool starting, its success with a preview of its output (a command's first line of
/// output; what a result says beyond the call's arguments), its failure with the first three
/// lines of the error; also the title, retries and compactions. `None` for events it does
/// not show.
pub(super) fn chat_event_line(e: &elfiee_adapters::agent_loop::LoopEvent) -> Option<String> {
    use elfiee_adapters::agent_loop::{LoopEvent, SessionStatus};
    match e {
        LoopEvent::Title(t) => Some(format!("  [title] {t}")),
        LoopEvent::ToolRunning { tool, subject, .. } if subject.is_empty() => {
            Some(format!("  [Running] {tool}"))
        }
        LoopEvent::ToolRunning { tool, subject, .. } => {
            Some(format!("  [Running] {tool} {subject}"))
        }
        LoopEvent::ToolSuccess { tool, summary, .. } => {
            let first = summary.lines().next().unwrap_or_default();
            Some(format!("  [Success] {tool}: {first}"))
        }
        LoopEvent::ToolFailed { tool, error, .. } => {
            let lines: Vec<String> = error.lines().take(3).map(|l| format!("    {l}")).collect();
            Some(format!("  [Failed] {tool}\n{}", lines.join("\n")))
        }
        LoopEvent::Status(SessionStatus::Retrying { attempt, reason }) => {
            Some(format!("  [retrying] attempt {attempt}: {reason}"))
        }
        LoopEvent::Compacted { summarised } => Some(format!(
            "  [compacted] {}",
            if *summarised {
                "older messages were summarised"
            } else {
                "older messages were dropped"
            }
        )),
        _ => None,
    }
}

/// `agent steps` as text: one line per step, then its files.
pub(super) fn steps_text(steps: &[elfiee_adapters::checkpoint::StepInfo]) -> String {
    if steps.is_empty() {
        return "no steps recorded yet".into();
    }
    let mut out = Vec::new();
    for st in steps {
        out.push(format!(
            "step {:<3} {:<6} seq {}..{}  {} event(s)  {}",
            st.step,
            st.status,
            st.doc_from + 1,
            st.doc_to,
            st.events,
            st.tools.join(", ")
        ));
        for (mark, files) in [
            ("+", &st.files_created),
            ("~", &st.files_modified),
            ("-", &st.files_deleted),
        ] {
            for f in files {
                out.push(format!("    {mark} {f}"));
            }
        }
        if !st.outside_grants.is_empty() {
            out.push(format!(
                "    ! outside the agent's grants: {}",
                st.outside_grants.join(", ")
            ));
        }
    }
    out.join("\n")
}

pub(super) fn undo_text(verb: &str, r: &elfiee_adapters::checkpoint::UndoReport) -> String {
    let steps: Vec<String> = r.steps.iter().map(u64::to_string).collect();
    with_forced(
        format!(
            "{verb} step(s) {} of session {}: {} block(s) restored, {} removed; {} file(s) restored, {} removed",
            steps.join(", "),
            r.session_id,
            r.blocks_restored.len(),
            r.blocks_removed.len(),
            r.files_restored.len(),
            r.files_removed.len()
        ),
        r,
    )
}

pub(super) fn edits_text(verb: &str, r: &elfiee_adapters::checkpoint::UndoReport) -> String {
    with_forced(
        format!(
            "{verb} {} edit(s): {} block(s) restored, {} removed",
            r.commands.len(),
            r.blocks_restored.len(),
            r.blocks_removed.len()
        ),
        r,
    )
}

/// `head`, then a line naming what `--force` overwrote, if anything.
fn with_forced(head: String, r: &elfiee_adapters::checkpoint::UndoReport) -> String {
    if r.forced.is_empty() {
        return head;
    }
    format!("{head}\noverwritten (--force): {}", r.forced.join(", "))
}
