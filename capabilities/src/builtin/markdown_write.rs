use elfiee_model::{Command, Ctx};
use elfiee_projections::State;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::spec::Builtin;
use super::support::on_block;
use crate::payload::parse;
use crate::Handled;

/// `markdown.write`: replaces the markdown text of a markdown block.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkdownWritePayload {
    pub markdown: String,
}

const ID: &str = "markdown.write";

pub(crate) const CAPABILITIES: &[Builtin] = &[Builtin::body_write(ID, "markdown", handle)];

fn handle(cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
    let p: MarkdownWritePayload = parse(ID, &cmd.payload)?;
    on_block(cmd, ID, json!({"contents": {"markdown": p.markdown}}))
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use elfiee_model::CapError;
    use serde_json::json;

    #[test]
    fn write_sets_markdown_and_checks_type_and_rights() {
        let mut k = Kit::new();
        let (md, code) = (k.block("markdown", "m"), k.block("code", "c"));
        k.ok(
            "markdown.write",
            Some(&md),
            json!({"markdown": "# Títle ✓"}),
        );
        assert_eq!(k.state.blocks[&md].contents["markdown"], "# Títle ✓");
        k.err_contains(
            "markdown.write",
            Some(&code),
            json!({"markdown": "x"}),
            "markdown blocks",
        );
        assert!(matches!(
            k.err_by("bob", "markdown.write", Some(&md), json!({"markdown": "x"})),
            CapError::Unauthorized { .. }
        ));
        assert!(matches!(
            k.err("markdown.write", Some(&md), json!({"text": "x"})),
            CapError::InvalidPayload { .. }
        ));
        assert!(matches!(
            k.err("markdown.write", None, json!({"markdown": "x"})),
            CapError::InvalidPayload { .. }
        ));
    }
}
