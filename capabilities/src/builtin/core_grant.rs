use elfiee_model::{CapError, Command, Ctx, Event, Grant, WILDCARD};
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};

use super::spec::Builtin;
use super::support::grant_draft;
use crate::payload::parse;
use crate::{Handled, Target};

/// Payload of `core.grant` / `core.revoke`; the command's block (or `*`) is the grant's block.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantPayload {
    /// Grantee editor id, or `*` for every editor.
    pub editor_id: String,
    pub cap_id: String,
}

/// Parses the payload into the grant it names, checking the editor and capability exist.
fn grant_of(cap: &str, cmd: &Command, state: &State, ctx: &Ctx) -> Result<Grant, CapError> {
    let p: GrantPayload = parse(cap, &cmd.payload)?;
    if p.editor_id != WILDCARD && state.editor(&p.editor_id).is_none() {
        return Err(CapError::UnknownEditor(p.editor_id));
    }
    if !ctx.known_caps.contains(&p.cap_id) || p.cap_id == "elf.init" {
        return Err(CapError::UnknownCapability(p.cap_id));
    }
    let block = cmd.block_id.clone().unwrap_or_else(|| WILDCARD.to_owned());
    Ok(Grant::new(p.editor_id, p.cap_id, block))
}

const ID: &str = "core.grant";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::BlockOrFile, handle).fold(fold_grant)];

/// `core.grant`: lets an editor (or `*`) run a capability on a block (or `*`).
fn handle(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    grant_event(ID, cmd, state, ctx, |g| {
        if state.grants.contains(g) {
            return Err(format!(
                "'{}' already holds '{}' on '{}'",
                g.editor_id, g.cap_id, g.block_id
            ));
        }
        Ok(())
    })
}

/// The event of `core.grant` / `core.revoke` (`cap`): the grant the payload names, once
/// `check` (what the state must say about it) passes; its message becomes the rejection.
pub(crate) fn grant_event(
    cap: &str,
    cmd: &Command,
    state: &State,
    ctx: &Ctx,
    check: impl FnOnce(&Grant) -> Result<(), String>,
) -> Handled {
    let g = grant_of(cap, cmd, state, ctx)?;
    check(&g).map_err(CapError::rejected)?;
    Ok(vec![grant_draft(cap, &g)])
}

/// The fold of `core.grant`: the grant joins.
fn fold_grant(state: &mut State, event: &Event) -> Folded {
    if let Some(g) = grant_in(event) {
        state.grants.insert(g);
    }
    Folded::Done
}

/// The grant a `core.grant` / `core.revoke` event carries (none if its value is not one).
pub(crate) fn grant_in(event: &Event) -> Option<Grant> {
    Grant::deserialize(&event.value).ok()
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use elfiee_model::CapError;
    use serde_json::json;

    #[test]
    fn grant_validates_editor_capability_and_duplicates() {
        let (mut k, a) = Kit::with_block("markdown", "a");
        k.grant("bob", "markdown.write", Some(&a));
        assert!(k.state.has_grant("bob", "markdown.write", &a));
        k.err_contains(
            "core.grant",
            Some(&a),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
            "already",
        );
        assert!(matches!(
            k.err(
                "core.grant",
                Some(&a),
                json!({"editor_id": "ghost", "cap_id": "markdown.write"})
            ),
            CapError::UnknownEditor(_)
        ));
        assert!(matches!(
            k.err(
                "core.grant",
                Some(&a),
                json!({"editor_id": "bob", "cap_id": "markdown.wirte"})
            ),
            CapError::UnknownCapability(_)
        ));
    }

    #[test]
    fn only_owner_or_grant_holder_may_grant() {
        let (mut k, a) = Kit::with_block("markdown", "a");
        assert!(matches!(
            k.err_by(
                "bob",
                "core.grant",
                Some(&a),
                json!({"editor_id": "bob", "cap_id": "markdown.write"})
            ),
            CapError::Unauthorized { .. }
        ));
        assert!(matches!(
            k.err_by(
                "bob",
                "core.grant",
                None,
                json!({"editor_id": "bob", "cap_id": "core.create"})
            ),
            CapError::Unauthorized { .. }
        ));
    }
}
