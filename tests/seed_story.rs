//! The seed's own user story (seed 002 §3), end to end through the CLI, on a real `cargo new`
//! project against a local server speaking the Anthropic API: import the project as directory
//! `b1`, link terminal `t1` to it, create agent `a1` referencing it and the requirement `f1`,
//! ask `a1` to implement the requirement; its proposal creates `src/pdf.rs` with a test, writes
//! it, places it in the directory, declares the module in `src/main.rs` and links the code to
//! the requirement (`implement`); the user approves; `dir status` lists the changes;
//! `terminal run --export` runs `cargo test pdf` in the project folder; the test passes; git
//! sees exactly the changed files; `verify` passes.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

mod common;

const KEY_ENV: &str = "ELFIEE_STORY_KEY";

fn elfiee(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee(elf, args, &[(KEY_ENV, "sk-local")])
}

async fn ok(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = common::run_elfiee_async(elf, &all, &[(KEY_ENV, "sk-local")]).await;
    common::success_json(args, &out)
}

fn id(v: &Value) -> String {
    v["block_id"].as_str().unwrap().to_owned()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = common::output_ok(
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com"),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const PDF_RS: &str = "/// The header every PDF file starts with.\npub fn header() -> &'static str {\n    \"%PDF-1.7\"\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn pdf_header_is_right() {\n        assert_eq!(super::header(), \"%PDF-1.7\");\n    }\n}\n";
const MAIN_RS: &str = "mod pdf;\n\nfn main() {\n    println!(\"{}\", pdf::header());\n}\n";

fn command(cap: &str, block: Option<&str>, payload: Value, why: &str) -> String {
    let block = block
        .map(|b| format!("<block_id>{b}</block_id>"))
        .unwrap_or_default();
    format!("<command><cap_id>{cap}</cap_id>{block}<payload>{payload}</payload><description>{why}</description></command>\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_story_an_agent_writes_code_into_a_project_and_its_tests_run_there() {
    std::env::set_var(KEY_ENV, "sk-local");
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    let made = Command::new("cargo")
        .args(["new", "--quiet", "--vcs", "git", "--name", "proj"])
        .arg(&proj)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    // A real project commits its lock file (so `cargo test` below adds nothing of its own).
    let locked = Command::new("cargo")
        .args(["generate-lockfile", "--offline"])
        .current_dir(&proj)
        .output()
        .unwrap();
    assert!(
        locked.status.success(),
        "{}",
        String::from_utf8_lossy(&locked.stderr)
    );
    git(&proj, &["add", "-A"]);
    git(&proj, &["commit", "-q", "-m", "cargo new"]);

    let elf = tmp.path().join("story.elf");
    ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]).await;
    let b1 = id(&ok(
        &elf,
        &["dir", "import", proj.to_str().unwrap(), "--name", "b1"],
    )
    .await);
    let t1 = id(&ok(&elf, &["terminal", "create", "--name", "t1", "--dir", &b1]).await);
    let f1 = id(&ok(
        &elf,
        &["block", "create", "--type", "markdown", "--name", "f1"],
    )
    .await);
    ok(
        &elf,
        &[
            "markdown",
            "write",
            &f1,
            "--text",
            "Requirement: a `pdf` module whose `header()` returns the PDF 1.7 header, with a test.",
        ],
    )
    .await;
    let agent = ok(&elf, &["agent", "create", "--name", "a1"]).await;
    let (a1, a1_editor) = (
        agent["agent_block_id"].as_str().unwrap().to_owned(),
        agent["editor_id"].as_str().unwrap().to_owned(),
    );
    for target in [&b1, &f1] {
        ok(
            &elf,
            &["block", "link", &a1, target, "--relation", "reference"],
        )
        .await;
    }
    // Pointing the agent at b1 let it place files in the project (no grant needed).
    let again = elfiee(&elf, &["grant", &a1_editor, "directory.add", &b1]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds 'directory.add'"),
        "the link granted it: {again:?}"
    );
    let main_rs = ok(&elf, &["block", "show", "src/main.rs"]).await["block_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The model's answer: create src/pdf.rs with a test, write it, place it in b1, declare
    // the module, link the code to the requirement.
    let answer = format!(
        "<thinking>A pdf module with a test.</thinking>\n{}{}{}{}{}",
        command(
            "core.create",
            None,
            json!({"name": "src/pdf.rs", "block_type": "code", "block_id": "pdf"}),
            "create the file"
        ),
        command(
            "code.write",
            Some("pdf"),
            json!({"text": PDF_RS, "language": "rust"}),
            "write it"
        ),
        command(
            "directory.add",
            Some(&b1),
            json!({"path": "src/pdf.rs", "block_id": "pdf"}),
            "put it in the project"
        ),
        command(
            "code.write",
            Some(&main_rs),
            json!({"text": MAIN_RS, "language": "rust"}),
            "declare the module"
        ),
        command(
            "core.link",
            Some("pdf"),
            json!({"to": f1, "relation": "implement"}),
            "it implements f1"
        ),
    );
    let (url, seen) = common::llm_server(vec![common::anthropic_answer(&answer)]).await;
    ok(
        &elf,
        &[
            "agent",
            "configure",
            &a1,
            "--base-url",
            &url,
            "--api-key-env",
            KEY_ENV,
        ],
    )
    .await;
    let proposal = ok(&elf, &["agent", "invoke", &a1, "--prompt", "Implement f1."]).await;
    assert_eq!(proposal["status"], "pending", "{proposal}");
    assert_eq!(
        proposal["proposed_commands"].as_array().unwrap().len(),
        5,
        "{proposal}"
    );
    assert!(
        seen.lock().unwrap()[0].contains("PDF 1.7 header"),
        "the requirement was in the model's context"
    );
    let pid = proposal["proposal_id"].as_str().unwrap().to_owned();
    ok(&elf, &["agent", "approve", &pid]).await;

    // b1 now holds the new file, not yet on disk.
    let st = ok(&elf, &["dir", "status", &b1]).await;
    assert_eq!(st["new"], json!(["src/pdf.rs"]), "{st}");
    assert_eq!(st["modified"], json!(["src/main.rs"]), "{st}");
    assert!(!proj.join("src/pdf.rs").exists());

    // Export & run: the tests run in the project folder; the output is committed as events.
    let run = ok(
        &elf,
        &[
            "terminal",
            "run",
            &t1,
            "--export",
            "--timeout",
            "600",
            "--",
            "cargo test --offline pdf",
        ],
    )
    .await;
    assert_eq!(run["exit_code"], 0, "{run}");
    let stdout = run["stdout"].as_str().unwrap();
    assert!(stdout.contains("pdf_header_is_right ... ok"), "{run}");
    assert_eq!(
        run["export"]["written"],
        json!(["src/main.rs", "src/pdf.rs"]),
        "{run}"
    );
    let log = ok(&elf, &["log", "--block", &t1]).await;
    assert!(
        log.to_string().contains("pdf_header_is_right ... ok"),
        "the output is an event"
    );
    // Git sees exactly what the proposal changed.
    let status = git(&proj, &["status", "--porcelain"]);
    let mut lines: Vec<&str> = status.lines().collect();
    lines.sort();
    assert_eq!(lines, [" M src/main.rs", "?? src/pdf.rs"], "{status}");
    assert_eq!(ok(&elf, &["dir", "status", &b1]).await["new"], json!([]));
    assert_eq!(ok(&elf, &["verify"]).await["ok"], true);
}

/// The same story through the agent loop (issue 37 item 8): `a1` reads the requirement and, in
/// one step, makes `src/pdf.rs` in `b1`, declares the module and links the code to `f1`; the
/// user runs the tests with `terminal run --export` (the export writes the agent's files);
/// then `agent undo a1` — by the agent's name — takes the step back: the file gone from disk
/// and from the document, `src/main.rs` as it was, `dir status` and `git status` clean. (The
/// user's export of the agent's own files is not a change by someone else.) After a redo and
/// a real change by the user, the undo is refused naming that block, and `--force` takes the
/// file too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_story_through_the_loop_then_the_users_export_then_agent_undo_by_name() {
    std::env::set_var(KEY_ENV, "sk-local");
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    common::output_ok(
        Command::new("cargo")
            .args(["new", "--quiet", "--vcs", "git", "--name", "proj"])
            .arg(&proj),
    );
    common::output_ok(
        Command::new("cargo")
            .args(["generate-lockfile", "--offline"])
            .current_dir(&proj),
    );
    git(&proj, &["add", "-A"]);
    git(&proj, &["commit", "-q", "-m", "cargo new"]);
    let original_main = std::fs::read_to_string(proj.join("src/main.rs")).unwrap();

    let elf = tmp.path().join("story.elf");
    ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]).await;
    let b1 = id(&ok(
        &elf,
        &["dir", "import", proj.to_str().unwrap(), "--name", "b1"],
    )
    .await);
    let t1 = id(&ok(&elf, &["terminal", "create", "--name", "t1", "--dir", &b1]).await);
    let f1 = id(&ok(
        &elf,
        &["block", "create", "--type", "markdown", "--name", "f1"],
    )
    .await);
    ok(
        &elf,
        &[
            "markdown",
            "write",
            &f1,
            "--text",
            "Requirement: a `pdf` module whose `header()` returns the PDF 1.7 header, with a test.",
        ],
    )
    .await;
    let a1 = ok(&elf, &["agent", "create", "--name", "a1"]).await["agent_block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for target in [&t1, &b1, &f1] {
        ok(
            &elf,
            &["block", "link", &a1, target, "--relation", "reference"],
        )
        .await;
    }
    let (url, _) = common::llm_turns(
        vec![
            common::anthropic_tool_calls(&[("r1", "elfiee_block_get", json!({"block_id": "f1"}))]),
            common::anthropic_tool_calls(&[
                (
                    "w1",
                    "elfiee_directory_add",
                    json!({"directory": "b1", "path": "src/pdf.rs", "content": PDF_RS}),
                ),
                (
                    "w2",
                    "elfiee_code_write",
                    json!({"block_id": "src/main.rs", "text": MAIN_RS, "language": "rust"}),
                ),
                (
                    "w3",
                    "elfiee_block_link",
                    json!({"from": "src/pdf.rs", "to": "f1", "relation": "implement"}),
                ),
            ]),
            common::anthropic_answer("src/pdf.rs implements f1; run `cargo test pdf`."),
        ],
        common::anthropic_answer("PDF export"),
    )
    .await;
    ok(
        &elf,
        &[
            "agent",
            "configure",
            &a1,
            "--base-url",
            &url,
            "--api-key-env",
            KEY_ENV,
        ],
    )
    .await;
    // "根据 f1 实现 PDF 导出" — through the loop.
    let turn = ok(
        &elf,
        &[
            "agent",
            "run",
            "a1",
            "--approve-all",
            "--message",
            "根据 f1 实现 PDF 导出",
        ],
    )
    .await;
    assert_eq!(turn["stop_reason"]["kind"], "end_turn", "{turn}");
    let st = ok(&elf, &["dir", "status", &b1]).await;
    assert_eq!(st["new"], json!(["src/pdf.rs"]), "{st}");
    assert_eq!(st["modified"], json!(["src/main.rs"]), "{st}");

    // The user: Export & Run.
    let run = ok(
        &elf,
        &[
            "terminal",
            "run",
            &t1,
            "--export",
            "--timeout",
            "600",
            "--",
            "cargo test --offline pdf",
        ],
    )
    .await;
    assert_eq!(run["exit_code"], 0, "{run}");
    assert!(run["stdout"]
        .as_str()
        .unwrap()
        .contains("pdf_header_is_right ... ok"));
    assert!(proj.join("src/pdf.rs").exists());

    // `agent undo` by the agent's name: its newest step, file and block together.
    let r = ok(&elf, &["agent", "undo", "a1"]).await;
    assert_eq!(r["steps"], json!([2]), "{r}");
    assert_eq!(r["files_removed"], json!(["src/pdf.rs"]), "{r}");
    assert_eq!(r["files_restored"], json!(["src/main.rs"]), "{r}");
    assert!(!proj.join("src/pdf.rs").exists(), "gone from disk");
    let gone = elfiee(&elf, &["block", "show", "src/pdf.rs"]);
    assert_eq!(gone.status.code(), Some(1), "and from the document");
    assert_eq!(
        std::fs::read_to_string(proj.join("src/main.rs")).unwrap(),
        original_main
    );
    let st = ok(&elf, &["dir", "status", &b1]).await;
    assert_eq!(
        (&st["new"], &st["modified"], &st["removed"]),
        (&json!([]), &json!([]), &json!([])),
        "{st}"
    );
    assert_eq!(git(&proj, &["status", "--porcelain"]), "");
    assert_eq!(ok(&elf, &["verify"]).await["ok"], true);
    assert_eq!(
        ok(&elf, &["replay"]).await["state_digest"],
        ok(&elf, &["state-digest"]).await["state_digest"]
    );

    // Redo; then the user really changes a block the step changed: refused, naming it (not
    // b1, whose export record is no one's change); --force takes the file with the block.
    ok(&elf, &["agent", "redo", "a1"]).await;
    assert!(proj.join("src/pdf.rs").exists());
    ok(
        &elf,
        &["code", "write", "src/main.rs", "--text", "// Alice's\n"],
    )
    .await;
    let refused = elfiee(&elf, &["agent", "undo", "a1"]);
    assert_eq!(refused.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(msg.contains("block 'src/main.rs'"), "{msg}");
    assert!(!msg.contains("block 'b1'"), "{msg}");
    let r = ok(&elf, &["agent", "undo", "a1", "--force"]).await;
    assert_eq!(r["steps"], json!([2]), "{r}");
    assert!(!proj.join("src/pdf.rs").exists(), "the file goes too");
    assert!(elfiee(&elf, &["block", "show", "src/pdf.rs"])
        .status
        .code()
        .is_some_and(|c| c == 1));
    let st = ok(&elf, &["dir", "status", &b1]).await;
    assert_eq!(
        (&st["new"], &st["modified"], &st["removed"]),
        (&json!([]), &json!([]), &json!([])),
        "{st}"
    );
    assert_eq!(git(&proj, &["status", "--porcelain"]), "");
    assert_eq!(ok(&elf, &["verify"]).await["ok"], true);
}
