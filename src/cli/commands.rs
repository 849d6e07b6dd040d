use crate::{Engine, Event, State};
use serde_json::{json, Value};

use super::output::Out;
use super::session::{
    elf_path, event_line, exec_payload, mentions, read_text, unknown_kinds_message, Session,
};
use super::{
    BlockCmd, Cli, CliError, Cmd, CodeCmd, EditorCmd, EditorKind, ExecArgs, GrantArgs, MarkdownCmd,
    SyncCmd,
};

mod agent;
mod files;
mod hook;
pub(crate) mod keep;
mod man;

use agent::*;
use files::*;
pub(crate) use hook::before_runtime as hook_before_runtime;
use man::man_pages;

/// Runs one parsed command line ([`Cli`]) on the process-wide engine ([`Engine::global`]):
/// prints what the command prints and returns its failure, if any, for the caller to report
/// ([`CliError::report`]) and turn into an exit code ([`CliError::code`]). Needs a tokio
/// runtime; [`super::main_from`] sets up the engine, the runtime and the logging around it.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let out = Out { json: cli.json };
    match &cli.cmd {
        Cmd::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = super::Cli::command();
            let name = super::program_name();
            clap_complete::generate(*shell, &mut cmd, name, &mut std::io::stdout());
            return Ok(());
        }
        Cmd::Man { dir } => return man_pages(dir.as_deref(), &out),
        Cmd::Hook { editor } => return hook::run(&cli, editor).await,
        Cmd::Init { path, owner } => {
            let file = Engine::global().init(path, owner).await?;
            let owner_id = file.owner().unwrap_or_default();
            let elf = file.path().display().to_string();
            file.close().await;
            out.print(&json!({"elf": elf, "owner": owner_id}), || {
                format!("created {elf} (owner: {owner_id})")
            });
            return Ok(());
        }
        Cmd::Sync(SyncCmd::NodeId { key }) => return super::sync::node_id(key, &out),
        Cmd::Sync(SyncCmd::Join {
            path,
            broker,
            doc,
            key,
            broker_access,
        }) => {
            let access = broker_access.access();
            return super::sync::join(path, broker, doc, key, &access, &out).await;
        }
        Cmd::Replay | Cmd::Verify => {
            // Exclusive access reads the log directly; if another process owns the file, the
            // owner runs the check on its log.
            let direct = if matches!(cli.cmd, Cmd::Replay) {
                // A synced document: also the merged state's digest (the same on every
                // device holding the same events).
                let synced = match elf_path(&cli) {
                    Ok(p) => super::sync::synced_digest(&p).await.ok().flatten(),
                    Err(_) => None,
                };
                replay(&cli, &out, synced)
            } else {
                verify(&cli, &out)
            };
            match direct {
                Err(CliError::Failed { kind, .. }) if kind == "locked" => {}
                other => return other,
            }
            let file = Engine::global().open(elf_path(&cli)?).await?;
            let result = if matches!(cli.cmd, Cmd::Replay) {
                file.replay()
                    .await
                    .map_err(CliError::from)
                    .map(|(report, _)| print_replay(&report, None, None, &out))
            } else {
                file.verify()
                    .await
                    .map_err(CliError::from)
                    .and_then(|report| print_verify(&report, &out))
            };
            file.close().await;
            return result;
        }
        Cmd::Restore { backup, new } => return keep::restore(backup, new, &out),
        Cmd::Salvage {
            damaged,
            new,
            backup,
        } => return keep::salvage(damaged, new, backup.as_deref(), &out),
        Cmd::Caps => {
            let ids = Engine::global().config().registry.ids().to_vec();
            out.print(&json!(ids), || ids.join("\n"));
            return Ok(());
        }
        _ => {}
    }
    let session = Session::open(&cli).await?;
    let result = dispatch(&cli, &session, &out).await;
    session.close().await;
    result
}

async fn dispatch(cli: &Cli, s: &Session, out: &Out) -> Result<(), CliError> {
    match &cli.cmd {
        Cmd::Init { .. }
        | Cmd::Replay
        | Cmd::Verify
        | Cmd::Caps
        | Cmd::Restore { .. }
        | Cmd::Salvage { .. }
        | Cmd::Completions { .. }
        | Cmd::Hook { .. }
        | Cmd::Man { .. } => {
            unreachable!("handled in run")
        }
        Cmd::Exec(args) => exec(s, args, out).await?,
        Cmd::Backup { to } => keep::backup(s, to.as_deref(), out).await?,
        Cmd::Undo { steps, force } => {
            let r =
                elfiee_adapters::checkpoint::undo_edits(&s.file, &s.editor, *steps, *force).await?;
            out.print(&json!(r), || edits_text("undid", &r));
        }
        Cmd::Redo { force } => {
            let r = elfiee_adapters::checkpoint::redo_edits(&s.file, &s.editor, *force).await?;
            out.print(&json!(r), || edits_text("redid", &r));
        }
        Cmd::Editor(EditorCmd::Create {
            name,
            editor_type,
            id,
        }) => {
            let ty = match editor_type {
                EditorKind::Human => "human",
                EditorKind::Agent => "agent",
            };
            let mut payload = json!({"name": name, "editor_type": ty});
            if let Some(id) = id {
                payload["editor_id"] = json!(id);
            }
            let ev = s.submit("editor.create", None, payload).await?;
            let id = &ev[0].entity;
            out.print(&json!({"editor_id": id}), || format!("created editor {id}"));
        }
        Cmd::Editor(EditorCmd::Delete { editor }) => {
            let id = s.editor_id(editor)?;
            let ev = s
                .submit("editor.delete", None, json!({"editor_id": id}))
                .await?;
            out.print(&json!({"editor_id": id, "events": ev.len()}), || {
                format!("deleted editor {id}")
            });
        }
        Cmd::Editor(EditorCmd::List) => {
            let (editors, owner) = s.file.with_state(|st| {
                (
                    st.editors.values().cloned().collect::<Vec<_>>(),
                    st.file_owner.clone(),
                )
            });
            out.print(&json!(editors), || {
                editors
                    .iter()
                    .map(|e| {
                        let own = if Some(&e.editor_id) == owner.as_ref() {
                            "  (owner)"
                        } else {
                            ""
                        };
                        format!(
                            "{:<44} {:<6} {}{own}",
                            e.editor_id,
                            format!("{:?}", e.editor_type).to_lowercase(),
                            e.name
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        Cmd::Block(cmd) => block(s, cmd, out).await?,
        Cmd::Graph(args) => super::graph::run(&s.file, args, out)?,
        Cmd::Dir(cmd) => dir(s, cmd, out).await?,
        Cmd::Terminal(cmd) => terminal(s, cmd, out).await?,
        Cmd::Agent(cmd) => agent(s, cmd, out).await?,
        Cmd::Sync(SyncCmd::AddNode { node_id, name }) => {
            let ev = s
                .submit(
                    "node.add",
                    None,
                    json!({"node_id": node_id, "public_key": node_id, "name": name}),
                )
                .await?;
            out.print(&json!({"node_id": node_id, "events": ev.len()}), || {
                if ev.is_empty() {
                    format!("node {node_id} was already a member")
                } else {
                    format!("node {node_id} may now write to this document")
                }
            });
        }
        Cmd::Sync(SyncCmd::RemoveNode { node_id }) => {
            super::sync::remove_node(&s.file, &s.editor, node_id, out).await?
        }
        Cmd::Sync(SyncCmd::Status { broker_access, .. }) => {
            super::sync::status(&s.file, &broker_access.access(), out).await?
        }
        Cmd::Sync(_) => unreachable!("handled in run"),
        Cmd::Serve(args) => {
            if let Some(pid) = s.file.owner_pid() {
                return Err(CliError::failed(
                    "already_served",
                    format!("process {pid} already owns this file and serves it"),
                ));
            }
            // Claude Code's hooks (agents enabled on a project) record through the owner.
            elfiee_adapters::hooks::provide(&s.file);
            let node = match &args.sync {
                Some(url) => {
                    let access = args.broker.access();
                    let doc = args.doc.as_deref();
                    Some(
                        super::sync::start(&s.file, url, doc, &args.key, args.replicas, access)
                            .await?,
                    )
                }
                None => None,
            };
            eprintln!(
                "serving {} (pid {}); stop with Ctrl-C",
                s.file.path().display(),
                std::process::id()
            );
            let mut events = s.file.subscribe();
            let print = out.json;
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => break,
                    e = events.recv() => match e {
                        Some(e) if print => {
                            // Where the event sits, the same on every device (issue 28).
                            let notes = if node.is_some() {
                                s.file.notes(std::slice::from_ref(&e)).unwrap_or_default().into_iter().collect()
                            } else {
                                Default::default()
                            };
                            println!("{}", super::sync::event_json(&e, &notes));
                        }
                        Some(_) => {}
                        None => break,
                    },
                }
            }
        }
        Cmd::McpServer { editor } => {
            let editor = match editor {
                Some(e) => s.editor_id(e)?,
                None => s.editor.clone(),
            };
            elfiee_adapters::mcp::serve_stdio(s.file.clone(), editor).await?;
        }
        Cmd::Markdown(MarkdownCmd::Write { id, source }) => {
            let id = s.block_id(id)?;
            let text = read_text(source)?;
            let ev = s
                .submit("markdown.write", Some(&id), json!({"markdown": text}))
                .await?;
            out.print(&json!({"block_id": id, "seq": ev[0].seq}), || {
                format!("wrote {} bytes to {id}", text.len())
            });
        }
        Cmd::Markdown(MarkdownCmd::Read { id }) => {
            let b = s.file.read_block(&s.editor, &s.block_id(id)?)?;
            let text = b
                .contents
                .get("markdown")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            out.print(&json!({"block_id": b.block_id, "markdown": text}), || {
                text.clone()
            });
        }
        Cmd::Code(CodeCmd::Write {
            id,
            source,
            language,
        }) => {
            let id = s.block_id(id)?;
            let text = read_text(source)?;
            let mut payload = json!({"text": text});
            if let Some(l) = language {
                payload["language"] = json!(l);
            }
            let ev = s.submit("code.write", Some(&id), payload).await?;
            out.print(&json!({"block_id": id, "seq": ev[0].seq}), || {
                format!("wrote {} bytes to {id}", text.len())
            });
        }
        Cmd::Code(CodeCmd::Read { id }) => {
            let b = s.file.read_block(&s.editor, &s.block_id(id)?)?;
            let text = b
                .contents
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            out.print(&json!({"block_id": b.block_id, "text": text, "language": b.contents.get("language")}), || text.clone());
        }
        Cmd::Grant(g) | Cmd::Revoke(g) => {
            let cap = if matches!(cli.cmd, Cmd::Grant(_)) {
                "core.grant"
            } else {
                "core.revoke"
            };
            grant(s, cap, g, out).await?
        }
        Cmd::Log { block, tail } => {
            let filter = block.as_deref().map(|b| s.block_id(b)).transpose()?;
            let mut events: Vec<Event> = s
                .file
                .events(1)?
                .into_iter()
                .filter(|e| filter.as_ref().is_none_or(|b| mentions(e, b)))
                .collect();
            if let Some(n) = tail {
                events.drain(..events.len().saturating_sub(*n));
            }
            if filter.is_some() {
                // One block's history: each version with the whole content it set.
                for e in &mut events {
                    e.value = s.file.resolve_value(&e.value)?;
                }
            }
            // A synced document's events with where each sits (origin and local): from the
            // process that syncs it (its view's notes), else folded from the log here.
            let notes = if out.json {
                super::sync::event_notes(&s.file, &events)
            } else {
                Default::default()
            };
            let shown: Vec<Value> = events
                .iter()
                .map(|e| super::sync::event_json(e, &notes))
                .collect();
            out.print(&json!(shown), || {
                events.iter().map(event_line).collect::<Vec<_>>().join("\n")
            });
        }
        Cmd::StateDigest => {
            let d = s.file.state_digest();
            out.print(
                &json!({"state_digest": d, "seq": s.file.last_seq()}),
                || d.clone(),
            );
        }
    }
    Ok(())
}

async fn block(s: &Session, cmd: &BlockCmd, out: &Out) -> Result<(), CliError> {
    match cmd {
        BlockCmd::Create {
            block_type,
            name,
            description,
        } => {
            let mut payload = json!({"name": name, "block_type": block_type});
            if let Some(d) = description {
                payload["description"] = json!(d);
            }
            let ev = s.submit("core.create", None, payload).await?;
            let id = &ev[0].entity;
            out.print(&json!({"block_id": id}), || {
                format!("created {block_type} block {id}")
            });
        }
        BlockCmd::List => {
            // Written straight from the state: only the four fields of each block are
            // decoded (a directory's entries can be large; nothing is kept decoded) and no
            // JSON tree of ten thousand rows is built.
            #[derive(serde::Serialize, serde::Deserialize)]
            struct Row {
                block_id: String,
                block_type: String,
                name: String,
                owner: String,
            }
            let text = s.file.with_state(|st| {
                let rows = st.blocks.view(|b| Row {
                    block_id: b.block_id.clone(),
                    block_type: b.block_type.clone(),
                    name: b.name.clone(),
                    owner: b.owner.clone(),
                });
                if out.json {
                    serde_json::to_string(&rows.collect::<Vec<_>>()).unwrap_or_default()
                } else {
                    rows.map(|r| {
                        format!(
                            "{}  {:<10} {:<24} owner={}",
                            r.block_id, r.block_type, r.name, r.owner
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
                }
            });
            out.print_text(&text);
        }
        BlockCmd::Show { id, at } => {
            let id = s.block_id(id)?;
            let parents_and_block = |state: &State| {
                let parents: Vec<Value> = state
                    .parents_of(&id)
                    .map(|(r, p)| json!({"relation": r, "from": p}))
                    .collect();
                (parents, state.block(&id).cloned())
            };
            let (parents, block) = match at {
                Some(seq) => parents_and_block(&s.file.state_at(*seq).await?),
                None => s.file.with_state(parents_and_block),
            };
            let block = block.ok_or_else(|| {
                let when = at.map(|a| format!(" at seq {a}")).unwrap_or_default();
                CliError::failed("block_not_found", format!("block '{id}' not found{when}"))
            })?;
            let block = s.file.resolve(&block)?;
            let mut v = serde_json::to_value(&block).unwrap_or_default();
            v["parents"] = json!(parents);
            if let Some(seq) = at {
                v["at_seq"] = json!(seq);
            }
            out.print(&v, || serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        BlockCmd::Delete { id } => {
            let id = s.block_id(id)?;
            let ev = s.submit("core.delete", Some(&id), json!({})).await?;
            out.print(&json!({"block_id": id, "events": ev.len()}), || {
                format!("deleted {id}")
            });
        }
        BlockCmd::Rename { id, name } => {
            let id = s.block_id(id)?;
            s.submit("core.rename", Some(&id), json!({"name": name}))
                .await?;
            out.print(&json!({"block_id": id, "name": name}), || {
                format!("renamed {id} to {name}")
            });
        }
        BlockCmd::Link(l) | BlockCmd::Unlink(l) => {
            let linking = matches!(cmd, BlockCmd::Link(_));
            let (from, to) = (s.block_id(&l.from)?, s.block_id(&l.to)?);
            let cap = if linking { "core.link" } else { "core.unlink" };
            s.submit(cap, Some(&from), json!({"to": to, "relation": l.relation}))
                .await?;
            let verb = if linking { "linked" } else { "unlinked" };
            out.print(
                &json!({"from": from, "to": to, "relation": l.relation}),
                || format!("{verb} {from} -{}-> {to}", l.relation),
            );
        }
    }
    Ok(())
}

async fn grant(s: &Session, cap: &str, g: &GrantArgs, out: &Out) -> Result<(), CliError> {
    let editor = s.editor_id(&g.editor)?;
    let block = s.block_id(&g.block)?;
    s.submit(
        cap,
        Some(&block),
        json!({"editor_id": editor, "cap_id": g.cap}),
    )
    .await?;
    let v = json!({"editor_id": editor, "cap_id": g.cap, "block_id": block});
    let verb = if cap == "core.grant" {
        "granted"
    } else {
        "revoked"
    };
    out.print(&v, || format!("{verb} {} on {block} for {editor}", g.cap));
    Ok(())
}

/// `elfiee exec CAP [--block ID] [--payload JSON | @FILE | -]`: one command of any
/// capability, as the session's editor; prints the committed events.
async fn exec(s: &Session, args: &ExecArgs, out: &Out) -> Result<(), CliError> {
    let payload = exec_payload(args.payload.as_deref())?;
    let block = args.block.as_deref().map(|b| s.block_id(b)).transpose()?;
    let events = s
        .submit(&args.cap, block.as_deref(), payload)
        .await
        .map_err(|e| match e {
            CliError::Failed { kind, .. } if kind == "unknown_capability" => CliError::Failed {
                kind,
                message: format!(
                    "unknown capability '{}': this program has no such capability; \
                         list the ones it knows with `{} caps`",
                    args.cap,
                    super::program_name()
                ),
            },
            other => other,
        })?;
    out.print(&json!({"events": events}), || {
        if events.is_empty() {
            return "no event committed (the command changed nothing)".into();
        }
        events
            .iter()
            .map(|e| format!("{} {} {}", e.seq, e.cap_id(), e.entity))
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

fn replay(cli: &Cli, out: &Out, synced: Option<String>) -> Result<(), CliError> {
    let path = elf_path(cli)?;
    let bar = progress("replay");
    let folds = Engine::global().config().registry.folds();
    let (report, state): (_, State) = crate::engine::replay_with(&path, folds, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .map_err(|e| damaged(&path, e))?;
    bar.finish_and_clear();
    print_replay(&report, Some(state.editors.len()), synced, out);
    Ok(())
}

/// The replay report; `editors` when the state is at hand (not when the owner replayed).
fn print_replay(
    report: &crate::engine::ReplayReport,
    editors: Option<usize>,
    synced: Option<String>,
    out: &Out,
) {
    let mut v = serde_json::to_value(report).unwrap_or_default();
    if let Some(d) = &synced {
        v["synced_digest"] = json!(d);
    }
    out.print(&v, || {
        let editors = editors
            .map(|n| format!(", {n} editors"))
            .unwrap_or_default();
        let mut s = format!(
            "replayed {} events into {} blocks{editors} in {} ms\nstate digest: {}",
            report.events, report.blocks, report.elapsed_ms, report.state_digest
        );
        if let Some(d) = &synced {
            s.push_str(&format!(
                "\nsynced digest: {d} (every device's events in merge order)"
            ));
        }
        if !report.unknown_kinds.is_empty() {
            s.push('\n');
            s.push_str(&unknown_kinds_message(&report.unknown_kinds));
        }
        s
    });
}

fn verify(cli: &Cli, out: &Out) -> Result<(), CliError> {
    let path = elf_path(cli)?;
    let bar = progress("verify");
    let folds = Engine::global().config().registry.folds();
    let report = crate::engine::verify_with(&path, folds, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .map_err(|e| damaged(&path, e))?;
    bar.finish_and_clear();
    print_verify(&report, out)
}

/// `e` from reading the document at `path` directly, with what to do when it is damaged
/// (as an open says it: `elfiee salvage`, the newest backup).
fn damaged(path: &std::path::Path, e: crate::EngineError) -> crate::EngineError {
    match crate::engine::layout::ElfPaths::existing(path) {
        Ok(paths) => crate::engine::salvage::advise(
            &paths,
            Engine::global().config().auto_backup.as_ref(),
            e,
        ),
        Err(_) => e,
    }
}

fn print_verify(report: &crate::engine::VerifyReport, out: &Out) -> Result<(), CliError> {
    let v = serde_json::to_value(report).unwrap_or_default();
    out.print(&v, || {
        let mut s = format!(
            "{} events in {} commands; snapshot: {}",
            report.events,
            report.commands,
            report.snapshot.as_deref().unwrap_or("none")
        );
        for p in &report.problems {
            s.push_str(&format!("\nproblem: {p}"));
        }
        // Not a problem (the log is whole), but said: this program cannot show those events.
        if !report.unknown_kinds.is_empty() {
            s.push('\n');
            s.push_str(&unknown_kinds_message(&report.unknown_kinds));
        }
        s.push_str(if report.ok { "\nok" } else { "\nFAILED" });
        s
    });
    if report.ok {
        Ok(())
    } else {
        Err(CliError::failed(
            "verify_failed",
            format!(
                "{} problem(s) found: {}",
                report.problems.len(),
                report.problems.join("; ")
            ),
        ))
    }
}
