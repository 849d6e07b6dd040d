//! # Elfiee
//!
//! An embeddable runtime for `.elf` documents: block-based, event-sourced, with capability-based
//! access control. One actor per open file serializes commands through pure capability handlers
//! into an append-only sled event log; replaying the log rebuilds the state.
//!
//! This crate is the facade: it re-exports the workspace crates and hosts the `elfiee` CLI
//! ([`cli`]; a program with its own capabilities runs it over them with [`cli::main_with`]).
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), elfiee::EngineError> {
//! use elfiee::{Command, Engine};
//! use serde_json::json;
//!
//! let file = Engine::global().init("demo.elf", "Alice").await?;
//! let spec = file
//!     .submit(Command::new("alice", "core.create", None, json!({"name": "Spec", "block_type": "markdown"})))
//!     .await?;
//! let id = &spec[0].entity;
//! file.submit(Command::new("alice", "markdown.write", Some(id), json!({"markdown": "# Hello"}))).await?;
//! assert_eq!(file.block(id).unwrap().contents["markdown"], "# Hello");
//! file.close().await;
//! # Ok(()) }
//! ```
//!
//! Crates: [`model`] (data types), [`projections`] (pure state + apply), [`capabilities`]
//! (pure handlers + CBAC), [`engine`] (actor, log, snapshots, subscriptions) — the core, always
//! in. Layers behind Cargo features (all on by default; `default-features = false` leaves
//! them out): `agents` (`elfiee::adapters`: effects, LLM proposals, the agent loop,
//! checkpoints), `mcp` (the MCP server), `sync` (`elfiee::sync`), `graph` (`elfiee::graph`),
//! `cli` (`elfiee::cli` and the `elfiee` binary, with every layer), `testkit`.

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "graph")]
pub mod graph;
#[cfg(feature = "testkit")]
pub mod testkit;

#[cfg(feature = "agents")]
pub use elfiee_adapters as adapters;
pub use elfiee_capabilities as capabilities;
pub use elfiee_engine as engine;
pub use elfiee_model as model;
pub use elfiee_projections as projections;
#[cfg(feature = "sync")]
pub use elfiee_sync as sync;

pub use elfiee_engine::{
    replay, verify, Engine, EngineConfig, EngineError, FileHandle, Subscription,
};
pub use elfiee_model::{
    Block, CapError, Command, Editor, EditorType, Event, Grant, Relation, WILDCARD,
};
pub use elfiee_projections::State;
