use std::collections::BTreeMap;

use elfiee_model::{CapError, Command, Ctx, Event};
use elfiee_projections::toolkit::merge_custom;
use elfiee_projections::{update_block, Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::spec::Builtin;
use crate::payload::parse;
use crate::{Handled, Merge, Target};

/// `core.update_metadata`: sets or clears the description and merges `custom` keys
/// (a `null` value removes a key).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateMetadataPayload {
    /// `Some(null)` clears it; absent leaves it.
    #[serde(default, with = "double_option")]
    #[cfg_attr(feature = "ts", ts(optional, type = "string | null"))]
    pub description: Option<Option<String>>,
    #[serde(default)]
    pub custom: BTreeMap<String, Value>,
}

mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<Option<String>>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(d).map(Some)
    }
}

const ID: &str = "core.update_metadata";

pub(crate) const CAPABILITIES: &[Builtin] = &[Builtin::new(ID, Target::Block(None), handle)
    .merge(Merge::BlockPatch)
    .fold(fold_update_metadata)];

fn handle(cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
    let p: UpdateMetadataPayload = parse(ID, &cmd.payload)?;
    if p.description.is_none() && p.custom.is_empty() {
        return Err(CapError::payload(
            ID,
            "nothing to update: give 'description' and/or 'custom'",
        ));
    }
    let mut value = Map::new();
    if let Some(d) = p.description {
        value.insert(
            "description".into(),
            d.map(Value::String).unwrap_or(Value::Null),
        );
    }
    if !p.custom.is_empty() {
        value.insert(
            "custom".into(),
            Value::Object(p.custom.into_iter().collect()),
        );
    }
    super::support::on_block(cmd, ID, Value::Object(value))
}

/// `description` set (null clears it), `custom` keys merged (null removes one).
fn fold_update_metadata(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        if let Some(d) = v.get("description") {
            b.metadata.description = d.as_str().map(str::to_owned);
        }
        merge_custom(b, v);
    })
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn metadata_merges_custom_and_clears_with_null() {
        let (mut k, a) = Kit::with_block("markdown", "a");
        k.ok(
            "core.update_metadata",
            Some(&a),
            json!({"description": "d", "custom": {"x": 1, "y": 2}}),
        );
        k.ok(
            "core.update_metadata",
            Some(&a),
            json!({"custom": {"x": null}}),
        );
        let m = &k.state.blocks[&a].metadata;
        assert_eq!(m.description.as_deref(), Some("d"));
        assert_eq!(m.custom.keys().collect::<Vec<_>>(), ["y"]);
        k.ok(
            "core.update_metadata",
            Some(&a),
            json!({"description": null}),
        );
        assert_eq!(k.state.blocks[&a].metadata.description, None);
        k.err("core.update_metadata", Some(&a), json!({}));
    }
}
