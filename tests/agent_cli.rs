//! `elfiee agent run` as configured, against a local server speaking the Anthropic API: the
//! agent's system prompt, temperature and language reach the provider; the profile and rules
//! decide what runs without asking; Chinese replies get Chinese result markers.

use std::path::Path;

use serde_json::{json, Value};

mod common;

const KEY_ENV: &str = "ELFIEE_AGENT_CLI_KEY";

async fn run(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee_async(elf, args, &[(KEY_ENV, "sk-local")]).await
}

fn ok(out: std::process::Output) -> Value {
    common::success_json(&[], &out)
}

/// A document with an agent configured against `url`; returns the agent id.
async fn setup(elf: &Path, url: &str, extra: &[&str]) -> String {
    ok(run(
        elf,
        &["--json", "init", elf.to_str().unwrap(), "--owner", "Alice"],
    )
    .await);
    ok(run(
        elf,
        &[
            "--json", "block", "create", "--type", "markdown", "--name", "Spec",
        ],
    )
    .await);
    let agent = ok(run(elf, &["--json", "agent", "create", "--name", "writer"]).await)
        ["agent_block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut args = vec![
        "--json",
        "agent",
        "configure",
        &agent,
        "--base-url",
        url,
        "--api-key-env",
        KEY_ENV,
        "--model",
        "claude-local",
    ];
    args.extend_from_slice(extra);
    ok(run(elf, &args).await);
    agent
}

fn body(request: &str) -> Value {
    let (_, b) = request.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(b).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_sends_the_configured_prompt_temperature_and_language_and_reads_without_asking() {
    std::env::set_var(KEY_ENV, "sk-local");
    // The CLI titles the session and summarises the turn with short calls around the turn.
    let (url, seen) = common::llm_server(vec![
        common::anthropic_answer("Listing blocks"),
        common::anthropic_tool_call("t1", "elfiee_block_list", &json!({})),
        common::anthropic_answer("done"),
        common::anthropic_answer("Listed the blocks."),
    ])
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("a.elf");
    let agent = setup(
        &elf,
        &url,
        &[
            "--system-prompt",
            "MARKER-7731: be terse.",
            "--temperature",
            "0.3",
            "--language",
            "zh",
        ],
    )
    .await;
    // No --approve-all: the default profile lets a read-only tool run without asking.
    let out = run(
        &elf,
        &["agent", "run", &agent, "--message", "list the blocks"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = seen.lock().unwrap().clone();
    assert_eq!(reqs.len(), 4, "title, a tool call, the answer, the summary");
    assert_eq!(body(&reqs[0])["max_tokens"], 64, "the title call is short");
    let first = body(&reqs[1]);
    let system = first["system"].to_string();
    assert!(system.contains("MARKER-7731"), "{system}");
    assert!(system.contains("Reply in zh"), "{system}");
    assert!(system.contains("[失败]"), "{system}");
    let t = first["temperature"].as_f64().unwrap();
    assert!((t - 0.3).abs() < 1e-6, "temperature {t}");
    assert_eq!(first["model"], "claude-local");
    let second = body(&reqs[2]).to_string();
    assert!(
        second.contains("Spec"),
        "elfiee_block_list ran without asking and its output went back: {second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_profile_refuses_a_write_tool_and_rules_files_decide() {
    std::env::set_var(KEY_ENV, "sk-local");
    let write = json!({"block_id": "Spec", "markdown": "changed"});
    let (url, seen) = common::llm_server(vec![
        common::anthropic_answer("Edit"),
        common::anthropic_tool_call("t1", "elfiee_markdown_write", &write),
        common::anthropic_answer("ok"),
        common::anthropic_answer("Tried to edit Spec."),
        common::anthropic_answer("Edit"),
        common::anthropic_tool_call("t2", "elfiee_markdown_write", &write),
        common::anthropic_answer("ok"),
        common::anthropic_answer("Edited Spec."),
    ])
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("p.elf");
    let agent = setup(&elf, &url, &["--language", "zh"]).await;
    let out = run(
        &elf,
        &[
            "agent",
            "run",
            &agent,
            "--profile",
            "plan",
            "--approve-all",
            "--message",
            "edit",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = body(&seen.lock().unwrap()[2]).to_string();
    assert!(
        refused.contains("[失败]"),
        "the write was refused, with the Chinese marker: {refused}"
    );
    let spec = ok(run(&elf, &["--json", "markdown", "read", "Spec"]).await);
    assert_eq!(spec["markdown"], "", "plan wrote nothing");

    // A rules file that allows the write: it runs without asking (no --approve-all).
    let rules = tmp.path().join("rules.json");
    std::fs::write(
        &rules,
        json!([{"permission": "elfiee_markdown_write", "pattern": "*", "action": "allow"}])
            .to_string(),
    )
    .unwrap();
    let out = run(
        &elf,
        &[
            "agent",
            "run",
            &agent,
            "--rules",
            rules.to_str().unwrap(),
            "--message",
            "edit",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec = ok(run(&elf, &["--json", "markdown", "read", "Spec"]).await);
    assert_eq!(spec["markdown"], "changed", "the rule allowed the write");
    let bad = run(
        &elf,
        &[
            "agent",
            "run",
            &agent,
            "--profile",
            "nope",
            "--message",
            "x",
        ],
    )
    .await;
    assert_eq!(bad.status.code(), Some(2));
}

/// Issue 26 / seed 003 ToolStatus: `agent chat` shows each tool call as it happens — a
/// preview of a success's output (what it says beyond the call's arguments), the first lines
/// of a failure's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_chat_prints_each_tools_output_preview_and_errors() {
    use std::io::Write;
    std::env::set_var(KEY_ENV, "sk-local");
    let (url, seen) = common::llm_server(vec![
        common::anthropic_answer("Blocks and a ghost"),
        common::anthropic_tool_call("t1", "elfiee_block_list", &json!({})),
        common::anthropic_tool_call("t2", "elfiee_block_get", &json!({"block_id": "ghost"})),
        common::anthropic_answer("There is no ghost."),
        common::anthropic_answer("Listed blocks; no ghost."),
    ])
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("a.elf");
    let agent = setup(
        &elf,
        &url,
        &[
            "--knowledge",
            "Spec holds the plan",
            "--knowledge",
            "Answer briefly",
        ],
    )
    .await;
    let too_long = "x".repeat(1001);
    let refused = run(
        &elf,
        &["agent", "configure", &agent, "--knowledge", &too_long],
    )
    .await;
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("knowledge entry 1 is 1001 characters; at most 1000"),
        "{err}"
    );
    let (elf2, agent2) = (elf.clone(), agent.clone());
    let out = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_elfiee"))
            .args(["agent", "chat", &agent])
            .env("ELFIEE_ELF", &elf)
            .env(KEY_ENV, "sk-local")
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"list the blocks, then show ghost\n\n")
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(seen.lock().unwrap().len(), 5, "{stderr}");
    assert!(stdout.contains("There is no ghost."), "{stdout}");
    assert!(
        stderr.contains(
            "  [Running] elfiee_block_list\n  [Success] elfiee_block_list: blocks: [{\"block_id\":\""
        ),
        "the output's preview: {stderr}"
    );
    assert!(
        stderr.contains(
            "  [Running] elfiee_block_get ghost\n  [Failed] elfiee_block_get\n    [failed] block 'ghost' not found"
        ),
        "the error: {stderr}"
    );
    assert!(stderr.contains("  [title] Blocks and a ghost"), "{stderr}");
    let step = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| body(r))
        .find(|b| b.get("tools").is_some())
        .unwrap();
    assert!(
        step["system"]
            .to_string()
            .contains("- Spec holds the plan\\n- Answer briefly\\n"),
        "the knowledge seeds are in the system prompt: {}",
        step["system"]
    );
    let cleared = ok(run(
        &elf2,
        &["--json", "agent", "configure", &agent2, "--clear-knowledge"],
    )
    .await);
    assert!(cleared.get("knowledge").is_none(), "{cleared}");
}
