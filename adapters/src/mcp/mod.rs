//! The MCP server Claude Code connects to (`elfiee mcp-server`). Scaffold: the implementation
//! (rmcp, the tool catalogue of DESIGN.md §7) lands with the MCP issue.

use elfiee_engine::{EngineError, FileHandle};

/// Serves MCP over stdin/stdout as `editor` until the client disconnects.
pub async fn serve_stdio(_file: FileHandle, _editor: String) -> Result<(), EngineError> {
    Err(EngineError::Effect("the MCP server is not built yet".into()))
}
