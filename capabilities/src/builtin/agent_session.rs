//! `agent.session`: one entry of an agent-loop session (a message, a session rule, a stop
//! reason). Sessions are rebuilt from these events, so closing and reopening a `.elf` resumes
//! them exactly. Authorized by `agent.invoke` on the agent block (the human who talks to the
//! agent, and the agent's own editor, hold it).

use elfiee_model::{CapError, Command, Ctx, EventDraft};
use elfiee_projections::State;
use serde_json::Value;

use crate::{Capability, Target};

pub struct AgentSession;

impl Capability for AgentSession {
    fn id(&self) -> &'static str {
        "agent.session"
    }
    fn target(&self) -> Target {
        Target::Block(Some("agent"))
    }
    fn authorized_by(&self, _cmd: &Command) -> &'static str {
        "agent.invoke"
    }
    fn handle(&self, cmd: &Command, _state: &State, _ctx: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let ok = cmd.payload.get("session_id").and_then(Value::as_str).is_some_and(|s| !s.is_empty())
            && cmd.payload.get("entry").and_then(Value::as_str).is_some();
        if !ok {
            return Err(CapError::payload(self.id(), "expected {\"session_id\": string, \"entry\": \"message\" | \"rule\" | \"stop\", …}"));
        }
        Ok(vec![EventDraft::new(cmd.block_id.clone().unwrap_or_default(), self.id(), cmd.payload.clone())])
    }
}
