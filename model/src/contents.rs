//! Typed views of the `contents` of the built-in block types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Contents of an `agent` block (seed 001 §5.1, plus the agent's editor id).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentContents {
    /// Display name (default `elfiee`).
    pub name: String,
    /// The directory block of the project this agent integrates with (Claude Code). `None` for
    /// an LLM-only agent.
    #[serde(default)]
    pub target_project_id: Option<String>,
    pub status: AgentStatus,
    /// The agent's own editor (`agent-<uuid>`): every change it makes is authored by it.
    pub editor_id: String,
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    Enabled,
    Disabled,
}

/// One imported file of a `directory.import` command.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportedFile {
    /// Path relative to the imported root, `/`-separated, no `..`.
    pub path: String,
    /// UTF-8 text of the file.
    pub content: String,
}

/// A file the importer left out, and why (binary, too large, symlink leaving the root, …).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkippedFile {
    pub path: String,
    pub reason: String,
}

/// One entry of a `directory` block: a relative path and the block holding its text.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectoryEntry {
    pub path: String,
    pub block_id: String,
    /// blake3 (hex) of what the file on disk held when the document last read (import, sync)
    /// or wrote (export) it; absent for a file made inside the document and not exported yet.
    /// The entry is dirty when its block's body differs from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub disk: Option<String>,
}

/// A file the directory no longer holds (removed or moved away inside the document) that is
/// still on disk until the next export removes it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRemoval {
    pub path: String,
    /// blake3 of the file as the document last knew it: the export removes it only if the
    /// disk still holds exactly that.
    pub disk: String,
}

/// Contents of a `terminal` block.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TerminalContents {
    /// Program that runs commands as `<shell> -c <command>` (default `sh`).
    pub shell: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Directory block whose `external_root_path` is the working directory.
    #[serde(default)]
    pub linked_directory_id: Option<String>,
}

/// Metadata key of a directory block that holds its folder on disk.
pub const EXTERNAL_ROOT_PATH: &str = "external_root_path";
