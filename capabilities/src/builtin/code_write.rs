use std::sync::Arc;

use elfiee_model::{Command, Ctx, EventDraft};
use elfiee_projections::{Fold, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::payload::parse;
use crate::{Capability, Handled, Target};

/// `code.write`: replaces the text (and optionally the language) of a code block.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeWritePayload {
    pub text: String,
    #[serde(default)]
    pub language: Option<String>,
}

pub struct CodeWrite;

impl Capability for CodeWrite {
    fn id(&self) -> &'static str {
        "code.write"
    }
    fn merge(&self) -> crate::Merge {
        crate::Merge::BlockWrite
    }
    fn target(&self) -> Target {
        Target::Block(Some("code"))
    }
    fn handle(&self, cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
        let p: CodeWritePayload = parse(self.id(), &cmd.payload)?;
        let mut contents = Map::new();
        contents.insert("text".into(), Value::String(p.text));
        if let Some(lang) = p.language {
            contents.insert("language".into(), Value::String(lang));
        }
        let block = cmd.block_id.clone().unwrap_or_default();
        Ok(vec![EventDraft::new(
            block,
            self.id(),
            json!({"contents": contents}),
        )])
    }
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        super::support::patch_fold()
    }
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn write_sets_text_and_keeps_language_when_absent() {
        let mut k = Kit::new();
        let c = k.block("code", "c");
        k.ok(
            "alice",
            "code.write",
            Some(&c),
            json!({"text": "fn main() {}", "language": "rust"}),
        );
        k.ok(
            "alice",
            "code.write",
            Some(&c),
            json!({"text": "fn main() { }"}),
        );
        assert_eq!(
            k.state.blocks[&c].contents,
            json!({"text": "fn main() { }", "language": "rust"})
        );
    }
}
