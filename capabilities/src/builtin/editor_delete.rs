use elfiee_model::{CapError, Command, Ctx, Event, EventDraft};
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::spec::Builtin;
use super::support::grant_draft;
use crate::payload::parse;
use crate::{Handled, Target};

/// `editor.delete`: removes an identity and, first, every grant it holds. A deleted editor has
/// no rights, not even on the blocks it owns. The file owner cannot be deleted.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditorDeletePayload {
    pub editor_id: String,
}

const ID: &str = "editor.delete";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::File, handle).fold(fold_editor_delete)];

fn handle(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    let p: EditorDeletePayload = parse(ID, &cmd.payload)?;
    if state.editor(&p.editor_id).is_none() {
        return Err(CapError::UnknownEditor(p.editor_id));
    }
    if state.file_owner.as_deref() == Some(p.editor_id.as_str()) {
        return Err(CapError::rejected(format!(
            "'{}' owns this file and cannot be deleted",
            p.editor_id
        )));
    }
    let mut out: Vec<EventDraft> = state
        .grants_of(&p.editor_id)
        .map(|g| grant_draft("core.revoke", g))
        .collect();
    out.push(EventDraft::new(&p.editor_id, ID, json!({})));
    Ok(out)
}

fn fold_editor_delete(state: &mut State, event: &Event) -> Folded {
    state.editors.remove(event.entity.as_str());
    Folded::Done
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use elfiee_model::CapError;
    use serde_json::json;

    #[test]
    fn deleted_editor_loses_grants_and_owner_rights() {
        let mut k = Kit::new();
        k.grant("bob", "core.create", None);
        let ev = k.ok_by(
            "bob",
            "core.create",
            None,
            json!({"name": "mine", "block_type": "markdown"}),
        );
        let mine = ev[0].entity.clone();
        let ev = k.ok("editor.delete", None, json!({"editor_id": "bob"}));
        assert_eq!(
            ev.iter().map(|e| e.cap_id()).collect::<Vec<_>>(),
            ["core.revoke", "editor.delete"]
        );
        assert!(matches!(
            k.err_by(
                "bob",
                "markdown.write",
                Some(&mine),
                json!({"markdown": "x"})
            ),
            CapError::UnknownEditor(_)
        ));
    }

    #[test]
    fn the_file_owner_cannot_be_deleted() {
        let mut k = Kit::new();
        k.err_contains(
            "editor.delete",
            None,
            json!({"editor_id": "alice"}),
            "owns this file",
        );
        assert!(matches!(
            k.err("editor.delete", None, json!({"editor_id": "nobody"})),
            CapError::UnknownEditor(_)
        ));
    }
}
