use elfiee_model::{Command, Ctx, Event};
use elfiee_projections::{update_block, Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::spec::Builtin;
use crate::payload::{check_name, parse};
use crate::{Handled, Merge, Target};

/// `core.rename`: sets a block's display name.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenamePayload {
    pub name: String,
}

const ID: &str = "core.rename";

pub(crate) const CAPABILITIES: &[Builtin] = &[Builtin::new(ID, Target::Block(None), handle)
    .merge(Merge::BlockWrite)
    .fold(fold_rename)];

fn handle(cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
    let p: RenamePayload = parse(ID, &cmd.payload)?;
    check_name(ID, "name", &p.name)?;
    super::support::on_block(cmd, ID, json!({"name": p.name}))
}

fn fold_rename(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        if let Some(name) = v.get("name").and_then(Value::as_str) {
            b.name = name.to_owned();
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn rename_sets_the_name_and_rejects_empty_ones() {
        let (mut k, a) = Kit::with_block("markdown", "a");
        k.ok("core.rename", Some(&a), json!({"name": "Alpha"}));
        assert_eq!(k.state.blocks[&a].name, "Alpha");
        k.err("core.rename", Some(&a), json!({"name": ""}));
        k.err("core.rename", Some(&a), json!({"name": 5}));
    }
}
