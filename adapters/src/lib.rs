//! Effect actors and outside-world I/O.
//!
//! The engine commits events; effects in this crate react to committed events and do the I/O
//! (filesystem, shell, Claude Code configuration), then commit the outcome as an event. Replay
//! never runs them: they run only where a host calls [`attach`].
//!
//! - [`effects`] — the runtime: one supervised actor per effect, concurrent runs ordered by
//!   key, retries with backoff, durable checkpoints, exactly-once outcomes.
//! - [`builtin`] — the built-in effects registered with the runtime, and their settings.
//! - [`claude`] — the Claude Code integration of `agent.enable` / `agent.disable`.
//! - [`hooks`] — Claude Code's own tool calls recorded as steps of its sessions, governed by
//!   the document's grants (its hooks, installed by enable).
//! - [`terminal`] — `terminal.execute` runs a shell command with a timeout.
//! - [`export`] — `directory.export` writes blocks back under the directory's root.
//! - [`import`] — reads a folder into a `directory.import` command.
//! - [`json_file`] — order- and format-preserving edits of JSON config files, written atomically.
//! - [`llm`] — LLM providers (Anthropic, OpenAI-compatible), streaming, retry, `<command>` parser.
//! - [`checkpoint`] — agent steps as checkpoints (document seq range + project files) and
//!   undo / redo of them.
//! - [`service`] — the operations a host calls (create an agent, import a folder, run a command
//!   and wait for its output).

pub mod agent_loop;
pub mod bounded;
pub mod builtin;
pub mod checkpoint;
pub mod claude;
pub mod effects;
pub mod export;
pub mod hooks;
pub mod import;
pub mod invoke;
pub mod json_file;
pub mod llm;
pub mod mcp;
mod payload;
pub mod service;
pub mod terminal;

pub use builtin::{attach, builtin_effects, EffectsConfig};
pub use effects::EffectsHandle;
