//! Unit tests of the session's pure parts.

use super::*;

fn call(id: &str) -> Message {
    Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "elfiee_block_list".into(),
            input: json!({}),
        }],
    )
}
fn result(id: &str) -> Message {
    Message::new(
        Role::User,
        vec![ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: "{}".into(),
            is_error: false,
        }],
    )
}

#[test]
fn a_dangling_tool_call_gets_an_error_result_before_the_next_message() {
    let mut h = Vec::new();
    push_paired(&mut h, Message::user_text("go"));
    push_paired(&mut h, call("t1"));
    push_paired(&mut h, Message::user_text("are you there?"));
    assert_eq!(h.len(), 4);
    assert!(
        matches!(&h[2].content[0], ContentBlock::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "t1")
    );
    let mut ok = Vec::new();
    for m in [Message::user_text("go"), call("t1"), result("t1")] {
        push_paired(&mut ok, m);
    }
    assert_eq!(ok.len(), 3, "answered calls are left alone");
}

#[test]
fn the_window_starts_at_a_plain_user_message_or_a_note() {
    let h = vec![
        Message::user_text("a"),
        call("t1"),
        result("t1"),
        Message::assistant_text("x"),
        Message::user_text("b"),
        call("t2"),
        result("t2"),
    ];
    let w = window(&h, 4);
    assert_eq!(w.len(), 3);
    assert!(is_plain_user(&w[0]));
    let only_tools = vec![
        Message::user_text("a"),
        call("t1"),
        result("t1"),
        call("t2"),
        result("t2"),
    ];
    let w = window(&only_tools, 3);
    assert_eq!(w[0], truncation_message());
    assert_eq!(w[1], call("t2"), "the note, then a whole call/result pair");
    assert_eq!(window(&only_tools, 50), only_tools);
}

#[test]
fn titles_and_time_are_short_and_well_formed() {
    assert_eq!(
        title_of("Implement the parser for command blocks now please"),
        "Implement the parser for command blocks"
    );
    assert_eq!(
        title_of("实现命令块解析器并链接到需求"),
        "实现命令块解析器并链接到需求"
    );
    let t = utc_now();
    assert!(
        t.len() == 20 && t.ends_with(" UTC") && t.starts_with("20"),
        "{t}"
    );
}

#[test]
fn results_render_in_the_seed_format() {
    assert_eq!(
        ToolOutcome::Ok("out".into()).render(),
        ("out".into(), false)
    );
    assert_eq!(
        ToolOutcome::failed("nope").render(),
        ("[failed] nope".into(), true)
    );
    assert_eq!(
        ToolOutcome::Failed {
            error: "exit code 1".into(),
            partial: Some("half".into())
        }
        .render()
        .0,
        "[failed] exit code 1\n[partial output]\nhalf"
    );
    assert_eq!(
        ToolOutcome::Error("disk".into()).render(),
        ("[error] disk".into(), true)
    );
}

#[test]
fn chinese_replies_get_chinese_result_markers() {
    let zh = Markers::for_language(Some("zh-CN"));
    assert_eq!(
        ToolOutcome::Failed {
            error: "exit code 1".into(),
            partial: Some("half".into())
        }
        .render_in(zh)
        .0,
        "[失败] exit code 1\n[部分输出]\nhalf"
    );
    assert_eq!(
        ToolOutcome::Error("disk".into()).render_in(zh).0,
        "[错误] disk"
    );
    assert_eq!(Markers::for_language(Some("Chinese")).failed, "[失败]");
    assert_eq!(Markers::for_language(Some("en")).failed, "[failed]");
    assert_eq!(Markers::for_language(None).failed, "[failed]");
}
