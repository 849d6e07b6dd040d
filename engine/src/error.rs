use std::path::PathBuf;

use elfiee_model::CapError;
use thiserror::Error;

/// Everything that can go wrong between a caller and the log. `Rejected` is the pure
/// pipeline's verdict (nothing was written); the others are about the file itself.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum EngineError {
    #[error(transparent)]
    Rejected(#[from] CapError),
    // (`ELFIEE` is `crate::layout::MARKER`; a test holds them equal, so the error needs no
    // arrow to the layout that returns it.)
    #[error("{path} is not an .elf document (no ELFIEE inside); create one with `elfiee init {path}`", path = .0.display())]
    NotAnElf(PathBuf),
    #[error("{} was written in format version {found}; this build of elfiee reads format versions up to {supported} — open it with a newer elfiee (nothing was changed)", path.display())]
    NewerFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{} already exists; choose another path or open it instead", .0.display())]
    AlreadyExists(PathBuf),
    #[error("{} is open in another process; close that process or talk to it instead", .0.display())]
    Locked(PathBuf),
    #[error("payload is {size} bytes; the limit is {limit} bytes — store large content in several blocks")]
    PayloadTooLarge { size: usize, limit: usize },
    #[error("event {seq} is corrupt: {reason}; nothing was changed — run `elfiee verify` for a full report")]
    Corrupt { seq: u64, reason: String },
    #[error("storage error: {0}; check the disk, then reopen the file")]
    Storage(String),
    #[error("{0}")]
    Effect(String),
    #[error("the file was closed; open it again with `Engine::open`")]
    Closed,
    #[error("I/O error on {path}: {message}")]
    Io { path: PathBuf, message: String },
}

impl EngineError {
    /// `true` when the command itself was refused (exit code 1 in the CLI) rather than the file
    /// being unusable.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            EngineError::Rejected(_) | EngineError::PayloadTooLarge { .. }
        )
    }

    /// A request refused with `msg` (which says what to do instead).
    pub fn rejected(msg: impl Into<String>) -> EngineError {
        EngineError::Rejected(CapError::rejected(msg))
    }

    pub(crate) fn io(path: impl Into<PathBuf>, e: impl std::fmt::Display) -> EngineError {
        EngineError::Io {
            path: path.into(),
            message: e.to_string(),
        }
    }
}

impl From<sled::Error> for EngineError {
    fn from(e: sled::Error) -> Self {
        EngineError::Storage(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_not_an_elf_message_names_the_marker() {
        let e = super::EngineError::NotAnElf("x.elf".into());
        assert!(e
            .to_string()
            .contains(&format!("no {} inside", crate::layout::MARKER)));
    }
}
