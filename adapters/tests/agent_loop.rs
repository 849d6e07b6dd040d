//! The agent loop with a scripted provider over the real engine.

mod support;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use elfiee_adapters::agent_loop::{
    Action, AgentSession, Autonomy, Confirm, Rule, Ruleset, SessionOptions, StopReason,
};
use elfiee_adapters::effects::BoxFuture;
use elfiee_adapters::llm::{
    ContentBlock, LlmError, LlmRequest, LlmResponse, Provider, ScriptedProvider, StreamEvent, Usage,
};
use elfiee_adapters::{attach, EffectsConfig};
use elfiee_engine::{Engine, FileHandle};
use serde_json::{json, Value};

fn tool(id: &str, name: &str, input: Value) -> LlmResponse {
    LlmResponse {
        content: vec![
            ContentBlock::text(format!("calling {name}")),
            ContentBlock::ToolUse {
                id: id.into(),
                name: name.into(),
                input,
            },
        ],
        stop_reason: Some("tool_use".into()),
        usage: Usage::default(),
        model: "scripted".into(),
    }
}

fn done(text: &str) -> LlmResponse {
    LlmResponse::text("scripted", text)
}

struct Doc {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    engine: Engine,
    file: FileHandle,
    agent: String,
    agent_editor: String,
}

async fn doc() -> Doc {
    let support::Fresh {
        dir,
        path,
        engine,
        file,
    } = support::fresh_doc("loop", "a.elf").await;
    support::requirement(&file, "Parse <command> blocks.").await;
    let create = json!({"name": "parser.rs", "block_type": "code", "block_id": "impl"});
    support::alice(&file, "core.create", None, create).await;
    let (agent, agent_editor) = support::create_agent(&file, "alice", "builder").await;
    Doc {
        _dir: dir,
        path,
        engine,
        file,
        agent,
        agent_editor,
    }
}

impl Doc {
    /// A new session of the document's agent, talking to alice.
    fn session(&self, o: SessionOptions) -> AgentSession {
        open_session(&self.file, &self.agent, None, o)
    }
}

/// Alice's session `id` (a new one with `None`) with `agent` on `file`.
fn open_session(
    file: &FileHandle,
    agent: &str,
    id: Option<&str>,
    o: SessionOptions,
) -> AgentSession {
    AgentSession::open(file, "alice", agent, id, o).unwrap()
}

fn options(p: &Arc<ScriptedProvider>, autonomy: Autonomy, rules: Vec<Rule>) -> SessionOptions {
    let mut o = SessionOptions::new(p.clone(), "scripted");
    o.autonomy = autonomy;
    o.rules = Ruleset::new(rules);
    o
}

fn no_ask(tool: &str, _: &Value) -> Confirm {
    panic!("unexpected confirmation for {tool}")
}

/// A provider's answer to one call.
type Answer = BoxFuture<'static, Result<LlmResponse, LlmError>>;

/// A scripted provider with a hook that sees every request first and answers it itself
/// (`Some`) or leaves it to the script (`None`).
struct Hooked<F> {
    script: ScriptedProvider,
    hook: F,
}

impl<F: Fn(&LlmRequest) -> Option<Answer> + Send + Sync> Provider for Hooked<F> {
    fn name(&self) -> &'static str {
        "hooked"
    }
    fn complete<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<LlmResponse, LlmError>> {
        match (self.hook)(req) {
            Some(answer) => answer,
            None => self.script.complete(req, on_event),
        }
    }
}

#[tokio::test]
async fn the_agent_reads_a_requirement_writes_code_and_links_it_as_itself() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "elfiee_block_get", json!({"block_id": "req"})),
        tool(
            "t2",
            "elfiee_code_write",
            json!({"block_id": "impl", "text": "fn parse() {}", "language": "rust"}),
        ),
        tool(
            "t3",
            "elfiee_block_link",
            json!({"from": "impl", "to": "req", "relation": "implement"}),
        ),
        done("Implemented and linked."),
    ]));
    let mut s = d.session(options(&p, Autonomy::Full, vec![]));
    let out = s
        .run_turn("Implement the requirement", &mut no_ask)
        .await
        .unwrap();
    assert_eq!(out.stop_reason, StopReason::EndTurn);
    assert_eq!(
        (out.text.as_str(), out.tool_calls),
        ("Implemented and linked.", 3)
    );
    let code = d.file.block("impl").unwrap();
    assert_eq!(code.contents["text"], "fn parse() {}");
    assert_eq!(code.children["implement"], vec!["req".to_string()]);
    let changes: Vec<String> = d
        .file
        .events(1)
        .unwrap()
        .iter()
        .filter(|e| e.entity == "impl" && e.cap_id() != "core.create")
        .map(|e| e.attribute.clone())
        .collect();
    assert_eq!(
        changes,
        [
            format!("{}/code.write", d.agent_editor),
            format!("{}/core.link", d.agent_editor)
        ]
    );
    // The model saw the requirement's text in the tool result.
    let second = &p.requests()[1];
    assert!(serde_json::to_string(&second.messages)
        .unwrap()
        .contains("Parse <command> blocks."));
    assert!(
        second.tools.iter().any(|t| t.name == "shell")
            && second
                .tools
                .iter()
                .any(|t| t.name == "elfiee_markdown_write")
    );
    d.file.close().await;
}

#[tokio::test]
async fn the_iteration_cap_stops_the_turn_with_a_visible_reason() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new(
        (0..5).map(|i| tool(&format!("t{i}"), "elfiee_block_list", json!({}))),
    ));
    let mut o = options(&p, Autonomy::Full, vec![]);
    o.max_iterations = 3;
    o.doom_loop_threshold = 100;
    let mut s = d.session(o);
    let out = s.run_turn("loop forever", &mut no_ask).await.unwrap();
    assert_eq!(out.stop_reason, StopReason::IterationCap { limit: 3 });
    assert!(out.stop_reason.to_string().contains("iteration cap"));
    assert_eq!(p.requests().len(), 3);
    d.file.close().await;
}

#[tokio::test]
async fn a_deny_rule_blocks_shell_rm_and_the_model_is_told() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "shell", json!({"command": "rm -rf /tmp/x"})),
        done("ok"),
    ]));
    let rules = vec![
        Rule::new("shell", "*", Action::Allow),
        Rule::new("shell", "rm *", Action::Deny),
    ];
    let mut s = d.session(options(&p, Autonomy::Full, rules));
    s.run_turn("clean up", &mut no_ask).await.unwrap();
    let sent = serde_json::to_string(&p.requests()[1].messages).unwrap();
    assert!(
        sent.contains("[failed] denied: a permission rule forbids shell"),
        "{sent}"
    );
    assert!(
        !d.file
            .events(1)
            .unwrap()
            .iter()
            .any(|e| e.cap_id() == "terminal.execute"),
        "nothing ran"
    );
    d.file.close().await;
}

#[tokio::test]
async fn ask_once_always_and_reject_with_feedback() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "elfiee_block_get", json!({"block_id": "req"})),
        tool(
            "t2",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "v2"}),
        ),
        tool(
            "t3",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "v3"}),
        ),
        tool(
            "t4",
            "elfiee_code_write",
            json!({"block_id": "impl", "text": "x"}),
        ),
        done("done"),
    ]));
    let mut asked = Vec::new();
    let mut answer = |tool: &str, _: &Value| {
        asked.push(tool.to_owned());
        match tool {
            "elfiee_block_get" => Confirm::Once,
            "elfiee_markdown_write" => Confirm::Always,
            _ => Confirm::RejectWithFeedback("use markdown, not code".into()),
        }
    };
    let mut s = d.session(options(&p, Autonomy::Supervised, vec![]));
    s.run_turn("edit", &mut answer).await.unwrap();
    assert_eq!(
        asked,
        [
            "elfiee_block_get",
            "elfiee_markdown_write",
            "elfiee_code_write"
        ],
        "the second write was allowed by the session rule"
    );
    assert_eq!(d.file.block("req").unwrap().contents["markdown"], "v3");
    assert!(
        d.file.block("impl").unwrap().contents.get("text").is_none(),
        "the rejected call did not run"
    );
    let last = serde_json::to_string(&p.requests()[4].messages).unwrap();
    assert!(
        last.contains("rejected by the user: use markdown, not code"),
        "the feedback reaches the model"
    );
    d.file.close().await;
}

#[tokio::test]
async fn the_doom_loop_guard_asks_on_the_third_identical_call() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "elfiee_block_list", json!({})),
        tool("t2", "elfiee_block_list", json!({})),
        tool("t3", "elfiee_block_list", json!({})),
        done("stopped"),
    ]));
    let mut asked = 0;
    let mut s = d.session(options(&p, Autonomy::Full, vec![]));
    s.run_turn("list", &mut |_: &str, _: &Value| {
        asked += 1;
        Confirm::Reject
    })
    .await
    .unwrap();
    assert_eq!(asked, 1);
    d.file.close().await;
}

#[tokio::test]
async fn a_session_resumes_after_reopen_and_replay_calls_nothing() {
    let d = doc().await;
    let fx = attach(&d.file, EffectsConfig::default()).await.unwrap();
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "shell", json!({"command": "echo hi >> ran.txt"})),
        done("first turn done"),
    ]));
    let rules = vec![Rule::new("shell", "echo *", Action::Allow)];
    let mut s = d.session(options(&p, Autonomy::Supervised, rules));
    s.run_turn("say hi", &mut no_ask).await.unwrap();
    let (id, history) = (s.session_id().to_owned(), s.history().to_vec());
    assert_eq!(
        history.len(),
        4,
        "user, assistant (tool call), tool result, assistant"
    );
    support::settle_and_close(&d.file, fx).await;
    let ran = std::fs::read_dir(d.path.join("terminals"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("ran.txt");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "hi\n");

    elfiee_engine::replay(&d.path, |_, _| {}).unwrap();
    let file = d.engine.open(&d.path).await.unwrap();
    let fx = attach(&file, EffectsConfig::default()).await.unwrap();
    let p2 = Arc::new(ScriptedProvider::new([done("second turn")]));
    let mut s = open_session(
        &file,
        &d.agent,
        Some(&id),
        options(&p2, Autonomy::Supervised, vec![]),
    );
    assert_eq!(
        s.history(),
        history.as_slice(),
        "the session is rebuilt exactly from its events"
    );
    s.run_turn("and now?", &mut no_ask).await.unwrap();
    assert_eq!(
        p2.requests()[0].messages.len(),
        5,
        "the resumed history went to the model"
    );
    support::settle_and_close(&file, fx).await;
    assert_eq!(
        p.requests().len(),
        2,
        "replay and reopen made no call on the first provider"
    );
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "hi\n",
        "and ran no shell command again"
    );
}

fn tool_with_usage(id: &str, name: &str, input: Value, tokens: u64) -> LlmResponse {
    let mut r = tool(id, name, input);
    r.usage = Usage {
        input_tokens: tokens,
        output_tokens: 10,
    };
    r
}

#[tokio::test]
async fn compaction_summarises_near_the_context_limit_and_survives_reopen() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool_with_usage("t1", "elfiee_block_get", json!({"block_id": "req"}), 950),
        done("Goal: implement req. Accomplished: read req."),
        done("continuing after compaction"),
    ]));
    let mut o = options(&p, Autonomy::Full, vec![]);
    o.context_limit = 1000;
    o.compaction_buffer = 100;
    let mut s = d.session(o);
    let out = s.run_turn("start", &mut no_ask).await.unwrap();
    assert_eq!(out.text, "continuing after compaction");
    let reqs = p.requests();
    assert!(
        serde_json::to_string(&reqs[1].messages)
            .unwrap()
            .contains("Goal, Instructions, Discoveries, Accomplished, Files"),
        "the compaction call"
    );
    let after = serde_json::to_string(&reqs[2].messages).unwrap();
    assert!(after.starts_with("[{\"role\":\"user\""), "{after}");
    assert!(
        after.contains("Goal: implement req."),
        "the summary replaced the old history: {after}"
    );
    assert!(
        !after.contains("\"start\""),
        "the first user message was compacted away"
    );
    assert_eq!(
        reqs[2].messages.len(),
        3,
        "summary + the last tool call and its result"
    );
    let id = s.session_id().to_owned();
    let history = s.history().to_vec();
    d.file.close().await;
    let file = d.engine.open(&d.path).await.unwrap();
    let again = open_session(
        &file,
        &d.agent,
        Some(&id),
        options(&p, Autonomy::Full, vec![]),
    );
    assert_eq!(
        again.history(),
        history.as_slice(),
        "compaction is replayed from its event"
    );
    file.close().await;
}

#[tokio::test]
async fn a_failed_compaction_falls_back_to_truncation_and_the_session_goes_on() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::with_results([
        Ok(tool_with_usage("t1", "elfiee_block_list", json!({}), 5000)),
        Err(LlmError::Malformed("summary call broke".into())),
        Ok(done("still here")),
    ]));
    let mut o = options(&p, Autonomy::Full, vec![]);
    o.context_limit = 1000;
    let mut s = d.session(o);
    let out = s.run_turn("go", &mut no_ask).await.unwrap();
    assert_eq!(
        (out.stop_reason, out.text.as_str()),
        (StopReason::EndTurn, "still here")
    );
    let last = serde_json::to_string(&p.requests()[2].messages).unwrap();
    assert!(last.contains("Older messages were dropped"), "{last}");
    let next = s.run_turn("and again", &mut no_ask).await;
    assert!(
        next.is_ok(),
        "the session stays usable (the script is exhausted, so this turn reports an error stop)"
    );
    d.file.close().await;
}

#[tokio::test]
async fn old_tool_outputs_are_pruned_to_a_marker_but_kept_in_the_log() {
    let d = doc().await;
    support::alice(
        &d.file,
        "markdown.write",
        Some("req"),
        json!({"markdown": "word ".repeat(400)}),
    )
    .await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "elfiee_block_get", json!({"block_id": "req"})),
        tool("t2", "elfiee_block_get", json!({"block_id": "impl"})),
        done("ok"),
    ]));
    let mut o = options(&p, Autonomy::Full, vec![]);
    o.prune_tool_tokens = 300;
    let mut s = d.session(o);
    s.run_turn("read both", &mut no_ask).await.unwrap();
    let last = serde_json::to_string(&p.requests()[2].messages).unwrap();
    assert!(
        last.contains("older tool output pruned"),
        "the big, older output was pruned: {}",
        &last[..last.len().min(400)]
    );
    assert!(last.contains("parser.rs"), "the newest output is kept");
    let logged = serde_json::to_string(&d.file.events(1).unwrap()).unwrap();
    assert!(
        logged.matches("word word word").count() >= 2,
        "the log keeps the full output"
    );
    d.file.close().await;
}

#[tokio::test]
async fn the_task_tool_runs_a_read_only_sub_agent_and_returns_its_answer() {
    let d = doc().await;
    // Calls in order: parent → child → child → parent (one provider serves both).
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "task", json!({"prompt": "find the requirement"})),
        tool(
            "c1",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "overwritten"}),
        ),
        done("the requirement is req"),
        done("parent done"),
    ]));
    let mut s = d.session(options(&p, Autonomy::Full, vec![]));
    let out = s.run_turn("delegate", &mut no_ask).await.unwrap();
    assert_eq!(out.text, "parent done");
    assert_eq!(
        d.file.block("req").unwrap().contents["markdown"],
        "Parse <command> blocks.",
        "the explore agent is read-only"
    );
    let child_saw = serde_json::to_string(&p.requests()[2].messages).unwrap();
    assert!(child_saw.contains("[failed] denied"), "{child_saw}");
    let parent_saw = serde_json::to_string(&p.requests()[3].messages).unwrap();
    assert!(
        parent_saw.contains("the requirement is req"),
        "the child's last text is the task result"
    );
    let tagged = d
        .file
        .events(1)
        .unwrap()
        .iter()
        .filter(|e| e.value.get("parent_session").and_then(Value::as_str) == Some(s.session_id()))
        .count();
    assert!(
        tagged >= 3,
        "the child session's events name their parent ({tagged})"
    );
    d.file.close().await;
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let d = doc().await;
    let flag = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (raise, count) = (flag.clone(), calls.clone());
    let provider = Arc::new(Hooked {
        script: ScriptedProvider::new([
            tool("t1", "task", json!({"prompt": "explore"})),
            tool("c1", "elfiee_block_list", json!({})),
            done("never reached"),
            done("never reached either"),
        ]),
        // Raises the cancel flag during the second call: the child's first.
        hook: move |_: &LlmRequest| {
            if count.fetch_add(1, SeqCst) + 1 == 2 {
                raise.store(true, SeqCst);
            }
            None
        },
    });
    let mut o = SessionOptions::new(provider.clone(), "scripted");
    o.autonomy = Autonomy::Full;
    o.cancel = flag;
    let mut s = d.session(o);
    let out = s.run_turn("go", &mut no_ask).await.unwrap();
    assert_eq!(out.stop_reason, StopReason::Cancelled);
    assert_eq!(
        calls.load(SeqCst),
        2,
        "neither the child nor the parent called again"
    );
    let stops: Vec<String> = d
        .file
        .events(1)
        .unwrap()
        .iter()
        .filter(|e| e.value.get("entry") == Some(&json!("stop")))
        .map(|e| e.value["stop_reason"]["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        stops,
        ["cancelled", "cancelled"],
        "child and parent both recorded the cancellation"
    );
    d.file.close().await;
}

// ---- approvals, result format, memory, title/status, profiles, history cap, callbacks ----

use elfiee_adapters::agent_loop::{
    always_rules, ApproveAll, DenyAll, LoopEvent, Profile, SessionStatus,
};
use elfiee_adapters::llm::Role;

fn session_entries(file: &FileHandle, entry: &str) -> Vec<elfiee_model::Event> {
    file.events(1)
        .unwrap()
        .into_iter()
        .filter(|e| e.cap_id() == "agent.session" && e.value["entry"] == entry)
        .collect()
}

#[tokio::test]
async fn approvals_are_events_answered_by_the_user_and_always_rules_are_recorded() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool(
            "t1",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "v2"}),
        ),
        tool(
            "t2",
            "elfiee_code_write",
            json!({"block_id": "impl", "text": "x"}),
        ),
        done("done"),
    ]));
    let mut s = d.session(options(&p, Autonomy::Supervised, vec![]));
    let mut answers = vec![
        Confirm::RejectWithFeedback("no code".into()),
        Confirm::Always,
    ];
    s.run_turn("edit", &mut |_: &str, _: &Value| answers.pop().unwrap())
        .await
        .unwrap();
    let asked = session_entries(&d.file, "approval");
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].editor_id(), d.agent_editor, "the agent asks");
    assert_eq!(asked[0].value["request"]["tool"], "elfiee_markdown_write");
    assert_eq!(asked[0].value["request"]["reason"], "rule");
    let answered = session_entries(&d.file, "approval_answer");
    assert_eq!(
        answered
            .iter()
            .map(|e| e.value["answer"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["always", "reject_with_feedback"]
    );
    assert!(
        answered.iter().all(|e| e.editor_id() == "alice"),
        "the user answers"
    );
    assert_eq!(answered[1].value["feedback"], "no code");
    let rules = session_entries(&d.file, "rule");
    assert_eq!(rules.len(), 1);
    assert_eq!(
        (
            rules[0].editor_id(),
            rules[0].value["rule"]["permission"].as_str()
        ),
        ("alice", Some("elfiee_markdown_write"))
    );
    assert_eq!(s.session_rules().rules.len(), 1);
    // The user's message is the user's; the agent's messages are the agent's.
    let msgs = session_entries(&d.file, "message");
    assert_eq!(msgs[0].editor_id(), "alice");
    assert!(msgs[1..].iter().all(|e| e.editor_id() == d.agent_editor));
    d.file.close().await;
}

#[test]
fn always_on_shell_allows_the_base_command_only() {
    let rules = Ruleset::new(always_rules("shell", "cargo test -p x"));
    assert_eq!(rules.evaluate("shell", "cargo build"), Action::Allow);
    assert_eq!(rules.evaluate("shell", "cargo"), Action::Allow);
    assert_eq!(rules.evaluate("shell", "cargox"), Action::Ask);
    assert_eq!(rules.evaluate("shell", "rm -rf x"), Action::Ask);
    assert_eq!(
        Ruleset::new(always_rules("elfiee_code_write", "b1")).evaluate("elfiee_code_write", "b2"),
        Action::Allow
    );
}

#[tokio::test]
async fn tool_results_use_the_seed_format_failed_with_partial_output_and_error() {
    let d = doc().await;
    let fx = attach(&d.file, EffectsConfig::default()).await.unwrap();
    let p = Arc::new(ScriptedProvider::new([
        tool(
            "t1",
            "shell",
            json!({"command": "echo half-done; echo oops >&2; exit 3"}),
        ),
        tool("t2", "elfiee_block_get", json!({"block_id": "nope"})),
        tool("t3", "shell", json!({"command": "echo fine"})),
        done("ok"),
    ]));
    let mut s = d.session(options(&p, Autonomy::Full, vec![]));
    s.run_turn("try things", &mut no_ask).await.unwrap();
    let results: Vec<(String, bool)> = support::tool_results(s.history())
        .into_iter()
        .map(|(is_error, content)| (content, is_error))
        .collect();
    assert!(
        results[0].1 && results[0].0.starts_with("[failed] exit code 3: oops"),
        "{:?}",
        results[0]
    );
    assert!(
        results[0].0.contains("[partial output]\nhalf-done"),
        "partial output is kept: {:?}",
        results[0]
    );
    assert!(
        results[1].1 && results[1].0.starts_with("[failed] block 'nope' not found"),
        "{:?}",
        results[1]
    );
    assert!(
        !results[2].1 && results[2].0.contains("fine"),
        "success is the output itself, no prefix: {:?}",
        results[2]
    );
    support::settle_and_close(&d.file, fx).await;
}

#[tokio::test]
async fn a_broken_terminal_is_a_system_error() {
    let d = doc().await;
    let fx = attach(&d.file, EffectsConfig::default()).await.unwrap();
    let name = format!("shell: {}", d.agent_editor);
    let ev = support::alice(
        &d.file,
        "terminal.create",
        None,
        json!({"name": name, "shell": "/nonexistent/shell"}),
    )
    .await;
    support::alice(
        &d.file,
        "core.grant",
        Some(&ev[0].entity),
        json!({"editor_id": d.agent_editor, "cap_id": "terminal.execute"}),
    )
    .await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "shell", json!({"command": "ls"})),
        done("ok"),
    ]));
    let mut s = d.session(options(&p, Autonomy::Full, vec![]));
    s.run_turn("ls", &mut no_ask).await.unwrap();
    let sent = serde_json::to_string(&p.requests()[1].messages).unwrap();
    assert!(sent.contains("[error] cannot start"), "{sent}");
    support::settle_and_close(&d.file, fx).await;
}

#[tokio::test]
async fn an_earlier_sessions_summary_is_recalled_into_the_system_prompt() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "elfiee_block_get", json!({"block_id": "req"})),
        done("The parser requirement is in block req."),
        done("second session answer"),
    ]));
    let mut first = d.session(options(&p, Autonomy::Full, vec![]));
    first
        .run_turn("Where is the parser requirement?", &mut no_ask)
        .await
        .unwrap();
    let memories = session_entries(&d.file, "memory");
    assert_eq!(memories.len(), 1);
    assert_eq!(memories[0].editor_id(), d.agent_editor);
    assert!(memories[0].value["summary"]
        .as_str()
        .unwrap()
        .contains("elfiee_block_get"));
    let mut second = d.session(options(&p, Autonomy::Full, vec![]));
    second
        .run_turn("Now extend the parser", &mut no_ask)
        .await
        .unwrap();
    let system = &p.requests()[2].system;
    assert!(
        system.contains("# Memory") && system.contains("The parser requirement is in block req."),
        "{system}"
    );
    let mut third = d.session(options(&p, Autonomy::Full, vec![]));
    p.push(Ok(done("x")));
    third.run_turn("zebra giraffe", &mut no_ask).await.unwrap();
    assert!(
        !p.requests()[3].system.contains("# Memory"),
        "nothing relevant, nothing recalled"
    );
    d.file.close().await;
}

#[tokio::test]
async fn a_new_session_gets_a_title_and_publishes_its_status_and_tool_events() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "elfiee_block_list", json!({})),
        done("two blocks"),
    ]));
    let mut s = d.session(options(&p, Autonomy::Full, vec![]));
    let status = s.status();
    let mut seen = Vec::new();
    s.run_turn_with(
        "List all the blocks in this document please",
        &mut ApproveAll,
        &mut |e| seen.push(e),
    )
    .await
    .unwrap();
    assert_eq!(s.title(), Some("List all the blocks in this"));
    assert_eq!(seen[0], LoopEvent::Status(SessionStatus::Busy));
    assert!(matches!(&seen[1], LoopEvent::Title(t) if t == "List all the blocks in this"));
    assert!(seen
        .iter()
        .any(|e| matches!(e, LoopEvent::ToolRunning { tool, .. } if tool == "elfiee_block_list")));
    assert!(seen
        .iter()
        .any(|e| matches!(e, LoopEvent::ToolSuccess { tool, .. } if tool == "elfiee_block_list")));
    assert_eq!(seen[seen.len() - 2], LoopEvent::Status(SessionStatus::Idle));
    assert_eq!(seen.last(), Some(&LoopEvent::Stopped(StopReason::EndTurn)));
    assert_eq!(*status.borrow(), SessionStatus::Idle);
    let listed = AgentSession::list(&d.file, &d.agent).unwrap();
    assert_eq!(
        listed,
        vec![(
            s.session_id().to_owned(),
            Some("List all the blocks in this".to_owned())
        )]
    );
    let id = s.session_id().to_owned();
    let again = open_session(
        &d.file,
        &d.agent,
        Some(&id),
        options(&p, Autonomy::Full, vec![]),
    );
    assert_eq!(
        again.title(),
        s.title(),
        "the title is rebuilt from its event"
    );
    d.file.close().await;
}

#[tokio::test]
async fn the_plan_profile_is_read_only_and_offers_only_reading_tools() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool(
            "t1",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "x"}),
        ),
        done("plan: 1. …"),
    ]));
    let opts =
        SessionOptions::new(p.clone(), "scripted").with_profile(&Profile::builtin("plan").unwrap());
    let mut s = d.session(opts);
    s.run_turn("plan the work", &mut DenyAll).await.unwrap();
    let req = &p.requests()[0];
    let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"elfiee_block_get")
            && names.contains(&"self_info")
            && !names.contains(&"shell")
            && !names.contains(&"elfiee_markdown_write"),
        "{names:?}"
    );
    assert!(req.system.contains("Profile plan"));
    assert_eq!(
        d.file.block("req").unwrap().contents["markdown"],
        "Parse <command> blocks."
    );
    assert!(serde_json::to_string(&p.requests()[1].messages)
        .unwrap()
        .contains("[failed] denied"));
    for name in ["build", "plan", "explore", "general"] {
        assert!(Profile::builtin(name).is_some());
    }
    d.file.close().await;
}

#[tokio::test]
async fn the_history_cap_keeps_tool_calls_paired_and_starts_with_a_user_message() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new(
        (0..6)
            .map(|i| {
                tool(
                    &format!("t{i}"),
                    "elfiee_block_get",
                    json!({"block_id": if i % 2 == 0 { "req" } else { "impl" }}),
                )
            })
            .chain([done("ok")]),
    ));
    let mut o = options(&p, Autonomy::Full, vec![]);
    o.max_history = 4;
    o.doom_loop_threshold = 100;
    let mut s = d.session(o);
    s.run_turn("read a lot", &mut no_ask).await.unwrap();
    for req in p.requests() {
        assert!(
            req.messages.len() <= 5,
            "cap (+ a note) respected: {}",
            req.messages.len()
        );
        assert_eq!(req.messages[0].role, Role::User);
        assert!(
            !req.messages[0]
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. })),
            "no orphaned tool result first"
        );
        let uses: Vec<String> = req
            .messages
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|b| {
                if let ContentBlock::ToolUse { id, .. } = b {
                    Some(id.clone())
                } else {
                    None
                }
            })
            .collect();
        for b in req.messages.iter().flat_map(|m| m.content.iter()) {
            if let ContentBlock::ToolResult { tool_use_id, .. } = b {
                assert!(
                    uses.contains(tool_use_id),
                    "result {tool_use_id} has its call"
                );
            }
        }
    }
    assert_eq!(s.history().len(), 14, "the session itself keeps everything");
    d.file.close().await;
}

#[tokio::test]
async fn approve_all_and_deny_all_answer_asks_but_never_override_deny_rules() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool(
            "t1",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "approved"}),
        ),
        tool("t2", "elfiee_block_delete", json!({"block_id": "impl"})),
        done("done"),
        tool(
            "t3",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "denied"}),
        ),
        done("done"),
    ]));
    let rules = vec![Rule::new("elfiee_block_delete", "**", Action::Deny)];
    let mut s = d.session(options(&p, Autonomy::Supervised, rules.clone()));
    s.run_turn("go", &mut ApproveAll).await.unwrap();
    assert_eq!(
        d.file.block("req").unwrap().contents["markdown"],
        "approved"
    );
    assert!(d.file.block("impl").is_some(), "the deny rule held");
    s.run_turn("again", &mut DenyAll).await.unwrap();
    assert_eq!(
        d.file.block("req").unwrap().contents["markdown"],
        "approved"
    );
    assert!(serde_json::to_string(&p.requests()[4].messages)
        .unwrap()
        .contains("[failed] rejected by the user"));
    d.file.close().await;
}

#[tokio::test]
async fn options_come_from_the_agent_config_through_a_provider_factory() {
    let d = doc().await;
    support::alice(
        &d.file,
        "agent.configure",
        Some(&d.agent),
        json!({"model": "m-1", "system_prompt": "Be terse."}),
    )
    .await;
    let p = Arc::new(ScriptedProvider::new([done("hi")]));
    let shared = p.clone();
    let factory: elfiee_adapters::invoke::ProviderFactory = Arc::new(move |cfg| {
        assert_eq!(cfg.model, "m-1");
        Ok(shared.clone() as Arc<dyn elfiee_adapters::llm::Provider>)
    });
    let opts = SessionOptions::for_agent(&d.file, &d.agent, &factory).unwrap();
    let mut s = d.session(opts);
    s.run_turn("hello", &mut DenyAll).await.unwrap();
    let req = &p.requests()[0];
    assert_eq!(req.model, "m-1");
    assert!(
        req.system.contains("Be terse.")
            && req.system.contains("# Tools")
            && req.system.contains("# Environment")
    );
    d.file.close().await;
}

/// Seed 002 §3: the agent's shell runs in the project it references, after the document's
/// unexported changes to that project were written out (its `cargo test` sees its code).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_shell_runs_in_the_referenced_project_after_exporting() {
    let d = doc().await;
    let fx = attach(&d.file, EffectsConfig::default()).await.unwrap();
    let proj = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(proj.path().join("src")).unwrap();
    std::fs::write(proj.path().join("src/main.rs"), "fn main() {}\n").unwrap();
    let dir = support::import_folder(&d.file, proj.path()).await;
    support::reference(&d.file, &d.agent, &dir).await;
    // A file made in the document, not exported yet.
    support::alice(
        &d.file,
        "directory.add",
        Some(&dir),
        json!({"path": "src/pdf.rs", "content": "pub fn pdf() {}\n"}),
    )
    .await;
    let p = Arc::new(ScriptedProvider::new([
        tool(
            "t1",
            "shell",
            json!({"command": "pwd > where.txt; ls src > listing.txt"}),
        ),
        done("looked"),
    ]));
    let rules = vec![Rule::new("shell", "*", Action::Allow)];
    let mut s = d.session(options(&p, Autonomy::Supervised, rules));
    s.run_turn("where are you?", &mut no_ask).await.unwrap();
    let root = proj.path().canonicalize().unwrap();
    let where_ = std::fs::read_to_string(root.join("where.txt")).unwrap();
    assert_eq!(
        where_.trim(),
        root.to_str().unwrap(),
        "the shell ran in the project"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("listing.txt")).unwrap(),
        "main.rs\npdf.rs\n",
        "the document's new file was exported before the command ran"
    );
    fx.settle(&d.file, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    d.file.close().await;
}

/// Seed 002 §2.1B: a block the agent creates is linked from the agent (`implement`), in the
/// same atomic batch.
#[tokio::test]
async fn a_block_the_agent_creates_is_linked_from_the_agent() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        tool(
            "t1",
            "elfiee_block_create",
            json!({"name": "pdf.rs", "block_type": "code"}),
        ),
        done("made it"),
    ]));
    let mut s = d.session(options(&p, Autonomy::Full, vec![]));
    s.run_turn("make pdf.rs", &mut no_ask).await.unwrap();
    let (created, linked) = d.file.with_state(|st| {
        let created = st
            .blocks
            .values()
            .find(|b| b.name == "pdf.rs")
            .map(|b| (b.block_id.clone(), b.owner.clone()))
            .expect("the block was created");
        let linked: Vec<String> = st
            .children_of(&d.agent)
            .filter(|(rel, _)| *rel == elfiee_model::Relation::Implement)
            .map(|(_, id)| id.to_owned())
            .collect();
        (created, linked)
    });
    assert_eq!(created.1, d.agent_editor, "created as the agent");
    assert_eq!(linked, vec![created.0]);
    d.file.close().await;
}

/// Seed 004 §7–§8: `task` starts a `general` sub-agent (it may write, by the parent's rules)
/// and a child session can be continued by its id, with its earlier turns.
#[tokio::test]
async fn the_task_tool_starts_a_general_sub_agent_and_resumes_it_by_id() {
    let d = doc().await;
    // parent → child (writes, done) → parent → child (resumed) → parent.
    let p = Arc::new(ScriptedProvider::new([
        tool(
            "t1",
            "task",
            json!({"prompt": "rewrite req", "agent": "general"}),
        ),
        tool(
            "c1",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "rewritten by the child"}),
        ),
        done("rewrote it"),
        done("first turn done"),
    ]));
    let rules = vec![
        Rule::new("task", "**", Action::Allow),
        Rule::new("elfiee_markdown_write", "*", Action::Allow),
    ];
    let mut s = d.session(options(&p, Autonomy::Supervised, rules.clone()));
    s.run_turn("delegate", &mut no_ask).await.unwrap();
    assert_eq!(
        d.file.block("req").unwrap().contents["markdown"],
        "rewritten by the child",
        "a general sub-agent acts by the parent's rules"
    );
    let result = serde_json::to_string(&p.requests()[3].messages).unwrap();
    let child = result
        .split("[session_id: ")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .expect("the task result names the child session")
        .to_owned();

    let p2 = Arc::new(ScriptedProvider::new([
        tool(
            "t2",
            "task",
            json!({"prompt": "what did you do?", "session_id": child}),
        ),
        done("I rewrote req"),
        done("second turn done"),
    ]));
    let mut s2 = open_session(
        &d.file,
        &d.agent,
        Some(s.session_id()),
        options(&p2, Autonomy::Supervised, rules),
    );
    s2.run_turn("ask the child", &mut no_ask).await.unwrap();
    let child_saw = serde_json::to_string(&p2.requests()[1].messages).unwrap();
    assert!(
        child_saw.contains("rewrite req") && child_saw.contains("rewrote it"),
        "the resumed child has its earlier turn: {child_saw}"
    );
    // Only children of this session can be resumed; unknown kinds are refused.
    let p3 = Arc::new(ScriptedProvider::new([
        tool(
            "t3",
            "task",
            json!({"prompt": "x", "session_id": "not-a-child"}),
        ),
        tool("t4", "task", json!({"prompt": "x", "agent": "root"})),
        done("ok"),
    ]));
    let mut s3 = d.session(options(&p3, Autonomy::Full, vec![]));
    s3.run_turn("try", &mut no_ask).await.unwrap();
    let saw = serde_json::to_string(&p3.requests()[2].messages).unwrap();
    assert!(saw.contains("is not a child session"), "{saw}");
    assert!(saw.contains("unknown sub-agent"), "{saw}");
    d.file.close().await;
}

/// Seed 004 §1: the title and the per-turn memory summary come from a short model call, and
/// fall back to the derived ones when it fails.
#[tokio::test]
async fn titles_and_summaries_come_from_a_short_model_call_or_are_derived() {
    let d = doc().await;
    let p = Arc::new(ScriptedProvider::new([
        done("\"PDF module plan\""),
        done("nothing to change"),
        done("Asked whether req needs changes; it does not."),
    ]));
    let mut o = options(&p, Autonomy::Full, vec![]);
    o.model_summaries = true;
    let mut s = d.session(o);
    let out = s
        .run_turn("does req need changes?", &mut no_ask)
        .await
        .unwrap();
    assert_eq!(out.text, "nothing to change");
    assert_eq!(s.title(), Some("PDF module plan"));
    assert_eq!(p.requests()[0].max_tokens, 64, "the title call is short");
    let memory = session_entries(&d.file, "memory");
    assert!(
        memory[0].value["summary"]
            .as_str()
            .unwrap()
            .contains("Asked whether req needs changes; it does not."),
        "{:?}",
        memory[0].value
    );

    // A failing short call: the derived title and summary.
    let p2 = Arc::new(Hooked {
        script: ScriptedProvider::new([done("ok")]),
        // Fails the short calls (titles, summaries: 64 tokens).
        hook: |req: &LlmRequest| -> Option<Answer> {
            (req.max_tokens <= 64)
                .then(|| Box::pin(async { Err(LlmError::Network("no route".into())) }) as Answer)
        },
    });
    let mut o = SessionOptions::new(p2.clone(), "scripted");
    o.autonomy = Autonomy::Full;
    o.model_summaries = true;
    let mut s2 = d.session(o);
    s2.run_turn("list every block please", &mut no_ask)
        .await
        .unwrap();
    let title = s2.title().unwrap().to_owned();
    assert!(title.starts_with("list every block"), "{title}");
    d.file.close().await;
}

/// The stdout of the last tool result in `req`'s messages (a `shell` call's JSON output).
fn last_shell_stdout(req: &elfiee_adapters::llm::LlmRequest) -> String {
    req.messages
        .iter()
        .flat_map(|m| m.content.iter())
        .rev()
        .find_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => serde_json::from_str::<Value>(content).ok(),
            _ => None,
        })
        .and_then(|v| v["stdout"].as_str().map(|s| s.trim().to_owned()))
        .expect("a shell result")
}

/// The line of the system prompt that names the working directory.
fn working_directory(system: &str) -> String {
    system
        .lines()
        .find_map(|l| l.strip_prefix("Working directory: "))
        .expect("the environment section names the working directory")
        .to_owned()
}

/// Issue 26: the system prompt's "Working directory" is where the agent's `shell` runs — a
/// folder inside the document while the agent references no directory, the project folder
/// once it does — never the host process's own folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_prompt_names_the_folder_the_shell_runs_in() {
    let d = doc().await;
    let fx = attach(&d.file, EffectsConfig::default()).await.unwrap();
    let p = Arc::new(ScriptedProvider::new([
        tool("t1", "shell", json!({"command": "pwd"})),
        done("here"),
        done("still here"),
        tool("t2", "shell", json!({"command": "pwd"})),
        done("in the project"),
    ]));
    let rules = vec![Rule::new("shell", "*", Action::Allow)];
    let mut s = d.session(options(&p, Autonomy::Supervised, rules));
    let host = std::env::current_dir().unwrap().display().to_string();
    // No directory: the agent's own terminal, inside the document.
    s.run_turn("where are you?", &mut no_ask).await.unwrap();
    let first = working_directory(&p.requests()[0].system);
    assert!(
        first.starts_with(&d.path.join("terminals").display().to_string())
            && first.contains("you reference no project directory"),
        "{first}"
    );
    assert!(!first.starts_with(&host), "{first}");
    let ran_in = last_shell_stdout(&p.requests()[1]);
    s.run_turn("and now?", &mut no_ask).await.unwrap();
    let second = working_directory(&p.requests()[2].system);
    assert!(
        second.starts_with(&format!("{ran_in} ")),
        "once the terminal exists the prompt names its folder, {ran_in}: {second}"
    );

    // A referenced directory: its project folder.
    let proj = tempfile::tempdir().unwrap();
    std::fs::write(proj.path().join("README.md"), "# p\n").unwrap();
    let dir = support::import_folder(&d.file, proj.path()).await;
    support::reference(&d.file, &d.agent, &dir).await;
    s.run_turn("and in the project?", &mut no_ask)
        .await
        .unwrap();
    let third = working_directory(&p.requests()[3].system);
    let root = d.file.with_state(|st| {
        st.block(&dir).unwrap().metadata.custom[elfiee_model::EXTERNAL_ROOT_PATH]
            .as_str()
            .unwrap()
            .to_owned()
    });
    assert!(
        third.starts_with(&format!("{root} (the project folder")),
        "{third}"
    );
    let ran_in = last_shell_stdout(&p.requests()[4]);
    assert_eq!(
        std::path::Path::new(&ran_in).canonicalize().unwrap(),
        std::path::Path::new(&root).canonicalize().unwrap(),
        "the shell ran where the prompt said"
    );
    fx.settle(&d.file, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    d.file.close().await;
}

/// Seed 003 §4: knowledge seeds (`agent.configure {knowledge}`) are always in the system
/// prompt's memory section, before the recalled summaries of earlier sessions.
#[tokio::test]
async fn knowledge_seeds_are_always_recalled_before_earlier_sessions() {
    let d = doc().await;
    support::alice(&d.file, "agent.configure", Some(&d.agent), json!({"knowledge": ["The parser lives in src/parser.rs", "Run cargo test before saying done"]})).await;
    let p = Arc::new(ScriptedProvider::new([
        done("The parser requirement is in block req."),
        done("extended"),
    ]));
    for message in ["Where is the parser requirement?", "Now extend the parser"] {
        let mut s = d.session(options(&p, Autonomy::Full, vec![]));
        s.run_turn(message, &mut no_ask).await.unwrap();
    }
    let alone = &p.requests()[0].system;
    assert!(
        alone.contains("# Memory\nKnowledge (standing facts from the user; treat them as true):\n- The parser lives in src/parser.rs\n- Run cargo test before saying done\n"),
        "with nothing to recall, the knowledge is there: {alone}"
    );
    assert!(!alone.contains("Earlier sessions:"), "{alone}");
    let both = &p.requests()[1].system;
    let at = |needle: &str| {
        both.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} in {both}"))
    };
    assert!(
        at("# Memory") < at("- The parser lives in src/parser.rs")
            && at("- Run cargo test before saying done") < at("Earlier sessions:")
            && at("Earlier sessions:") < at("The parser requirement is in block req.")
            && at("The parser requirement is in block req.") < at("# Environment"),
        "{both}"
    );
    d.file.close().await;
}

/// Seed 004: the title is generated in the background (the first step does not wait for it),
/// asks for 3–6 words at a low temperature, and is recorded as an event before the turn ends.
#[tokio::test]
async fn the_title_is_made_in_the_background_with_few_words_and_a_low_temperature() {
    let d = doc().await;
    // The title call answers only after the first step's request was sent (or fails after
    // 5 s, which a title call that blocks the first step would hit).
    let titles = Arc::new(std::sync::Mutex::new(Vec::<LlmRequest>::new()));
    let log = Arc::new(std::sync::Mutex::new(Vec::<&'static str>::new()));
    let step_sent = Arc::new(tokio::sync::Notify::new());
    let (titles_seen, logged) = (titles.clone(), log.clone());
    let p = Arc::new(Hooked {
        script: ScriptedProvider::new([done("looked"), done("Looked at the parser.")]),
        hook: move |req: &LlmRequest| -> Option<Answer> {
            if !req.system.starts_with("Name this conversation") {
                logged.lock().unwrap().push("step sent");
                step_sent.notify_one();
                return None;
            }
            let (req, titles, log, step_sent) = (
                req.clone(),
                titles_seen.clone(),
                logged.clone(),
                step_sent.clone(),
            );
            Some(Box::pin(async move {
                titles.lock().unwrap().push(req);
                log.lock().unwrap().push("title sent");
                let waited =
                    tokio::time::timeout(std::time::Duration::from_secs(5), step_sent.notified())
                        .await;
                log.lock().unwrap().push("title answered");
                match waited {
                    Ok(()) => Ok(done("\"Parser work plan\"")),
                    Err(_) => Err(LlmError::Network(
                        "the first step was not sent while the title call ran".into(),
                    )),
                }
            }))
        },
    });
    let mut o = SessionOptions::new(p.clone(), "scripted");
    o.autonomy = Autonomy::Full;
    o.model_summaries = true;
    let mut s = d.session(o);
    let mut seen = Vec::new();
    s.run_turn_with("look at the parser", &mut no_ask, &mut |e| seen.push(e))
        .await
        .unwrap();
    assert_eq!(
        log.lock().unwrap()[..3],
        ["title sent", "step sent", "title answered"],
        "the first step went out while the title call was pending"
    );
    assert_eq!(s.title(), Some("Parser work plan"));
    assert!(seen
        .iter()
        .any(|e| matches!(e, LoopEvent::Title(t) if t == "Parser work plan")));
    let titles = titles.lock().unwrap().clone();
    assert_eq!(titles.len(), 1);
    assert_eq!(titles[0].temperature, Some(0.2), "a low temperature");
    assert!(
        titles[0].system.contains("3 to 6 words"),
        "{}",
        titles[0].system
    );
    assert_eq!(titles[0].max_tokens, 64);
    let recorded = session_entries(&d.file, "title");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].value["title"], "Parser work plan");
    assert_eq!(recorded[0].editor_id(), "alice");
    let stop_seq = session_entries(&d.file, "stop")[0].seq;
    assert!(recorded[0].seq < stop_seq, "recorded before the turn ended");
    let id = s.session_id().to_owned();
    let again = open_session(
        &d.file,
        &d.agent,
        Some(&id),
        SessionOptions::new(p.clone(), "scripted"),
    );
    assert_eq!(
        again.title(),
        Some("Parser work plan"),
        "the event counts on reopen"
    );
    d.file.close().await;
}
