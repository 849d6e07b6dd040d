use elfiee_model::{CapError, Command, Ctx, EventDraft};
use elfiee_projections::State;

use super::core_grant::grant_of;
use crate::{Capability, Target};

/// `core.revoke`: removes a grant that exists (exact match; revoking `*` does not touch
/// per-editor grants).
pub struct CoreRevoke;

impl Capability for CoreRevoke {
    fn id(&self) -> &'static str {
        "core.revoke"
    }
    fn target(&self) -> Target {
        Target::BlockOrFile
    }
    fn handle(&self, cmd: &Command, state: &State, ctx: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let g = grant_of(self.id(), cmd, state, ctx)?;
        if state.file_owner.as_deref() == Some(g.editor_id.as_str())
            && g.block_id == elfiee_model::WILDCARD
        {
            return Err(CapError::rejected(format!(
                "the file owner's grants on '*' cannot be revoked ('{}' would lose '{}')",
                g.editor_id, g.cap_id
            )));
        }
        if !state.grants.contains(&g) {
            return Err(CapError::rejected(format!(
                "'{}' holds no grant '{}' on '{}' to revoke",
                g.editor_id, g.cap_id, g.block_id
            )));
        }
        Ok(vec![EventDraft::new(
            &g.editor_id,
            self.id(),
            serde_json::to_value(&g).unwrap_or_default(),
        )])
    }
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn revoke_removes_an_existing_grant_only() {
        let mut k = Kit::new();
        let a = k.block("markdown", "a");
        k.err(
            "alice",
            "core.revoke",
            Some(&a),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        );
        k.ok(
            "alice",
            "core.grant",
            Some(&a),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        );
        k.ok(
            "alice",
            "core.revoke",
            Some(&a),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        );
        assert!(!k.state.has_grant("bob", "markdown.write", &a));
    }
}
