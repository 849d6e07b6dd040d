//! Errors the adapters build for their callers.

use elfiee_engine::EngineError;
use elfiee_model::CapError;

/// A request refused with `msg` (which says what to do instead).
pub(crate) fn rejected(msg: impl Into<String>) -> EngineError {
    EngineError::Rejected(CapError::rejected(msg))
}
