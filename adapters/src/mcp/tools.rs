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
            description: "Create an empty block; you become its owner. Use block_type `markdown` for prose and `code` for source, then write it with elfiee_markdown_write / elfiee_code_write. Returns the new block_id.",
            input_schema: object(
                json!({
                    "block_type": {"type": "string", "minLength": 1, "description": "Block type, e.g. `markdown` or `code`"},
                    "name": {"type": "string", "minLength": 1, "description": "Human-readable block name"},
                }),
                &["block_type", "name"],
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
            description: "List pending and decided change proposals of the LLM agent layer. Not available in this build yet.",
            input_schema: object(json!({}), &[]),
            read_only: true,
            destructive: false,
        },
        ToolSpec {
            name: "elfiee_propose",
            title: "Propose changes",
            description: "Propose a set of commands for a human to approve or reject. Not available in this build yet.",
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
    pub name: String,
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

/// Runs tool `name` with JSON `args` as `editor`. The result is always a JSON object.
pub async fn call(
    file: &FileHandle,
    editor: &str,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
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
            // An agent's blocks are linked from the agent (`implement`, seed 002 §2.1B), in the
            // same atomic batch as the create.
            let agent = super::proposals::agent_of(file, editor);
            let ev = match agent {
                Some(agent) => {
                    let id = uuid::Uuid::new_v4().to_string();
                    file.submit_all(vec![
                        Command::new(
                            editor,
                            "core.create",
                            None,
                            json!({"name": a.name, "block_type": a.block_type, "block_id": id}),
                        ),
                        Command::new(
                            editor,
                            "core.link",
                            Some(&agent),
                            json!({"to": id, "relation": "implement"}),
                        ),
                    ])
                    .await
                    .map_err(engine_error)?
                }
                None => {
                    submit(
                        file,
                        editor,
                        "core.create",
                        None,
                        json!({"name": a.name, "block_type": a.block_type}),
                    )
                    .await?
                }
            };
            let created = ev
                .iter()
                .find(|e| e.cap_id() == "core.create")
                .unwrap_or(&ev[0]);
            Ok(json!({
                "block_id": created.entity,
                "name": a.name,
                "block_type": a.block_type,
                "owner": editor,
                "seq": created.seq,
            }))
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
        assert_eq!(names.len(), 15);
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
