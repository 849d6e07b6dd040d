use elfiee_model::{Command, Ctx};
use elfiee_projections::State;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::spec::Builtin;
use super::support::on_block;
use crate::payload::parse;
use crate::Handled;

/// `code.write`: replaces the text (and optionally the language) of a code block.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeWritePayload {
    pub text: String,
    #[serde(default)]
    pub language: Option<String>,
}

const ID: &str = "code.write";

pub(crate) const CAPABILITIES: &[Builtin] = &[Builtin::body_write(ID, "code", handle)];

fn handle(cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
    let p: CodeWritePayload = parse(ID, &cmd.payload)?;
    let mut contents = Map::new();
    contents.insert("text".into(), Value::String(p.text));
    if let Some(lang) = p.language {
        contents.insert("language".into(), Value::String(lang));
    }
    on_block(cmd, ID, json!({"contents": contents}))
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn write_sets_text_and_keeps_language_when_absent() {
        let (mut k, c) = Kit::with_block("code", "c");
        k.ok(
            "code.write",
            Some(&c),
            json!({"text": "fn main() {}", "language": "rust"}),
        );
        k.ok("code.write", Some(&c), json!({"text": "fn main() { }"}));
        assert_eq!(
            k.state.blocks[&c].contents,
            json!({"text": "fn main() { }", "language": "rust"})
        );
    }
}
