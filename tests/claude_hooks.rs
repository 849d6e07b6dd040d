//! Claude Code's hooks as elfiee receives them (issue 37), replayed by this test with the
//! payload shapes the real CLI sends (`tests/claude_code.rs` drives the real CLI): each tool
//! call that can change files is a step of the Claude Code session; the document follows the
//! disk; undo and redo take the project and the document back and forth; the grants deny a
//! write before it happens; disable gives the settings file back byte for byte.
//!
//! Both ways a hook records: through the document's owner (an `elfiee mcp-server`, as Claude
//! Code runs it) and alone (no process has the document open).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::elfiee_json;
use serde_json::{json, Value};

const SETTINGS: &str = "{\r\n\t\"permissions\": {\"allow\": [\"Bash(ls:*)\"]},\r\n\t\"hooks\": {\r\n\t\t\"PostToolUse\": [\r\n\t\t\t{\"matcher\": \"Write\", \"hooks\": [{\"type\": \"command\", \"command\": \"echo mine\"}]}\r\n\t\t]\r\n\t}\r\n}";

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "core.autocrlf=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `cargo new`-like project with a git commit, Claude Code initialized (`.claude/` with the
/// user's own settings: CRLF, tabs, a hook of theirs).
fn project(root: &Path) -> PathBuf {
    let p = root.join("hello");
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::create_dir_all(p.join(".claude")).unwrap();
    std::fs::write(
        p.join("Cargo.toml"),
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        p.join("src/main.rs"),
        "fn main() {\n    println!(\"Hello, world!\");\n}\n",
    )
    .unwrap();
    std::fs::write(p.join("notes.txt"), "old notes\n").unwrap();
    std::fs::write(p.join("crlf.txt"), "a\r\n\tb = 1\r\n\tc = 2").unwrap();
    std::fs::write(p.join(".gitignore"), "/target\n").unwrap();
    std::fs::write(p.join(".claude/settings.local.json"), SETTINGS).unwrap();
    git(&p, &["init", "-q"]);
    git(&p, &["add", "-A"]);
    git(
        &p,
        &[
            "-c",
            "user.email=t@e.st",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "init",
        ],
    );
    p
}

/// Runs one hook as Claude Code would: the command enable wrote, payload on stdin.
fn hook(command: &str, payload: &Value) -> std::process::Output {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .env_remove("ELFIEE_ELF")
        .spawn()
        .expect("hook");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "hook {payload}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

struct Session<'a> {
    command: &'a str,
    id: String,
    project: &'a Path,
    transcript: PathBuf,
}

impl Session<'_> {
    fn payload(&self, event: &str, extra: Value) -> Value {
        let mut v = json!({
            "session_id": self.id,
            "transcript_path": self.transcript,
            "cwd": self.project,
            "permission_mode": "default",
            "hook_event_name": event,
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    fn event(&self, event: &str, extra: Value) -> std::process::Output {
        hook(self.command, &self.payload(event, extra))
    }

    /// One tool call: its `PreToolUse` (the answer returned when it denies), the work, its
    /// `PostToolUse`.
    fn call(&self, id: &str, tool: &str, input: Value, work: impl FnOnce()) -> Option<String> {
        let pre = self.event(
            "PreToolUse",
            json!({"tool_name": tool, "tool_input": input, "tool_use_id": id}),
        );
        let said = String::from_utf8_lossy(&pre.stdout).trim().to_owned();
        if said.contains("\"deny\"") {
            return Some(said);
        }
        work();
        self.transcript_line(
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": tool, "input": input}]}}),
        );
        self.transcript_line(
            json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "done"}]}}),
        );
        self.event(
            "PostToolUse",
            json!({"tool_name": tool, "tool_input": input, "tool_use_id": id,
                   "tool_response": {"success": true}}),
        );
        None
    }

    fn transcript_line(&self, v: Value) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.transcript)
            .unwrap();
        writeln!(f, "{v}").unwrap();
    }
}

/// Every file of the project (but `.git`) with its bytes.
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_name() == ".git" {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The document's blocks as the user sees them (ids, names, types, owners, bodies).
fn blocks(elf: &Path) -> Value {
    let list = elfiee_json(elf, &["block", "list"]);
    let mut out: Vec<Value> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["block_type"] != "agent")
        .map(|b| {
            let id = b["block_id"].as_str().unwrap();
            let full = elfiee_json(elf, &["block", "show", id]);
            let entries = full["contents"].get("entries").cloned();
            json!({"id": id, "name": full["name"], "type": full["block_type"], "owner": full["owner"],
                   "text": full["contents"].get("text").or(full["contents"].get("markdown")).cloned(),
                   "entries": entries.map(|e| e.as_array().unwrap().iter().map(|x| x["path"].clone()).collect::<Vec<_>>())})
        })
        .collect();
    out.sort_by_key(|b| b["id"].as_str().unwrap().to_owned());
    json!(out)
}

fn check_document(elf: &Path) {
    let verify = elfiee_json(elf, &["verify"]);
    assert_eq!(verify["ok"], true, "{verify}");
    let replay = elfiee_json(elf, &["replay"]);
    let live = elfiee_json(elf, &["state-digest"]);
    assert_eq!(
        replay["state_digest"], live["state_digest"],
        "replay == live: {replay} {live}"
    );
}

/// A project in `tmp` imported into a new document `doc.elf` (owner Alice), with an agent
/// created on its directory: (project, document, directory block, `agent create`'s answer).
fn agent_project(tmp: &Path) -> (PathBuf, PathBuf, String, Value) {
    let project = project(tmp);
    let elf = tmp.join("doc.elf");
    elfiee_json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let dir = elfiee_json(&elf, &["dir", "import", project.to_str().unwrap()])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let created = elfiee_json(&elf, &["agent", "create", "--target", &dir]);
    (project, elf, dir, created)
}

/// The project's `.claude/settings.local.json` (where enable put the hooks).
fn hook_settings(project: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(project.join(".claude/settings.local.json")).unwrap(),
    )
    .unwrap()
}

/// `elfiee mcp-server` on `elf` as `editor` (what Claude Code starts), once it owns the
/// document (its owner socket is bound).
fn mcp_owner(elf: &Path, editor: &str) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args([
            "mcp-server",
            "--elf",
            elf.to_str().unwrap(),
            "--editor",
            editor,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        common::owner_socket_appears(elf, std::time::Duration::from_secs(5)),
        "the MCP server owns the document"
    );
    child
}

fn story(with_owner: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (project, elf, dir, created) = agent_project(tmp.path());
    assert_eq!(created["warnings"], json!([]), "{created}");
    let agent = created["agent_block_id"].as_str().unwrap().to_owned();
    let editor = created["editor_id"].as_str().unwrap().to_owned();

    // Enable put our hooks beside the user's, which stays.
    let settings = hook_settings(&project);
    assert_eq!(
        settings["hooks"]["PostToolUse"][0]["hooks"][0]["command"],
        "echo mine"
    );
    let command = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(command.contains(" hook --elf "), "{command}");
    for event in ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"] {
        let ours = settings["hooks"][event]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["hooks"][0]["command"] == command.as_str());
        assert!(ours, "{event}: {settings}");
    }
    // Enable's own changes (.mcp.json, the skill link, the settings) are the starting tree.
    let tree_before = tree(&project);
    let git_before = git(&project, &["status", "--porcelain"]);
    let blocks_before = blocks(&elf);

    // Claude Code started: its MCP server owns the document.
    let mut owner = with_owner.then(|| mcp_owner(&elf, &editor));

    let s = Session {
        command: &command,
        id: format!("5e55-{}", with_owner),
        project: &project,
        transcript: tmp.path().join("transcript.jsonl"),
    };
    s.event("SessionStart", json!({"source": "startup"}));
    s.event(
        "UserPromptSubmit",
        json!({"prompt": "Greet the user by name\nand add a util module"}),
    );
    // A read records nothing (the matcher would not even start the hook for it).
    s.event(
        "PreToolUse",
        json!({"tool_name": "Read", "tool_input": {"file_path": project.join("src/main.rs")}}),
    );
    let main_rs = project.join("src/main.rs");
    assert_eq!(
        s.call(
            "t1",
            "Edit",
            json!({"file_path": main_rs, "old_string": "world", "new_string": "Alice"}),
            || {
                let t = std::fs::read_to_string(&main_rs).unwrap();
                std::fs::write(&main_rs, t.replace("world", "Alice")).unwrap();
            }
        ),
        None
    );
    // Two writes in one response: both hooks' `PreToolUse` first, then the writes.
    let util = project.join("src/util.rs");
    let deep = project.join("docs/new/plan.md");
    for (id, p) in [("t2", &util), ("t3", &deep)] {
        s.event("PreToolUse", json!({"tool_name": "Write", "tool_use_id": id, "tool_input": {"file_path": p, "content": "x"}}));
    }
    std::fs::write(
        &util,
        "pub fn util() -> u8 {\n    7\n}\n\n#[test]\nfn seven() {\n    assert_eq!(util(), 7);\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(deep.parent().unwrap()).unwrap();
    std::fs::write(&deep, "# Plan\n").unwrap();
    for (id, p) in [("t2", &util), ("t3", &deep)] {
        s.event("PostToolUse", json!({"tool_name": "Write", "tool_use_id": id, "tool_input": {"file_path": p, "content": "x"}, "tool_response": {"type": "create"}}));
    }
    // Bash: a deletion and a `sed -i` on a CRLF, tabbed file.
    s.call(
        "t4",
        "Bash",
        json!({"command": "rm notes.txt && sed -i 's/b = 1/b = 10/' crlf.txt"}),
        || {
            let out = Command::new("sh")
                .arg("-c")
                .arg("rm notes.txt && sed -i 's/b = 1/b = 10/' crlf.txt")
                .current_dir(&project)
                .output()
                .unwrap();
            assert!(out.status.success());
        },
    );
    s.transcript_line(
        json!({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "Done: Alice is greeted and util.rs exists."}]}}),
    );
    s.event("Stop", json!({"stop_hook_active": false}));
    let tree_after = tree(&project);

    // The session, its prompt, the final answer.
    let sessions = elfiee_json(&elf, &["agent", "sessions", &agent]);
    let listed = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["session_id"] == s.id.as_str())
        .unwrap_or_else(|| panic!("session listed: {sessions}"))
        .clone();
    assert_eq!(listed["title"], "Greet the user by name");
    assert_eq!(listed["source"], "claude-code");
    let log = elfiee_json(&elf, &["log", "--block", &agent]).to_string();
    assert!(
        log.contains("and add a util module"),
        "the prompt is in the document"
    );
    assert!(
        log.contains("Alice is greeted"),
        "the final answer is in the document"
    );

    // Steps naming every changed file.
    let steps = elfiee_json(&elf, &["agent", "steps", &s.id]);
    let steps = steps["steps"].as_array().unwrap().clone();
    let files = |k: &str| -> Vec<String> {
        steps
            .iter()
            .flat_map(|x| {
                x[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap().to_owned())
            })
            .collect()
    };
    assert_eq!(
        files("files_modified"),
        ["src/main.rs", "crlf.txt"],
        "{steps:?}"
    );
    let mut created_files = files("files_created");
    created_files.sort();
    assert_eq!(created_files, ["docs/new/plan.md", "src/util.rs"]);
    assert_eq!(files("files_deleted"), ["notes.txt"]);
    assert_eq!(steps[0]["tools"], json!(["Edit"]));
    assert_eq!(steps.last().unwrap()["tools"], json!(["Bash"]));

    // The document follows the disk: new files are the agent's blocks, linked from it.
    let doc = blocks(&elf);
    let by_name = |n: &str| {
        doc.as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("block {n} in {doc}"))
    };
    assert_eq!(by_name("src/util.rs")["owner"], editor.as_str());
    assert!(by_name("src/main.rs")["text"]
        .as_str()
        .unwrap()
        .contains("Alice"));
    assert!(doc.to_string().contains("docs/new/plan.md"));
    assert!(
        !doc.to_string().contains("notes.txt"),
        "deleted from the document"
    );
    let status = elfiee_json(&elf, &["dir", "status", &dir]);
    assert!(
        !status.to_string().contains("util.rs"),
        "dir status clean: {status}"
    );
    check_document(&elf);

    // Undo every step: files byte for byte, git status, blocks as before.
    let n = steps.len().to_string();
    let undone = elfiee_json(&elf, &["agent", "undo", &s.id, "--steps", &n]);
    assert!(
        undone["conflicts"].as_array().is_none_or(Vec::is_empty),
        "{undone}"
    );
    assert_eq!(tree(&project), tree_before);
    assert_eq!(git(&project, &["status", "--porcelain"]), git_before);
    assert_eq!(blocks(&elf), blocks_before);
    check_document(&elf);
    // Redo: as after the session.
    elfiee_json(&elf, &["agent", "redo", &s.id]);
    assert_eq!(tree(&project), tree_after);
    check_document(&elf);

    // A revoked directory.add stops a new file before it is written.
    elfiee_json(&elf, &["revoke", &editor, "directory.add", &dir]);
    let denied = s
        .call(
            "t5",
            "Write",
            json!({"file_path": project.join("src/new.rs"), "content": "x"}),
            || panic!("a denied call does not run"),
        )
        .expect("denied");
    assert!(denied.contains("directory.add"), "{denied}");
    assert!(
        denied.contains(&format!("grant {editor} directory.add")),
        "{denied}"
    );
    assert!(!project.join("src/new.rs").exists());
    // What Bash made outside the grants cannot be stopped before; the step names it.
    s.call(
        "t6",
        "Bash",
        json!({"command": "echo x > bash.txt"}),
        || std::fs::write(project.join("bash.txt"), "x\n").unwrap(),
    );
    let steps = elfiee_json(&elf, &["agent", "steps", &s.id]);
    let last = steps["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["files_created"], json!(["bash.txt"]), "{last}");
    assert_eq!(last["outside_grants"], json!(["bash.txt"]), "{last}");

    if let Some(o) = owner.as_mut() {
        drop(o.stdin.take());
        let _ = o.wait();
    }
    // Disable: the settings file byte for byte as before enable.
    elfiee_json(&elf, &["agent", "disable", &agent]);
    assert_eq!(
        std::fs::read_to_string(project.join(".claude/settings.local.json")).unwrap(),
        SETTINGS
    );
}

#[test]
fn hooks_through_the_owner_record_steps_that_undo_and_redo() {
    story(true);
}

#[test]
fn hooks_with_no_owner_record_alone() {
    story(false);
}

/// Runs `elfiee hook` directly with `payload`; (exit code, stdout, stderr, seconds).
fn raw_hook(elf: &Path, editor: &str, payload: &Value) -> (i32, String, String, f64) {
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["hook", "--elf", elf.to_str().unwrap(), "--editor", editor])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .env_remove("ELFIEE_ELF")
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed().as_secs_f64(),
    )
}

/// Never in the way: a document that is gone gets one non-blocking message per session and
/// silence after; an owner that crashed (its socket left behind) does not stop the recording;
/// bad input is refused in words, never blocking; every call returns within seconds.
#[test]
fn a_hook_never_stands_in_the_way() {
    let tmp = tempfile::tempdir().unwrap();
    let gone = tmp.path().join("gone.elf");
    let session = format!("gone-{}", std::process::id());
    let p = json!({"session_id": session, "hook_event_name": "PreToolUse", "cwd": tmp.path(),
                   "tool_name": "Write", "tool_use_id": "t1",
                   "tool_input": {"file_path": tmp.path().join("x.rs"), "content": "x"}});
    let (code, out, err, secs) = raw_hook(&gone, "agent-x", &p);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("is gone"), "{err}");
    assert!(secs < 3.0, "{secs} s");
    let (code, _, err, _) = raw_hook(&gone, "agent-x", &p);
    assert_eq!((code, err.as_str()), (0, ""), "once per session");
    // Not a hook payload: said, not blocking (exit 1 is shown, never a denial).
    let mut child = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["hook", "--elf", gone.to_str().unwrap(), "--editor", "a"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"no\": 1")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not JSON"));

    // An owner that crashed left its socket: the hook records alone.
    let (project, elf, _, created) = agent_project(tmp.path());
    let editor = created["editor_id"].as_str().unwrap();
    drop(std::os::unix::net::UnixListener::bind(elf.join("owner.sock")).unwrap());
    let call = |event: &str| {
        json!({"session_id": "crashed-owner", "hook_event_name": event, "cwd": project,
               "tool_name": "Write", "tool_use_id": "w1",
               "tool_input": {"file_path": project.join("new.txt"), "content": "new\n"}})
    };
    raw_hook(
        &elf,
        editor,
        &json!({"session_id": "crashed-owner", "hook_event_name": "UserPromptSubmit", "prompt": "p"}),
    );
    let (code, out, err, secs) = raw_hook(&elf, editor, &call("PreToolUse"));
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(secs < 5.0, "{secs} s");
    std::fs::write(project.join("new.txt"), "new\n").unwrap();
    let (code, _, err, _) = raw_hook(&elf, editor, &call("PostToolUse"));
    assert_eq!(code, 0, "{err}");
    let steps = elfiee_json(&elf, &["agent", "steps", "crashed-owner"]);
    assert_eq!(
        steps["steps"][0]["files_created"],
        json!(["new.txt"]),
        "{steps}"
    );
}

/// Two sessions at once in one project: B's Write (through a temporary file, as Claude Code
/// writes) lands while A's Write is open, and A's `PostToolUse` comes first. A's step records A's file only; B's file is left for B's step
/// (it was A's before: undoing A would have reverted B's work).
#[test]
fn two_sessions_at_once_each_step_records_its_own_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (project, elf, dir, created) = agent_project(tmp.path());
    let editor = created["editor_id"].as_str().unwrap().to_owned();
    let settings = hook_settings(&project);
    let command = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut owner = mcp_owner(&elf, &editor);
    let session = |id: &str| Session {
        command: &command,
        id: id.into(),
        project: &project,
        transcript: tmp.path().join(format!("{id}.jsonl")),
    };
    let (a, b) = (session("sess-a"), session("sess-b"));
    for s in [&a, &b] {
        s.event("SessionStart", json!({"source": "startup"}));
        s.event("UserPromptSubmit", json!({"prompt": "write a file"}));
    }
    let write = |name: &str| json!({"file_path": project.join(name), "content": name});
    let tool = |s: &Session, event: &str, id: &str, name: &str| {
        s.event(
            event,
            json!({"tool_name": "Write", "tool_input": write(name), "tool_use_id": id,
                   "tool_response": {"success": true}}),
        );
    };
    tool(&a, "PreToolUse", "a1", "src/a.rs");
    tool(&b, "PreToolUse", "b1", "src/b.rs");
    // B writes as Claude Code does, through a temporary file renamed over the named one; A's
    // `PostToolUse` comes in between (as in a CI run with the real Claude Code).
    let b_tmp = project.join("src/b.rs.tmp.4242.54c33b0c1da9");
    std::fs::write(&b_tmp, "b").unwrap();
    std::fs::write(project.join("src/a.rs"), "a").unwrap();
    tool(&a, "PostToolUse", "a1", "src/a.rs");
    std::fs::rename(&b_tmp, project.join("src/b.rs")).unwrap();
    tool(&b, "PostToolUse", "b1", "src/b.rs");
    for (s, file) in [(&a, "src/a.rs"), (&b, "src/b.rs")] {
        let (created, steps) = common::session_files_created(&elf, &s.id);
        assert_eq!(created, [file], "{}: {steps}", s.id);
    }
    // What the attribution is for: undoing A's work takes back A's file alone, and the
    // document still follows the disk.
    let undone = elfiee_json(&elf, &["agent", "undo", &a.id]);
    assert_eq!(undone["files_removed"], json!(["src/a.rs"]), "{undone}");
    assert!(!project.join("src/a.rs").exists());
    assert_eq!(
        std::fs::read_to_string(project.join("src/b.rs")).unwrap(),
        "b",
        "B's file is B's: {undone}"
    );
    let status = elfiee_json(&elf, &["dir", "status", &dir]);
    for list in ["new", "modified", "removed"] {
        assert_eq!(status[list], json!([]), "{list}: {status}");
    }
    drop(owner.stdin.take());
    let _ = owner.wait();
}
