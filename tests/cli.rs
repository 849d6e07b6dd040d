//! The `elfiee` binary end to end: outputs, `--json`, exit codes (0 done, 1 rejected, 2 usage),
//! `error:` messages, and that replay / state-digest / verify agree.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

mod common;

fn elfiee(elf: &Path, args: &[&str]) -> Output {
    common::run_elfiee(elf, args, &[("ELFIEE_NODE_ID", "cli-test")])
}

fn json_ok(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    common::success_json(args, &elfiee(elf, &all))
}

fn init(dir: &Path) -> std::path::PathBuf {
    let elf = dir.join("t.elf");
    let v = json_ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    assert_eq!(v["owner"], "alice");
    elf
}

#[test]
fn a_full_session_through_the_cli_agrees_with_replay_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let elf = init(dir.path());
    let spec = common::new_block(json_ok, &elf, "markdown", "Spec");
    let code = common::new_block(json_ok, &elf, "code", "impl");
    json_ok(
        &elf,
        &["block", "link", &code, &spec, "--relation", "implement"],
    );
    json_ok(&elf, &["markdown", "write", &spec, "--text", "# Spec ✓"]);
    json_ok(
        &elf,
        &[
            "code",
            "write",
            "impl",
            "--text",
            "fn main() {}",
            "--language",
            "rust",
        ],
    );
    assert_eq!(
        json_ok(&elf, &["markdown", "read", "Spec"])["markdown"],
        "# Spec ✓"
    );

    let list = json_ok(&elf, &["block", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let show = json_ok(&elf, &["block", "show", &spec]);
    assert_eq!(show["parents"][0]["from"], code.as_str());
    assert_eq!(show["parents"][0]["relation"], "implement");

    let log = json_ok(&elf, &["log", "--block", &spec]);
    let kinds: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["attribute"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "alice/core.create",
            "alice/core.link",
            "alice/markdown.write"
        ]
    );

    let replay = json_ok(&elf, &["replay"]);
    let digest = json_ok(&elf, &["state-digest"]);
    assert_eq!(replay["state_digest"], digest["state_digest"]);
    assert_eq!(replay["blocks"], 2);
    for key in ["events", "blocks", "state_digest", "elapsed_ms"] {
        assert!(replay.get(key).is_some(), "replay output lacks {key}");
    }
    assert_eq!(json_ok(&elf, &["verify"])["ok"], true);
}

#[test]
fn exit_codes_are_0_done_1_rejected_2_usage() {
    let dir = tempfile::tempdir().unwrap();
    let elf = init(dir.path());
    json_ok(&elf, &["editor", "create", "--name", "Bob", "--id", "bob"]);
    let id = common::new_block(json_ok, &elf, "markdown", "n");

    let denied = elfiee(
        &elf,
        &["--as", "bob", "markdown", "write", &id, "--text", "x"],
    );
    assert_eq!(denied.status.code(), Some(1));
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains("elfiee grant bob markdown.write"),
        "the message says what to do: {err}"
    );

    let json_err = elfiee(&elf, &["--json", "block", "delete", "nope"]);
    assert_eq!(json_err.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&json_err.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "block_not_found");

    assert_eq!(
        elfiee(&elf, &["block", "frobnicate"]).status.code(),
        Some(2)
    );
    assert_eq!(
        elfiee(&elf, &["block", "link", "a", "b", "--relation", "likes"])
            .status
            .code(),
        Some(2)
    );
    let no_elf = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["block", "list"])
        .env_remove("ELFIEE_ELF")
        .output()
        .unwrap();
    assert_eq!(no_elf.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_elf.stderr).contains("--elf"));

    let not_elf = elfiee(&dir.path().join("nothing"), &["block", "list"]);
    assert_eq!(not_elf.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&not_elf.stderr).contains("elfiee init"));

    // Bob becomes able to write once granted; --as accepts a name too.
    json_ok(&elf, &["grant", "bob", "markdown.write", &id]);
    json_ok(
        &elf,
        &["--as", "Bob", "markdown", "write", &id, "--text", "by bob"],
    );
    let log = json_ok(&elf, &["log", "--tail", "1"]);
    assert_eq!(log[0]["attribute"], "bob/markdown.write");
    json_ok(&elf, &["revoke", "bob", "markdown.write", &id]);
    assert_eq!(
        elfiee(
            &elf,
            &["--as", "bob", "markdown", "write", &id, "--text", "again"]
        )
        .status
        .code(),
        Some(1)
    );
}

#[test]
fn markdown_text_can_come_from_stdin_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let elf = init(dir.path());
    json_ok(
        &elf,
        &["block", "create", "--type", "markdown", "--name", "doc"],
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["markdown", "write", "doc"])
        .env("ELFIEE_ELF", &elf)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all("from stdin\n".as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        json_ok(&elf, &["markdown", "read", "doc"])["markdown"],
        "from stdin\n"
    );
    let f = dir.path().join("in.md");
    std::fs::write(&f, "from a file").unwrap();
    json_ok(
        &elf,
        &["markdown", "write", "doc", "--file", f.to_str().unwrap()],
    );
    assert_eq!(
        json_ok(&elf, &["markdown", "read", "doc"])["markdown"],
        "from a file"
    );
    let missing = elfiee(
        &elf,
        &["markdown", "write", "doc", "--file", "/nonexistent/x.md"],
    );
    assert_eq!(missing.status.code(), Some(1));
}

#[test]
fn verify_exits_1_on_a_bad_snapshot_and_state_digest_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let elf = init(dir.path());
    json_ok(
        &elf,
        &["block", "create", "--type", "markdown", "--name", "n"],
    );
    let before = json_ok(&elf, &["state-digest"]);
    let last = json_ok(&elf, &["log"]).as_array().unwrap().len();
    // A snapshot file that is not one, at the last seq (newer than any the engine wrote).
    std::fs::create_dir_all(elf.join("snapshots")).unwrap();
    std::fs::write(
        elf.join("snapshots").join(format!("{last:020}.snap")),
        b"not a snapshot",
    )
    .unwrap();
    let out = elfiee(&elf, &["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("snapshot"));
    assert_eq!(
        json_ok(&elf, &["state-digest"])["state_digest"],
        before["state_digest"],
        "a bad snapshot is ignored, not trusted"
    );
}

#[test]
fn init_refuses_an_existing_document() {
    let dir = tempfile::tempdir().unwrap();
    let elf = init(dir.path());
    let again = elfiee(&elf, &["init", elf.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}

/// docs/CLI.md names every subcommand that `--help` lists, so the two cannot drift apart.
#[test]
fn cli_doc_lists_every_subcommand() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CLI.md")).unwrap();
    let subcommands = |args: &[&str]| -> Vec<String> {
        let out = Command::new(env!("CARGO_BIN_EXE_elfiee"))
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .filter(|c| c != "help")
            .collect()
    };
    let top = subcommands(&[]);
    assert!(top.len() >= 10, "{top:?}");
    for cmd in top {
        let nested = subcommands(&[&cmd]);
        if nested.is_empty() {
            assert!(
                doc.contains(&format!("elfiee {cmd}")),
                "docs/CLI.md does not document `elfiee {cmd}`"
            );
        }
        for sub in nested {
            assert!(
                doc.contains(&format!("elfiee {cmd} {sub}")),
                "docs/CLI.md does not document `elfiee {cmd} {sub}`"
            );
        }
    }
}

#[test]
fn completions_are_printed_without_a_document() {
    let out = common::output_ok(
        Command::new(env!("CARGO_BIN_EXE_elfiee"))
            .args(["completions", "bash"])
            .env_remove("ELFIEE_ELF"),
    );
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        script.contains("elfiee") && script.contains("block") && script.contains("mcp-server"),
        "{}",
        &script[..script.len().min(300)]
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
