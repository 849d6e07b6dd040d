//! Turning what a user typed into ids: exact id, else a unique id prefix (4+ characters), else
//! a unique name.

use crate::State;

use super::CliError;

pub fn block(state: &State, input: &str) -> Result<String, CliError> {
    if input == "*" || state.blocks.contains_key(input) {
        return Ok(input.to_owned());
    }
    // A name is said in full, an id prefix is a shorthand: a block named like the start of
    // another block's id is reached by its name (that other block by more of its id).
    let named: Vec<&str> = state
        .blocks
        .values()
        .filter(|b| b.name == input)
        .map(|b| b.block_id.as_str())
        .collect();
    if let [one] = named[..] {
        return Ok(one.to_owned());
    }
    let mut by_prefix: Vec<String> = if input.len() >= 4 {
        state
            .blocks
            .keys()
            .filter(|k| k.starts_with(input))
            .collect()
    } else {
        Vec::new()
    };
    if by_prefix.len() == 1 {
        return Ok(by_prefix.swap_remove(0));
    }
    let by_name: Vec<String> = state
        .blocks
        .values()
        .filter(|b| b.name == input)
        .map(|b| b.block_id.clone())
        .collect();
    match (by_prefix.len(), by_name.len()) {
        (0, 1) => Ok(by_name[0].clone()),
        (0, 0) => Err(CliError::failed(
            "block_not_found",
            format!("block '{input}' not found; list blocks with `elfiee block list`"),
        )),
        _ => {
            let mut all: Vec<String> = by_prefix.into_iter().chain(by_name).collect();
            all.sort();
            all.dedup();
            Err(CliError::failed(
                "ambiguous",
                format!(
                    "'{input}' matches several blocks ({}); give the full id",
                    all.join(", ")
                ),
            ))
        }
    }
}

pub fn editor(state: &State, input: &str) -> Result<String, CliError> {
    if input == "*" || state.editors.contains_key(input) {
        return Ok(input.to_owned());
    }
    let by_name: Vec<&String> = state
        .editors
        .values()
        .filter(|e| e.name.eq_ignore_ascii_case(input))
        .map(|e| &e.editor_id)
        .collect();
    match by_name.len() {
        1 => Ok(by_name[0].clone()),
        0 => Err(CliError::failed(
            "unknown_editor",
            format!("editor '{input}' not found; list editors with `elfiee editor list`"),
        )),
        _ => Err(CliError::failed(
            "ambiguous",
            format!("several editors are named '{input}'; give the id"),
        )),
    }
}
