//! The Elfiee tool catalogue (DESIGN.md §7): each tool's name, description and argument
//! schema, the typed arguments, and argument parsing whose errors say what was expected.
//! Running the tools is [`super::tools`].

use elfiee_engine::EngineError;
use elfiee_model::CapError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

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

/// `kind` of the error [`call`](super::tools::call) returns for a name that is not in the catalogue.
pub const UNKNOWN_TOOL: &str = "unknown_tool";

pub(crate) const RELATIONS: [&str; 2] = ["reference", "implement"];

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

pub(crate) fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
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
