//! The Anthropic Messages API stand-in (`tests/common/anthropic_standin.rs`) against the real
//! Claude Code CLI from `tools/claude-code` (`npm ci` there installs it), and the recorded hook
//! payloads in `tests/fixtures/claude-hooks/`.

#[path = "common/anthropic_standin.rs"]
mod anthropic_standin;

use anthropic_standin::{content_text, Scripted, StandIn, EXHAUSTED_TEXT, SIDE_TEXT};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pinned Claude Code CLI, if it is installed and runs.
fn claude_cli() -> Option<PathBuf> {
    let bin = repo().join("tools/claude-code/node_modules/.bin/claude");
    let ok = bin.exists()
        && Command::new(&bin)
            .arg("--version")
            .output()
            .map(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains("Claude Code")
            })
            .unwrap_or(false);
    if ok {
        Some(bin)
    } else {
        eprintln!("\n{}", "!".repeat(72));
        eprintln!("!!! CLAUDE CODE CLI NOT INSTALLED: run npm ci in tools/claude-code");
        eprintln!("!!! ({} is missing or does not run)", bin.display());
        eprintln!("{}\n", "!".repeat(72));
        None
    }
}

/// One HTTP/1.1 request on `conn`; returns (status line, headers, body).
fn http(
    conn: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: &Value,
) -> (String, Vec<String>, String) {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    write!(
        conn.get_mut(),
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).unwrap();
    let mut headers = Vec::new();
    let mut len = 0;
    loop {
        let mut l = String::new();
        conn.read_line(&mut l).unwrap();
        let l = l.trim_end().to_owned();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        headers.push(l);
    }
    let mut buf = vec![0; if method == "HEAD" { 0 } else { len }];
    conn.read_exact(&mut buf).unwrap();
    (
        status.trim_end().to_owned(),
        headers,
        String::from_utf8(buf).unwrap(),
    )
}

/// The stand-in alone, spoken to over one keep-alive connection (needs no CLI).
#[test]
fn standin_streams_scripted_responses() {
    let standin = StandIn::start(vec![
        Scripted::tools([
            ("Write", json!({"file_path": "/p/a.rs", "content": "ä\n"})),
            ("Write", json!({"file_path": "/p/b.rs", "content": "b\n"})),
        ])
        .with_text("Two files."),
        Scripted::text("Done."),
    ]);
    let mut conn = BufReader::new(TcpStream::connect(standin.addr).unwrap());
    let tools = json!([{"name": "Write", "description": "w", "input_schema": {"type": "object"}}]);

    let (status, _, _) = http(&mut conn, "HEAD", "/api/hello", &Value::Null);
    assert_eq!(status, "HTTP/1.1 200 OK");

    let req = json!({"model": "m-1", "stream": true, "tools": tools,
        "messages": [{"role": "user", "content": "go"}]});
    let (status, headers, body) = http(&mut conn, "POST", "/v1/messages?beta=true", &req);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers
            .iter()
            .any(|h| h == "content-type: text/event-stream"),
        "{headers:?}"
    );
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    assert_eq!(events[0]["message"]["model"], "m-1");
    assert_eq!(events[1]["content_block"]["type"], "text");
    assert_eq!(
        events[2]["delta"],
        json!({"type": "text_delta", "text": "Two files."})
    );
    assert_eq!(events[4]["content_block"]["id"], "toolu_00_0");
    assert_eq!(events[8]["content_block"]["id"], "toolu_00_1");
    let input: String = [&events[5], &events[6]]
        .iter()
        .map(|e| e["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"file_path": "/p/a.rs", "content": "ä\n"})
    );
    assert_eq!(events[12]["delta"]["stop_reason"], "tool_use");

    // A side request (no tools), not streamed: plain text, no script used.
    let (_, _, body) = http(
        &mut conn,
        "POST",
        "/v1/messages",
        &json!({"model": "m", "messages": [{"role": "user", "content": "title?"}]}),
    );
    let msg: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(msg["content"][0]["text"], SIDE_TEXT);
    assert_eq!(msg["stop_reason"], "end_turn");
    assert_eq!(standin.used(), 1);

    // The next turn carries the tool results; not streamed this time.
    let req = json!({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": "go"},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_00_0", "content": "denied: no grant", "is_error": true},
            {"type": "tool_result", "tool_use_id": "toolu_00_1", "content": [{"type": "text", "text": "ok"}]}]}]});
    let (_, _, body) = http(&mut conn, "POST", "/v1/messages", &req);
    let msg: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(msg["content"][0]["text"], "Done.");
    let (_, _, body) = http(&mut conn, "POST", "/v1/messages", &req);
    let msg: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(msg["content"][0]["text"], EXHAUSTED_TEXT);

    let (_, _, body) = http(&mut conn, "POST", "/v1/messages/count_tokens", &req);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["input_tokens"],
        100
    );

    assert_eq!(
        standin.tool_result_text("toolu_00_0").as_deref(),
        Some("denied: no grant")
    );
    assert_eq!(standin.tool_result("toolu_00_0").unwrap()["is_error"], true);
    assert_eq!(
        standin.tool_result_text("toolu_00_1").as_deref(),
        Some("ok")
    );
    let reqs = standin.requests();
    assert_eq!(reqs.len(), 6);
    assert_eq!(reqs[0].method, "HEAD");
    assert_eq!(
        reqs.iter().map(|r| r.script_index).collect::<Vec<_>>(),
        [None, Some(0), None, Some(1), None, None]
    );
    assert_eq!(standin.model_requests().len(), 3);
    assert_eq!(reqs[1].header("Content-Type"), Some("application/json"));
}

/// The recorded payloads are what the tests that replay them expect: one JSON object per line,
/// its `event` matching the payload's `hook_event_name`, no machine paths left.
#[test]
fn recorded_hook_payloads_are_wellformed() {
    let dir = repo().join("tests/fixtures/claude-hooks");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".jsonl") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("/tmp/explore") && !text.contains("/tmp/ccfx"),
            "{name}"
        );
        for (i, line) in text.lines().enumerate() {
            let v: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1));
            if name == "transcript.jsonl" {
                assert!(v["type"].is_string(), "{name}:{}", i + 1);
            } else if name.ends_with(".tool_results.jsonl") {
                assert_eq!(v["type"], "tool_result", "{name}:{}", i + 1);
            } else if !v["payload"].is_null() {
                assert_eq!(
                    v["payload"]["hook_event_name"],
                    v["event"],
                    "{name}:{}",
                    i + 1
                );
                assert!(v["payload"]["session_id"].is_string(), "{name}:{}", i + 1);
            } else {
                assert!(v["not_completed"].is_string(), "{name}:{}", i + 1);
            }
        }
    }
    assert!(files >= 10, "fixtures missing in {}", dir.display());
}

/// Runs `claude` and waits at most `limit`; returns (success, stdout, stderr).
fn run_claude(mut cmd: Command, scratch: &Path, limit: Duration) -> (bool, String, String) {
    let out = scratch.join("claude.stdout");
    let err = scratch.join("claude.stderr");
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().expect("start claude");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "claude ran longer than {limit:?}; stderr: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.success(),
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap(),
    )
}

/// The real Claude Code CLI, headless, its model scripted by the stand-in: a `Write` happens
/// and the project's `PostToolUse` hook gets the payload for it.
#[test]
fn real_claude_code_write_reaches_the_hooks() {
    let Some(claude) = claude_cli() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("proj");
    let home = tmp.path().join("home");
    let dumps = tmp.path().join("hooks");
    // Claude Code keeps its own temporary files under $TMPDIR (claude-<uid>/, cc-socks/).
    let tmpdir = tmp.path().join("tmp");
    for d in [
        &tmpdir,
        &project.join("src"),
        &project.join(".claude"),
        &home,
        &dumps,
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname = \"proj\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        project.join("src/main.rs"),
        "fn main() {\n    println!(\"Hello, world!\");\n}\n",
    )
    .unwrap();
    // Each hook run stores its stdin in its own file, named by the time it started.
    let dump = tmp.path().join("dump.sh");
    std::fs::write(
        &dump,
        format!(
            "#!/bin/sh\ncat > '{}'/\"$(date +%s%N)-$$.json\"\n",
            dumps.display()
        ),
    )
    .unwrap();
    let hook = json!([{"matcher": "*", "hooks": [{"type": "command", "command": format!("sh '{}'", dump.display()), "timeout": 30}]}]);
    let settings = json!({"hooks": {
        "SessionStart": hook, "UserPromptSubmit": hook, "PreToolUse": hook,
        "PostToolUse": hook, "Stop": hook}});
    std::fs::write(
        project.join(".claude/settings.local.json"),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();

    let target = project.join("src/greet.rs");
    let content = "pub fn greet() -> &'static str {\n    \"hi\"\n}\n";
    let standin = StandIn::start(vec![
        Scripted::tool("Write", json!({"file_path": target, "content": content}))
            .with_text("Writing the module."),
        Scripted::text("Wrote src/greet.rs."),
    ]);

    let mut cmd = Command::new(&claude);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CLAUDE") || k.starts_with("ANTHROPIC") {
            cmd.env_remove(&*k);
        }
    }
    cmd.current_dir(&project)
        .env("HOME", &home)
        .env("TMPDIR", &tmpdir)
        .env("ANTHROPIC_BASE_URL", &standin.base_url)
        .env("ANTHROPIC_API_KEY", "x")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .args([
            "-p",
            "Add a greet module",
            "--allowedTools",
            "Read Edit Write Bash",
        ])
        .args(["--output-format", "json"]);
    let (ok, stdout, stderr) = run_claude(cmd, tmp.path(), Duration::from_secs(180));
    assert!(ok, "claude failed\nstdout: {stdout}\nstderr: {stderr}");
    let out: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("--output-format json printed {stdout:?}: {e}"));
    assert_eq!(out["type"], "result", "{out}");
    assert_eq!(out["is_error"], false, "{out}");
    assert_eq!(out["result"], "Wrote src/greet.rs.", "{out}");
    let session = out["session_id"].as_str().expect("session_id").to_owned();

    assert_eq!(std::fs::read_to_string(&target).unwrap(), content);
    assert_eq!(standin.used(), 2, "{:?}", standin.requests());
    let result = standin
        .tool_result_text("toolu_00_0")
        .expect("the model got the Write's result");
    assert!(result.starts_with("File created successfully"), "{result}");

    let mut names: Vec<PathBuf> = std::fs::read_dir(&dumps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let payloads: Vec<Value> = names
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    let events: Vec<&str> = payloads
        .iter()
        .map(|p| p["hook_event_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop"
        ],
        "{payloads:#?}"
    );
    for p in &payloads {
        assert_eq!(p["session_id"], session.as_str());
        assert_eq!(
            Path::new(p["cwd"].as_str().unwrap()),
            project.canonicalize().unwrap()
        );
    }
    let post = &payloads[3];
    assert_eq!(post["tool_name"], "Write");
    assert_eq!(post["tool_use_id"], "toolu_00_0");
    assert_eq!(payloads[2]["tool_use_id"], "toolu_00_0");
    assert_eq!(
        post["tool_input"],
        json!({"file_path": target, "content": content})
    );
    assert_eq!(post["tool_response"]["type"], "create");
    assert_eq!(post["tool_response"]["filePath"], json!(target));
    assert_eq!(post["tool_response"]["content"], content);
    assert_eq!(post["permission_mode"], "default");
    // The transcript holds the final answer when Stop fires.
    let transcript =
        std::fs::read_to_string(payloads[4]["transcript_path"].as_str().unwrap()).unwrap();
    let last_text = transcript
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "assistant")
        .map(|e| content_text(&e["message"]["content"]))
        .rfind(|t| !t.is_empty());
    assert_eq!(last_text.as_deref(), Some("Wrote src/greet.rs."));
    assert!(transcript.starts_with('{'));
    assert!(payloads[4]["transcript_path"]
        .as_str()
        .unwrap()
        .starts_with(home.join(".claude/projects").to_str().unwrap()));
}
