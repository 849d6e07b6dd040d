//! Capability-based access control.
//!
//! An editor may run a capability on a block when it owns the block, or when a grant matches
//! `(editor or *, cap, block or *)`. Commands that target the whole file need a grant on `*`.
//! A deleted (or unknown) editor has no rights at all, owner rights included. `elf.init` is the
//! one exception: it is allowed exactly once, on an empty file, and creates the file owner.

use elfiee_model::{Block, CapError, WILDCARD};
use elfiee_projections::State;

/// Checks that `editor` may run `cap` on `block` (`None` = the whole file).
pub fn authorize(
    state: &State,
    editor: &str,
    cap: &str,
    block: Option<&Block>,
) -> Result<(), CapError> {
    if cap == "elf.init" {
        return if state.file_owner.is_none() && state.editors.is_empty() {
            Ok(())
        } else {
            Err(CapError::rejected(
                "this .elf is already initialized; `elf.init` runs once, on an empty file",
            ))
        };
    }
    if state.editor(editor).is_none() {
        return Err(CapError::UnknownEditor(editor.to_owned()));
    }
    let target = block.map(|b| b.block_id.as_str()).unwrap_or(WILDCARD);
    let owns = block.is_some_and(|b| b.owner == editor);
    if owns || state.has_grant(editor, cap, target) {
        Ok(())
    } else {
        Err(CapError::Unauthorized {
            editor: editor.to_owned(),
            cap: cap.to_owned(),
            block: target.to_owned(),
        })
    }
}
