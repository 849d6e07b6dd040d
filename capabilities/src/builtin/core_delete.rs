use std::sync::Arc;

use elfiee_model::{Command, Ctx, Event, EventDraft};
use elfiee_projections::{Fold, Folded, State};
use serde_json::json;

use crate::{Capability, Handled, Target};

/// `core.delete`: removes a block. The log first records every relation and grant that goes
/// with it (`core.unlink`, `core.revoke` events), then the delete, all in one atomic batch.
pub struct CoreDelete;

impl Capability for CoreDelete {
    fn id(&self) -> &'static str {
        "core.delete"
    }
    fn target(&self) -> Target {
        Target::Block(None)
    }
    fn handle(&self, cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
        crate::payload::expect_empty(self.id(), &cmd.payload)?;
        let id = cmd.block_id.as_deref().unwrap_or_default();
        let mut out = super::support::detach_block(state, id);
        out.push(EventDraft::new(id, self.id(), json!({})));
        Ok(out)
    }
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        super::support::fold(fold_delete)
    }
}

fn fold_delete(state: &mut State, event: &Event) -> Folded {
    elfiee_projections::toolkit::delete_block(state, &event.entity);
    Folded::Done
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn delete_removes_the_block_from_every_parent_and_child_list() {
        let mut k = Kit::new();
        let (a, b, c) = (
            k.block("markdown", "a"),
            k.block("markdown", "b"),
            k.block("code", "c"),
        );
        k.link(&a, &b, "reference");
        k.link(&b, &c, "implement");
        k.grant("bob", "markdown.write", Some(&b));
        let ev = k.ok("alice", "core.delete", Some(&b), json!({}));
        let kinds: Vec<_> = ev.iter().map(|e| e.cap_id().to_owned()).collect();
        assert_eq!(
            kinds,
            ["core.unlink", "core.unlink", "core.revoke", "core.delete"]
        );
        assert!(!k.state.blocks.contains_key(&b));
        assert!(k.state.blocks[&a].children.is_empty());
        assert_eq!(k.state.parents_of(&c).count(), 0);
        assert!(!k.state.grants.iter().any(|g| g.block_id == b));
    }

    #[test]
    fn delete_of_a_missing_block_is_not_found() {
        let mut k = Kit::new();
        k.err_contains("alice", "core.delete", Some("nope"), json!({}), "not found");
    }
}
