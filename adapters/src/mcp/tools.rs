//! The Elfiee tool catalogue (DESIGN.md §7), independent of any protocol.
//!
//! One catalogue, two front-ends: the MCP server ([`super::server`]) exposes these tools, and the
//! agent loop can expose the same names, arguments and results. Each entry has a JSON Schema for
//! its arguments; [`call`] parses the arguments (unknown fields, missing fields and wrong types
//! are errors that say what was expected) and runs the tool **as the given editor** through the
//! engine: writes go through [`FileHandle::submit`] (CBAC + the pure handlers), reads through
//! [`FileHandle::read_block`] (which checks `<block_type>.read`). A failure is a [`ToolError`]
//! whose message says what to do; nothing fails silently.

use std::path::{Path, PathBuf};

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Block, CapError, Command, Event};
use elfiee_projections::State;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::service;

/// One tool: its name, what it does, and the JSON Schema of its arguments.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// JSON Schema (`type: object`) of the arguments; `required` lists the mandatory fields.
    pub input_schema: Value,
    /// Reads only; never changes the document.
    pub read_only: bool,
    /// May remove or overwrite content.
    pub destructive: bool,
}

/// A tool call that did not succeed: a short machine-readable `kind` and a message for the caller
/// that says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolError {
    pub kind: String,
    pub message: String,
}

impl ToolError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError {
            kind: kind.into(),
            message: message.into(),
        }
    }

    /// The JSON form used as structured error content: `{"error": {"kind", "message"}}`.
    pub fn to_json(&self) -> Value {
        json!({"error": {"kind": self.kind, "message": self.message}})
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

/// `kind` of the error [`call`] returns for a name that is not in the catalogue.
pub const UNKNOWN_TOOL: &str = "unknown_tool";

/// UTC time with millisecond precision, RFC 3339.
macro_rules! ts {
    ($d:expr) => {
        $d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    };
}

const RELATIONS: [&str; 2] = ["reference", "implement"];

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

fn object(props: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

fn block_id_prop(what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "description": format!("{what}: a block id from elfiee_block_list (a unique block name also works)")})
}

/// Every tool, in a stable order.
pub fn catalogue() -> Vec<ToolSpec> {
    let link_props = json!({
        "from": block_id_prop("Source block"),
        "to": block_id_prop("Target block"),
        "relation": {"type": "string", "enum": RELATIONS, "description": "`reference` (from cites to) or `implement` (from implements to)"},
    });
    vec![
        ToolSpec {
            name: "elfiee_block_list",
            title: "List blocks",
            description: "List every block of the .elf document: id, name, type, owner, outgoing relations, and whether you may read its contents (call elfiee_block_get for the contents).",
            input_schema: object(json!({}), &[]),
            read_only: true,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_block_get",
            title: "Get a block",
            description: "Read one block: its contents, children (outgoing relations) and parents (blocks that link to it). Needs the `<type>.read` capability (e.g. markdown.read) unless you own the block.",
            input_schema: object(json!({"block_id": block_id_prop("The block")}), &["block_id"]),
            read_only: true,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_block_create",
            title: "Create a block",
            description: "Create an empty block; you become its owner. Use block_type `markdown` for prose and `code` for source, then write it with elfiee_markdown_write / elfiee_code_write. With `directory` and `path` the block is a new file of that directory (named by its path; `.md` files are markdown, others code), written to the project folder by the next export. Returns the new block_id.",
            input_schema: object(
                json!({
                    "block_type": {"type": "string", "minLength": 1, "description": "Block type, e.g. `markdown` or `code`"},
                    "name": {"type": "string", "minLength": 1, "description": "Human-readable block name (not needed with `path`: a file is named by its path)"},
                    "directory": block_id_prop("A directory block to make the block a file of"),
                    "path": {"type": "string", "minLength": 1, "description": "With `directory`: the file's path inside it, e.g. `src/lib.rs`"},
                }),
                &["block_type"],
            ),
            read_only: false,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_block_delete",
            title: "Delete a block",
            description: "Delete a block and every relation to or from it. Needs core.delete on the block unless you own it.",
            input_schema: object(json!({"block_id": block_id_prop("The block to delete")}), &["block_id"]),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_markdown_write",
            title: "Write markdown",
            description: "Replace the contents of a markdown block with the given markdown text.",
            input_schema: object(
                json!({
                    "block_id": block_id_prop("The markdown block"),
                    "markdown": {"type": "string", "description": "The whole new markdown text"},
                }),
                &["block_id", "markdown"],
            ),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_code_write",
            title: "Write code",
            description: "Replace the contents of a code block with the given source text (and optionally set its language).",
            input_schema: object(
                json!({
                    "block_id": block_id_prop("The code block"),
                    "text": {"type": "string", "description": "The whole new source text"},
                    "language": {"type": "string", "description": "Language name, e.g. `rust`; optional"},
                }),
                &["block_id", "text"],
            ),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_block_link",
            title: "Link two blocks",
            description: "Add a relation from one block to another. No self-links, no cycles, no duplicates.",
            input_schema: object(link_props.clone(), &["from", "to", "relation"]),
            read_only: false,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_block_unlink",
            title: "Unlink two blocks",
            description: "Remove a relation from one block to another.",
            input_schema: object(link_props, &["from", "to", "relation"]),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_block_history",
            title: "Block history",
            description: "The committed events that concern a block (its creation, writes, links to and from it, grants on it), oldest first, with who made each change.",
            input_schema: object(json!({"block_id": block_id_prop("The block")}), &["block_id"]),
            read_only: true,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_directory_import",
            title: "Import a folder",
            description: "Import a folder from disk as a directory block with one markdown/code block per text file (skips .git, target, node_modules, binary and oversize files). A relative path is taken from the server's working directory.",
            input_schema: object(
                json!({"path": {"type": "string", "minLength": 1, "description": "Folder to import"}}),
                &["path"],
            ),
            read_only: false,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_directory_sync",
            title: "Rescan a folder",
            description: "Bring a directory block up to date with its folder on disk: changed files are written, new files get blocks, deleted files' blocks are deleted; unchanged files produce no event. Returns the counts (changed, added, deleted, unchanged).",
            input_schema: object(json!({"block_id": block_id_prop("The directory block")}), &["block_id"]),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_directory_add",
            title: "Add a file to a directory",
            description: "Make a new file in a directory block at a relative path (`src/lib.rs`), with its text: a markdown block for `.md`, a code block otherwise, owned by you and linked from you (`implement`). The next export (before any terminal or shell command in that directory) writes it to the project folder. Returns the new block_id.",
            input_schema: object(
                json!({
                    "directory": block_id_prop("The directory block"),
                    "path": {"type": "string", "minLength": 1, "description": "Relative path inside the directory, `/`-separated, no `..`"},
                    "content": {"type": "string", "description": "The file's text (default empty)"},
                }),
                &["directory", "path"],
            ),
            read_only: false,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_directory_move",
            title: "Move a file in a directory",
            description: "Move (rename) a file of a directory block to another relative path. The next export renames it in the project folder.",
            input_schema: object(
                json!({
                    "directory": block_id_prop("The directory block"),
                    "from": {"type": "string", "minLength": 1, "description": "The file's current path"},
                    "to": {"type": "string", "minLength": 1, "description": "Its new path"},
                }),
                &["directory", "from", "to"],
            ),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_directory_remove",
            title: "Remove a file from a directory",
            description: "Remove a file from a directory block (its block is deleted unless keep_block). The next export deletes it from the project folder, unless the file there changed since it was last read.",
            input_schema: object(
                json!({
                    "directory": block_id_prop("The directory block"),
                    "path": {"type": "string", "minLength": 1, "description": "The file's path"},
                    "keep_block": {"type": "boolean", "description": "Keep the block, only take it out of the directory (default false)"},
                }),
                &["directory", "path"],
            ),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_steps",
            title: "List your checkpoints",
            description: "Your steps in this session, oldest first, each a checkpoint: the document's seq range it changed, the project files it created, modified and deleted, and whether it is done or undone.",
            input_schema: object(json!({}), &[]),
            read_only: true,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_undo",
            title: "Undo your last steps",
            description: "Take back your newest `steps` steps of this session (default 1) in the document and in the project folder, byte for byte. Refused, with nothing changed, when a block or file you changed was changed since by someone else. elfiee_redo brings them back.",
            input_schema: object(
                json!({"steps": {"type": "integer", "minimum": 1, "description": "How many of your newest steps (default 1)"}}),
                &[],
            ),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_redo",
            title: "Redo what you undid",
            description: "Bring back the steps your newest elfiee_undo took back, in the document and in the project folder.",
            input_schema: object(json!({}), &[]),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_terminal_run",
            title: "Run a terminal command",
            description: "Run a shell command in a terminal block (its working directory is the terminal's linked directory) and wait for the recorded output: stdout, stderr, exit_code.",
            input_schema: object(
                json!({
                    "terminal_id": block_id_prop("The terminal block"),
                    "command": {"type": "string", "minLength": 1, "description": "Shell command line"},
                }),
                &["terminal_id", "command"],
            ),
            read_only: false,
            destructive: true,
        },
        ToolSpec {
            name: "elfiee_proposal_list",
            title: "List proposals",
            description: "List change proposals with their status (pending, approved, rejected, failed), oldest first: yours when you are an agent, every agent's otherwise. Each has its proposal_id, prompt and proposed_commands; a human decides a pending one with `elfiee agent approve` / `reject`.",
            input_schema: object(json!({}), &[]),
            read_only: true,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_propose",
            title: "Propose changes",
            description: "Propose commands ({cap_id, block_id?, payload}) for a human to approve or reject; nothing runs now. Only an agent may propose. Returns the pending proposal_id; on `elfiee agent approve` every command runs as you, all or nothing, each checked against your grants.",
            input_schema: object(
                json!({
                    "commands": {
                        "type": "array",
                        "description": "Commands to propose, each {cap_id, block_id?, payload}",
                        "items": {
                            "type": "object",
                            "properties": {
                                "cap_id": {"type": "string"},
                                "block_id": {"type": "string"},
                                "payload": {"type": "object"},
                            },
                            "required": ["cap_id"],
                        },
                    },
                    "description": {"type": "string", "description": "Why these changes"},
                }),
                &["commands", "description"],
            ),
            read_only: false,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_exec",
            title: "Run any capability",
            description: "Run one command of any capability the document's program knows (core.create, markdown.write, core.grant, or a block type an embedding program added), as you, checked against your grants like every write. Use the specific tools when one fits; this one is for capabilities they do not cover. Returns the committed events (seq, kind, entity, value).",
            input_schema: object(
                json!({
                    "capability": {"type": "string", "minLength": 1, "description": "Capability id, e.g. `markdown.write` or `core.create`"},
                    "block_id": {"type": "string", "minLength": 1, "description": "The block the command targets: a block id from elfiee_block_list (a unique block name also works); omit it (or pass `*`) for commands on the whole document such as core.create"},
                    "payload": {"type": "object", "description": "The command's payload, as the capability expects it (default {}), e.g. {\"markdown\": \"# Title\"} for markdown.write"},
                }),
                &["capability"],
            ),
            read_only: false,
            // It can run any capability, deletes and overwrites included.
            destructive: true,
        },
    ]
}

/// Whether `name` is a tool of the catalogue.
pub fn is_known(name: &str) -> bool {
    catalogue().iter().any(|t| t.name == name)
}

// Arguments. Unknown fields are errors: a typo must not be silently ignored.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockArgs {
    pub block_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    pub block_type: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub directory: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
}

/// `elfiee_directory_add {directory, path, content?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirAddArgs {
    pub directory: String,
    pub path: String,
    #[serde(default)]
    pub content: Option<String>,
}

/// `elfiee_directory_move {directory, from, to}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirMoveArgs {
    pub directory: String,
    pub from: String,
    pub to: String,
}

/// `elfiee_directory_remove {directory, path, keep_block?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirRemoveArgs {
    pub directory: String,
    pub path: String,
    #[serde(default)]
    pub keep_block: bool,
}

/// `elfiee_undo {steps?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UndoArgs {
    #[serde(default)]
    pub steps: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkdownWriteArgs {
    pub block_id: String,
    pub markdown: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeWriteArgs {
    pub block_id: String,
    pub text: String,
    #[serde(default)]
    pub language: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkArgs {
    pub from: String,
    pub to: String,
    pub relation: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportArgs {
    pub path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalRunArgs {
    pub terminal_id: String,
    pub command: String,
}

/// `elfiee_exec {capability, block_id?, payload?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    pub capability: String,
    #[serde(default)]
    pub block_id: Option<String>,
    #[serde(default)]
    pub payload: Option<serde_json::Map<String, Value>>,
}

/// `elfiee_proposal_list {}`.
pub type ProposalListArgs = NoArgs;

/// `elfiee_propose {commands, description}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposeArgs {
    pub commands: Vec<Value>,
    pub description: String,
}

fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    let args = if args.is_null() { json!({}) } else { args };
    serde_json::from_value(args).map_err(|e| {
        let expected = catalogue()
            .into_iter()
            .find(|t| t.name == tool)
            .map(|t| describe_schema(&t.input_schema))
            .unwrap_or_default();
        ToolError::new(
            "invalid_arguments",
            format!("invalid arguments for {tool}: {e}; expected {expected}"),
        )
    })
}

/// `{block_id: string, language?: string}` from a tool's input schema.
fn describe_schema(schema: &Value) -> String {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<String> = schema["properties"]
        .as_object()
        .map(|p| {
            p.iter()
                .map(|(k, v)| {
                    let opt = if required.contains(&k.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    let ty = match v.get("enum").and_then(Value::as_array) {
                        Some(e) => e
                            .iter()
                            .filter_map(Value::as_str)
                            .map(|s| format!("\"{s}\""))
                            .collect::<Vec<_>>()
                            .join(" | "),
                        None => v["type"].as_str().unwrap_or("any").to_owned(),
                    };
                    format!("{k}{opt}: {ty}")
                })
                .collect()
        })
        .unwrap_or_default();
    format!("{{{}}}", fields.join(", "))
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
                    let ty = file_type_of(&path);
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

/// The block type `directory.add` gives a file at `path`.
fn file_type_of(path: &str) -> &'static str {
    if path.to_ascii_lowercase().ends_with(".md") {
        "markdown"
    } else {
        "code"
    }
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
        "block_type": file_type_of(path),
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

/// Turns an engine error into a message for a tool caller.
pub fn engine_error(e: EngineError) -> ToolError {
    match e {
        EngineError::Rejected(CapError::BlockNotFound(id)) => ToolError::new(
            "not_found",
            format!("block '{id}' not found; call elfiee_block_list to see the blocks and their ids"),
        ),
        EngineError::Rejected(c @ CapError::Unauthorized { .. }) => ToolError::new("unauthorized", c.to_string()),
        EngineError::Rejected(c @ CapError::UnknownEditor(_)) => ToolError::new(
            "unauthorized",
            format!("{c}; this MCP server acts as that editor — start it with `elfiee mcp-server --editor ID` for an existing editor"),
        ),
        EngineError::Rejected(c @ CapError::InvalidPayload { .. }) => ToolError::new("invalid_arguments", c.to_string()),
        EngineError::Rejected(c @ CapError::Conflict { .. }) => ToolError::new("conflict", c.to_string()),
        EngineError::Rejected(c) => ToolError::new("rejected", c.to_string()),
        e @ EngineError::PayloadTooLarge { .. } => ToolError::new("too_large", e.to_string()),
        e => ToolError::new("failed", e.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_names_are_unique_and_schemas_are_objects() {
        let cat = catalogue();
        let mut names: Vec<&str> = cat.iter().map(|t| t.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 21);
        for t in &cat {
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            for r in t.input_schema["required"].as_array().unwrap() {
                assert!(
                    t.input_schema["properties"]
                        .get(r.as_str().unwrap())
                        .is_some(),
                    "{}: {r}",
                    t.name
                );
            }
        }
    }

    #[test]
    fn bad_arguments_say_what_was_expected() {
        let e = parse::<CodeWriteArgs>("elfiee_code_write", json!({"block_id": 5, "text": "x"}))
            .unwrap_err();
        assert_eq!(e.kind, "invalid_arguments");
        assert!(e.message.contains("invalid type"), "{}", e.message);
        for field in ["block_id: string", "text: string", "language?: string"] {
            assert!(e.message.contains(field), "{}", e.message);
        }
        let e = parse::<BlockArgs>("elfiee_block_get", json!({})).unwrap_err();
        assert!(
            e.message.contains("missing field `block_id`"),
            "{}",
            e.message
        );
        let e = parse::<BlockArgs>("elfiee_block_get", json!({"block_id": "a", "blockid": "b"}))
            .unwrap_err();
        assert!(
            e.message.contains("unknown field `blockid`"),
            "{}",
            e.message
        );
        assert!(parse::<NoArgs>("elfiee_block_list", Value::Null).is_ok());
    }
}
