//! The MCP server Claude Code connects to (`elfiee mcp-server`), built on the `rmcp` crate.
//!
//! - [`tools`] — the tool catalogue of DESIGN.md §7 (names, argument schemas, execution as an
//!   editor through the engine). Protocol-independent, so the agent loop can share it.
//! - [`proposals`] — the two proposal tools, kept apart until the proposal layer is wired.
//! - `server` (feature `mcp`, which brings `rmcp`) — the rmcp handler: tools, the `elfiee://blocks` and `elfiee://block/{id}`
//!   resources, and `notifications/resources/list_changed` driven by committed events.
//! - [`stdio`] — bounded line reading, so an oversized message is answered, not dropped.
//!
//! Protocol: JSON-RPC over stdin/stdout, one message per line. stdout carries nothing but
//! protocol messages; logs go to stderr through `tracing`. Both lifecycles of rmcp 3.9 are
//! served: the classic `initialize` handshake (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25)
//! and the 2026-07-28 style (`server/discover`, per-request `_meta`, `subscriptions/listen`).

pub mod catalogue;
pub mod proposals;
#[cfg(feature = "mcp")]
pub mod server;
pub mod stdio;
pub mod tools;

#[cfg(feature = "mcp")]
pub use server::{serve_stdio, ElfieeServer};
