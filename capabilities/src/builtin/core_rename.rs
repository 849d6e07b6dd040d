use std::sync::Arc;

use elfiee_model::{Command, Ctx, Event};
use elfiee_projections::{update_block, Fold, Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::payload::{check_name, parse};
use crate::{Capability, Handled, Target};

/// `core.rename`: sets a block's display name.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenamePayload {
    pub name: String,
}

pub struct CoreRename;

impl Capability for CoreRename {
    fn id(&self) -> &'static str {
        "core.rename"
    }
    fn merge(&self) -> crate::Merge {
        crate::Merge::BlockWrite
    }
    fn target(&self) -> Target {
        Target::Block(None)
    }
    fn handle(&self, cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
        let p: RenamePayload = parse(self.id(), &cmd.payload)?;
        check_name(self.id(), "name", &p.name)?;
        super::support::on_block(cmd, self.id(), json!({"name": p.name}))
    }
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        super::support::fold(fold_rename)
    }
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
        let mut k = Kit::new();
        let a = k.block("markdown", "a");
        k.ok("alice", "core.rename", Some(&a), json!({"name": "Alpha"}));
        assert_eq!(k.state.blocks[&a].name, "Alpha");
        k.err("alice", "core.rename", Some(&a), json!({"name": ""}));
        k.err("alice", "core.rename", Some(&a), json!({"name": 5}));
    }
}
