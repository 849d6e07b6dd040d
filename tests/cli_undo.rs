//! `elfiee undo` / `redo`: a human's own edits taken back and brought back with the mechanism
//! of agent steps (compensating `core.restore` events), through the CLI.

use std::path::Path;

use serde_json::{json, Value};

mod common;

fn run(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee(elf, args, &[])
}

fn ok(elf: &Path, args: &[&str]) -> Value {
    common::elfiee_json(elf, args)
}

fn text(elf: &Path, id: &str) -> Value {
    ok(elf, &["block", "show", id])["contents"]["markdown"].clone()
}

fn digests_agree(elf: &Path) {
    assert_eq!(ok(elf, &["verify"])["ok"], true);
    assert_eq!(
        ok(elf, &["replay"])["state_digest"],
        ok(elf, &["state-digest"])["state_digest"]
    );
}

#[test]
fn an_editor_undoes_and_redoes_their_own_edits_and_not_someone_elses() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("u.elf");
    ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let nothing = run(&elf, &["undo"]);
    assert_eq!(nothing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("nothing to undo"));
    let b = common::new_block(ok, &elf, "markdown", "Notes");
    ok(&elf, &["markdown", "write", &b, "--text", "v1"]);
    ok(&elf, &["markdown", "write", &b, "--text", "v2"]);
    // One edit back, then another.
    let r = ok(&elf, &["undo"]);
    assert_eq!(r["commands"].as_array().unwrap().len(), 1);
    assert_eq!(text(&elf, &b), "v1");
    ok(&elf, &["undo"]);
    assert_eq!(text(&elf, &b), Value::Null, "before the first write");
    digests_agree(&elf);
    // Redo brings them back, newest undo first.
    ok(&elf, &["redo"]);
    assert_eq!(text(&elf, &b), "v1");
    ok(&elf, &["redo"]);
    assert_eq!(text(&elf, &b), "v2");
    assert_eq!(run(&elf, &["redo"]).status.code(), Some(1), "nothing left");
    // Two at once: back to the empty block; the block itself goes with the third.
    ok(&elf, &["undo", "--steps", "2"]);
    assert_eq!(text(&elf, &b), Value::Null);
    let r = ok(&elf, &["undo"]);
    assert_eq!(r["blocks_removed"], json!([b]));
    assert_eq!(run(&elf, &["block", "show", &b]).status.code(), Some(1));
    ok(&elf, &["redo"]);
    assert_eq!(ok(&elf, &["block", "show", &b])["name"], "Notes");
    digests_agree(&elf);

    // Someone else's later write is not taken back silently.
    ok(&elf, &["redo"]);
    assert_eq!(text(&elf, &b), "v2");
    let bob = ok(&elf, &["editor", "create", "--name", "Bob", "--id", "bob"])["editor_id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&elf, &["grant", &bob, "markdown.write", &b]);
    ok(
        &elf,
        &["--as", &bob, "markdown", "write", &b, "--text", "bob's"],
    );
    let refused = run(&elf, &["undo"]);
    assert_eq!(refused.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(
        msg.contains("block 'Notes'") && msg.contains("--force"),
        "{msg}"
    );
    assert_eq!(text(&elf, &b), "bob's", "a refused undo changes nothing");
    ok(&elf, &["undo", "--force"]);
    assert_eq!(text(&elf, &b), "v1");
    digests_agree(&elf);
}
