// Generated from the Rust types by tests/ts_bindings.rs — do not edit.
// Regenerate: ELFIEE_BLESS=1 cargo test --test ts_bindings

export type JsonValue = number | string | boolean | Array<JsonValue> | { [key in string]: JsonValue } | null;

export type Block = { block_id: string, name: string, 
/**
 * `markdown`, `code`, `directory`, `terminal`, `agent`, or any extension type.
 */
block_type: string, 
/**
 * Type-specific content, e.g. `{"markdown": "..."}` or `{"text": "...", "language": "rust"}`.
 * In the engine's state a large body (see [`ContentRef`]) is not here but in
 * `content_refs`; reads through the engine put it back.
 */
contents: JsonValue, 
/**
 * Bodies kept out of the state: `contents` key → reference into the document's content
 * store. Empty in every block the engine hands out to readers (they are resolved).
 */
content_refs?: { [key in string]?: ContentRef }, 
/**
 * Outgoing relations: relation name (`reference`, `implement`) → target block ids, in link order.
 */
children: { [key in string]: Array<string> }, owner: string, metadata: BlockMetadata, };

export type ContentRef = { 
/**
 * blake3 of the body's bytes: 64 lowercase hex characters in JSON, 32 bytes in the
 * binary encodings (snapshots, the state digest).
 */
hash: string, 
/**
 * Length of the body in bytes.
 */
len: number, };

export type BlockMetadata = { description?: string | null, created_at: number, updated_at: number, custom: { [key in string]: JsonValue }, };

export type Relation = "reference" | "implement";

export type Editor = { editor_id: string, name: string, editor_type: EditorType, };

export type EditorType = "human" | "agent";

export type Grant = { editor_id: string, cap_id: string, block_id: string, };

export type Command = { 
/**
 * Idempotency key: resubmitting a committed `cmd_id` returns the original events.
 */
cmd_id: string, editor_id: string, cap_id: string, 
/**
 * Target block; `None` for capabilities that target the whole file (`*`).
 */
block_id?: string | null, payload: JsonValue, 
/**
 * Optimistic concurrency: reject with `Conflict` if the target block changed after this seq.
 */
expected_seq?: number | null, };

export type Event = { seq: number, event_id: string, cmd_id: string, entity: string, attribute: string, value: JsonValue, 
/**
 * Vector clock: `"<node_id>:<editor_id>"` → count.
 */
clock: { [key in string]: number }, created_at: number, hash: string, };

export type EventPlace = { 
/**
 * The node (device) that committed it: its key, 64 hex characters.
 */
origin_node: string, 
/**
 * Its place in that node's own events: 1, 2, 3, …
 */
origin_seq: number, 
/**
 * Its hash in the committing node's log; `None` for an event that came through a build
 * from before issue 28, which did not carry it.
 */
origin_hash: string | null, local_seq: number, local_hash: string, };

export type EventDraft = { entity: string, 
/**
 * Capability id naming the change (`core.create`, `core.unlink`, …).
 */
kind: string, value: JsonValue, };

export type CapError = { "kind": "unknown_capability", "detail": string } | { "kind": "unauthorized", "detail": { editor: string, cap: string, block: string, } } | { "kind": "unknown_editor", "detail": string } | { "kind": "block_not_found", "detail": string } | { "kind": "invalid_payload", "detail": { cap: string, reason: string, } } | { "kind": "rejected", "detail": string } | { "kind": "conflict", "detail": { block: string, expected: number, actual: number, } } | { "kind": "handler_panic", "detail": { cap: string, message: string, } };

export type AgentContents = { 
/**
 * Display name (default `elfiee`).
 */
name: string, 
/**
 * The directory block of the project this agent integrates with (Claude Code). `None` for
 * an LLM-only agent.
 */
target_project_id: string | null, status: AgentStatus, 
/**
 * The agent's own editor (`agent-<uuid>`): every change it makes is authored by it.
 */
editor_id: string, };

export type AgentStatus = "enabled" | "disabled";

export type ImportedFile = { 
/**
 * Path relative to the imported root, `/`-separated, no `..`.
 */
path: string, 
/**
 * UTF-8 text of the file.
 */
content: string, };

export type SkippedFile = { path: string, reason: string, };

export type DirectoryEntry = { path: string, block_id: string, 
/**
 * blake3 (hex) of what the file on disk held when the document last read (import, sync)
 * or wrote (export) it; absent for a file made inside the document and not exported yet.
 * The entry is dirty when its block's body differs from it.
 */
disk?: string, };

export type PendingRemoval = { path: string, 
/**
 * blake3 of the file as the document last knew it: the export removes it only if the
 * disk still holds exactly that.
 */
disk: string, };

export type TerminalContents = { 
/**
 * Program that runs commands as `<shell> -c <command>` (default `sh`).
 */
shell: string, env: { [key in string]: string }, 
/**
 * Directory block whose `external_root_path` is the working directory.
 */
linked_directory_id: string | null, };

export type CoreCreatePayload = { name: string, block_type: string, 
/**
 * Initial contents; `{}` when absent.
 */
contents: JsonValue | null, description: string | null, 
/**
 * Caller-chosen id (must be unused); generated from the context when absent.
 */
block_id: string | null, };

export type RenamePayload = { name: string, };

export type UpdateMetadataPayload = { 
/**
 * `Some(null)` clears it; absent leaves it.
 */
description?: string | null, custom: { [key in string]: JsonValue }, };

export type LinkPayload = { 
/**
 * Target block id.
 */
to: string, 
/**
 * `reference` or `implement`.
 */
relation: string, };

export type GrantPayload = { 
/**
 * Grantee editor id, or `*` for every editor.
 */
editor_id: string, cap_id: string, };

export type EditorCreatePayload = { name: string, editor_type: EditorType, editor_id: string | null, };

export type EditorDeletePayload = { editor_id: string, };

export type InitPayload = { 
/**
 * Display name of the owner.
 */
name: string, };

export type MarkdownWritePayload = { markdown: string, };

export type CodeWritePayload = { text: string, language: string | null, };

export type DirectoryImportPayload = { 
/**
 * Absolute path of the imported folder.
 */
root: string, 
/**
 * Block name; default: the folder's name.
 */
name: string | null, files: Array<ImportedFile>, skipped: Array<SkippedFile>, 
/**
 * More files follow in `directory.sync` commands (a streaming import): the block is
 * marked `import_incomplete` until a sync with `done: true`.
 */
pending: boolean, };

export type DirectorySyncPayload = { 
/**
 * New or changed files (unchanged ones may be sent too: they write nothing).
 */
files: Array<ImportedFile>, 
/**
 * Paths gone from disk.
 */
deleted: Array<string>, skipped: Array<SkippedFile>, 
/**
 * The last chunk: clears `import_incomplete`.
 */
done: boolean, };

export type DirectoryAddPayload = { 
/**
 * Relative path inside the directory (`/`-separated, no `..`).
 */
path: string, 
/**
 * Text of the new file (a `markdown` block for `.md`, else `code`); empty when absent.
 */
content: string | null, 
/**
 * Place this existing markdown or code block at `path` instead of making a new one.
 */
block_id: string | null, };

export type DirectoryMovePayload = { from: string, to: string, };

export type DirectoryRemovePayload = { path: string, 
/**
 * Keep the block (only the entry leaves the directory).
 */
keep_block: boolean, };

export type DirectoryStatus = { 
/**
 * Files made (or moved) inside the document, not written out yet.
 */
new: Array<string>, 
/**
 * Files whose text changed in the document since the last import, rescan or export.
 */
modified: Array<string>, 
/**
 * Files that left the directory (removed or moved away) still on disk.
 */
removed: Array<string>, 
/**
 * Entries whose text is what the disk was last seen to hold.
 */
clean: number, };

export type ExportPlan = { root: string, 
/**
 * Files to write: new ones and ones whose text changed in the document.
 */
write: Array<string>, 
/**
 * Files to remove: they left the directory and the disk still holds what the document
 * last saw there.
 */
remove: Array<string>, 
/**
 * Entries already on disk as they are (not touched).
 */
unchanged: number, 
/**
 * Files the export leaves alone, and why (changed on disk since the document last saw
 * them, a path that would leave the root, ...).
 */
refused: Array<Refusal>, 
/**
 * Entries whose file on disk already holds their text: the disk hash to record.
 */
disk: { [key in string]: string }, };

export type ProposedCommand = { cap_id: string, 
/**
 * Target block; `None` for commands without one (`core.create`, …).
 */
block_id: string | null, 
/**
 * A JSON object (`{}` when the command has no `<payload>`).
 */
payload: JsonValue, description: string | null, };

export type Proposal = { proposal_id: string, agent_block_id: string, status: ProposalStatus, prompt: string, proposed_commands: Array<ProposedCommand>, 
/**
 * Problems found while reading the model's `<command>` blocks.
 */
parse_errors: Array<string>, 
/**
 * Why the model call failed (status `failed`).
 */
error: string | null, model: string | null, 
/**
 * The model's whole answer.
 */
raw_response: string | null, 
/**
 * Blocks whose contents went into the model's context.
 */
context_blocks: Array<string>, 
/**
 * Seq of the `agent.invoke` that asked, and of the proposal itself.
 */
trigger_seq: number, created_seq: number, 
/**
 * Who decided, when, and their feedback (approved / rejected).
 */
decided_by: string | null, decided_seq: number | null, feedback: string | null, };

export type ProposalStatus = "pending" | "failed" | "approved" | "rejected";

export type ExportBeforeRun = "ask" | "always" | "never";

export type Refusal = { path: string, reason: string, };

export type TerminalCreatePayload = { name: string, shell: string | null, env: { [key in string]: string }, 
/**
 * Directory block whose folder is the working directory.
 */
linked_directory_id: string | null, };

export type TerminalExecutePayload = { command: string, 
/**
 * Seconds before the command is killed (1–3600; default 120).
 */
timeout_secs: number | null, };

export type AgentCreatePayload = { 
/**
 * Directory block of the project to integrate with; absent for an LLM-only agent.
 */
target_project_id: string | null, 
/**
 * Default `elfiee`.
 */
name: string | null, };

export type AgentConfigurePayload = { provider: string | null, model: string | null, api_key_env: string | null, system_prompt: string | null, max_context_tokens: number | null, base_url: string | null, 
/**
 * Sampling temperature, 0–2; a negative value clears it (the provider's default).
 */
temperature: number | null, 
/**
 * Reply language (`zh`, `en`, or a name like `Chinese`); empty clears it.
 */
language: string | null, 
/**
 * Default permission rules of the agent loop: `[{"permission", "pattern", "action":
 * "allow" | "deny" | "ask"}]`, later rules winning; `[]` clears them.
 */
rules: Array<{ permission: string, pattern: string, action: "allow" | "deny" | "ask" }>, 
/**
 * Knowledge seeds (seed 003 §4): standing facts the agent loop always recalls into the
 * system prompt's memory section; replaces the list, `[]` clears it. At most
 * `MAX_KNOWLEDGE` entries of at most `MAX_KNOWLEDGE_CHARS` characters each.
 */
knowledge: Array<string> | null, };

export type AgentConfig = { provider: string, model: string, api_key_env: string, system_prompt: string | null, max_context_tokens: number, base_url: string | null, temperature?: number, language?: string, 
/**
 * Default permission rules of the agent loop (see `AgentConfigurePayload::rules`).
 */
rules?: Array<{ permission: string, pattern: string, action: "allow" | "deny" | "ask" }>, 
/**
 * Knowledge seeds: standing facts recalled into every agent-loop system prompt.
 */
knowledge?: Array<string>, };

export type AgentInvokePayload = { prompt: string, 
/**
 * Extra blocks to start the context walk from (besides the agent's own references).
 */
context_block_ids: Array<string>, };

export type AgentApprovePayload = { proposal_id: string, approved: boolean, feedback: string | null, };

export type EngineError = { "kind": "rejected", "detail": CapError } | { "kind": "not_an_elf", "detail": string } | { "kind": "newer_format", "detail": { 
/**
 * The document.
 */
path: string, 
/**
 * The format version its marker names.
 */
found: number, 
/**
 * The newest format version this build reads ([`elfiee_model::FORMAT_VERSION`]).
 */
supported: number, } } | { "kind": "already_exists", "detail": string } | { "kind": "locked", "detail": string } | { "kind": "payload_too_large", "detail": { 
/**
 * The payload's size in bytes (as JSON).
 */
size: number, 
/**
 * The limit in bytes.
 */
limit: number, } } | { "kind": "corrupt", "detail": { 
/**
 * The event's seq.
 */
seq: number, 
/**
 * What was wrong with it.
 */
reason: string, } } | { "kind": "storage", "detail": string } | { "kind": "effect", "detail": string } | { "kind": "closed" } | { "kind": "io", "detail": { 
/**
 * The file.
 */
path: string, 
/**
 * The operating system's message.
 */
message: string, } };

export type ReplayReport = { 
/**
 * Events replayed (the whole log, hash chain checked).
 */
events: number, 
/**
 * Blocks in the rebuilt state.
 */
blocks: number, 
/**
 * The rebuilt state's digest ([`State::digest`]): equal to the live state's.
 */
state_digest: string, 
/**
 * How long the replay took, in milliseconds.
 */
elapsed_ms: number, 
/**
 * Event kinds the folds do not know, with their event counts (their meaning is missing
 * from the state; see [`State::unknown_kinds`]).
 */
unknown_kinds?: { [key in string]: number }, };

export type VerifyReport = { 
/**
 * `problems` is empty.
 */
ok: boolean, 
/**
 * Events checked.
 */
events: number, 
/**
 * Commands found in the log (this device's), each checked against the command index.
 */
commands: number, 
/**
 * What became of the newest snapshot: `valid at seq N`, `invalid: …` or `not compared:
 * …`; `None` when there is none.
 */
snapshot: string | null, 
/**
 * Each problem found, in words (a broken chain, an index entry that disagrees, a body
 * that does not match its hash, a snapshot that differs).
 */
problems: Array<string>, 
/**
 * Event kinds the folds do not know, with their event counts: not a problem (the log is
 * whole), but their meaning is missing from the state this program shows.
 */
unknown_kinds?: { [key in string]: number }, };

export type ImportReport = { block_id: string, root: string, 
/**
 * Files the block holds now.
 */
files: number, 
/**
 * An interrupted import of the same folder was resumed.
 */
resumed: boolean, sync: SyncReport, skipped: Array<SkippedFile>, };

export type SyncReport = { block_id: string, root: string, 
/**
 * Files whose text changed (a write event each).
 */
changed: number, 
/**
 * New files (a new block each).
 */
added: number, 
/**
 * Files gone from disk (their blocks deleted).
 */
deleted: number, 
/**
 * Files equal to their block (no event).
 */
unchanged: number, 
/**
 * Text bytes sent (changed + added).
 */
bytes: number, 
/**
 * Commands submitted.
 */
chunks: number, skipped: Array<SkippedFile>, };

export type AgentResult = { agent_block_id: string, editor_id: string, status: string, needs_restart: boolean, message: string, warnings: Array<string>, };

export type LiveDelta = { agent_block_id: string, proposal_id: string, text: string, };

