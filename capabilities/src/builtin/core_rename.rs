use elfiee_model::{CapError, Command, Ctx, EventDraft};
use elfiee_projections::State;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::payload::{check_name, parse};
use crate::{Capability, Target};

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
    fn handle(
        &self,
        cmd: &Command,
        _state: &State,
        _ctx: &Ctx,
    ) -> Result<Vec<EventDraft>, CapError> {
        let p: RenamePayload = parse(self.id(), &cmd.payload)?;
        check_name(self.id(), "name", &p.name)?;
        Ok(vec![EventDraft::new(
            cmd.block_id.clone().unwrap_or_default(),
            self.id(),
            json!({"name": p.name}),
        )])
    }
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
