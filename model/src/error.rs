use thiserror::Error;

/// Why a command was rejected by the pure pipeline (lookup, CBAC, handler, conflict).
/// Every message says what the user can do about it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum CapError {
    #[error("unknown capability '{0}'; run `elfiee caps` or see docs/EVENTS.md for the list")]
    UnknownCapability(String),
    #[error("editor '{editor}' may not run '{cap}' on '{block}'; ask the block owner for `elfiee grant {editor} {cap} {block}`")]
    Unauthorized {
        editor: String,
        cap: String,
        block: String,
    },
    #[error("editor '{0}' does not exist or was deleted; create it with `elfiee editor create`")]
    UnknownEditor(String),
    #[error("block '{0}' not found; list blocks with `elfiee block list`")]
    BlockNotFound(String),
    #[error("invalid payload for '{cap}': {reason}")]
    InvalidPayload { cap: String, reason: String },
    #[error("{0}")]
    Rejected(String),
    #[error("conflict: block '{block}' changed at seq {actual}, after the expected seq {expected}; reload it and retry")]
    Conflict {
        block: String,
        expected: u64,
        actual: u64,
    },
    #[error("the handler for '{cap}' failed unexpectedly ({message}); nothing was written, please report this")]
    HandlerPanic { cap: String, message: String },
}

impl CapError {
    /// Shorthand for [`CapError::InvalidPayload`].
    pub fn payload(cap: &str, reason: impl Into<String>) -> CapError {
        CapError::InvalidPayload {
            cap: cap.to_owned(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`CapError::Rejected`].
    pub fn rejected(msg: impl Into<String>) -> CapError {
        CapError::Rejected(msg.into())
    }
}
