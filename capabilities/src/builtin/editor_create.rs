use elfiee_model::{CapError, Command, Ctx, Editor, EditorType, Event, EventDraft};
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};

use super::spec::Builtin;
use crate::payload::{check_id, check_name, parse};
use crate::{Handled, Target};

/// `editor.create`: a new identity. Agents get ids `agent-<uuid>`; humans a UUID, unless the
/// payload names an id.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditorCreatePayload {
    pub name: String,
    #[serde(default)]
    pub editor_type: EditorType,
    #[serde(default)]
    pub editor_id: Option<String>,
}

const ID: &str = "editor.create";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::File, handle).fold(fold_editor_create)];

fn handle(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let p: EditorCreatePayload = parse(ID, &cmd.payload)?;
    check_name(ID, "name", &p.name)?;
    let editor_id = match (p.editor_id, p.editor_type) {
        (Some(id), _) => {
            check_id(ID, "editor_id", &id)?;
            id
        }
        (None, EditorType::Agent) => format!("agent-{}", ctx.new_id(0)),
        (None, EditorType::Human) => ctx.new_id(0).to_string(),
    };
    if state.editors.contains_key(&editor_id) {
        return Err(CapError::rejected(format!(
            "editor '{editor_id}' already exists"
        )));
    }
    let editor = Editor {
        editor_id: editor_id.clone(),
        name: p.name,
        editor_type: p.editor_type,
    };
    Ok(vec![EventDraft::new(
        editor_id,
        ID,
        serde_json::to_value(&editor).unwrap_or_default(),
    )])
}

fn fold_editor_create(state: &mut State, event: &Event) -> Folded {
    if let Ok(editor) = Editor::deserialize(&event.value) {
        state.editors.insert(editor.editor_id.clone(), editor);
    }
    Folded::Done
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn agents_get_agent_prefixed_ids_and_ids_are_unique() {
        let mut k = Kit::new();
        let ev = k.ok(
            "editor.create",
            None,
            json!({"name": "Helper", "editor_type": "agent"}),
        );
        assert!(ev[0].entity.starts_with("agent-"), "{}", ev[0].entity);
        k.err_contains(
            "editor.create",
            None,
            json!({"name": "Bob again", "editor_id": "bob"}),
            "already exists",
        );
        k.err(
            "editor.create",
            None,
            json!({"name": "x", "editor_type": "robot"}),
        );
    }
}
