use elfiee_model::{Command, Ctx, Event, WILDCARD};
use elfiee_projections::{Folded, State};

use super::core_grant::{grant_event, grant_in};
use super::spec::Builtin;
use crate::{Handled, Target};

const ID: &str = "core.revoke";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::BlockOrFile, handle).fold(fold_revoke)];

/// `core.revoke`: removes a grant that exists (exact match; revoking `*` does not touch
/// per-editor grants).
fn handle(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    grant_event(ID, cmd, state, ctx, |g| {
        if state.file_owner.as_deref() == Some(g.editor_id.as_str()) && g.block_id == WILDCARD {
            return Err(format!(
                "the file owner's grants on '*' cannot be revoked ('{}' would lose '{}')",
                g.editor_id, g.cap_id
            ));
        }
        if !state.grants.contains(g) {
            return Err(format!(
                "'{}' holds no grant '{}' on '{}' to revoke",
                g.editor_id, g.cap_id, g.block_id
            ));
        }
        Ok(())
    })
}

/// The fold of `core.revoke`: the grant leaves.
fn fold_revoke(state: &mut State, event: &Event) -> Folded {
    if let Some(g) = grant_in(event) {
        state.grants.remove(&g);
    }
    Folded::Done
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn revoke_removes_an_existing_grant_only() {
        let (mut k, a) = Kit::with_block("markdown", "a");
        k.err(
            "core.revoke",
            Some(&a),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        );
        k.grant("bob", "markdown.write", Some(&a));
        k.ok(
            "core.revoke",
            Some(&a),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        );
        assert!(!k.state.has_grant("bob", "markdown.write", &a));
    }
}
