use std::collections::BTreeMap;

use elfiee_model::{Block, BlockMetadata, CapError, Command, Ctx, Event, EventDraft};
use elfiee_projections::{Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::spec::Builtin;
use crate::payload::{check_id, check_name, parse};
use crate::{Handled, Target};

/// `core.create`: a new block owned by the commanding editor. The event value is the whole
/// initial block.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreCreatePayload {
    pub name: String,
    pub block_type: String,
    /// Initial contents; `{}` when absent.
    #[serde(default)]
    pub contents: Option<Value>,
    #[serde(default)]
    pub description: Option<String>,
    /// Caller-chosen id (must be unused); generated from the context when absent.
    #[serde(default)]
    pub block_id: Option<String>,
}

const ID: &str = "core.create";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::File, handle).fold(fold_create)];

fn handle(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let p: CoreCreatePayload = parse(ID, &cmd.payload)?;
    check_name(ID, "name", &p.name)?;
    let type_ok = !p.block_type.is_empty()
        && p.block_type.len() <= 64
        && p.block_type
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.'));
    if !type_ok {
        return Err(CapError::payload(
            ID,
            format!(
                "'block_type' must be 1-64 characters of a-z, 0-9, '_', '-', '.' (got {:?})",
                p.block_type
            ),
        ));
    }
    let block_id = match p.block_id {
        Some(id) => {
            check_id(ID, "block_id", &id)?;
            if state.blocks.contains_key(&id) {
                return Err(CapError::rejected(format!(
                    "a block with id '{id}' already exists; omit 'block_id' to get a fresh one"
                )));
            }
            id
        }
        None => ctx.new_id(0).to_string(),
    };
    let contents = match p.contents {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(CapError::payload(ID, "'contents' must be a JSON object")),
    };
    let block = Block {
        block_id: block_id.clone(),
        name: p.name,
        block_type: p.block_type,
        contents,
        content_refs: Default::default(),
        children: BTreeMap::new(),
        owner: cmd.editor_id.clone(),
        metadata: BlockMetadata {
            description: p.description,
            created_at: ctx.now,
            updated_at: ctx.now,
            custom: BTreeMap::new(),
        },
    };
    Ok(vec![EventDraft::new(
        block_id,
        ID,
        serde_json::to_value(&block).unwrap_or_default(),
    )])
}

/// The new block, its content references moved into `content_refs`.
fn fold_create(state: &mut State, event: &Event) -> Folded {
    match Block::deserialize(&event.value) {
        Ok(mut block) => {
            block.content_refs.clear();
            elfiee_projections::content::take_refs(&mut block);
            state.blocks.insert(block.block_id.clone(), block);
            Folded::Block
        }
        Err(_) => Folded::Done,
    }
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use elfiee_model::CapError;
    use serde_json::json;

    #[test]
    fn create_event_holds_the_whole_initial_block() {
        let mut k = Kit::new();
        let ev = k.ok(
            "core.create",
            None,
            json!({"name": "Spec", "block_type": "markdown", "description": "d"}),
        );
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].value["name"], "Spec");
        assert_eq!(ev[0].value["owner"], "alice");
        assert_eq!(ev[0].value["metadata"]["description"], "d");
        assert_eq!(k.state.blocks[&ev[0].entity].block_type, "markdown");
    }

    #[test]
    fn create_rejects_bad_names_types_and_taken_ids() {
        let mut k = Kit::new();
        for bad in [
            json!({"name": " ", "block_type": "markdown"}),
            json!({"name": "x", "block_type": "Mark Down"}),
            json!({"name": "x"}),
            json!({"name": "x", "block_type": "code", "nmae": 1}),
        ] {
            let e = k.err("core.create", None, bad.clone());
            assert!(matches!(e, CapError::InvalidPayload { .. }), "{bad}: {e}");
        }
        k.ok(
            "core.create",
            None,
            json!({"name": "x", "block_type": "code", "block_id": "fixed"}),
        );
        k.err_contains(
            "core.create",
            None,
            json!({"name": "y", "block_type": "code", "block_id": "fixed"}),
            "already exists",
        );
    }

    #[test]
    fn create_needs_a_star_grant() {
        let mut k = Kit::new();
        assert!(matches!(
            k.err_by(
                "bob",
                "core.create",
                None,
                json!({"name": "x", "block_type": "code"})
            ),
            CapError::Unauthorized { .. }
        ));
    }
}
