//! `markdown.read` and `code.read`: authorize reading a block of their type; commit no
//! events. The engine's read API runs this check and then returns the block.

use super::spec::Builtin;
use super::support::read;
use crate::Target;

pub(crate) const CAPABILITIES: &[Builtin] = &[
    Builtin::new("markdown.read", Target::Block(Some("markdown")), read),
    Builtin::new("code.read", Target::Block(Some("code")), read),
];

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn read_is_checked_but_writes_nothing() {
        let (mut k, md) = Kit::with_block("markdown", "m");
        assert!(k.ok("markdown.read", Some(&md), json!({})).is_empty());
        k.err_by("bob", "markdown.read", Some(&md), json!({}));
        k.grant("*", "markdown.read", None);
        assert!(k
            .ok_by("bob", "markdown.read", Some(&md), json!({}))
            .is_empty());
        // Each read is for blocks of its own type.
        let code = k.block("code", "c");
        assert!(k.ok("code.read", Some(&code), json!({})).is_empty());
        k.err("code.read", Some(&md), json!({}));
        k.err("markdown.read", Some(&code), json!({}));
        k.err("code.read", Some(&code), json!({"x": 1}));
    }
}
