use elfiee_model::{CapError, Command, Ctx, EventDraft};
use elfiee_projections::State;

use crate::{Capability, Target};

/// `code.read`: authorizes reading a code block; commits no events.
pub struct CodeRead;

impl Capability for CodeRead {
    fn id(&self) -> &'static str {
        "code.read"
    }
    fn target(&self) -> Target {
        Target::Block(Some("code"))
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
