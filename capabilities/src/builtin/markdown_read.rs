use elfiee_model::{CapError, Command, Ctx, EventDraft};
use elfiee_projections::State;

use crate::{Capability, Target};

/// `markdown.read`: authorizes reading a markdown block. Reads commit no events; the engine's
/// read API runs this check and then returns the block.
pub struct MarkdownRead;

impl Capability for MarkdownRead {
    fn id(&self) -> &'static str {
        "markdown.read"
    }
    fn target(&self) -> Target {
        Target::Block(Some("markdown"))
    }
    fn handle(
        &self,
        cmd: &Command,
        _state: &State,
        _ctx: &Ctx,
    ) -> Result<Vec<EventDraft>, CapError> {
        crate::payload::expect_empty(self.id(), &cmd.payload)?;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn read_is_checked_but_writes_nothing() {
        let mut k = Kit::new();
        let md = k.block("markdown", "m");
        assert!(k
            .ok("alice", "markdown.read", Some(&md), json!({}))
            .is_empty());
        k.err("bob", "markdown.read", Some(&md), json!({}));
        k.ok(
            "alice",
            "core.grant",
            None,
            json!({"editor_id": "*", "cap_id": "markdown.read"}),
        );
        assert!(k
            .ok("bob", "markdown.read", Some(&md), json!({}))
            .is_empty());
    }
}
