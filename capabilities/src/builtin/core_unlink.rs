use elfiee_model::{CapError, Command, Ctx, Event};
use elfiee_projections::toolkit::unlink;
use elfiee_projections::{Folded, State};
use serde_json::json;

use super::core_link::{link_of, parse_link};
use super::spec::Builtin;
use super::support::on_block;
use crate::{Handled, Target};

const ID: &str = "core.unlink";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::Block(None), handle).fold(fold_unlink)];

/// `core.unlink`: removes an existing relation; unlinking what is not linked is an error.
fn handle(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    let from = cmd.block_id.as_deref().unwrap_or_default();
    let (to, rel) = parse_link(ID, cmd)?;
    if !state.children_of(from).any(|(r, c)| r == rel && c == to) {
        return Err(CapError::rejected(format!(
            "'{from}' has no '{rel}' link to '{to}'; see `elfiee block show {from}`"
        )));
    }
    on_block(cmd, ID, json!({"to": to, "relation": rel}))
}

fn fold_unlink(state: &mut State, event: &Event) -> Folded {
    link_of(event).map_or(Folded::Done, |(to, rel)| unlink(state, event, to, rel))
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn unlink_removes_the_edge_and_rejects_missing_ones() {
        let mut k = Kit::new();
        let (a, b) = (k.block("markdown", "a"), k.block("markdown", "b"));
        k.link(&a, &b, "reference");
        k.err(
            "core.unlink",
            Some(&a),
            json!({"to": b, "relation": "implement"}),
        );
        k.ok(
            "core.unlink",
            Some(&a),
            json!({"to": b, "relation": "reference"}),
        );
        assert!(k.state.blocks[&a].children.is_empty());
        assert_eq!(k.state.parents_of(&b).count(), 0);
        k.err(
            "core.unlink",
            Some(&a),
            json!({"to": b, "relation": "reference"}),
        );
    }
}
