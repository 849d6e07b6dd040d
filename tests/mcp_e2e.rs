//! `elfiee mcp-server` end to end: the real binary, driven by the official MCP Python SDK
//! (`tests/mcp_client.py`, run with `.venv/bin/python` — `scripts/test` creates the venv) and by
//! raw JSON-RPC lines for handshake versions and bad input.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

const TOOLS: [&str; 21] = [
    "elfiee_block_list",
    "elfiee_block_get",
    "elfiee_block_create",
    "elfiee_block_delete",
    "elfiee_markdown_write",
    "elfiee_code_write",
    "elfiee_block_link",
    "elfiee_block_unlink",
    "elfiee_block_history",
    "elfiee_directory_import",
    "elfiee_directory_sync",
    "elfiee_directory_add",
    "elfiee_directory_move",
    "elfiee_directory_remove",
    "elfiee_steps",
    "elfiee_undo",
    "elfiee_redo",
    "elfiee_terminal_run",
    "elfiee_proposal_list",
    "elfiee_propose",
    "elfiee_exec",
];

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_elfiee")
}

fn elfiee(elf: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    common::run_elfiee(elf, &all, &[])
}

fn json_ok(elf: &Path, args: &[&str]) -> Value {
    common::success_json(args, &elfiee(elf, args))
}

/// A document owned by Alice with one markdown block of hers, and an agent editor that may
/// create blocks and read (only read) Alice's block.
struct Fixture {
    _dir: tempfile::TempDir,
    elf: PathBuf,
    agent: String,
    spec: String,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("doc.elf");
    json_ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let agent = json_ok(
        &elf,
        &["editor", "create", "--name", "Claude", "--type", "agent"],
    )["editor_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(agent.starts_with("agent-"), "{agent}");
    let spec = common::new_block(json_ok, &elf, "markdown", "Spec");
    json_ok(&elf, &["markdown", "write", &spec, "--text", "# Spec\n"]);
    json_ok(&elf, &["grant", &agent, "core.create", "*"]);
    json_ok(&elf, &["grant", &agent, "markdown.read", &spec]);
    Fixture {
        _dir: dir,
        elf,
        agent,
        spec,
    }
}

fn venv_python() -> PathBuf {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: the MCP end-to-end tests use the official MCP Python SDK from the project's venv; \
         run `scripts/test` (it creates .venv and installs `mcp`), then run this test again",
        py.display()
    );
    py
}

/// Waits for `child` with a deadline, killing it on timeout.
fn wait_output(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&err_t.join().unwrap()).into_owned();
            panic!("timed out after {limit:?}; stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    }
}

#[test]
fn the_python_sdk_client_works_through_the_engine_as_the_agent_editor() {
    let py = venv_python();
    let f = fixture();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let child = Command::new(py)
        .arg(&script)
        .args([
            "--bin",
            bin(),
            "--elf",
            f.elf.to_str().unwrap(),
            "--editor",
            &f.agent,
            "--owner-block",
            &f.spec,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python MCP client");
    let out = wait_output(child, Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed:\n{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client output is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });

    // Handshake and catalogue.
    assert_eq!(r["initialize"]["server_name"], "elfiee");
    assert_eq!(r["initialize"]["protocol_version"], "2025-11-25");
    assert_eq!(r["initialize"]["resources_list_changed"], true);
    assert_eq!(r["tools"], json!(TOOLS));
    assert_eq!(r["required"]["elfiee_block_get"], json!(["block_id"]));
    assert_eq!(
        r["required"]["elfiee_code_write"],
        json!(["block_id", "text"])
    );
    assert_eq!(
        r["required"]["elfiee_block_link"],
        json!(["from", "to", "relation"])
    );
    assert_eq!(
        r["required"]["elfiee_propose"],
        json!(["commands", "description"])
    );

    // Create, write, read back.
    for step in [
        "create",
        "write",
        "get",
        "link",
        "get_owner_block",
        "history",
        "list",
    ] {
        assert_eq!(r[step]["is_error"], false, "{step}: {}", r[step]);
    }
    let block = r["create"]["structured_content"]["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(r["create"]["structured_content"]["owner"], f.agent.as_str());
    let text = "# Agent notes\n\nWritten through MCP by the agent editor.\n";
    assert_eq!(r["get"]["structured_content"]["contents"]["markdown"], text);
    // JSON text content mirrors the structured content.
    let from_text: Value = serde_json::from_str(r["get"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(from_text, r["get"]["structured_content"]);
    assert_eq!(
        r["get_owner_block"]["structured_content"]["contents"]["markdown"],
        "# Spec\n"
    );
    assert_eq!(
        r["get_owner_block"]["structured_content"]["parents"],
        json!([{"from": block, "relation": "reference"}])
    );
    let history: Vec<&str> = r["history"]["structured_content"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["core.create", "markdown.write", "core.link"]);

    // Refused calls: a tool result with isError and a message that says what to do.
    for (step, cap) in [
        ("delete_denied", "core.delete"),
        ("write_denied", "markdown.write"),
    ] {
        let d = &r[step];
        assert_eq!(d["is_error"], true, "{step}: {d}");
        assert_eq!(d["structured_content"]["error"]["kind"], "unauthorized");
        let msg = d["text"].as_str().unwrap();
        assert!(msg.contains(&format!("may not run '{cap}'")), "{msg}");
        assert!(
            msg.contains(&format!("elfiee grant {} {cap} {}", f.agent, f.spec)),
            "{msg}"
        );
    }
    // This editor is an agent-type editor without an agent block: it may list, not propose.
    assert_eq!(r["propose"]["is_error"], true);
    assert!(
        r["propose"]["text"]
            .as_str()
            .unwrap()
            .contains("is not an agent"),
        "{}",
        r["propose"]
    );
    assert_eq!(
        r["proposal_list"]["is_error"], false,
        "{}",
        r["proposal_list"]
    );

    // Resources and the change notification.
    let resources: Vec<&str> = r["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    assert!(resources.contains(&"elfiee://blocks"));
    assert!(resources.contains(&format!("elfiee://block/{block}").as_str()));
    assert_eq!(r["resource_text"], text);
    assert_eq!(r["resource_blocks"]["count"], 2);
    assert!(
        r["notifications"]
            .as_array()
            .unwrap()
            .contains(&json!("notifications/resources/list_changed")),
        "{}",
        r["notifications"]
    );

    // Bad input: every call was answered, and the server went on serving.
    let bad = &r["bad"];
    assert_eq!(
        bad["unknown_tool"]["protocol_error"]["code"], -32602,
        "{}",
        bad["unknown_tool"]
    );
    assert!(bad["unknown_tool"]["protocol_error"]["message"]
        .as_str()
        .unwrap()
        .contains("tools/list"));
    for (case, needle) in [
        (
            "wrong_types",
            "invalid type: integer `5`, expected a string",
        ),
        ("missing_argument", "missing field `block_id`"),
        ("unknown_argument", "unknown field `blockid`"),
        ("bad_relation", "use \"reference\" or \"implement\""),
        ("missing_block", "call elfiee_block_list"),
        ("huge_argument", "the limit is 16777216 bytes"),
    ] {
        assert_eq!(bad[case]["is_error"], true, "{case}: {}", bad[case]);
        assert!(
            bad[case]["text"].as_str().unwrap().contains(needle),
            "{case}: {}",
            bad[case]["text"]
        );
    }
    assert_eq!(bad["still_serving"]["is_error"], false);
    assert_eq!(
        bad["still_serving"]["structured_content"]["contents"]["markdown"],
        text
    );

    // The 2026-07-28 lifecycle: discover, per-request _meta, subscriptions/listen.
    let m = &r["modern"];
    assert_eq!(m["protocol_version"], "2026-07-28");
    for v in [
        "2024-11-05",
        "2025-03-26",
        "2025-06-18",
        "2025-11-25",
        "2026-07-28",
    ] {
        assert!(
            m["supported_versions"]
                .as_array()
                .unwrap()
                .contains(&json!(v)),
            "{v}"
        );
    }
    assert_eq!(m["tools"], json!(TOOLS));
    assert_eq!(m["write"]["is_error"], false);
    assert_eq!(m["event"], "ResourcesListChanged");
    assert_eq!(
        m["get"]["structured_content"]["contents"],
        json!({"text": "fn main() {}\n", "language": "rust"})
    );

    // The log says who did it: the agent editor, through the engine.
    let log = json_ok(&f.elf, &["log"]);
    let events = log.as_array().unwrap();
    let by = |attr: &str, entity: &str| {
        events
            .iter()
            .filter(|e| e["attribute"] == attr && e["entity"] == entity)
            .count()
    };
    assert_eq!(by(&format!("{}/core.create", f.agent), &block), 1, "{log}");
    assert_eq!(
        by(&format!("{}/markdown.write", f.agent), &block),
        1,
        "{log}"
    );
    assert_eq!(by(&format!("{}/core.link", f.agent), &block), 1, "{log}");
    let modern_block = m["create"]["structured_content"]["block_id"]
        .as_str()
        .unwrap();
    assert_eq!(
        by(&format!("{}/code.write", f.agent), modern_block),
        1,
        "{log}"
    );
    // Refused and invalid calls wrote nothing.
    assert!(events
        .iter()
        .all(|e| e["attribute"] != format!("{}/core.delete", f.agent)));
    assert_eq!(
        events
            .iter()
            .filter(|e| e["attribute"]
                .as_str()
                .unwrap()
                .ends_with("/markdown.write"))
            .count(),
        2
    );
    assert_eq!(
        json_ok(&f.elf, &["markdown", "read", &f.spec])["markdown"],
        "# Spec\n"
    );
}

/// `elfiee mcp-server` as a child process, spoken to line by line.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every stdout line seen so far.
    seen: Vec<String>,
}

impl Server {
    fn start(f: &Fixture) -> Server {
        let mut child = Command::new(bin())
            .args([
                "--elf",
                f.elf.to_str().unwrap(),
                "mcp-server",
                "--editor",
                &f.agent,
            ])
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start elfiee mcp-server");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Server {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        self.response(&id)
    }

    /// The next message whose id is `id` (other messages are kept in `seen`).
    fn response(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer for id {id}; saw {:?}", self.seen));
            self.seen.push(line.clone());
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            assert_eq!(v["jsonrpc"], "2.0", "stdout line is not JSON-RPC: {line}");
            if v.get("method").is_none() && &v["id"] == id {
                return v;
            }
        }
    }

    fn initialize(&mut self, version: &str) -> Value {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}),
        );
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        r
    }

    /// Closes stdin and expects a clean exit.
    fn finish(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("mcp-server did not exit after stdin closed");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "mcp-server exited with {status}");
        // Anything still on stdout is protocol too.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            assert_eq!(v["jsonrpc"], "2.0");
        }
    }
}

#[test]
fn the_classic_handshake_accepts_every_protocol_version_and_discover_works() {
    let f = fixture();
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut s = Server::start(&f);
        let r = s.initialize(version);
        assert_eq!(r["result"]["protocolVersion"], version, "{r}");
        assert_eq!(r["result"]["serverInfo"]["name"], "elfiee");
        assert!(r["result"]["capabilities"]["tools"].is_object(), "{r}");
        assert_eq!(s.request(json!(1), "ping", json!({}))["result"], json!({}));
        let tools = s.request(json!(2), "tools/list", json!({}));
        assert_eq!(
            tools["result"]["tools"].as_array().unwrap().len(),
            TOOLS.len()
        );
        s.finish();
    }
    // An unknown version gets the newest one that has an `initialize` handshake.
    let mut s = Server::start(&f);
    assert_eq!(
        s.initialize("1999-01-01")["result"]["protocolVersion"],
        "2025-11-25"
    );
    s.finish();

    // 2026-07-28: no initialize; every request carries its protocol version in `_meta`.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    });
    let mut s = Server::start(&f);
    let d = s.request(json!("d"), "server/discover", json!({"_meta": meta}));
    assert!(
        d["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28")),
        "{d}"
    );
    let r = s.request(
        json!("l"),
        "tools/call",
        json!({"_meta": meta, "name": "elfiee_block_list", "arguments": {}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["count"], 1);
    // Without _meta, a 2026-07-28 session refuses the request with a protocol error.
    let r = s.request(
        json!("x"),
        "tools/call",
        json!({"name": "elfiee_block_list", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    s.finish();
}

#[test]
fn bad_json_rpc_input_is_answered_and_the_server_keeps_running() {
    let f = fixture();
    let mut s = Server::start(&f);
    s.initialize("2025-06-18");

    // Not JSON at all: ignored (nothing to answer), the session continues.
    s.send("{this is not json");
    s.send("");
    assert_eq!(s.request(json!(1), "ping", json!({}))["result"], json!({}));
    // JSON that is no JSON-RPC message: an Invalid Request error.
    s.send(r#"{"hello":"world"}"#);
    let r = s.response(&Value::Null);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // Unknown method.
    let r = s.request(json!(2), "elfiee/nope", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // Unknown tool: a protocol error naming the catalogue.
    let r = s.request(
        json!(3),
        "tools/call",
        json!({"name": "rm_rf", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("elfiee_block_list"),
        "{r}"
    );
    // Arguments of the wrong type: a tool error that says what was expected.
    let r = s.request(
        json!(4),
        "tools/call",
        json!({"name": "elfiee_block_create", "arguments": {"block_type": 1, "name": null}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    let msg = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        msg.contains(
            "expected {block_type: string, directory?: string, name?: string, path?: string}"
        ),
        "{msg}"
    );
    // `arguments` that is not an object at all.
    let r = s.request(
        json!(5),
        "tools/call",
        json!({"name": "elfiee_block_get", "arguments": "x"}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("arguments?: object"),
        "{r}"
    );
    // A 20 MB argument reaches the tool and is refused with the payload limit.
    let big = "y".repeat(20 * 1024 * 1024);
    let r = s.request(json!(6), "tools/call", json!({"name": "elfiee_block_create", "arguments": {"block_type": "markdown", "name": big}}));
    assert_eq!(
        r["result"]["isError"],
        true,
        "{}",
        &r.to_string()[..300.min(r.to_string().len())]
    );
    // A 40 MB message is over the line limit: answered with a protocol error, never read whole.
    let huge = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "elfiee_markdown_write", "arguments": {"block_id": f.spec, "markdown": "z".repeat(40 * 1024 * 1024)}}}).to_string();
    s.send(&huge);
    let r = s.response(&json!(77));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("larger than this server's limit") && msg.contains("nothing was changed"),
        "{msg}"
    );
    // Still serving, and nothing was written by any of it.
    let r = s.request(
        json!(8),
        "tools/call",
        json!({"name": "elfiee_block_list", "arguments": {}}),
    );
    assert_eq!(r["result"]["structuredContent"]["count"], 1, "{r}");
    s.finish();
    let log = json_ok(&f.elf, &["log"]);
    assert!(
        log.as_array()
            .unwrap()
            .iter()
            .all(|e| !e["attribute"].as_str().unwrap().starts_with(&f.agent)),
        "{log}"
    );
}

#[test]
fn elfiee_exec_runs_any_capability_as_the_server_editor() {
    let f = fixture();
    let mut s = Server::start(&f);
    s.initialize("2025-11-25");
    let tools = s.request(json!(1), "tools/list", json!({}));
    let exec = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "elfiee_exec")
        .unwrap_or_else(|| panic!("no elfiee_exec in {tools}"))
        .clone();
    assert_eq!(exec["inputSchema"]["required"], json!(["capability"]));
    assert_eq!(exec["annotations"]["readOnlyHint"], false, "{exec}");
    assert_eq!(exec["annotations"]["destructiveHint"], true, "{exec}");
    let mut id = 1;
    let mut call = |s: &mut Server, args: Value| {
        id += 1;
        let r = s.request(
            json!(id),
            "tools/call",
            json!({"name": "elfiee_exec", "arguments": args}),
        );
        r["result"].clone()
    };

    // A file-wide command (no block), then one on that block by its name.
    let r = call(
        &mut s,
        json!({"capability": "core.create", "payload": {"name": "Notes", "block_type": "markdown"}}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let created = &r["structuredContent"];
    assert_eq!(created["capability"], "core.create");
    assert_eq!(created["count"], 1, "{created}");
    let ev = &created["events"][0];
    assert_eq!(ev["kind"], "core.create");
    assert_eq!(ev["editor_id"], f.agent.as_str());
    assert_eq!(created["seq"], ev["seq"]);
    let notes = ev["entity"].as_str().unwrap().to_owned();
    let r = call(
        &mut s,
        json!({"capability": "markdown.write", "block_id": "Notes", "payload": {"markdown": "# Notes\n"}}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["block_id"], notes.as_str());
    assert_eq!(
        r["structuredContent"]["events"][0]["kind"],
        "markdown.write"
    );
    assert_eq!(
        r["structuredContent"]["events"][0]["entity"],
        notes.as_str()
    );

    // Refusals: a tool error with the engine's message, nothing written.
    for (args, kind, needle) in [
        (
            json!({"capability": "markdown.write", "block_id": f.spec, "payload": {"markdown": "x"}}),
            "unauthorized",
            "may not run 'markdown.write'".to_owned(),
        ),
        (
            json!({"capability": "checklist.add", "payload": {}}),
            "unknown_capability",
            "unknown capability 'checklist.add'".to_owned(),
        ),
        (
            json!({"capability": "markdown.write", "block_id": "nope", "payload": {"markdown": "x"}}),
            "not_found",
            "call elfiee_block_list".to_owned(),
        ),
        (
            json!({"capability": "markdown.write", "block_id": notes, "payload": {"text": 1}}),
            "invalid_arguments",
            "markdown.write".to_owned(),
        ),
        (
            json!({"capability": "core.create", "payload": "not an object"}),
            "invalid_arguments",
            "payload?: object".to_owned(),
        ),
        (
            json!({"cap": "core.create"}),
            "invalid_arguments",
            "unknown field `cap`".to_owned(),
        ),
    ] {
        let r = call(&mut s, args.clone());
        assert_eq!(r["isError"], true, "{args}: {r}");
        assert_eq!(r["structuredContent"]["error"]["kind"], kind, "{args}: {r}");
        let msg = r["content"][0]["text"].as_str().unwrap();
        assert!(msg.contains(&needle), "{args}: {msg}");
    }
    s.finish();

    // The log holds exactly the two accepted commands, by the agent editor.
    let log = json_ok(&f.elf, &["log"]);
    let by_agent: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["attribute"].as_str())
        .filter(|a| a.starts_with(&f.agent))
        .collect();
    assert_eq!(
        by_agent,
        [
            format!("{}/core.create", f.agent),
            format!("{}/markdown.write", f.agent)
        ],
        "{log}"
    );
    assert_eq!(
        json_ok(&f.elf, &["markdown", "read", &notes])["markdown"],
        "# Notes\n"
    );
}

#[test]
fn an_unknown_editor_is_refused_before_serving() {
    let f = fixture();
    let out = Command::new(bin())
        .args([
            "--elf",
            f.elf.to_str().unwrap(),
            "mcp-server",
            "--editor",
            "nobody",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "stdout must stay clean: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody"));
}

#[test]
fn directory_import_and_terminal_run_work_through_the_effects_of_the_server() {
    let f = fixture();
    let project = f._dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "# Project\n").unwrap();
    std::fs::write(project.join("main.rs"), "fn main() {}\n").unwrap();
    let terminal = json_ok(&f.elf, &["terminal", "create", "--name", "shell"])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    json_ok(&f.elf, &["grant", &f.agent, "directory.import", "*"]);

    let mut s = Server::start(&f);
    s.initialize("2025-11-25");
    let call = |s: &mut Server, id: i64, name: &str, args: Value| {
        let r = s.request(
            json!(id),
            "tools/call",
            json!({"name": name, "arguments": args}),
        );
        r["result"].clone()
    };
    let r = call(
        &mut s,
        1,
        "elfiee_directory_import",
        json!({"path": project.to_str().unwrap()}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["files"], 2, "{r}");
    let dir_block = r["structuredContent"]["block_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Without terminal.execute on Alice's terminal the command is refused, and nothing runs.
    let r = call(
        &mut s,
        2,
        "elfiee_terminal_run",
        json!({"terminal_id": terminal, "command": "echo hi"}),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("terminal.execute"),
        "{r}"
    );
    json_ok(&f.elf, &["grant", &f.agent, "terminal.execute", &terminal]);
    let r = call(
        &mut s,
        3,
        "elfiee_terminal_run",
        json!({"terminal_id": terminal, "command": "echo hi; echo oops >&2; exit 3"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["stdout"], "hi\n", "{r}");
    assert_eq!(r["structuredContent"]["stderr"], "oops\n", "{r}");
    assert_eq!(r["structuredContent"]["exit_code"], 3, "{r}");
    let r = call(
        &mut s,
        4,
        "elfiee_directory_import",
        json!({"path": "/no/such/folder"}),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("is not a folder"),
        "{r}"
    );
    s.finish();

    let log = json_ok(&f.elf, &["log"]);
    let attrs: Vec<String> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["entity"] == dir_block.as_str() || e["entity"] == terminal.as_str())
        .map(|e| e["attribute"].as_str().unwrap().to_owned())
        .collect();
    for want in ["directory.import", "terminal.execute", "terminal.output"] {
        assert!(
            attrs.contains(&format!("{}/{want}", f.agent)),
            "{want} missing in {attrs:?}"
        );
    }
}
