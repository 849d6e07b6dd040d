//! Agent steps as users meet them, through the CLI (issue 37 item 8): a file the loop's tool
//! made is undone with that tool's step, not with the later `shell` step whose export wrote it
//! to disk; an agent's shell exports only the agent's own pending changes; `agent steps /
//! undo / redo` take a session id, a unique start of one, or the agent's name or id; `agent
//! run` prints its tool calls and steps and fails when the model call failed; the `[Success]`
//! preview is the output's first line, not the call's arguments.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

mod common;

const KEY_ENV: &str = "ELFIEE_AGENT_STEPS_KEY";

async fn run(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee_async(elf, args, &[(KEY_ENV, "sk-local")]).await
}

/// `elfiee --json ARGS`: its JSON (panics with stderr when it failed).
async fn ok(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    common::success_json(&all, &run(elf, &all).await)
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = common::output_ok(
        std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const MAIN_RS: &str = "fn main() {\n    println!(\"hello\");\n}\n";
const README: &str = "# proj\nsay hello\n";
const PDF_RS: &str = "/// The header every PDF file starts with.\npub fn header() -> &'static str {\n    \"%PDF-1.7\"\n}\n";
const NEW_MAIN: &str = "mod pdf;\n\nfn main() {\n    println!(\"{}\", pdf::header());\n}\n";

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    elf: PathBuf,
    dir: String,
}

/// A git project imported as directory `b1` of a new document (owner Alice).
async fn project() -> Project {
    std::env::set_var(KEY_ENV, "sk-local");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("proj");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/main.rs"), MAIN_RS).unwrap();
    std::fs::write(root.join("README.md"), README).unwrap();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "init"]);
    let elf = tmp.path().join("p.elf");
    ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]).await;
    let dir = ok(
        &elf,
        &["dir", "import", root.to_str().unwrap(), "--name", "b1"],
    )
    .await["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    Project {
        _tmp: tmp,
        root,
        elf,
        dir,
    }
}

/// Agent `name` pointed at the project's directory and configured against `url`: (block id,
/// editor id).
async fn agent(p: &Project, name: &str, url: &str) -> (String, String) {
    let a = ok(&p.elf, &["agent", "create", "--name", name]).await;
    let (id, editor) = (
        a["agent_block_id"].as_str().unwrap().to_owned(),
        a["editor_id"].as_str().unwrap().to_owned(),
    );
    ok(
        &p.elf,
        &["block", "link", &id, &p.dir, "--relation", "reference"],
    )
    .await;
    ok(
        &p.elf,
        &[
            "agent",
            "configure",
            &id,
            "--base-url",
            url,
            "--api-key-env",
            KEY_ENV,
        ],
    )
    .await;
    (id, editor)
}

async fn dir_status(p: &Project) -> Value {
    ok(&p.elf, &["dir", "status", &p.dir]).await
}

fn assert_clean(st: &Value) {
    assert_eq!(
        (&st["new"], &st["modified"], &st["removed"]),
        (&json!([]), &json!([]), &json!([])),
        "dir status clean: {st}"
    );
}

async fn digests_agree(elf: &Path) {
    assert_eq!(ok(elf, &["verify"]).await["ok"], true);
    assert_eq!(
        ok(elf, &["replay"]).await["state_digest"],
        ok(elf, &["state-digest"]).await["state_digest"]
    );
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The short calls' answer (titles, memory summaries).
fn short() -> String {
    common::anthropic_answer("Pdf module")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_loops_tool_made_goes_with_that_step_not_with_the_shell_step_that_exported_it() {
    let p = project().await;
    let (url, _) = common::llm_turns(
        vec![
            // Step 1: the agent makes src/pdf.rs in the directory and declares the module.
            common::anthropic_tool_calls(&[
                (
                    "c1",
                    "elfiee_directory_add",
                    json!({"directory": "b1", "path": "src/pdf.rs", "content": PDF_RS}),
                ),
                (
                    "c2",
                    "elfiee_code_write",
                    json!({"block_id": "src/main.rs", "text": NEW_MAIN}),
                ),
            ]),
            // Step 2: its shell, whose export writes both to disk first.
            common::anthropic_tool_calls(&[("c3", "shell", json!({"command": "cat src/pdf.rs"}))]),
            common::anthropic_answer("Made the pdf module."),
        ],
        short(),
    )
    .await;
    let (a1, editor) = agent(&p, "a1", &url).await;
    let out = run(
        &p.elf,
        &[
            "agent",
            "run",
            "a1",
            "--approve-all",
            "--message",
            "make a pdf module",
        ],
    )
    .await;
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // `agent run` shows each call and the turn's steps, as `agent chat` does; the previews
    // are the output (the command's first line), not the arguments.
    assert!(
        err.contains("  [Running] elfiee_directory_add src/pdf.rs\n"),
        "{err}"
    );
    assert!(
        err.contains("  [Success] shell: /// The header every PDF file starts with.\n"),
        "the shell's first line of output: {err}"
    );
    let add = err
        .lines()
        .find(|l| l.starts_with("  [Success] elfiee_directory_add: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        add.contains("block_id: ") && !add.contains("src/pdf.rs") && !add.contains('{'),
        "what the result adds, not the arguments again: {add}"
    );
    assert!(err.contains("step 1 ") && err.contains("step 2 "), "{err}");
    assert!(err.contains("    + src/pdf.rs\n"), "{err}");
    assert!(
        p.root.join("src/pdf.rs").exists(),
        "the shell's export wrote it"
    );

    // The file belongs to step 1 (the tool that made it), not to step 2 (the export).
    for by in ["a1", a1.as_str(), editor.as_str()] {
        let steps = ok(&p.elf, &["agent", "steps", by]).await;
        let s = &steps["steps"];
        assert_eq!(s.as_array().unwrap().len(), 2, "{steps}");
        assert_eq!(s[0]["files_created"], json!(["src/pdf.rs"]), "{steps}");
        assert_eq!(s[0]["files_modified"], json!(["src/main.rs"]), "{steps}");
        assert_eq!(s[1]["files_created"], json!([]), "{steps}");
        assert_eq!(s[1]["files_modified"], json!([]), "{steps}");
        assert_eq!(s[1]["tools"], json!(["shell"]), "{steps}");
    }

    // Undoing the shell step leaves the file, on disk and in the document.
    let r = ok(&p.elf, &["agent", "undo", "a1"]).await;
    assert_eq!(r["steps"], json!([2]), "{r}");
    assert_eq!(r["files_removed"], json!([]), "{r}");
    assert!(p.root.join("src/pdf.rs").exists());
    ok(&p.elf, &["block", "show", "src/pdf.rs"]).await;
    assert_clean(&dir_status(&p).await);

    // Undoing the tool's step takes file and block together.
    let r = ok(&p.elf, &["agent", "undo", "a1"]).await;
    assert_eq!(r["steps"], json!([1]), "{r}");
    assert!(!p.root.join("src/pdf.rs").exists(), "the file is gone");
    let gone = run(&p.elf, &["block", "show", "src/pdf.rs"]).await;
    assert_eq!(gone.status.code(), Some(1), "and its block");
    assert_eq!(
        std::fs::read_to_string(p.root.join("src/main.rs")).unwrap(),
        MAIN_RS
    );
    assert_clean(&dir_status(&p).await);
    assert_eq!(git(&p.root, &["status", "--porcelain"]), "");
    digests_agree(&p.elf).await;

    // Redo brings both back, in step.
    let r = ok(&p.elf, &["agent", "redo", "a1"]).await;
    assert_eq!(r["steps"], json!([1]), "{r}");
    assert_eq!(
        std::fs::read_to_string(p.root.join("src/pdf.rs")).unwrap(),
        PDF_RS
    );
    ok(&p.elf, &["block", "show", "src/pdf.rs"]).await;
    assert_clean(&dir_status(&p).await);
    digests_agree(&p.elf).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_shell_exports_its_own_changes_and_leaves_other_agents_pending() {
    let p = project().await;
    let (url, seen) = common::llm_turns(
        vec![
            // `other` changes README.md in the document (not exported).
            common::anthropic_tool_calls(&[(
                "o1",
                "elfiee_markdown_write",
                json!({"block_id": "README.md", "markdown": "# changed by other\n"}),
            )]),
            common::anthropic_answer("Changed the readme."),
            // `writer` makes its own file, then runs a command.
            common::anthropic_tool_calls(&[
                (
                    "w1",
                    "elfiee_directory_add",
                    json!({"directory": "b1", "path": "src/own.rs", "content": "pub fn own() {}\n"}),
                ),
                ("w2", "shell", json!({"command": "cat README.md"})),
            ]),
            common::anthropic_answer("Done."),
        ],
        short(),
    )
    .await;
    agent(&p, "other", &url).await;
    agent(&p, "writer", &url).await;
    let args = |who: &'static str| {
        [
            "agent",
            "run",
            who,
            "--approve-all",
            "--message",
            "work on the project",
        ]
    };
    let out = run(&p.elf, &args("other")).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&p.elf, &args("writer")).await;
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");

    // The writer's export wrote its own file only; the command saw the README as on disk.
    assert_eq!(
        std::fs::read_to_string(p.root.join("src/own.rs")).unwrap(),
        "pub fn own() {}\n"
    );
    assert_eq!(
        std::fs::read_to_string(p.root.join("README.md")).unwrap(),
        README,
        "the other agent's pending change is not written by this agent's shell"
    );
    assert!(err.contains("  [Success] shell: # proj\n"), "{err}");
    let st = dir_status(&p).await;
    assert_eq!(st["modified"], json!(["README.md"]), "still pending: {st}");
    assert_eq!(st["new"], json!([]), "{st}");
    // The model is told what was left pending, and why.
    let told = seen
        .lock()
        .unwrap()
        .iter()
        .any(|body| body.contains("pending_of_others") && body.contains(r#"[\"README.md\"]"#));
    assert!(
        told,
        "the tool result names the other editors' pending changes"
    );
    // The writer's step records its own file and nothing of the other agent's.
    let steps = ok(&p.elf, &["agent", "steps", "writer"]).await;
    let s = &steps["steps"][0];
    assert_eq!(s["files_created"], json!(["src/own.rs"]), "{steps}");
    assert_eq!(s["files_modified"], json!([]), "{steps}");
    // Undoing it takes its file back and leaves the other agent's change pending.
    ok(&p.elf, &["agent", "undo", "writer"]).await;
    assert!(!p.root.join("src/own.rs").exists());
    let st = dir_status(&p).await;
    assert_eq!(st["modified"], json!(["README.md"]), "{st}");
    assert_eq!(st["new"], json!([]), "{st}");
    digests_agree(&p.elf).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_undo_and_redo_take_a_session_prefix_or_the_agents_name_and_run_fails_on_a_model_error(
) {
    let p = project().await;
    let note = |id: &str, text: &str| {
        common::anthropic_tool_calls(&[(
            id,
            "elfiee_markdown_write",
            json!({"block_id": "README.md", "markdown": text}),
        )])
    };
    let (url, _) = common::llm_turns(
        vec![
            note("n1", "first\n"),
            common::anthropic_answer("one"),
            note("n2", "second\n"),
            common::anthropic_answer("two"),
        ],
        short(),
    )
    .await;
    let (a1, _) = agent(&p, "a1", &url).await;
    // Two sessions whose ids start alike.
    for (sid, msg) in [("abc-one", "first"), ("abc-two", "second")] {
        let out = run(
            &p.elf,
            &[
                "agent",
                "run",
                "a1",
                "--approve-all",
                "--session",
                sid,
                "--message",
                msg,
            ],
        )
        .await;
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let readme =
        || async { ok(&p.elf, &["markdown", "read", "README.md"]).await["markdown"].clone() };
    assert_eq!(readme().await, "second\n");

    // The start of one session's id.
    let steps = ok(&p.elf, &["agent", "steps", "abc-o"]).await;
    assert_eq!(steps["session_id"], "abc-one");
    assert_eq!(steps["steps"].as_array().unwrap().len(), 1, "{steps}");
    // A start both share is refused, naming them.
    let both = run(&p.elf, &["agent", "undo", "abc"]).await;
    assert_eq!(both.status.code(), Some(1));
    let msg = stderr(&both);
    assert!(
        msg.contains("abc-one") && msg.contains("abc-two") && msg.contains("several sessions"),
        "{msg}"
    );
    assert_eq!(readme().await, "second\n", "a refused undo changes nothing");
    // The agent's name (or block id) means the session it worked in last.
    let r = ok(&p.elf, &["agent", "undo", "a1"]).await;
    assert_eq!(r["session_id"], "abc-two", "{r}");
    assert_eq!(readme().await, "first\n");
    let r = ok(&p.elf, &["agent", "redo", &a1]).await;
    assert_eq!(r["session_id"], "abc-two", "{r}");
    assert_eq!(readme().await, "second\n");
    let r = ok(&p.elf, &["agent", "undo", "abc-t"]).await;
    assert_eq!(r["session_id"], "abc-two", "{r}");
    assert_eq!(readme().await, "first\n");
    let unknown = run(&p.elf, &["agent", "steps", "zzz"]).await;
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("no agent session or agent 'zzz'"));
    let empty = run(&p.elf, &["agent", "undo", ""]).await;
    assert_eq!(empty.status.code(), Some(2), "{}", stderr(&empty));

    // A model call that fails: `agent run` says so and exits non-zero.
    let (bad, _) = common::llm_server(vec![common::http(
        "401 Unauthorized",
        &[("content-type", "application/json")],
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
    ); 4])
    .await;
    ok(&p.elf, &["agent", "configure", "a1", "--base-url", &bad]).await;
    let out = run(&p.elf, &["agent", "run", "a1", "--message", "hello"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let msg = stderr(&out);
    assert!(msg.contains("the model call failed"), "{msg}");
    assert!(
        msg.contains("--session"),
        "names the session to continue: {msg}"
    );
}
