use std::io::Read;
use std::path::{Path, PathBuf};

use crate::{Command, Engine, Event, FileHandle, State};
use elfiee_adapters::import::{ImportLimits, SyncProgress, MAX_FILE_BYTES_LIMIT};
use elfiee_adapters::service;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use super::output::Out;
use super::{
    resolve, AgentCmd, BlockCmd, Cli, CliError, Cmd, CodeCmd, DirCmd, EditorCmd, EditorKind,
    ExecArgs, GrantArgs, MarkdownCmd, SyncCmd, TerminalCmd, TextSource,
};

/// An open file, its running effects, and who we act as.
struct Session {
    file: FileHandle,
    editor: String,
    /// While another process owns the file its effects run there; they start here if this
    /// process takes the file over.
    effects: Option<elfiee_adapters::EffectsHandle>,
}

impl Session {
    async fn open(cli: &Cli) -> Result<Session, CliError> {
        let path = cli
            .elf
            .as_deref()
            .ok_or_else(|| CliError::usage("no .elf given: pass --elf PATH or set ELFIEE_ELF"))?;
        let file = Engine::global().open(path).await?;
        // Events of kinds this program has no fold for are kept in the log but missing from
        // the state it shows: say so once, on stderr (stdout stays the command's output).
        let unknown = file.unknown_kinds();
        if !unknown.is_empty() {
            eprintln!("warning: {}", unknown_kinds_message(&unknown));
        }
        // A device that joined a synced document has no owner until the document arrives.
        let ownerless = matches!(cli.cmd, Cmd::Serve(_) | Cmd::Sync(SyncCmd::Status { .. }));
        let editor = match &cli.as_editor {
            Some(who) => file.with_state(|s| resolve::editor(s, who))?,
            None if ownerless && file.owner().is_none() => String::new(),
            None => file.owner().ok_or_else(|| {
                // A device that joined a synced document and has not received it yet.
                let joined = matches!(elfiee_sync::node::recorded_config(&file), Ok(Some(_)));
                if joined {
                    CliError::failed(
                        "not_synced_yet",
                        "this document has not arrived from the broker yet; run `elfiee serve --sync URL` on it (and have the owner run `elfiee sync add-node` with this device's node id to write to it)",
                    )
                } else {
                    CliError::failed(
                        "not_initialized",
                        "this .elf has no owner; it was never initialized",
                    )
                }
            })?,
        };
        // Effects catch up from their checkpoints (e.g. after a crash) and serve this command.
        let effects = Some(elfiee_adapters::attach(&file, super::effects_config()).await?);
        Ok(Session {
            file,
            editor,
            effects,
        })
    }

    /// Lets pending effects finish, then closes the file.
    async fn close(self) {
        if let Some(fx) = &self.effects {
            if let Err(e) = fx
                .settle(&self.file, std::time::Duration::from_secs(600))
                .await
            {
                eprintln!("warning: {e}");
            }
        }
        self.file.close().await;
        if let Some(fx) = self.effects {
            fx.join().await;
        }
        // The process ends right after: freeing a large document's state block by block
        // would only cost time (the file is closed and flushed).
        std::mem::forget(self.file);
    }

    async fn submit(
        &self,
        cap: &str,
        block: Option<&str>,
        payload: Value,
    ) -> Result<Vec<Event>, CliError> {
        let block = block.filter(|b| *b != "*");
        Ok(self
            .file
            .submit(Command::new(&self.editor, cap, block, payload))
            .await?)
    }

    fn block_id(&self, input: &str) -> Result<String, CliError> {
        self.file.with_state(|s| resolve::block(s, input))
    }

    fn editor_id(&self, input: &str) -> Result<String, CliError> {
        self.file.with_state(|s| resolve::editor(s, input))
    }
}

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
        }) => return super::sync::join(path, broker, doc, key, &out).await,
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
        Cmd::Init { .. } | Cmd::Replay | Cmd::Verify | Cmd::Caps | Cmd::Completions { .. } => {
            unreachable!("handled in run")
        }
        Cmd::Exec(args) => exec(s, args, out).await?,
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
        Cmd::Sync(SyncCmd::Status { .. }) => super::sync::status(&s.file, out).await?,
        Cmd::Sync(_) => unreachable!("handled in run"),
        Cmd::Serve(args) => {
            if let Some(pid) = s.file.owner_pid() {
                return Err(CliError::failed(
                    "already_served",
                    format!("process {pid} already owns this file and serves it"),
                ));
            }
            let _node = match &args.sync {
                Some(url) => {
                    Some(super::sync::start(&s.file, url, args.doc.as_deref(), &args.key).await?)
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
                        Some(e) if print => println!("{}", serde_json::to_string(&e).unwrap_or_default()),
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
            out.print(&json!(events), || {
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

async fn dir(s: &Session, cmd: &DirCmd, out: &Out) -> Result<(), CliError> {
    match cmd {
        DirCmd::Import {
            path,
            name,
            max_file_bytes,
        } => {
            let limits = import_limits(*max_file_bytes)?;
            let bar = sync_bar("import");
            let report = service::import_directory(
                &s.file,
                &s.editor,
                path,
                name.as_deref(),
                &limits,
                |p| show_sync_progress(&bar, p),
            )
            .await?;
            bar.finish_and_clear();
            let v = serde_json::to_value(&report).unwrap_or_default();
            out.print(&v, || {
                let mut t = format!(
                    "{} {} files from {} as {} ({} bytes of text, {} commands)",
                    if report.resumed {
                        "resumed: holds"
                    } else {
                        "imported"
                    },
                    report.files,
                    report.root,
                    report.block_id,
                    report.sync.bytes,
                    report.sync.chunks,
                );
                for sk in &report.skipped {
                    t.push_str(&format!("\nskipped {}: {}", sk.path, sk.reason));
                }
                t
            });
        }
        DirCmd::Sync { id, max_file_bytes } => {
            let id = s.block_id(id)?;
            let limits = import_limits(*max_file_bytes)?;
            let bar = sync_bar("sync");
            let r = service::sync_directory(&s.file, &s.editor, &id, &limits, |p| {
                show_sync_progress(&bar, p)
            })
            .await?;
            bar.finish_and_clear();
            let v = serde_json::to_value(&r).unwrap_or_default();
            out.print(&v, || {
                format!(
                    "{}: {} changed, {} added, {} deleted, {} unchanged",
                    r.root, r.changed, r.added, r.deleted, r.unchanged
                )
            });
        }
        DirCmd::Export {
            id,
            dry_run: true,
            force,
        } => {
            let id = s.block_id(id)?;
            let plan = elfiee_adapters::export::plan_export(&s.file, &id, *force)?;
            let v = serde_json::to_value(&plan).unwrap_or_default();
            out.print(&v, || {
                let mut t = format!(
                    "would write {} and remove {} files under {} ({} unchanged); nothing written",
                    plan.write.len(),
                    plan.remove.len(),
                    plan.root.display(),
                    plan.unchanged
                );
                for p in &plan.write {
                    t.push_str(&format!("\nwrite  {p}"));
                }
                for p in &plan.remove {
                    t.push_str(&format!("\nremove {p}"));
                }
                for r in &plan.refused {
                    t.push_str(&format!("\nrefuse {}: {}", r.path, r.reason));
                }
                t
            });
        }
        DirCmd::Status { id } => {
            let id = s.block_id(id)?;
            let st = s.file.with_state(|st| {
                st.block(&id)
                    .filter(|b| b.block_type == "directory")
                    .map(|dir| crate::capabilities::builtin::directory_status(st, dir))
            });
            let st = st.ok_or_else(|| {
                CliError::failed(
                    "not_a_directory",
                    format!("'{id}' is not a directory block"),
                )
            })?;
            let v = serde_json::to_value(&st).unwrap_or_default();
            out.print(&v, || {
                if !st.is_dirty() {
                    return format!("nothing to export ({} files as on disk)", st.clean);
                }
                let mut t = format!(
                    "{} new, {} modified, {} removed, {} as on disk; `elfiee dir export` writes them",
                    st.new.len(),
                    st.modified.len(),
                    st.removed.len(),
                    st.clean
                );
                for p in &st.new {
                    t.push_str(&format!("\nnew       {p}"));
                }
                for p in &st.modified {
                    t.push_str(&format!("\nmodified  {p}"));
                }
                for p in &st.removed {
                    t.push_str(&format!("\nremoved   {p}"));
                }
                t
            });
        }
        DirCmd::Add {
            id,
            path,
            text,
            file,
            block,
        } => {
            let id = s.block_id(id)?;
            let mut payload = json!({ "path": path });
            if let Some(b) = block {
                payload["block_id"] = json!(s.block_id(b)?);
            } else if text.is_some() || file.is_some() {
                payload["content"] = json!(read_text(&TextSource {
                    text: text.clone(),
                    file: file.clone(),
                })?);
            }
            let ev = s.submit("directory.add", Some(&id), payload).await?;
            let block_id = ev
                .iter()
                .find(|e| e.cap_id() == "directory.add")
                .and_then(|e| e.value.get("block_id").cloned())
                .unwrap_or_default();
            out.print(
                &json!({"directory": id, "path": path, "block_id": block_id}),
                || {
                    format!(
                        "added {path} (block {}) to {id}",
                        block_id.as_str().unwrap_or("")
                    )
                },
            );
        }
        DirCmd::Mv { id, from, to } => {
            let id = s.block_id(id)?;
            s.submit("directory.move", Some(&id), json!({"from": from, "to": to}))
                .await?;
            out.print(&json!({"directory": id, "from": from, "to": to}), || {
                format!("moved {from} to {to} in {id}")
            });
        }
        DirCmd::Rm {
            id,
            path,
            keep_block,
        } => {
            let id = s.block_id(id)?;
            s.submit(
                "directory.remove",
                Some(&id),
                json!({"path": path, "keep_block": keep_block}),
            )
            .await?;
            out.print(&json!({"directory": id, "removed": path}), || {
                format!("removed {path} from {id}")
            });
        }
        DirCmd::Export { id, force, .. } => {
            let id = s.block_id(id)?;
            let v = service::export_directory_with(&s.file, &s.editor, &id, *force).await?;
            out.print(&v, || {
                let written = v["written"].as_array().map(Vec::len).unwrap_or(0);
                let removed = v["removed"].as_array().map(Vec::len).unwrap_or(0);
                let mut t = format!(
                    "wrote {written} and removed {removed} files under {} ({} unchanged)",
                    v["root"].as_str().unwrap_or(""),
                    v["unchanged"]
                );
                for r in v["refused"].as_array().into_iter().flatten() {
                    t.push_str(&format!(
                        "\nrefused {}: {}",
                        r["path"].as_str().unwrap_or(""),
                        r["reason"].as_str().unwrap_or("")
                    ));
                }
                t
            });
        }
    }
    Ok(())
}

async fn terminal(s: &Session, cmd: &TerminalCmd, out: &Out) -> Result<(), CliError> {
    match cmd {
        TerminalCmd::Create { name, dir, shell } => {
            let mut payload = json!({"name": name});
            if let Some(d) = dir {
                payload["linked_directory_id"] = json!(s.block_id(d)?);
            }
            if let Some(sh) = shell {
                payload["shell"] = json!(sh);
            }
            let ev = s.submit("terminal.create", None, payload).await?;
            let id = &ev[0].entity;
            out.print(&json!({"block_id": id}), || {
                format!("created terminal {id}")
            });
        }
        TerminalCmd::Run {
            id,
            timeout,
            command,
            export,
            no_export,
            remember,
        } => {
            let id = s.block_id(id)?;
            let line = command.join(" ");
            let exported = export_before_run(s, &id, *export, *no_export, *remember).await?;
            let mut v = service::run_terminal(&s.file, &s.editor, &id, &line, *timeout).await?;
            if let Some(x) = exported {
                v["export"] = x;
            }
            if let Some(err) = v.get("error").and_then(Value::as_str) {
                return Err(CliError::failed("terminal", err.to_owned()));
            }
            out.print(&v, || {
                let mut t = v["stdout"].as_str().unwrap_or("").to_owned();
                let stderr = v["stderr"].as_str().unwrap_or("");
                if !stderr.is_empty() {
                    eprint!("{stderr}");
                }
                if v["timed_out"] == true {
                    t.push_str("\n[timed out]");
                }
                if v["exit_code"] != 0 {
                    eprintln!("[exit code {}]", v["exit_code"]);
                }
                t.trim_end_matches('\n').to_owned()
            });
        }
    }
    Ok(())
}

/// Seed 002 §2.2B: before a run in a terminal whose linked directory holds changes not
/// exported yet, export them or not — by flag, by the terminal's remembered rule, by asking on
/// a terminal, else refuse (a script must say). Returns the export's outcome when it ran.
async fn export_before_run(
    s: &Session,
    terminal: &str,
    export: bool,
    no_export: bool,
    remember: bool,
) -> Result<Option<Value>, CliError> {
    use service::ExportBeforeRun as Rule;
    let flag = match (export, no_export) {
        (true, _) => Some(Rule::Always),
        (_, true) => Some(Rule::Never),
        _ => None,
    };
    if remember {
        let rule = flag.ok_or_else(|| {
            CliError::usage("--remember keeps --export or --no-export; pass one of them")
        })?;
        service::set_export_rule(&s.file, &s.editor, terminal, rule).await?;
    }
    let Some((dir, status)) = service::pending_export(&s.file, terminal) else {
        return Ok(None);
    };
    let choice = match flag.unwrap_or_else(|| service::export_rule(&s.file, terminal)) {
        Rule::Ask => ask_export(&dir, &status)?,
        rule => rule,
    };
    if choice != Rule::Always {
        return Ok(None);
    }
    let out = service::export_directory(&s.file, &s.editor, &dir).await?;
    for r in out["refused"].as_array().into_iter().flatten() {
        eprintln!(
            "warning: not exported {}: {}",
            r["path"].as_str().unwrap_or(""),
            r["reason"].as_str().unwrap_or("")
        );
    }
    Ok(Some(out))
}

/// Asks "export & run / run / cancel" on a terminal; without one, refuses with what to pass.
fn ask_export(
    dir: &str,
    st: &crate::capabilities::builtin::DirectoryStatus,
) -> Result<elfiee_adapters::service::ExportBeforeRun, CliError> {
    use elfiee_adapters::service::ExportBeforeRun as Rule;
    use std::io::{BufRead, IsTerminal, Write};
    let what = format!(
        "directory {dir} has {} new, {} modified and {} removed files not exported yet",
        st.new.len(),
        st.modified.len(),
        st.removed.len()
    );
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::usage(format!(
            "{what}; pass --export (write them first) or --no-export (run as is), with --remember to keep the choice for this terminal"
        )));
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{what}.\n[e]xport & run, [r]un, [c]ancel? ");
    let _ = err.flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    match answer.trim().to_ascii_lowercase().as_str() {
        "e" | "export" | "y" | "yes" => Ok(Rule::Always),
        "r" | "run" => Ok(Rule::Never),
        _ => Err(CliError::failed("cancelled", "cancelled; nothing was run")),
    }
}

async fn agent(s: &Session, cmd: &AgentCmd, out: &Out) -> Result<(), CliError> {
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
                if !steps.is_empty() {
                    if let Ok(h) =
                        elfiee_adapters::checkpoint::History::load(&s.file, chat.session_id())
                    {
                        let turn: Vec<_> = h
                            .infos(&s.file)
                            .into_iter()
                            .filter(|i| steps.contains(&i.step))
                            .collect();
                        eprintln!("{}", steps_text(&turn));
                    }
                }
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
            let outcome = session.run_turn(message, &mut confirm).await?;
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
            let v: Vec<Value> = list
                .iter()
                .map(|(sid, title)| json!({"session_id": sid, "title": title}))
                .collect();
            out.print(&json!(v), || {
                list.iter()
                    .map(|(sid, t)| format!("{sid}  {}", t.as_deref().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        AgentCmd::Steps { session } => {
            let h = elfiee_adapters::checkpoint::History::load(&s.file, session)?;
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
            let r = undo(&s.file, &s.editor, session, sel, *force).await?;
            out.print(&json!(r), || undo_text("undid", &r));
        }
        AgentCmd::Redo { session, force } => {
            let r = elfiee_adapters::checkpoint::redo(&s.file, &s.editor, session, *force).await?;
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

/// Agent-loop options: the agent's configuration (system prompt, model, temperature, language,
/// its default rules; provider built now, key from its env var), then the profile, the rules
/// file and the autonomy given on the command line.
fn session_options(
    s: &Session,
    agent: &str,
    perms: &super::LoopPermissions,
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
fn read_rules(path: &Path) -> Result<Vec<Value>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
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

fn read_text(src: &TextSource) -> Result<String, CliError> {
    if let Some(t) = &src.text {
        return Ok(t.clone());
    }
    let mut buf = String::new();
    match src.file.as_deref() {
        Some(p) if p != Path::new("-") => {
            return std::fs::read_to_string(p)
                .map_err(|e| CliError::failed("io", format!("cannot read {}: {e}", p.display())));
        }
        _ => std::io::stdin().read_to_string(&mut buf).map_err(|e| {
            CliError::failed(
                "io",
                format!("cannot read stdin: {e}; pass --text or --file"),
            )
        })?,
    };
    Ok(buf)
}

fn mentions(e: &Event, block: &str) -> bool {
    e.entity == block
        || e.value.get("to").and_then(Value::as_str) == Some(block)
        || e.value.get("block_id").and_then(Value::as_str) == Some(block)
}

fn event_line(e: &Event) -> String {
    let mut v = e.value.to_string();
    if v.len() > 100 {
        let cut = (0..=100)
            .rev()
            .find(|i| v.is_char_boundary(*i))
            .unwrap_or(0);
        v.truncate(cut);
        v.push('…');
    }
    format!(
        "{:>6}  {}  {:<36} {:<40} {v}",
        e.seq,
        e.created_at.format("%Y-%m-%d %H:%M:%S%.3f"),
        e.attribute,
        e.entity
    )
}

fn elf_path(cli: &Cli) -> Result<PathBuf, CliError> {
    cli.elf
        .clone()
        .ok_or_else(|| CliError::usage("no .elf given: pass --elf PATH or set ELFIEE_ELF"))
}

fn import_limits(max_file_bytes: Option<u64>) -> Result<ImportLimits, CliError> {
    let mut limits = ImportLimits::default();
    if let Some(m) = max_file_bytes {
        if m == 0 || m > MAX_FILE_BYTES_LIMIT {
            return Err(CliError::usage(format!(
                "--max-file-bytes must be between 1 and {MAX_FILE_BYTES_LIMIT}"
            )));
        }
        limits.max_file_bytes = m;
    }
    Ok(limits)
}

/// A bar over the bytes of the files a sync or an import reads.
fn sync_bar(label: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(label);
    bar
}

fn show_sync_progress(bar: &ProgressBar, p: SyncProgress) {
    bar.set_length(p.bytes_total);
    bar.set_position(p.bytes_done);
}

fn progress(label: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} events ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(label);
    bar
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

/// The payload of `exec`: JSON given inline, `@FILE`, `-` (stdin), or `{}` when absent.
fn exec_payload(arg: Option<&str>) -> Result<Value, CliError> {
    let (text, source) = match arg {
        None => return Ok(json!({})),
        Some("-") => {
            let mut buf = String::new();
            std::io::stdin().read_to_string(&mut buf).map_err(|e| {
                CliError::failed("io", format!("cannot read the payload from stdin: {e}"))
            })?;
            (buf, "the payload read from stdin".to_owned())
        }
        Some(a) if a.starts_with('@') => {
            let path = &a[1..];
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::usage(format!("cannot read the payload file {path}: {e}"))
            })?;
            (text, format!("the payload file {path}"))
        }
        Some(a) => (a.to_owned(), "--payload".to_owned()),
    };
    serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "{source} is not valid JSON: {e} (pass an object such as '{{\"markdown\": \"# Hi\"}}', \
             @FILE or - for stdin)"
        ))
    })
}

/// One line naming the event kinds no fold of this program knows.
fn unknown_kinds_message(kinds: &std::collections::BTreeMap<String, u64>) -> String {
    format!(
        "unknown kinds: {} — written by a program that registered them; their meaning is \
         missing from this state",
        crate::engine::describe_kinds(kinds)
    )
}

fn replay(cli: &Cli, out: &Out, synced: Option<String>) -> Result<(), CliError> {
    let path = elf_path(cli)?;
    let bar = progress("replay");
    let folds = Engine::global().config().registry.folds();
    let (report, state): (_, State) = crate::engine::replay_with(&path, folds, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
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
    })?;
    bar.finish_and_clear();
    print_verify(&report, out)
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

/// The line `agent chat` prints for a loop event (seed 003's ToolStatus): a tool starting,
/// its success with the first line of its output, its failure with the first three lines of
/// the error; also the title, retries and compactions. `None` for events it does not show.
pub(crate) fn chat_event_line(e: &elfiee_adapters::agent_loop::LoopEvent) -> Option<String> {
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
pub(crate) fn steps_text(steps: &[elfiee_adapters::checkpoint::StepInfo]) -> String {
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
    }
    out.join("\n")
}

fn undo_text(verb: &str, r: &elfiee_adapters::checkpoint::UndoReport) -> String {
    let steps: Vec<String> = r.steps.iter().map(u64::to_string).collect();
    let mut out = vec![format!(
        "{verb} step(s) {} of session {}: {} block(s) restored, {} removed; {} file(s) restored, {} removed",
        steps.join(", "),
        r.session_id,
        r.blocks_restored.len(),
        r.blocks_removed.len(),
        r.files_restored.len(),
        r.files_removed.len()
    )];
    if !r.forced.is_empty() {
        out.push(format!("overwritten (--force): {}", r.forced.join(", ")));
    }
    out.join("\n")
}

fn edits_text(verb: &str, r: &elfiee_adapters::checkpoint::UndoReport) -> String {
    let mut out = vec![format!(
        "{verb} {} edit(s): {} block(s) restored, {} removed",
        r.commands.len(),
        r.blocks_restored.len(),
        r.blocks_removed.len()
    )];
    if !r.forced.is_empty() {
        out.push(format!("overwritten (--force): {}", r.forced.join(", ")));
    }
    out.join("\n")
}
