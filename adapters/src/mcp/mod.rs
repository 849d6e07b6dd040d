//! The MCP server Claude Code connects to (`elfiee mcp-server`), built on the `rmcp` crate.
//!
//! - [`tools`] — the tool catalogue of DESIGN.md §7 (names, argument schemas, execution as an
//!   editor through the engine). Protocol-independent, so the agent loop can share it.
//! - [`proposals`] — the two proposal tools, kept apart until the proposal layer is wired.
//! - [`server`] — the rmcp handler: tools, the `elfiee://blocks` and `elfiee://block/{id}`
//!   resources, and `notifications/resources/list_changed` driven by committed events.
//! - [`stdio`] — bounded line reading, so an oversized message is answered, not dropped.
//!
//! Protocol: JSON-RPC over stdin/stdout, one message per line. stdout carries nothing but
//! protocol messages; logs go to stderr through `tracing`. Both lifecycles of rmcp 3.9 are
//! served: the classic `initialize` handshake (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25)
//! and the 2026-07-28 style (`server/discover`, per-request `_meta`, `subscriptions/listen`).

pub mod catalogue;
pub mod proposals;
pub mod server;
pub mod stdio;
pub mod tools;

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::CapError;
use rmcp::service::ServerInitializeError;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::ServiceExt;

pub use server::ElfieeServer;

/// Serves MCP over stdin/stdout as `editor` until the client disconnects.
pub async fn serve_stdio(file: FileHandle, editor: String) -> Result<(), EngineError> {
    if file.with_state(|s| s.editor(&editor).is_none()) {
        return Err(EngineError::Rejected(CapError::UnknownEditor(editor)));
    }
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (pump_in, rmcp_in) = tokio::io::duplex(1 << 20);
    let pump = tokio::spawn(stdio::pump(stdin, pump_in, stdio::MAX_MESSAGE_BYTES));
    // The pump already bounds lines; rmcp's own limit only has to let them through.
    let transport = AsyncRwTransport::new_server(rmcp_in, stdout)
        .with_max_line_length(stdio::MAX_MESSAGE_BYTES + 4096);

    let server = ElfieeServer::new(file.clone(), editor.clone());
    let watcher = tokio::spawn(server.clone().watch_file());
    tracing::info!(editor = %editor, elf = %file.path().display(), "MCP server listening on stdio");
    let outcome = match server.clone().serve(transport).await {
        Ok(running) => {
            let notifier = tokio::spawn(server.clone().notify_classic(running.peer().clone()));
            let reason = running.waiting().await;
            tracing::info!(?reason, "MCP session ended");
            notifier.abort();
            Ok(())
        }
        // The client went away before (or while) initializing: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(EngineError::Effect(format!(
            "MCP session could not start: {e}; the first message must be `initialize` or `server/discover`"
        ))),
    };
    watcher.abort();
    pump.abort();
    outcome
}
