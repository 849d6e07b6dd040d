//! The `<command>` parser (seed 000 §3.5): well-formed answers, broken ones, adversarial sizes.

use std::time::{Duration, Instant};

use elfiee_adapters::llm::{parse_structured_output, ProposedCommand};
use serde_json::json;

const SEED_EXAMPLE: &str = r##"
<thinking>
用户想要创建一个新的 Markdown 文件...
</thinking>

<command>
  <cap_id>markdown.write</cap_id>
  <block_id>block-xxx</block_id>
  <payload>{"content": "# Hello World"}</payload>
  <description>创建新的 Markdown 内容</description>
</command>

<command>
  <cap_id>code.write</cap_id>
  <block_id>block-yyy</block_id>
  <payload>{"content": "fn main() {}", "language": "rust"}</payload>
  <description>添加 Rust 代码示例</description>
</command>
"##;

/// `text` yields no command, and its first error mentions `why`.
fn assert_refused(text: &str, why: &str) {
    let r = parse_structured_output(text);
    assert!(r.commands.is_empty(), "{:?}", r.commands);
    assert!(r.errors[0].contains(why), "{:?}", r.errors);
}

#[test]
fn seed_example_yields_both_commands_in_order() {
    let r = parse_structured_output(SEED_EXAMPLE);
    assert_eq!(r.errors, Vec::<String>::new());
    assert_eq!(
        r.commands,
        vec![
            ProposedCommand {
                cap_id: "markdown.write".into(),
                block_id: Some("block-xxx".into()),
                payload: json!({"content": "# Hello World"}),
                description: Some("创建新的 Markdown 内容".into()),
            },
            ProposedCommand {
                cap_id: "code.write".into(),
                block_id: Some("block-yyy".into()),
                payload: json!({"content": "fn main() {}", "language": "rust"}),
                description: Some("添加 Rust 代码示例".into()),
            },
        ]
    );
}

#[test]
fn single_command_after_thinking_is_parsed() {
    let r = parse_structured_output(
        "<thinking>I need to write markdown</thinking>\n<command>\n  <cap_id>markdown.write</cap_id>\n  <block_id>block-123</block_id>\n  <payload>{\"content\": \"# Hello\"}</payload>\n  <description>Write heading</description>\n</command>\n",
    );
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.commands.len(), 1);
    assert_eq!(r.commands[0].cap_id, "markdown.write");
    assert_eq!(r.commands[0].block_id.as_deref(), Some("block-123"));
    assert_eq!(r.commands[0].description.as_deref(), Some("Write heading"));
}

#[test]
fn command_without_payload_or_description_gets_empty_object_and_none() {
    let r = parse_structured_output(
        "<command><cap_id>markdown.read</cap_id><block_id>b</block_id></command>",
    );
    assert!(r.errors.is_empty());
    assert_eq!(r.commands[0].payload, json!({}));
    assert_eq!(r.commands[0].description, None);
}

#[test]
fn command_without_block_id_targets_nothing() {
    let r = parse_structured_output(
        r#"<command><cap_id>core.create</cap_id><payload>{"name": "n", "block_type": "markdown"}</payload></command>"#,
    );
    assert!(r.errors.is_empty());
    assert_eq!(r.commands[0].block_id, None);
}

#[test]
fn text_without_commands_gives_nothing_and_no_errors() {
    let r = parse_structured_output(
        "Sure! I think the document looks fine as it is. 1 < 2 and <b>bold</b>.",
    );
    assert!(r.commands.is_empty());
    assert!(r.errors.is_empty());
}

#[test]
fn malformed_payload_json_is_reported_by_index_and_the_rest_still_parse() {
    let text = r#"
<command><cap_id>a.one</cap_id><payload>{"x": 1}</payload></command>
<command><cap_id>a.two</cap_id><payload>{"x": 1,,}</payload></command>
<command><cap_id>a.three</cap_id><payload>{"y": 2}</payload></command>"#;
    let r = parse_structured_output(text);
    let caps: Vec<_> = r.commands.iter().map(|c| c.cap_id.as_str()).collect();
    assert_eq!(caps, ["a.one", "a.three"]);
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(r.errors[0].starts_with("command #2:"), "{}", r.errors[0]);
    assert!(r.errors[0].contains("not valid JSON"), "{}", r.errors[0]);
}

#[test]
fn payload_that_is_not_an_object_is_an_error() {
    assert_refused(
        "<command><cap_id>a.b</cap_id><payload>[1, 2]</payload></command>",
        "must be a JSON object",
    );
}

#[test]
fn missing_cap_id_is_reported_and_others_kept() {
    let r = parse_structured_output(
        "<command><block_id>b1</block_id><payload>{}</payload></command><command><cap_id>ok.cap</cap_id></command>",
    );
    assert_eq!(r.commands.len(), 1);
    assert_eq!(r.commands[0].cap_id, "ok.cap");
    assert_eq!(r.errors, vec!["command #1: missing <cap_id>".to_owned()]);
}

#[test]
fn cap_id_with_spaces_is_rejected() {
    assert_refused(
        "<command><cap_id>write the file</cap_id></command>",
        "not a capability id",
    );
}

#[test]
fn command_not_closed_before_the_next_one_is_reported_and_the_next_parses() {
    let r = parse_structured_output(
        "<command><cap_id>a.first</cap_id>\n<command><cap_id>a.second</cap_id><payload>{\"k\": true}</payload></command>",
    );
    assert_eq!(r.commands.len(), 1);
    assert_eq!(r.commands[0].cap_id, "a.second");
    assert_eq!(r.errors.len(), 1);
    assert!(
        r.errors[0].starts_with("command #1:") && r.errors[0].contains("not closed"),
        "{:?}",
        r.errors
    );
}

#[test]
fn unclosed_last_command_is_reported() {
    let r = parse_structured_output(
        "<command><cap_id>a.ok</cap_id></command><command><cap_id>a.cut</cap_id><payload>{\"a\":",
    );
    assert_eq!(r.commands.len(), 1);
    assert!(
        r.errors.iter().any(|e| e.starts_with("command #2:")),
        "{:?}",
        r.errors
    );
}

#[test]
fn unclosed_field_tag_is_reported() {
    assert_refused(
        "<command><cap_id>a.b</cap_id><block_id>b1</command>",
        "<block_id> is not closed",
    );
}

#[test]
fn duplicate_field_is_reported() {
    assert_refused(
        "<command><cap_id>a.b</cap_id><cap_id>c.d</cap_id></command>",
        "more than one <cap_id>",
    );
}

#[test]
fn commands_inside_thinking_are_ignored() {
    let text = "<thinking>Maybe:\n<command><cap_id>core.delete</cap_id><block_id>all</block_id></command>\nno.</thinking>\n\
                <command><cap_id>markdown.write</cap_id><block_id>b</block_id><payload>{\"markdown\": \"x\"}</payload></command>";
    let r = parse_structured_output(text);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let caps: Vec<_> = r.commands.iter().map(|c| c.cap_id.as_str()).collect();
    assert_eq!(caps, ["markdown.write"]);
}

#[test]
fn unclosed_thinking_hides_later_commands_and_says_so() {
    let r =
        parse_structured_output("<thinking>hmm <command><cap_id>core.delete</cap_id></command>");
    assert!(r.commands.is_empty());
    assert_eq!(r.errors.len(), 1);
    assert!(
        r.errors[0].contains("<thinking> is never closed"),
        "{:?}",
        r.errors
    );
}

#[test]
fn payload_containing_tag_like_text_is_kept_whole() {
    // A document *about* this format: its strings contain the closing tags.
    let md = "Use <command>…</command> with <cap_id>x</cap_id> and </payload> inside.";
    let text = format!(
        "<command><cap_id>markdown.write</cap_id><block_id>doc</block_id><payload>{}</payload><description>d</description></command>",
        json!({ "markdown": md })
    );
    let r = parse_structured_output(&text);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.commands.len(), 1);
    assert_eq!(r.commands[0].payload["markdown"], md);
    assert_eq!(r.commands[0].cap_id, "markdown.write");
    assert_eq!(r.commands[0].description.as_deref(), Some("d"));
}

#[test]
fn payload_in_a_json_code_fence_is_accepted() {
    let r = parse_structured_output(
        "<command><cap_id>a.b</cap_id><payload>\n```json\n{\"k\": 1}\n```\n</payload></command>",
    );
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.commands[0].payload, json!({"k": 1}));
}

#[test]
fn non_ascii_everywhere_is_preserved() {
    let text = "前言 🙂 <command>\n<cap_id>markdown.write</cap_id>\n<block_id>块-α</block_id>\n<payload>{\"markdown\": \"# 你好，世界 🌍\\nnaïve café\"}</payload>\n<description>写入标题 ✓</description>\n</command> 后记 é";
    let r = parse_structured_output(text);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.commands[0].block_id.as_deref(), Some("块-α"));
    assert_eq!(
        r.commands[0].payload["markdown"],
        "# 你好，世界 🌍\nnaïve café"
    );
    assert_eq!(r.commands[0].description.as_deref(), Some("写入标题 ✓"));
}

#[test]
fn truncated_inputs_never_panic() {
    // Every prefix (at char boundaries) of a realistic answer, including cuts inside tags.
    let text =
        format!("{SEED_EXAMPLE}<command><cap_id>x.y</cap_id><payload>{{\"a\": \"<b>é</b>\"}}</payload></command>");
    for (i, _) in text.char_indices() {
        let r = parse_structured_output(&text[..i]);
        assert!(r.commands.len() <= 3);
    }
}

fn assert_fast(text: &str, limit: Duration) -> elfiee_adapters::llm::ParseResult {
    let t = Instant::now();
    let r = parse_structured_output(text);
    let took = t.elapsed();
    assert!(took < limit, "parsing {} bytes took {took:?}", text.len());
    r
}

#[test]
fn one_megabyte_answer_with_many_commands_parses_quickly() {
    let one = "<command>\n  <cap_id>markdown.write</cap_id>\n  <block_id>block-1</block_id>\n  <payload>{\"markdown\": \"# 标题\\n正文 text\"}</payload>\n  <description>写</description>\n</command>\nSome prose between commands.\n";
    let text = one.repeat(1_000_000 / one.len() + 1);
    assert!(text.len() >= 1_000_000);
    let r = assert_fast(&text, Duration::from_secs(1));
    assert!(r.errors.is_empty());
    assert_eq!(r.commands.len(), 1_000_000 / one.len() + 1);
}

#[test]
fn one_megabyte_of_unclosed_tags_parses_quickly() {
    // Adversarial: tens of thousands of unclosed commands and fields — must stay linear.
    let text = "<command><cap_id><block_id><payload>{\"a\": ".repeat(1_000_000 / 40);
    let r = assert_fast(&text, Duration::from_secs(1));
    assert!(r.commands.is_empty());
    assert!(!r.errors.is_empty());
    let text = "<command>".repeat(1_000_000 / 9);
    let r = assert_fast(&text, Duration::from_secs(1));
    assert_eq!(
        r.errors.len(),
        1_000_000 / 9,
        "one error per unclosed command"
    );
}

#[test]
fn one_megabyte_single_payload_parses_quickly() {
    let big = "字".repeat(330_000);
    let text = format!(
        "<command><cap_id>markdown.write</cap_id><payload>{}</payload></command>",
        json!({ "markdown": big })
    );
    assert!(text.len() > 990_000);
    let r = assert_fast(&text, Duration::from_secs(1));
    assert!(r.errors.is_empty());
    assert_eq!(
        r.commands[0].payload["markdown"].as_str().map(|s| s.len()),
        Some(big.len())
    );
}

proptest::proptest! {
    /// Any mix of tag fragments, JSON bits and multi-byte text: no panic, and every error names
    /// a command that exists.
    #[test]
    fn arbitrary_tag_soup_never_panics(parts in proptest::collection::vec(proptest::sample::select(vec![
        "<command>", "</command>", "<cap_id>", "</cap_id>", "<block_id>", "</block_id>", "<payload>", "</payload>",
        "<description>", "</description>", "<thinking>", "</thinking>", "{", "}", "\"", ":", ",", "[", "]",
        "a.b", " ", "\n", "é", "…", "字", "🙂", "<", ">", "```json\n", "```", "{\"k\": \"</payload>\"}",
    ]), 0..60)) {
        let text: String = parts.concat();
        let r = parse_structured_output(&text);
        let opened = text.matches("<command>").count();
        proptest::prop_assert!(r.commands.len() <= opened);
        for e in &r.errors {
            if let Some(n) = e.strip_prefix("command #").and_then(|s| s.split(':').next()).and_then(|n| n.parse::<usize>().ok()) {
                proptest::prop_assert!(n >= 1 && n <= opened, "{e}");
            }
        }
    }
}
