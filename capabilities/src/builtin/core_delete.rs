use elfiee_model::{Command, Ctx, Event};
use elfiee_projections::{Folded, State};

use super::spec::Builtin;
use crate::{Handled, Target};

const ID: &str = "core.delete";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::Block(None), handle).fold(fold_delete)];

/// `core.delete`: removes a block. The log first records every relation and grant that goes
/// with it (`core.unlink`, `core.revoke` events), then the delete, all in one atomic batch.
fn handle(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    crate::payload::expect_empty(ID, &cmd.payload)?;
    let id = cmd.block_id.as_deref().unwrap_or_default();
    Ok(super::support::delete_events(state, id))
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
        let ev = k.ok("core.delete", Some(&b), json!({}));
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
        k.err_contains("core.delete", Some("nope"), json!({}), "not found");
    }
}
