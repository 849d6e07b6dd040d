use elfiee_model::{CapError, Command, Ctx, Event, EventDraft, Relation};
use elfiee_projections::toolkit::link;
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::spec::Builtin;
use crate::payload::parse;
use crate::{Handled, Merge, Target};

/// Payload of `core.link` and `core.unlink`: the command's block is the source.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkPayload {
    /// Target block id.
    pub to: String,
    /// `reference` or `implement`.
    pub relation: String,
}

pub(crate) fn parse_link(cap: &str, cmd: &Command) -> Result<(String, Relation), CapError> {
    let p: LinkPayload = parse(cap, &cmd.payload)?;
    let rel = Relation::parse(&p.relation).ok_or_else(|| {
        CapError::payload(
            cap,
            format!(
                "unknown relation '{}'; use 'reference' or 'implement'",
                p.relation
            ),
        )
    })?;
    Ok((p.to, rel))
}

/// The target and relation of a `core.link` / `core.unlink` event (none if malformed): its
/// fold's reading, which sync's merge also uses to skip a link that would close a cycle.
pub fn link_of(event: &Event) -> Option<(&str, Relation)> {
    let to = event.value.get("to").and_then(Value::as_str)?;
    let rel = event.value.get("relation").and_then(Value::as_str)?;
    Some((to, Relation::parse(rel)?))
}

fn fold_link(state: &mut State, event: &Event) -> Folded {
    link_of(event).map_or(Folded::Done, |(to, rel)| link(state, event, to, rel))
}

const ID: &str = "core.link";

pub(crate) const CAPABILITIES: &[Builtin] = &[Builtin::new(ID, Target::Block(None), handle)
    .merge(Merge::Link)
    .fold(fold_link)];

/// `core.link`: adds a relation. No self-links, no duplicates, and no cycles: the relation graph
/// (all relations together) stays acyclic, so context walks always end.
fn handle(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let from = cmd.block_id.as_deref().unwrap_or_default();
    let (to, rel) = parse_link(ID, cmd)?;
    if from == to {
        return Err(CapError::rejected(format!(
            "a block cannot link to itself ('{from}')"
        )));
    }
    if !state.blocks.contains_key(&to) {
        return Err(CapError::BlockNotFound(to));
    }
    if state.children_of(from).any(|(r, c)| r == rel && c == to) {
        return Err(CapError::rejected(format!(
            "'{from}' already has a '{rel}' link to '{to}'"
        )));
    }
    if state.reaches(&to, from) {
        return Err(CapError::rejected(format!(
            "linking '{from}' to '{to}' would create a cycle ('{to}' already leads back to '{from}')"
        )));
    }
    let mut out = vec![EventDraft::new(
        from,
        ID,
        json!({"to": to, "relation": rel}),
    )];
    // Someone who points an agent at a directory lets it add, move and remove files
    // there (an agent cannot give itself that by linking).
    if rel == Relation::Reference {
        let agent_editor = state
            .block(from)
            .filter(|b| b.block_type == "agent")
            .and_then(|b| b.contents.get("editor_id"))
            .and_then(Value::as_str);
        let is_dir = state
            .block(&to)
            .is_some_and(|b| b.block_type == "directory");
        if let Some(agent) = agent_editor.filter(|a| is_dir && *a != cmd.editor_id) {
            out.extend(super::agent::directory_grants(state, ctx, agent, &to));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use elfiee_model::CapError;
    use serde_json::json;

    #[test]
    fn link_records_both_directions() {
        let mut k = Kit::new();
        let (a, b) = (k.block("markdown", "req"), k.block("code", "impl"));
        k.link(&b, &a, "implement");
        assert_eq!(k.state.blocks[&b].children["implement"], vec![a.clone()]);
        assert_eq!(
            k.state
                .parents_of(&a)
                .map(|(_, p)| p.to_owned())
                .collect::<Vec<_>>(),
            vec![b]
        );
    }

    #[test]
    fn link_rejects_self_duplicate_cycle_unknown_relation_and_missing_target() {
        let mut k = Kit::new();
        let (a, b, c) = (
            k.block("markdown", "a"),
            k.block("markdown", "b"),
            k.block("markdown", "c"),
        );
        k.link(&a, &b, "reference");
        k.link(&b, &c, "implement");
        for (from, to, why) in [(&a, &a, "itself"), (&a, &b, "already"), (&c, &a, "cycle")] {
            let link = json!({"to": to, "relation": "reference"});
            k.err_contains("core.link", Some(from), link, why);
        }
        assert!(matches!(
            k.err("core.link", Some(&a), json!({"to": c, "relation": "likes"})),
            CapError::InvalidPayload { .. }
        ));
        assert!(matches!(
            k.err(
                "core.link",
                Some(&a),
                json!({"to": "ghost", "relation": "reference"})
            ),
            CapError::BlockNotFound(_)
        ));
    }
}
