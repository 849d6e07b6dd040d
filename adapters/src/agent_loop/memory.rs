//! Memory (seed 003 "Memory recall / store"): after each turn the session stores a short summary
//! as an `agent.session` `memory` event; before each turn the summaries of the agent's *other*
//! sessions that share keywords with the user's message are recalled into the system prompt.
//! Keyword search only — no embedding model, no network.

use std::collections::BTreeSet;

/// One stored summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub session_id: String,
    pub summary: String,
    pub keywords: BTreeSet<String>,
}

/// Lower-cased words of 3+ characters (ASCII-ish scripts) and character bigrams of CJK runs
/// (the same keywords the context policy ranks by).
pub use elfiee_projections::context::keywords;

/// The `limit` memories sharing the most keywords with `query` (at least one), best first;
/// ties go to the newer memory.
pub fn recall<'a>(memories: &'a [Memory], query: &str, limit: usize) -> Vec<&'a Memory> {
    let q = keywords(query);
    let mut scored: Vec<(usize, usize, &Memory)> = memories
        .iter()
        .enumerate()
        .map(|(i, m)| (m.keywords.intersection(&q).count(), i, m))
        .filter(|(s, _, _)| *s > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    scored.into_iter().take(limit).map(|(_, _, m)| m).collect()
}

/// At most `max` characters of `s` (on a character boundary), with `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(id: &str, text: &str) -> Memory {
        Memory {
            session_id: id.into(),
            summary: text.into(),
            keywords: keywords(text),
        }
    }

    #[test]
    fn keywords_cover_words_and_cjk_bigrams() {
        let k = keywords("Fix the Parser in parser.rs — 修复解析器");
        assert!(k.contains("parser") && k.contains("fix") && !k.contains("the"));
        assert!(k.contains("解析") && k.contains("修复"));
    }

    #[test]
    fn recall_ranks_by_shared_keywords() {
        let ms = vec![
            mem("a", "wrote the parser for command blocks"),
            mem("b", "renamed the terminal"),
            mem("c", "parser tests for command output"),
        ];
        let got: Vec<&str> = recall(&ms, "the command parser is broken", 2)
            .iter()
            .map(|m| m.session_id.as_str())
            .collect();
        assert_eq!(got, ["c", "a"]);
        assert!(recall(&ms, "unrelated words entirely", 3).is_empty());
    }

    #[test]
    fn clip_keeps_characters_whole() {
        assert_eq!(clip("解析器很好", 3), "解析器…");
        assert_eq!(clip(" short ", 10), "short");
    }
}
