//! A person's own edits undone and redone (`elfiee undo` / `redo`): the same mechanism as
//! agent steps, one command a step, the document only.

use super::*;
use crate::payload::{str_field, str_list};

// A human's own edits (`elfiee undo` / `redo`): the same mechanism, one command per step and
// the document only. The records are the `reason` of the `core.restore` events themselves
// (`{"undo": {"editor", "undo_id", "commands"}}`, `{"redo": {"editor", "undo_id"}}`).

/// Kinds of commands an editor's undo skips: records, requests, reads, and what is not a
/// block's (grants, editors).
pub(super) const NOT_EDITS: &[&str] = &[
    "agent.session",
    "core.restore",
    "core.grant",
    "core.revoke",
    "editor.create",
    "editor.delete",
    "elf.init",
    "markdown.read",
    "code.read",
    "agent.invoke",
    "terminal.execute",
    "directory.export",
];

/// An editor's commands and undos, read from the log.
pub(super) struct Edits {
    /// The editor's undoable commands, oldest first: id and its events' range.
    commands: Vec<(String, Change)>,
    /// Undos in log order: id, commands, the range of their restore events.
    undos: Vec<(String, Vec<String>, Change)>,
    redone: BTreeSet<String>,
    /// Undos after which the editor made a new edit (no redo then).
    superseded: BTreeSet<String>,
}

pub(super) fn edits_of(file: &FileHandle, editor: &str) -> Result<Edits, EngineError> {
    let mut e = Edits {
        commands: Vec::new(),
        undos: Vec::new(),
        redone: BTreeSet::new(),
        superseded: BTreeSet::new(),
    };
    let mut restores: BTreeMap<String, (Value, u64, u64)> = BTreeMap::new();
    let mut current: Option<(uuid::Uuid, String, u64, u64)> = None;
    let flush = |c: Option<(uuid::Uuid, String, u64, u64)>, e: &mut Edits| {
        if let Some((id, cap, from, to)) = c {
            if !NOT_EDITS.contains(&cap.as_str()) {
                e.commands.push((
                    id.to_string(),
                    Change {
                        doc_from: from - 1,
                        doc_to: to,
                        root: None,
                        files: Vec::new(),
                        more: Vec::new(),
                    },
                ));
            }
        }
    };
    for ev in file.events(1)? {
        if ev.cap_id() == "core.restore" {
            if let Some(reason) = ev.value.get("reason").filter(|r| {
                r.get("undo")
                    .or_else(|| r.get("redo"))
                    .and_then(|x| x.get("editor"))
                    .and_then(Value::as_str)
                    == Some(editor)
            }) {
                let entry = restores.entry(ev.cmd_id.to_string()).or_insert((
                    reason.clone(),
                    ev.seq,
                    ev.seq,
                ));
                entry.2 = ev.seq;
            }
        }
        if ev.editor_id() != editor {
            continue;
        }
        match &mut current {
            Some((id, _, _, to)) if *id == ev.cmd_id => *to = ev.seq,
            _ => {
                flush(current.take(), &mut e);
                current = Some((ev.cmd_id, ev.cap_id().to_owned(), ev.seq, ev.seq));
            }
        }
    }
    flush(current.take(), &mut e);
    // Restores in log order (by their first seq).
    let mut restores: Vec<(Value, u64, u64)> = restores.into_values().collect();
    restores.sort_by_key(|r| r.1);
    for (reason, from, to) in restores {
        let range = Change {
            doc_from: from - 1,
            doc_to: to,
            root: None,
            files: Vec::new(),
            more: Vec::new(),
        };
        if let Some(u) = reason.get("undo") {
            let id = str_field(u, "undo_id");
            let commands = str_list(u, "commands");
            e.undos.push((id, commands, range));
        } else if let Some(r) = reason.get("redo") {
            if let Some(id) = r.get("undo_id").and_then(Value::as_str) {
                e.redone.insert(id.to_owned());
            }
        }
    }
    // A new edit after an undo ends its redo only if it came after it.
    let last_edit = e.commands.last().map(|(_, c)| c.doc_to).unwrap_or(0);
    e.superseded = e
        .undos
        .iter()
        .filter(|(_, _, c)| last_edit > c.doc_to)
        .map(|(id, ..)| id.clone())
        .collect();
    Ok(e)
}

/// Takes back `editor`'s newest `n` edits not undone yet (the document only), as `editor`;
/// refused when a block they changed was changed since by someone else, unless `force`.
pub async fn undo_edits(
    file: &FileHandle,
    editor: &str,
    n: u64,
    force: bool,
) -> Result<UndoReport, EngineError> {
    if n == 0 {
        return Err(EngineError::rejected("--steps must be at least 1"));
    }
    let e = edits_of(file, editor)?;
    let undone: BTreeSet<&str> = e
        .undos
        .iter()
        .filter(|(id, ..)| !e.redone.contains(id))
        .flat_map(|(_, cmds, _)| cmds.iter().map(String::as_str))
        .collect();
    let done: Vec<&(String, Change)> = e
        .commands
        .iter()
        .filter(|(id, _)| !undone.contains(id.as_str()))
        .collect();
    let picked = &done[done.len().saturating_sub(n as usize)..];
    if picked.is_empty() {
        return Err(EngineError::rejected(format!(
            "nothing to undo: '{editor}' has no edit in this document that is not undone yet"
        )));
    }
    let changes: Vec<&Change> = picked.iter().map(|(_, c)| c).collect();
    let commands: Vec<String> = picked.iter().map(|(id, _)| id.clone()).collect();
    let undo_id = uuid::Uuid::new_v4().to_string();
    let reason = json!({"undo": {"editor": editor, "undo_id": undo_id, "commands": commands}});
    let (mut report, _) = revert(file, editor, &changes, force, reason).await?;
    report.commands = commands;
    Ok(report)
}

/// Brings back what `editor`'s newest undo took (unless they edited since).
pub async fn redo_edits(
    file: &FileHandle,
    editor: &str,
    force: bool,
) -> Result<UndoReport, EngineError> {
    let e = edits_of(file, editor)?;
    let Some((undo_id, commands, change)) = e
        .undos
        .iter()
        .rev()
        .find(|(id, ..)| !e.redone.contains(id))
        .filter(|(id, ..)| !e.superseded.contains(id))
    else {
        return Err(EngineError::rejected(format!(
            "nothing to redo: '{editor}' has no undo since their last edit"
        )));
    };
    let reason = json!({"redo": {"editor": editor, "undo_id": undo_id}});
    let (mut report, _) = revert(file, editor, &[change], force, reason).await?;
    report.commands = commands.clone();
    Ok(report)
}
