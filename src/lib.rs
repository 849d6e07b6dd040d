//! # Elfiee
//!
//! An embeddable runtime for `.elf` documents: block-based, event-sourced, with capability-based
//! access control. One actor per open file serializes commands through pure capability
//! handlers into an append-only sled event log; replaying the log rebuilds the state exactly
//! (the same [`State::digest`]). Embed it in a Tauri app, or drive it from the `elfiee`
//! command line (the [`cli`] module, and the binary built from it).
//!
//! This crate is the facade: it re-exports the workspace's crates — [`model`] (data types),
//! [`projections`] (the pure state and its folds), [`capabilities`] (pure handlers and CBAC),
//! [`engine`] (the actor, the log, snapshots, subscriptions) — and the types most programs
//! need at its root.
//!
//! ## Quick start
//!
//! ```toml
//! [dependencies]
//! elfiee = { version = "0.1", default-features = false } # the engine core alone
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! serde_json = "1"
//! ```
//!
//! ```
//! use elfiee::{Command, Engine};
//! use serde_json::json;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), elfiee::EngineError> {
//! #   let dir = tempfile::tempdir().unwrap();
//! #   std::env::set_current_dir(dir.path()).unwrap(); // (this example runs in a scratch folder)
//!     // A new document owned by a new editor `alice` (`Engine::open` opens an existing one).
//!     let file = Engine::global().init("notes.elf", "Alice").await?;
//!     let mut events = file.subscribe(); // every committed event, in order, no gaps
//!
//!     // Every change is a command; `submit` answers once its events are durable.
//!     let created = file
//!         .submit(Command::new("alice", "core.create", None, json!({"name": "Spec", "block_type": "markdown"})))
//!         .await?;
//!     let spec = &created[0].entity;
//!     file.submit(Command::new("alice", "markdown.write", Some(spec), json!({"markdown": "# Hello"})))
//!         .await?;
//!
//!     assert_eq!(file.block(spec).unwrap().contents["markdown"], "# Hello");
//!     assert_eq!(events.recv().await.unwrap().cap_id(), "core.create");
//!     file.close().await; // drains, writes a snapshot, releases the file
//!     Ok(())
//! }
//! ```
//!
//! Where to go next: [`Engine`] (open and create documents), [`FileHandle`] (submit, read,
//! subscribe, replay, verify, back up), [`capabilities::Registry`] (your own block types:
//! capabilities and their folds), [`testkit`] (check them), [`cli::main_with`] (the whole
//! command line over them). The guide is docs/EMBEDDING.md in the repository; the event
//! format and its promise, docs/EVENTS.md.
//!
//! ## Feature flags
//!
//! The engine core ([`model`], [`projections`], [`capabilities`], [`engine`] and the
//! re-exports below) is always in. Each layer is a feature; all but `testkit` are on by
//! default, which is what the `elfiee` binary needs. `default-features = false` gives the core
//! alone (`examples/embedder`: 97 crates, where everything is about 250).
//!
//! | feature | default | brings | pulls in |
//! |---|---|---|---|
//! | `agents` | yes | [`adapters`]: effects (terminal, export, Claude Code files), LLM proposals, the agent loop, checkpoints and undo | reqwest (rustls), notify, ignore |
//! | `mcp` | yes | the MCP server Claude Code connects to (`adapters::mcp`); implies `agents` | rmcp |
//! | `sync` | yes | [`sync`]: several devices on one document through NATS JetStream | async-nats, ed25519-dalek |
//! | `graph` | yes | [`graph`]: the relation graph as DOT, Mermaid or SVG, laid out in-process | rust-sugiyama |
//! | `cli` | yes | [`cli`] and the `elfiee` binary (completions, man page); implies all of the above | clap, clap_complete, clap_mangen, indicatif, tracing-subscriber |
//! | `testkit` | no | [`testkit`]: given/when/then and generated command sequences against the real engine, for your dev-dependencies | proptest, tempfile |
//!
//! A Tauri app that keeps documents and runs agents takes
//! `default-features = false, features = ["agents", "graph"]` (`examples/tauri-host`).

#![warn(missing_docs)]

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
