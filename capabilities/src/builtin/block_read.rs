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
        let mut k = Kit::new();
        let md = k.block("markdown", "m");
        assert!(k
            .ok("alice", "markdown.read", Some(&md), json!({}))
            .is_empty());
        k.err("bob", "markdown.read", Some(&md), json!({}));
        k.grant("*", "markdown.read", None);
        assert!(k
            .ok("bob", "markdown.read", Some(&md), json!({}))
            .is_empty());
        // Each read is for blocks of its own type.
        let code = k.block("code", "c");
        assert!(k
            .ok("alice", "code.read", Some(&code), json!({}))
            .is_empty());
        k.err("alice", "code.read", Some(&md), json!({}));
        k.err("alice", "markdown.read", Some(&code), json!({}));
        k.err("alice", "code.read", Some(&code), json!({"x": 1}));
    }
}
