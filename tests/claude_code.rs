//! The real Claude Code CLI (`tools/claude-code`, from npm) working in a project through
//! elfiee (issue 37): `agent create --target` installs the MCP server and the hooks; Claude
//! Code, its model scripted by a local stand-in of the Messages API, reads and edits with its
//! own tools, writes two files in one response and runs `Bash`. Afterwards the session, its
//! prompt and answer, and one step per changing tool call are in the document; undo of every
//! step gives back the project byte for byte (and `git status`) and the document's blocks;
//! redo brings the session's work back; a revoked grant stops a native `Write`, the model told
//! which grant; disable gives back the user's settings file byte for byte.
//!
//! When the CLI is not installed the test says so loudly and returns; `scripts/test` installs
//! it (`npm ci` in tools/claude-code), and `tests/claude_hooks.rs` replays the same hooks.

#[path = "common/anthropic_standin.rs"]
mod anthropic_standin;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anthropic_standin::{Scripted, StandIn};
use common::elfiee_json;
use serde_json::{json, Value};

/// The user's own settings: CRLF line ends, tabs, a hook of theirs (which must keep running).
fn user_settings(marker: &Path) -> String {
    format!(
        "{{\r\n\t\"permissions\": {{\"allow\": [\"Bash(ls:*)\"]}},\r\n\t\"hooks\": {{\r\n\t\t\"Stop\": [\r\n\t\t\t{{\"hooks\": [{{\"type\": \"command\", \"command\": \"touch '{}'\"}}]}}\r\n\t\t]\r\n\t}}\r\n}}",
        marker.display()
    )
}

fn claude_cli() -> Option<PathBuf> {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tools/claude-code/node_modules/.bin/claude");
    let runs = Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if runs {
        return Some(bin);
    }
    eprintln!("\n{}", "!".repeat(72));
    eprintln!("!!! CLAUDE CODE CLI NOT INSTALLED: run npm ci in tools/claude-code");
    eprintln!("!!! this test did not run; tests/claude_hooks.rs replays the hooks instead");
    eprintln!("{}\n", "!".repeat(72));
    None
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "core.autocrlf=false",
            "-c",
            "user.email=t@e.st",
            "-c",
            "user.name=t",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file of the project but `.git`, with its bytes.
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_name() == ".git" {
                continue;
            }
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if !p.is_symlink() {
                out.push((
                    p.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// The document's file and directory blocks: id, name, owner, body, entries.
fn blocks(elf: &Path) -> Value {
    let mut out: Vec<Value> = elfiee_json(elf, &["block", "list"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["block_type"] != "agent")
        .map(|b| {
            let full = elfiee_json(elf, &["block", "show", b["block_id"].as_str().unwrap()]);
            json!({"id": full["block_id"], "name": full["name"], "owner": full["owner"],
                   "contents": full["contents"]})
        })
        .collect();
    out.sort_by_key(|b| b["id"].as_str().unwrap().to_owned());
    json!(out)
}

fn check_document(elf: &Path) {
    assert_eq!(elfiee_json(elf, &["verify"])["ok"], true);
    assert_eq!(
        elfiee_json(elf, &["replay"])["state_digest"],
        elfiee_json(elf, &["state-digest"])["state_digest"],
        "replay == live"
    );
}

/// Runs Claude Code headless in `project` with `prompt`, its model `script`; returns its
/// `--output-format json` result and the stand-in (for what the model was sent).
fn claude(
    bin: &Path,
    scratch: &Path,
    project: &Path,
    prompt: &str,
    script: Vec<Scripted>,
) -> (Value, StandIn) {
    let standin = StandIn::start(script);
    let (home, tmpdir) = (scratch.join("home"), scratch.join("tmp"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmpdir).unwrap();
    let mut cmd = Command::new(bin);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CLAUDE") || k.starts_with("ANTHROPIC") || k.starts_with("ELFIEE") {
            cmd.env_remove(&*k);
        }
    }
    let (out_path, err_path) = (scratch.join("claude.out"), scratch.join("claude.err"));
    cmd.current_dir(project)
        .env("HOME", &home)
        .env("TMPDIR", &tmpdir)
        .env("ANTHROPIC_BASE_URL", &standin.base_url)
        .env("ANTHROPIC_API_KEY", "x")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env_remove("RUST_LOG")
        .args([
            "-p",
            prompt,
            "--allowedTools",
            "Read Edit Write Bash mcp__elfiee",
        ])
        .args(["--output-format", "json"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut child = cmd.spawn().expect("start claude");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!(
                "claude ran over 4 minutes: {}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap();
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert!(status.success(), "claude failed: {stdout}\n{stderr}");
    let out: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("claude printed {stdout:?} ({e}); stderr {stderr}"));
    // Claude Code's MCP server (the document's owner meanwhile) is gone once claude exits;
    // wait for it to let go of the document.
    (out, standin)
}

#[test]
fn claude_codes_own_tools_become_undoable_governed_steps() {
    let Some(bin) = claude_cli() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    // `cargo new`, plus two files the Bash call will change.
    let out = Command::new("cargo")
        .args(["new", "--vcs", "git", "--quiet", "hello"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo new: {out:?}");
    let project = root.join("hello");
    std::fs::write(project.join("notes.txt"), "old notes\n").unwrap();
    std::fs::write(project.join("crlf.txt"), "a\r\n\tb = 1\r\n\tc = 2").unwrap();
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "init"]);
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    let marker = root.join("user-hook-ran");
    let settings_before = user_settings(&marker);
    let settings_path = project.join(".claude/settings.local.json");
    std::fs::write(&settings_path, &settings_before).unwrap();

    let elf = root.join("doc.elf");
    elfiee_json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let dir = elfiee_json(&elf, &["dir", "import", project.to_str().unwrap()])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let created = elfiee_json(&elf, &["agent", "create", "--target", &dir]);
    assert_eq!(created["warnings"], json!([]), "{created}");
    let agent = created["agent_block_id"].as_str().unwrap().to_owned();
    let editor = created["editor_id"].as_str().unwrap().to_owned();
    let tree_before = tree(&project);
    let git_before = git(&project, &["status", "--porcelain"]);
    let blocks_before = blocks(&elf);

    let main_rs = project.join("src/main.rs");
    let util = project.join("src/util.rs");
    let plan = project.join("docs/new/plan.md");
    let util_text = "pub fn util() -> u8 {\n    7\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn seven() {\n        assert_eq!(super::util(), 7);\n    }\n}\n";
    let (out, standin) = claude(
        &bin,
        &root,
        &project,
        "Greet Alice instead of the world\nand add a util module with a test",
        vec![
            Scripted::tool("Read", json!({"file_path": main_rs})).with_text("Reading main.rs."),
            Scripted::tool(
                "Edit",
                json!({"file_path": main_rs, "old_string": "world", "new_string": "Alice"}),
            ),
            Scripted::tools([
                ("Write", json!({"file_path": util, "content": util_text})),
                (
                    "Write",
                    json!({"file_path": plan, "content": "# Plan\n\n- greet Alice\n"}),
                ),
            ]),
            Scripted::tool(
                "Bash",
                json!({"command": "rm notes.txt && sed -i 's/b = 1/b = 10/' crlf.txt", "description": "tidy"}),
            ),
            Scripted::text("Done: main greets Alice, util.rs has a test."),
        ],
    );
    assert_eq!(
        out["result"], "Done: main greets Alice, util.rs has a test.",
        "{out}"
    );
    assert!(standin.used() >= 5, "every scripted response was asked for");
    let session = out["session_id"].as_str().unwrap().to_owned();
    assert!(marker.exists(), "the user's own hook still ran");
    // What Claude Code did on disk.
    assert!(std::fs::read_to_string(&main_rs).unwrap().contains("Alice"));
    assert_eq!(std::fs::read_to_string(&util).unwrap(), util_text);
    assert!(!project.join("notes.txt").exists());
    assert_eq!(
        std::fs::read(project.join("crlf.txt")).unwrap(),
        b"a\r\n\tb = 10\r\n\tc = 2"
    );
    let tree_after = tree(&project);

    // The session is in the document: listed, with its prompt and the model's answer.
    let sessions = elfiee_json(&elf, &["agent", "sessions", &agent]);
    let listed = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == session.as_str())
        .unwrap_or_else(|| panic!("{session} in {sessions}"))
        .clone();
    assert_eq!(listed["source"], "claude-code");
    assert_eq!(listed["title"], "Greet Alice instead of the world");
    let log = elfiee_json(&elf, &["log", "--block", &agent]).to_string();
    assert!(log.contains("add a util module with a test"), "the prompt");
    assert!(log.contains("util.rs has a test."), "the final answer");
    assert!(log.contains("Reading main.rs."), "the model's text");

    // One step per changing call, naming every changed file.
    let steps = elfiee_json(&elf, &["agent", "steps", &session])["steps"]
        .as_array()
        .unwrap()
        .clone();
    let tools: Vec<Value> = steps.iter().map(|s| s["tools"].clone()).collect();
    assert_eq!(
        tools,
        [
            json!(["Edit"]),
            json!(["Write"]),
            json!(["Write"]),
            json!(["Bash"])
        ],
        "{steps:#?}"
    );
    let files = |k: &str| -> Vec<String> {
        let mut v: Vec<String> = steps
            .iter()
            .flat_map(|s| {
                s[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap().to_owned())
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(files("files_modified"), ["crlf.txt", "src/main.rs"]);
    assert_eq!(files("files_created"), ["docs/new/plan.md", "src/util.rs"]);
    assert_eq!(files("files_deleted"), ["notes.txt"]);

    // The document follows: the new files are the agent's blocks, the edit is in main.rs.
    let doc = blocks(&elf).to_string();
    let doc_v: Value = serde_json::from_str(&doc).unwrap();
    let block = |name: &str| {
        doc_v
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no block {name}: {doc}"))
    };
    assert_eq!(block("src/util.rs")["owner"], editor.as_str());
    assert_eq!(block("docs/new/plan.md")["owner"], editor.as_str());
    assert!(block("src/main.rs")["contents"]
        .to_string()
        .contains("Alice"));
    assert!(
        !doc.contains("\"notes.txt\""),
        "the deleted file left the document"
    );
    check_document(&elf);

    // Undo every step: the project byte for byte, git status, the document's blocks.
    let n = steps.len().to_string();
    let undo = elfiee_json(&elf, &["agent", "undo", &session, "--steps", &n]);
    assert!(
        undo["conflicts"].as_array().is_none_or(Vec::is_empty),
        "{undo}"
    );
    assert_eq!(tree(&project), tree_before);
    assert_eq!(git(&project, &["status", "--porcelain"]), git_before);
    assert_eq!(blocks(&elf), blocks_before);
    check_document(&elf);
    // Redo: as after the session.
    elfiee_json(&elf, &["agent", "redo", &session]);
    assert_eq!(tree(&project), tree_after);
    check_document(&elf);

    // A revoked `directory.add` stops a native Write of a new file; the model hears why.
    elfiee_json(&elf, &["revoke", &editor, "directory.add", &dir]);
    let denied_path = project.join("src/denied.rs");
    let (_, standin) = claude(
        &bin,
        &root,
        &project,
        "Add another module",
        vec![
            Scripted::tool("Write", json!({"file_path": denied_path, "content": "x"}))
                .with_id(0, "toolu_denied"),
            Scripted::text("I may not create files here."),
        ],
    );
    let said = standin
        .tool_result_text("toolu_denied")
        .expect("the model got the denied call's result");
    assert!(said.contains("directory.add"), "{said}");
    assert!(
        said.contains(&format!("grant {editor} directory.add")),
        "{said}"
    );
    assert!(!denied_path.exists(), "the denied file was not written");

    // Disable: the settings file byte for byte as before enable.
    elfiee_json(&elf, &["agent", "disable", &agent]);
    assert_eq!(
        std::fs::read_to_string(&settings_path).unwrap(),
        settings_before
    );
}

/// Two Claude Code sessions on one project at once (two terminals), one of them running a
/// sub-agent that writes: both sessions are recorded through the document's owner (one of
/// the two MCP servers; the other is its client), none lost, the sub-agent's work and words
/// in its parent's session.
#[test]
fn two_sessions_at_once_and_a_subagent_are_all_recorded() {
    let Some(bin) = claude_cli() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let project = root.join("two");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    std::fs::write(project.join("src/lib.rs"), "pub mod a;\n").unwrap();
    let elf = root.join("doc.elf");
    elfiee_json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let dir = elfiee_json(&elf, &["dir", "import", project.to_str().unwrap()])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let created = elfiee_json(&elf, &["agent", "create", "--target", &dir]);
    let agent = created["agent_block_id"].as_str().unwrap().to_owned();
    let (a_rs, b_rs) = (project.join("src/a.rs"), project.join("src/b.rs"));
    let runs = [
        (
            "with-subagent",
            "Write a.rs through a helper",
            vec![
                Scripted::tool(
                    "Agent",
                    json!({"description": "write a.rs", "prompt": "Write src/a.rs",
                           "subagent_type": "general-purpose", "run_in_background": false}),
                ),
                Scripted::tool(
                    "Write",
                    json!({"file_path": a_rs, "content": "pub fn a() {}\n"}),
                )
                .with_text("The helper writes a.rs."),
                Scripted::text("helper finished a.rs"),
                Scripted::text("A is done."),
            ],
        ),
        (
            "plain",
            "Write b.rs",
            vec![
                Scripted::tool(
                    "Write",
                    json!({"file_path": b_rs, "content": "pub fn b() {}\n"}),
                ),
                Scripted::text("B is done."),
            ],
        ),
    ];
    let threads: Vec<_> = runs
        .into_iter()
        .map(|(name, prompt, script)| {
            let (bin, scratch, project) = (bin.clone(), root.join(name), project.clone());
            std::fs::create_dir_all(&scratch).unwrap();
            std::thread::spawn(move || claude(&bin, &scratch, &project, prompt, script).0)
        })
        .collect();
    let outs: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(outs[0]["result"], "A is done.", "{}", outs[0]);
    assert_eq!(outs[1]["result"], "B is done.", "{}", outs[1]);
    assert!(a_rs.exists() && b_rs.exists());

    let sessions = elfiee_json(&elf, &["agent", "sessions", &agent]).to_string();
    for (out, file) in outs.iter().zip(["src/a.rs", "src/b.rs"]) {
        let id = out["session_id"].as_str().unwrap();
        assert!(sessions.contains(id), "{id} listed in {sessions}");
        let (created, steps) = common::session_files_created(&elf, id);
        assert_eq!(created, [file], "{steps}");
    }
    let log = elfiee_json(&elf, &["log", "--block", &agent]).to_string();
    assert!(
        log.contains("helper finished a.rs"),
        "the sub-agent's answer is recorded"
    );
    assert!(log.contains("\"subagent\""), "marked as the sub-agent's");
    // Undoing A's work takes back A's file alone (decision 0050).
    let a_id = outs[0]["session_id"].as_str().unwrap();
    let steps = elfiee_json(&elf, &["agent", "steps", a_id])["steps"]
        .as_array()
        .unwrap()
        .len()
        .to_string();
    let undone = elfiee_json(&elf, &["agent", "undo", a_id, "--steps", &steps]);
    assert_eq!(undone["files_removed"], json!(["src/a.rs"]), "{undone}");
    assert!(!a_rs.exists() && b_rs.exists(), "{undone}");
    check_document(&elf);
}

/// Claude Code undoes its own last step through the `elfiee` MCP server's `elfiee_undo`: the
/// step of its session (the server knows the session from Claude Code's environment).
#[test]
fn claude_code_undoes_its_own_last_step_over_mcp() {
    let Some(bin) = claude_cli() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let project = root.join("p");
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    std::fs::write(project.join("keep.txt"), "keep\n").unwrap();
    let elf = root.join("doc.elf");
    elfiee_json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let dir = elfiee_json(&elf, &["dir", "import", project.to_str().unwrap()])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    elfiee_json(&elf, &["agent", "create", "--target", &dir]);
    let oops = project.join("oops.rs");
    let (out, standin) = claude(
        &bin,
        &root,
        &project,
        "Write oops.rs, then take it back",
        vec![
            Scripted::tool("Write", json!({"file_path": oops, "content": "oops\n"})),
            Scripted::tool("mcp__elfiee__elfiee_undo", json!({})).with_id(0, "toolu_undo"),
            Scripted::text("Taken back."),
        ],
    );
    assert_eq!(out["result"], "Taken back.", "{out}");
    let said = standin.tool_result_text("toolu_undo").unwrap_or_default();
    assert!(
        !oops.exists(),
        "the step was undone on disk; the tool said {said}"
    );
    let session = out["session_id"].as_str().unwrap();
    let steps = elfiee_json(&elf, &["agent", "steps", session]);
    assert_eq!(steps["steps"][0]["status"], "undone", "{steps}");
    check_document(&elf);
}
