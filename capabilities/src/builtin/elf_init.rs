use elfiee_model::{
    Command, Ctx, Editor, EditorType, Event, EventDraft, Grant, FORMAT_VERSION, WILDCARD,
};
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::spec::Builtin;
use super::support::grant_draft;
use crate::payload::{check_id, check_name, parse};
use crate::{Handled, Target};

/// `elf.init`: the first command of every file. The command's `editor_id` becomes the file
/// owner, who is granted every known capability on `*`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitPayload {
    /// Display name of the owner.
    pub name: String,
}

const ID: &str = "elf.init";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::File, handle).fold(fold_init)];

fn handle(cmd: &Command, _state: &State, ctx: &Ctx) -> Handled {
    let p: InitPayload = parse(ID, &cmd.payload)?;
    check_name(ID, "name", &p.name)?;
    check_id(ID, "editor_id", &cmd.editor_id)?;
    let owner = &cmd.editor_id;
    let editor = Editor {
        editor_id: owner.clone(),
        name: p.name,
        editor_type: EditorType::Human,
    };
    let mut out = vec![
        EventDraft::new(
            owner,
            "elf.init",
            json!({"owner": owner, "format_version": FORMAT_VERSION}),
        ),
        EventDraft::new(
            owner,
            "editor.create",
            serde_json::to_value(&editor).unwrap_or_default(),
        ),
    ];
    for cap in ctx.known_caps.iter().filter(|c| c.as_str() != "elf.init") {
        out.push(grant_draft("core.grant", &Grant::new(owner, cap, WILDCARD)));
    }
    Ok(out)
}

/// The file owner is the one who initialized it.
fn fold_init(state: &mut State, event: &Event) -> Folded {
    if let Some(owner) = event.value.get("owner").and_then(Value::as_str) {
        state.file_owner = Some(owner.to_owned());
    }
    Folded::Done
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn init_makes_the_owner_and_grants_every_cap_on_star() {
        let k = Kit::new();
        assert_eq!(k.state.file_owner.as_deref(), Some("alice"));
        assert!(k.state.has_grant("alice", "core.create", "*"));
        assert!(k.state.has_grant("alice", "editor.delete", "*"));
        assert!(!k.state.has_grant("alice", "elf.init", "*"));
    }

    #[test]
    fn init_runs_only_once() {
        let mut k = Kit::new();
        k.err_contains_by(
            "mallory",
            "elf.init",
            None,
            json!({"name": "M"}),
            "already initialized",
        );
    }
}
