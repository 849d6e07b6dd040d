//! `elfiee_proposal_list` and `elfiee_propose`: the LLM proposal layer (DESIGN.md §8).
//!
//! The proposal tools are part of the catalogue so clients see the whole tool surface, but this
//! build does not let an MCP client create or list proposals yet. Everything about them lives
//! here: wiring them later means replacing these two functions (the catalogue entries in
//! [`super::tools`] already carry their final names and input schemas).

use elfiee_engine::FileHandle;
use serde_json::Value;

use super::tools::{ProposalListArgs, ProposeArgs, ToolError};

const UNAVAILABLE: &str = "proposals are not available in this build yet; make the change directly \
with the other elfiee_* tools (elfiee_markdown_write, elfiee_code_write, elfiee_block_create, …), \
or ask the user to run `elfiee agent invoke` / `elfiee agent proposals`";

/// `elfiee_proposal_list {}`.
pub async fn list(_file: &FileHandle, _editor: &str, _args: ProposalListArgs) -> Result<Value, ToolError> {
    Err(ToolError::new("unavailable", UNAVAILABLE))
}

/// `elfiee_propose {commands, description}`.
pub async fn propose(_file: &FileHandle, _editor: &str, _args: ProposeArgs) -> Result<Value, ToolError> {
    Err(ToolError::new("unavailable", UNAVAILABLE))
}
