//! Running the Elfiee tools (the catalogue is [`super::catalogue`]), independent of any protocol.
//!
//! One catalogue, two front-ends: the MCP server ([`super::server`]) exposes these tools, and the
//! agent loop can expose the same names, arguments and results. Each entry has a JSON Schema for
//! its arguments; [`call`] parses the arguments (unknown fields, missing fields and wrong types
//! are errors that say what was expected) and runs the tool **as the given editor** through the
//! engine: writes go through [`FileHandle::submit`] (CBAC + the pure handlers), reads through
//! [`FileHandle::read_block`] (which checks `<block_type>.read`). A failure is a [`ToolError`]
//! whose message says what to do; nothing fails silently.

use std::path::{Path, PathBuf};

use elfiee_capabilities::builtin::file_block_type;
use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Block, CapError, Command, Event};
use elfiee_projections::State;
use serde_json::{json, Value};

use crate::service;

pub use super::catalogue::*;
use super::catalogue::{parse, RELATIONS};

/// UTC time with millisecond precision, RFC 3339.
macro_rules! ts {
    ($d:expr) => {
        $d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    };
}

/// An event as the tools show it (`value`: as stored, or with bodies resolved).
fn event_json(e: &Event, value: Value) -> Value {
    json!({
        "seq": e.seq,
        "created_at": ts!(e.created_at),
        "editor_id": e.editor_id(),
        "kind": e.cap_id(),
        "entity": e.entity,
        "value": value,
    })
}

/// Runs tool `name` with JSON `args` as `editor`. The result is always a JSON object. The
/// checkpoint tools (`elfiee_steps`, `elfiee_undo`, `elfiee_redo`) need a session: see
/// [`call_in_session`].
pub async fn call(
    file: &FileHandle,
    editor: &str,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    call_in_session(file, editor, None, name, args).await
}

/// Tools whose calls are checkpoints' business (they do not make a step of their own).
pub const CHECKPOINT_TOOLS: &[&str] = &["elfiee_steps", "elfiee_undo", "elfiee_redo"];

/// [`call`] inside a session whose steps are checkpointed (the agent loop's session, or the
/// MCP server's, one per server process): the checkpoint tools act on that session.
pub async fn call_in_session(
    file: &FileHandle,
    editor: &str,
    session: Option<&str>,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    if CHECKPOINT_TOOLS.contains(&name) {
        let Some(session) = session else {
            return Err(ToolError::new(
                "rejected",
                format!("{name} works inside a session whose steps are checkpointed (the agent loop, `elfiee mcp-server`)"),
            ));
        };
        return checkpoint_tool(file, editor, session, name, args).await;
    }
    match name {
        "elfiee_block_list" => {
            parse::<NoArgs>(name, args)?;
            Ok(block_list(file, editor))
        }
        "elfiee_block_get" => {
            let a: BlockArgs = parse(name, args)?;
            block_get(file, editor, &a.block_id)
        }
        "elfiee_block_create" => {
            let a: CreateArgs = parse(name, args)?;
            match (a.directory, a.path) {
                (Some(dir), Some(path)) => {
                    let ty = file_block_type(&path);
                    if a.block_type != ty {
                        return Err(ToolError::new(
                            "invalid_arguments",
                            format!("'{path}' is a {ty} file (`.md` files are markdown, others code); pass block_type \"{ty}\" or another path"),
                        ));
                    }
                    return directory_add(file, editor, &dir, &path, None).await;
                }
                (Some(_), None) | (None, Some(_)) => return Err(ToolError::new(
                    "invalid_arguments",
                    "pass both `directory` and `path` to make a file of a directory, or neither",
                )),
                (None, None) => {}
            }
            let Some(block_name) = a.name else {
                return Err(ToolError::new(
                    "invalid_arguments",
                    "missing `name`: a block needs a name (or pass `directory` and `path` for a file)",
                ));
            };
            // An agent's blocks are linked from the agent (`implement`, seed 002 §2.1B), in the
            // same atomic batch as the create.
            let id = uuid::Uuid::new_v4().to_string();
            let mut batch = vec![Command::new(
                editor,
                "core.create",
                None,
                json!({"name": block_name, "block_type": a.block_type, "block_id": id}),
            )];
            batch.extend(implement_link(file, editor, &id));
            let ev = file.submit_all(batch).await.map_err(engine_error)?;
            let created = ev
                .iter()
                .find(|e| e.cap_id() == "core.create")
                .unwrap_or(&ev[0]);
            Ok(json!({
                "block_id": created.entity,
                "name": block_name,
                "block_type": a.block_type,
                "owner": editor,
                "seq": created.seq,
            }))
        }
        "elfiee_directory_add" => {
            let a: DirAddArgs = parse(name, args)?;
            directory_add(file, editor, &a.directory, &a.path, a.content).await
        }
        "elfiee_directory_move" => {
            let a: DirMoveArgs = parse(name, args)?;
            let dir = resolve(file, &a.directory)?;
            let ev = submit(
                file,
                editor,
                "directory.move",
                Some(&dir),
                json!({"from": a.from, "to": a.to}),
            )
            .await?;
            Ok(json!({"directory": dir, "from": a.from, "to": a.to, "seq": last_seq(&ev)}))
        }
        "elfiee_directory_remove" => {
            let a: DirRemoveArgs = parse(name, args)?;
            let dir = resolve(file, &a.directory)?;
            let ev = submit(
                file,
                editor,
                "directory.remove",
                Some(&dir),
                json!({"path": a.path, "keep_block": a.keep_block}),
            )
            .await?;
            Ok(
                json!({"directory": dir, "path": a.path, "removed": true, "block_deleted": !a.keep_block, "seq": last_seq(&ev)}),
            )
        }
        "elfiee_block_delete" => {
            let a: BlockArgs = parse(name, args)?;
            let id = resolve(file, &a.block_id)?;
            let ev = submit(file, editor, "core.delete", Some(&id), json!({})).await?;
            Ok(json!({"block_id": id, "deleted": true, "seq": last_seq(&ev), "events": ev.len()}))
        }
        "elfiee_markdown_write" => {
            let a: MarkdownWriteArgs = parse(name, args)?;
            let id = resolve(file, &a.block_id)?;
            let bytes = a.markdown.len();
            let ev = submit(
                file,
                editor,
                "markdown.write",
                Some(&id),
                json!({"markdown": a.markdown}),
            )
            .await?;
            Ok(json!({"block_id": id, "bytes": bytes, "seq": last_seq(&ev)}))
        }
        "elfiee_code_write" => {
            let a: CodeWriteArgs = parse(name, args)?;
            let id = resolve(file, &a.block_id)?;
            let bytes = a.text.len();
            let mut payload = json!({"text": a.text});
            if let Some(l) = &a.language {
                payload["language"] = json!(l);
            }
            let ev = submit(file, editor, "code.write", Some(&id), payload).await?;
            Ok(
                json!({"block_id": id, "bytes": bytes, "language": a.language, "seq": last_seq(&ev)}),
            )
        }
        "elfiee_block_link" | "elfiee_block_unlink" => {
            let a: LinkArgs = parse(name, args)?;
            if !RELATIONS.contains(&a.relation.as_str()) {
                return Err(ToolError::new(
                    "invalid_arguments",
                    format!(
                        "relation '{}' is not known; use \"reference\" or \"implement\"",
                        a.relation
                    ),
                ));
            }
            let from = resolve(file, &a.from)?;
            let to = resolve(file, &a.to)?;
            let cap = if name == "elfiee_block_link" {
                "core.link"
            } else {
                "core.unlink"
            };
            let ev = submit(
                file,
                editor,
                cap,
                Some(&from),
                json!({"to": to, "relation": a.relation}),
            )
            .await?;
            Ok(
                json!({"from": from, "to": to, "relation": a.relation, "linked": cap == "core.link", "seq": last_seq(&ev)}),
            )
        }
        "elfiee_block_history" => {
            let a: BlockArgs = parse(name, args)?;
            block_history(file, editor, &a.block_id)
        }
        "elfiee_directory_import" => {
            let a: ImportArgs = parse(name, args)?;
            let path = PathBuf::from(&a.path);
            if !path.is_dir() {
                return Err(ToolError::new(
                    "invalid_arguments",
                    format!(
                        "'{}' is not a folder (relative paths start at {}); pass the path of an existing folder",
                        a.path,
                        std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| "?".into())
                    ),
                ));
            }
            let report = service::import_directory(
                file,
                editor,
                Path::new(&path),
                None,
                &crate::import::ImportLimits::default(),
                |_| {},
            )
            .await
            .map_err(engine_error)?;
            Ok(serde_json::to_value(report).unwrap_or_default())
        }
        "elfiee_directory_sync" => {
            let a: BlockArgs = parse(name, args)?;
            let id = resolve(file, &a.block_id)?;
            let report = service::sync_directory(
                file,
                editor,
                &id,
                &crate::import::ImportLimits::default(),
                |_| {},
            )
            .await
            .map_err(engine_error)?;
            Ok(serde_json::to_value(report).unwrap_or_default())
        }
        "elfiee_terminal_run" => {
            let a: TerminalRunArgs = parse(name, args)?;
            let id = resolve(file, &a.terminal_id)?;
            let out = service::run_terminal(file, editor, &id, &a.command, None)
                .await
                .map_err(engine_error)?;
            let mut v = serde_json::Map::new();
            v.insert("terminal_id".into(), json!(id));
            match out {
                Value::Object(m) => v.extend(m),
                other => {
                    v.insert("output".into(), other);
                }
            }
            Ok(Value::Object(v))
        }
        "elfiee_exec" => {
            let a: ExecArgs = parse(name, args)?;
            let block = match a.block_id.as_deref() {
                None | Some("*") => None,
                Some(b) => Some(resolve(file, b)?),
            };
            let payload = Value::Object(a.payload.unwrap_or_default());
            let ev = file
                .submit(Command::new(
                    editor,
                    &a.capability,
                    block.as_deref(),
                    payload,
                ))
                .await
                .map_err(|e| match e {
                    EngineError::Rejected(c @ CapError::UnknownCapability(_)) => {
                        ToolError::new("unknown_capability", c.to_string())
                    }
                    e => engine_error(e),
                })?;
            let events: Vec<Value> = ev.iter().map(|e| event_json(e, e.value.clone())).collect();
            Ok(json!({
                "capability": a.capability,
                "block_id": block,
                "seq": last_seq(&ev),
                "count": events.len(),
                "events": events,
            }))
        }
        "elfiee_proposal_list" => {
            let a: ProposalListArgs = parse(name, args)?;
            super::proposals::list(file, editor, a).await
        }
        "elfiee_propose" => {
            let a: ProposeArgs = parse(name, args)?;
            super::proposals::propose(file, editor, a).await
        }
        other => Err(ToolError::new(
            UNKNOWN_TOOL,
            format!(
                "unknown tool '{other}'; the tools are: {}",
                catalogue()
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

async fn submit(
    file: &FileHandle,
    editor: &str,
    cap: &str,
    block: Option<&str>,
    payload: Value,
) -> Result<Vec<Event>, ToolError> {
    file.submit(Command::new(editor, cap, block, payload))
        .await
        .map_err(engine_error)
}

fn last_seq(ev: &[Event]) -> u64 {
    ev.last().map(|e| e.seq).unwrap_or(0)
}

/// The `implement` link from the agent whose editor is `editor` to its new block `id` (seed
/// 002 §2.1B), when `editor` is an agent's.
fn implement_link(file: &FileHandle, editor: &str, id: &str) -> Option<Command> {
    super::proposals::agent_of(file, editor).map(|agent| {
        Command::new(
            editor,
            "core.link",
            Some(&agent),
            json!({"to": id, "relation": "implement"}),
        )
    })
}

/// A new file of directory `dir` at `path`, linked from the agent, in one batch.
async fn directory_add(
    file: &FileHandle,
    editor: &str,
    dir: &str,
    path: &str,
    content: Option<String>,
) -> Result<Value, ToolError> {
    let dir = resolve(file, dir)?;
    let mut payload = json!({"path": path});
    if let Some(c) = &content {
        payload["content"] = json!(c);
    }
    let add = Command::new(editor, "directory.add", Some(&dir), payload);
    let ev = file.submit(add).await.map_err(engine_error)?;
    let created = ev
        .iter()
        .find(|e| e.cap_id() == "core.create")
        .map(|e| e.entity.clone())
        .unwrap_or_default();
    let mut seq = last_seq(&ev);
    if let Some(link) = implement_link(file, editor, &created) {
        // The file is made; a failed link (e.g. a revoked core.link) leaves it unlinked.
        if let Ok(l) = file.submit(link).await {
            seq = last_seq(&l);
        }
    }
    Ok(json!({
        "directory": dir,
        "path": path,
        "block_id": created,
        "block_type": file_block_type(path),
        "bytes": content.map_or(0, |c| c.len()),
        "seq": seq,
    }))
}

/// `elfiee_steps`, `elfiee_undo`, `elfiee_redo` on session `session`. The undo is run as the
/// owner of the agent block (it needs `core.restore`, which agents do not hold): what it
/// restores comes from the session's recorded checkpoints, never from the caller.
async fn checkpoint_tool(
    file: &FileHandle,
    editor: &str,
    session: &str,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    use crate::checkpoint;
    let history = || {
        checkpoint::History::load(file, session).map_err(|_| {
            ToolError::new(
                "rejected",
                format!("this session ({session}) has no recorded steps yet"),
            )
        })
    };
    let as_owner = |h: &checkpoint::History| {
        file.with_state(|s| s.block(&h.agent_block_id).map(|b| b.owner.clone()))
            .unwrap_or_else(|| editor.to_owned())
    };
    match name {
        "elfiee_steps" => {
            parse::<NoArgs>(name, args)?;
            let steps = match checkpoint::History::load(file, session) {
                Ok(h) => h.infos(file),
                Err(_) => Vec::new(),
            };
            Ok(json!({"session_id": session, "steps": steps}))
        }
        "elfiee_undo" => {
            let a: UndoArgs = parse(name, args)?;
            let h = history()?;
            let r = checkpoint::undo(
                file,
                &as_owner(&h),
                session,
                checkpoint::Selection::Last(a.steps.unwrap_or(1)),
                false,
            )
            .await
            .map_err(engine_error)?;
            Ok(serde_json::to_value(r).unwrap_or_default())
        }
        _ => {
            parse::<NoArgs>(name, args)?;
            let h = history()?;
            let r = checkpoint::redo(file, &as_owner(&h), session, false)
                .await
                .map_err(engine_error)?;
            Ok(serde_json::to_value(r).unwrap_or_default())
        }
    }
}

/// A block id, or the id of the one block with that name.
fn resolve(file: &FileHandle, input: &str) -> Result<String, ToolError> {
    file.with_state(|s| resolve_in(s, input))
}

fn resolve_in(s: &State, input: &str) -> Result<String, ToolError> {
    if s.blocks.contains_key(input) {
        return Ok(input.to_owned());
    }
    let by_name: Vec<&str> = s
        .blocks
        .values()
        .filter(|b| b.name == input)
        .map(|b| b.block_id.as_str())
        .collect();
    match by_name.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(ToolError::new(
            "not_found",
            format!(
                "block '{input}' not found; call elfiee_block_list to see the blocks and their ids"
            ),
        )),
        many => Err(ToolError::new(
            "ambiguous",
            format!(
                "'{input}' is the name of several blocks ({}); pass the block_id instead",
                many.join(", ")
            ),
        )),
    }
}

fn may_read(s: &State, editor: &str, b: &Block) -> bool {
    elfiee_capabilities::cbac::authorize(s, editor, &format!("{}.read", b.block_type), Some(b))
        .is_ok()
}

/// Blocks that link to `id`, as `block show` prints them: `[{"from", "relation"}]`.
fn parents(s: &State, id: &str) -> Vec<Value> {
    s.parents_of(id)
        .map(|(r, from)| json!({"from": from, "relation": r.as_str()}))
        .collect()
}

/// `{"blocks": [...]}`: every block without its contents.
pub fn block_list(file: &FileHandle, editor: &str) -> Value {
    file.with_state(|s| {
        let blocks: Vec<Value> = s
            .blocks
            .values()
            .map(|b| {
                json!({
                    "block_id": b.block_id,
                    "name": b.name,
                    "block_type": b.block_type,
                    "owner": b.owner,
                    "description": b.metadata.description,
                    "children": b.children,
                    "updated_at": ts!(b.metadata.updated_at),
                    "readable": may_read(s, editor, b),
                })
            })
            .collect();
        json!({"count": blocks.len(), "blocks": blocks})
    })
}

/// One block with contents, children and parents, as `editor` may read it.
pub fn block_get(file: &FileHandle, editor: &str, input: &str) -> Result<Value, ToolError> {
    let id = resolve(file, input)?;
    let b = file.read_block(editor, &id).map_err(engine_error)?;
    Ok(file.with_state(|s| {
        json!({
            "block_id": b.block_id,
            "name": b.name,
            "block_type": b.block_type,
            "owner": b.owner,
            "contents": b.contents,
            "children": b.children,
            "parents": parents(s, &b.block_id),
            // The seq of the block's last change: the version read.
            "seq": s.block_seq.get(&b.block_id).copied(),
            "metadata": {
                "description": b.metadata.description,
                "created_at": ts!(b.metadata.created_at),
                "updated_at": ts!(b.metadata.updated_at),
                "custom": b.metadata.custom,
            },
        })
    }))
}

fn mentions(e: &Event, block: &str) -> bool {
    e.entity == block
        || e.value.get("to").and_then(Value::as_str) == Some(block)
        || e.value.get("block_id").and_then(Value::as_str) == Some(block)
}

/// The events that concern a block the editor may read, oldest first.
pub fn block_history(file: &FileHandle, editor: &str, input: &str) -> Result<Value, ToolError> {
    let id = resolve(file, input)?;
    // Writes carry contents: the history is readable exactly when the block is.
    file.read_block(editor, &id).map_err(engine_error)?;
    let events = file.events(1).map_err(engine_error)?;
    let events: Vec<Value> = events
        .iter()
        .filter(|e| mentions(e, &id))
        .map(|e| {
            let value = file
                .resolve_value(&e.value)
                .unwrap_or_else(|_| e.value.clone());
            event_json(e, value)
        })
        .collect();
    Ok(json!({"block_id": id, "count": events.len(), "events": events}))
}
