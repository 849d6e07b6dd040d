//! What a checkpoint records (a change: a step, an undo, a redo) and what an undo reports,
//! below both the recorder (`mod.rs`) and the revert (`revert.rs`).

use elfiee_engine::EngineError;
use elfiee_model::{ContentRef, EventHash};
use serde::{Deserialize, Serialize};

use super::scan::{FileChange, Version};

pub(super) fn storage(msg: impl Into<String>) -> EngineError {
    EngineError::Storage(msg.into())
}

pub(super) fn content_ref(v: &Version) -> Result<ContentRef, EngineError> {
    Ok(ContentRef {
        hash: EventHash::from_hex(&v.hash)
            .ok_or_else(|| storage(format!("a checkpoint names a bad hash '{}'", v.hash)))?,
        len: v.len,
    })
}

pub use super::scan::MAX_KEPT_BYTES;

/// A recorded change: a step, an undo or a redo.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Change {
    pub doc_from: u64,
    pub doc_to: u64,
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub files: Vec<FileChange>,
    /// Files of other folders (an undo that set back files of another directory's folder).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more: Vec<FolderChange>,
}

/// The files a change changed in one folder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FolderChange {
    pub root: String,
    pub files: Vec<FileChange>,
}

impl Change {
    /// Each folder with the files the change changed there.
    pub fn folders(&self) -> impl Iterator<Item = (&str, &[FileChange])> {
        let main = (!self.files.is_empty()).then(|| {
            (
                self.root.as_deref().unwrap_or_default(),
                self.files.as_slice(),
            )
        });
        main.into_iter().chain(
            self.more
                .iter()
                .map(|f| (f.root.as_str(), f.files.as_slice())),
        )
    }
}

/// What an undo or redo did (or would have done, when refused).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UndoReport {
    pub session_id: String,
    /// The steps taken back (undo) or brought back (redo).
    pub steps: Vec<u64>,
    pub blocks_restored: Vec<String>,
    pub blocks_removed: Vec<String>,
    pub files_restored: Vec<String>,
    pub files_removed: Vec<String>,
    /// Blocks and files changed since by someone else, overwritten because of `force`.
    pub forced: Vec<String>,
    /// For an editor's own edits ([`super::undo_edits`]): the commands taken back or brought back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
}
