//! What an agent makes lands in the project (issue 26): on a `cargo new` project, an agent
//! linked to the directory adds `src/agent_made.rs` with a test, and `cargo test` in the
//! project runs it and passes — through the agent loop (`elfiee agent run`, a local server
//! speaking the Anthropic API), through `elfiee mcp-server` driven by the official MCP Python
//! SDK, and through a proposal (`agent invoke` + `agent approve`). The loop's steps are then
//! listed and undone from the CLI.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

mod common;

const KEY_ENV: &str = "ELFIEE_AGENT_PROJECT_KEY";

const AGENT_MADE: &str = "pub fn made() -> u32 {\n    7\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn made_is_seven() {\n        assert_eq!(super::made(), 7);\n    }\n}\n";
const MAIN: &str = "mod agent_made;\n\nfn main() {\n    println!(\"{}\", agent_made::made());\n}\n";
/// The project's own target folder (never ours, whatever the environment says).
const CARGO_TEST: &str = "CARGO_TARGET_DIR=target cargo test --offline 2>&1";

async fn run(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee_async(elf, args, &[(KEY_ENV, "sk-local")]).await
}

async fn ok(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    common::success_json(&all, &run(elf, &all).await)
}

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    elf: PathBuf,
    dir: String,
    agent: String,
    agent_editor: String,
}

/// `cargo new proj`, imported into a new document, and an agent pointed at it by its owner.
async fn project() -> Project {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("cargo")
        .args(["new", "--vcs", "none", "--name", "proj", "proj"])
        .current_dir(tmp.path())
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo new: {out:?}");
    let root = tmp.path().join("proj").canonicalize().unwrap();
    let elf = tmp.path().join("p.elf");
    ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]).await;
    let dir = ok(&elf, &["dir", "import", root.to_str().unwrap()]).await["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = ok(&elf, &["agent", "create", "--name", "builder"]).await;
    let agent = a["agent_block_id"].as_str().unwrap().to_owned();
    let agent_editor = a["editor_id"].as_str().unwrap().to_owned();
    ok(
        &elf,
        &["block", "link", &agent, &dir, "--relation", "reference"],
    )
    .await;
    Project {
        _tmp: tmp,
        root,
        elf,
        dir,
        agent,
        agent_editor,
    }
}

/// `cargo test` in the project, as the user would run it after the agent.
fn cargo_test(root: &Path) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", CARGO_TEST])
        .current_dir(root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "cargo test failed:\n{text}");
    text
}

/// Points the agent at a local server speaking the Anthropic API.
async fn configure(p: &Project, url: &str) {
    ok(
        &p.elf,
        &[
            "agent",
            "configure",
            &p.agent,
            "--base-url",
            url,
            "--api-key-env",
            KEY_ENV,
            "--model",
            "claude-local",
        ],
    )
    .await;
}

async fn dir_clean(p: &Project) {
    let st = ok(&p.elf, &["dir", "status", &p.dir]).await;
    assert_eq!(st["new"], json!([]), "{st}");
    assert_eq!(st["modified"], json!([]), "{st}");
    assert_eq!(st["removed"], json!([]), "{st}");
}

async fn entries(p: &Project) -> Vec<String> {
    ok(&p.elf, &["block", "show", &p.dir]).await["contents"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loop_adds_a_tested_file_its_next_shell_step_passes_cargo_test_and_undo_takes_it_back(
) {
    std::env::set_var(KEY_ENV, "sk-local");
    let p = project().await;
    let (url, seen) = common::llm_turns(
        vec![
            common::anthropic_tool_calls(&[
                (
                    "t1",
                    "elfiee_directory_add",
                    json!({"directory": p.dir, "path": "src/agent_made.rs", "content": AGENT_MADE}),
                ),
                (
                    "t2",
                    "elfiee_code_write",
                    json!({"block_id": "src/main.rs", "text": MAIN}),
                ),
            ]),
            common::anthropic_tool_call("t3", "shell", &json!({"command": CARGO_TEST})),
            common::anthropic_answer("Added src/agent_made.rs; cargo test passes."),
        ],
        common::anthropic_answer("Add a tested file"),
    )
    .await;
    configure(&p, &url).await;
    let r = ok(
        &p.elf,
        &[
            "agent",
            "run",
            &p.agent,
            "--message",
            "Add a tested function in src/agent_made.rs",
            "--approve-all",
        ],
    )
    .await;
    assert_eq!(r["stop_reason"]["kind"], "end_turn", "{r}");
    assert_eq!(r["tool_calls"], 3, "{r}");
    // The shell step ran cargo test in the project and it passed.
    let bodies = seen.lock().unwrap().clone();
    let last_turn = bodies
        .iter()
        .rfind(|b| b.contains("\"tools\""))
        .expect("turn requests");
    assert!(
        last_turn.contains("test agent_made::tests::made_is_seven ... ok"),
        "the model saw cargo test pass: {last_turn}"
    );
    assert!(
        !last_turn.contains("\"is_error\":true"),
        "no failed tool: {last_turn}"
    );
    assert_eq!(
        std::fs::read_to_string(p.root.join("src/agent_made.rs")).unwrap(),
        AGENT_MADE
    );
    assert!(entries(&p).await.contains(&"src/agent_made.rs".to_owned()));
    dir_clean(&p).await;
    let made = ok(&p.elf, &["block", "show", "src/agent_made.rs"]).await;
    assert_eq!(made["owner"], p.agent_editor.as_str());
    let agent = ok(&p.elf, &["block", "show", &p.agent]).await;
    assert!(
        agent["children"]["implement"]
            .as_array()
            .unwrap()
            .contains(&made["block_id"]),
        "the agent links what it made: {agent}"
    );
    cargo_test(&p.root);

    // The steps, from the CLI.
    let sid = r["session_id"].as_str().unwrap();
    let steps = ok(&p.elf, &["agent", "steps", sid]).await;
    let steps = steps["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(
        steps[0]["tools"],
        json!(["elfiee_directory_add", "elfiee_code_write"])
    );
    // The files belong to the step whose tools made them; the export before the shell wrote
    // them to disk, but the shell step holds only what its command changed (issue 37).
    assert_eq!(steps[0]["files_created"], json!(["src/agent_made.rs"]));
    assert_eq!(steps[0]["files_modified"], json!(["src/main.rs"]));
    assert_eq!(
        steps[1]["files_created"],
        json!(["Cargo.lock"]),
        "cargo test's lock file: {:?}",
        steps[1]
    );
    assert_eq!(steps[1]["files_modified"], json!([]));
    let text = run(&p.elf, &["agent", "steps", sid]).await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("+ src/agent_made.rs"), "{text}");

    // Undo both: the project as `cargo new` made it, the directory as imported.
    let u = ok(&p.elf, &["agent", "undo", sid, "--steps", "2"]).await;
    assert_eq!(u["steps"], json!([1, 2]));
    assert!(!p.root.join("src/agent_made.rs").exists());
    assert!(
        !p.root.join("Cargo.lock").exists(),
        "cargo test's lock file goes too"
    );
    assert!(std::fs::read_to_string(p.root.join("src/main.rs"))
        .unwrap()
        .contains("Hello, world!"));
    assert!(!entries(&p).await.contains(&"src/agent_made.rs".to_owned()));
    dir_clean(&p).await;
    assert_eq!(ok(&p.elf, &["verify"]).await["ok"], true);
    // Redo: back again, and cargo test passes again.
    ok(&p.elf, &["agent", "redo", sid]).await;
    assert_eq!(
        std::fs::read_to_string(p.root.join("src/agent_made.rs")).unwrap(),
        AGENT_MADE
    );
    cargo_test(&p.root);
    // Bad input says what to do.
    let out = run(&p.elf, &["agent", "undo", "no-such-session"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent sessions"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_over_mcp_adds_a_file_that_lands_in_the_project_and_undoes_its_own_edit() {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run `scripts/test` once (it creates .venv with the MCP SDK)",
        py.display()
    );
    let p = project().await;
    let calls = json!([
        {"name": "elfiee_block_create", "arguments": {"block_type": "code", "directory": p.dir, "path": "src/agent_made.rs"}},
        {"name": "elfiee_code_write", "arguments": {"block_id": "$0.block_id", "text": AGENT_MADE}},
        {"name": "elfiee_code_write", "arguments": {"block_id": "src/main.rs", "text": MAIN}},
        {"name": "elfiee_directory_add", "arguments": {"directory": p.dir, "path": "notes/scratch.md", "content": "# scratch\n"}},
        {"name": "elfiee_steps", "arguments": {}},
        {"name": "elfiee_undo", "arguments": {}},
        {"name": "elfiee_steps", "arguments": {}},
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_script.py");
    let (elf, editor) = (p.elf.clone(), p.agent_editor.clone());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(py)
            .arg(script)
            .args([
                "--bin",
                env!("CARGO_BIN_EXE_elfiee"),
                "--elf",
                elf.to_str().unwrap(),
                "--editor",
                &editor,
                "--calls",
                &calls.to_string(),
            ])
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = v["results"].as_array().unwrap();
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["is_error"], false, "call {i}: {r}");
    }
    assert_eq!(
        results[4]["structured_content"]["steps"]
            .as_array()
            .unwrap()
            .len(),
        4,
        "each writing call is a step: {}",
        results[4]
    );
    assert_eq!(results[5]["structured_content"]["steps"], json!([4]));
    let after = results[6]["structured_content"]["steps"]
        .as_array()
        .unwrap();
    assert_eq!(after[3]["status"], "undone");
    // Exported as the calls happened: Claude Code's own shell sees the files.
    assert_eq!(
        std::fs::read_to_string(p.root.join("src/agent_made.rs")).unwrap(),
        AGENT_MADE
    );
    assert!(
        !p.root.join("notes/scratch.md").exists(),
        "the undone file is gone from disk"
    );
    let paths = entries(&p).await;
    assert!(paths.contains(&"src/agent_made.rs".to_owned()), "{paths:?}");
    assert!(!paths.contains(&"notes/scratch.md".to_owned()), "{paths:?}");
    dir_clean(&p).await;
    assert!(cargo_test(&p.root).contains("test agent_made::tests::made_is_seven ... ok"));
    assert_eq!(ok(&p.elf, &["verify"]).await["ok"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_proposal_adds_the_file_and_a_terminal_run_passes_cargo_test() {
    std::env::set_var(KEY_ENV, "sk-local");
    let payload = |v: Value| v.to_string();
    let answer = format!(
        "<thinking>Add the module and use it.</thinking>\n\
<command><cap_id>core.create</cap_id><payload>{}</payload><description>the file</description></command>\n\
<command><cap_id>code.write</cap_id><block_id>made</block_id><payload>{}</payload><description>its code</description></command>\n\
<command><cap_id>code.write</cap_id><block_id>MAIN</block_id><payload>{}</payload><description>use it</description></command>\n",
        payload(json!({"name": "src/agent_made.rs", "block_type": "code", "block_id": "made"})),
        payload(json!({"text": AGENT_MADE, "language": "rust"})),
        payload(json!({"text": MAIN})),
    );
    let p = project().await;
    let main_id = ok(&p.elf, &["block", "show", "src/main.rs"]).await["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (url, _seen) = common::llm_turns(
        vec![],
        common::anthropic_answer(&answer.replace("MAIN", &main_id)),
    )
    .await;
    configure(&p, &url).await;
    let prop = ok(
        &p.elf,
        &[
            "agent",
            "invoke",
            &p.agent,
            "--prompt",
            "add a tested module",
        ],
    )
    .await;
    let pid = prop["proposal_id"].as_str().unwrap().to_owned();
    assert_eq!(prop["status"], "pending", "{prop}");
    ok(&p.elf, &["agent", "approve", &pid]).await;
    assert!(entries(&p).await.contains(&"src/agent_made.rs".to_owned()));
    let agent = ok(&p.elf, &["block", "show", &p.agent]).await;
    assert_eq!(
        agent["children"]["implement"],
        json!(["made"]),
        "approved blocks are linked from the agent: {agent}"
    );
    let t = ok(
        &p.elf,
        &["terminal", "create", "--name", "t", "--dir", &p.dir],
    )
    .await["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = ok(
        &p.elf,
        &[
            "terminal",
            "run",
            &t,
            "--export",
            "--timeout",
            "600",
            "--",
            CARGO_TEST,
        ],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(
        out["stdout"]
            .as_str()
            .unwrap()
            .contains("test agent_made::tests::made_is_seven ... ok"),
        "{out}"
    );
    dir_clean(&p).await;
}
