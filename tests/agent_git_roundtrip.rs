//! Through the `elfiee` binary, on a git project: `agent create` → `agent enable` →
//! `agent disable` leaves `git status --porcelain --ignored` empty, for each way the Claude
//! Code config files can be written (one line, 2 or 4 spaces, tabs, CRLF, no final newline,
//! unusual key order, `\u00e9` escapes, `{}`, an empty file, no file).

mod common;

use std::path::Path;
use std::process::Command;

use common::{run_elfiee, success_json};

/// `(formatting, .mcp.json, .claude/mcp.json, .claude/settings.local.json)`; `None`: no file.
type Case = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
);

const CASES: &[Case] = &[
    (
        "one line",
        Some("{\"mcpServers\": {\"other\": {\"command\": \"x\", \"args\": [\"--flag\"]}}}\n"),
        Some("{\"mcpServers\":{}}"),
        Some("{\"permissions\": {\"allow\": [\"Bash(ls)\"]}}\n"),
    ),
    (
        "2 spaces",
        Some("{\n  \"mcpServers\": {\n    \"other\": {\n      \"command\": \"x\"\n    }\n  }\n}\n"),
        Some("{\n  \"note\": \"keep me\"\n}\n"),
        Some("{\n  \"permissions\": {\n    \"allow\": [\n      \"Bash(ls)\"\n    ]\n  },\n  \"enabledMcpjsonServers\": [\n    \"other\"\n  ]\n}\n"),
    ),
    (
        "4 spaces, no final newline",
        Some("{\n    \"mcpServers\": {\n        \"other\": {\n            \"command\": \"x\"\n        }\n    }\n}"),
        Some("{\n    \"x\": [\n        1,\n        2\n    ]\n}"),
        Some("{\n    \"permissions\": {\n        \"allow\": [\n            \"Bash(ls)\"\n        ]\n    }\n}"),
    ),
    (
        "tabs",
        Some("{\n\t\"mcpServers\": {\n\t\t\"other\": {\n\t\t\t\"command\": \"x\"\n\t\t}\n\t}\n}\n"),
        None,
        Some("{\n\t\"permissions\": {\n\t\t\"allow\": [\"Bash(ls)\"]\n\t}\n}\n"),
    ),
    (
        "CRLF",
        Some("{\r\n  \"mcpServers\": {\r\n    \"other\": {\r\n      \"command\": \"x\"\r\n    }\r\n  }\r\n}\r\n"),
        Some("{\r\n  \"mcpServers\": {}\r\n}\r\n"),
        Some("{\r\n  \"permissions\": {\r\n    \"allow\": [\r\n      \"Bash(ls)\"\r\n    ]\r\n  }\r\n}\r\n"),
    ),
    (
        "unusual key order",
        Some("{\n  \"zeta\": 1,\n  \"mcpServers\": {\n    \"zz\": {\"command\": \"z\"},\n    \"aa\": {\"command\": \"a\"}\n  },\n  \"alpha\": 2\n}\n"),
        None,
        Some("{\n  \"zeta\": true,\n  \"enabledMcpjsonServers\": [\"zz\", \"aa\"],\n  \"alpha\": null\n}\n"),
    ),
    (
        "unicode escapes",
        Some("{\n  \"mcpServers\": {\n    \"caf\\u00e9\": {\"command\": \"\\u00e9\"}\n  }\n}\n"),
        Some("{\"caf\\u00e9\": \"\\u65e5\\u672c\"}"),
        Some("{\n  \"permissions\": {\n    \"allow\": [\"Bash(echo caf\\u00e9)\"]\n  }\n}\n"),
    ),
    ("empty object", Some("{}"), Some("{ }\n"), Some("{}\n")),
    ("empty file", Some(""), Some("\n"), Some("")),
    ("no file", None, None, None),
    (
        "byte-order mark",
        Some("\u{feff}{\r\n  \"mcpServers\": {}\r\n}\r\n"),
        Some("\u{feff}"),
        Some("\u{feff}{\"permissions\": {\"allow\": [\"Bash(ls)\"]}}"),
    ),
];

const FILES: [&str; 3] = [
    ".mcp.json",
    ".claude/mcp.json",
    ".claude/settings.local.json",
];

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "core.autocrlf=false", "-c", "core.safecrlf=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn elfiee(elf: &Path, args: &[&str]) -> serde_json::Value {
    success_json(args, &run_elfiee(elf, args, &[]))
}

#[test]
fn create_enable_disable_leaves_git_status_empty_for_every_formatting() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("SKIPPED: git is not installed; this test needs it to check `git status`");
        return;
    }
    for (name, mcp, claude_mcp, settings) in CASES {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        std::fs::create_dir_all(project.join(".claude")).unwrap();
        std::fs::write(project.join("README.md"), "# project\n").unwrap();
        for (file, text) in FILES.iter().zip([mcp, claude_mcp, settings]) {
            if let Some(text) = text {
                std::fs::write(project.join(file), text).unwrap();
            }
        }
        git(&project, &["init", "-q"]);
        git(&project, &["add", "-A"]);
        git(
            &project,
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
        assert_eq!(git(&project, &["status", "--porcelain", "--ignored"]), "");

        let elf = tmp.path().join("doc.elf");
        let elf_arg = elf.to_str().unwrap();
        elfiee(&elf, &["--json", "init", elf_arg, "--owner", "Alice"]);
        let dir = elfiee(
            &elf,
            &["--json", "dir", "import", project.to_str().unwrap()],
        )["block_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let created = elfiee(&elf, &["--json", "agent", "create", "--target", &dir]);
        assert_eq!(created["status"], "enabled", "{name}: {created}");
        assert_eq!(created["warnings"], serde_json::json!([]), "{name}");
        let mcp_now = std::fs::read_to_string(project.join(".mcp.json")).unwrap();
        assert!(
            mcp_now.contains("\"elfiee\""),
            "{name}: enable wrote the server: {mcp_now}"
        );
        assert!(
            !git(&project, &["status", "--porcelain", "--ignored"]).is_empty(),
            "{name}: enable changed the project"
        );
        let agent = created["agent_block_id"].as_str().unwrap().to_owned();
        let enabled = elfiee(&elf, &["--json", "agent", "enable", &agent]);
        assert_eq!(enabled["warnings"], serde_json::json!([]), "{name}");
        let disabled = elfiee(&elf, &["--json", "agent", "disable", &agent]);
        assert_eq!(disabled["status"], "disabled", "{name}: {disabled}");
        assert!(
            disabled["message"]
                .as_str()
                .unwrap()
                .contains("the project is as enable found it"),
            "{name}: {disabled}"
        );
        assert_eq!(
            git(&project, &["status", "--porcelain", "--ignored"]),
            "",
            "{name}: disable left the project as committed"
        );
        for (file, text) in FILES.iter().zip([mcp, claude_mcp, settings]) {
            assert_eq!(
                std::fs::read_to_string(project.join(file)).ok().as_deref(),
                *text,
                "{name}: {file}"
            );
        }
        assert!(!project.join(".claude/skills").exists(), "{name}");
    }
}
