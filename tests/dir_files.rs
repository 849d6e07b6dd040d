//! Directories own their files, through the CLI: files made, renamed and removed inside the
//! document; `dir status` lists what is not on disk yet; `dir export` writes exactly that,
//! never overwrites a file changed on disk since (it reports it), refuses paths that would
//! leave the root, and `--dry-run` writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

mod common;

fn elfiee(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee(elf, args, &[("ELFIEE_NODE_ID", "dir-test")])
}

fn json_ok(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    common::success_json(args, &elfiee(elf, &all))
}

/// Every file under `root`: relative path → text.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

fn strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

#[test]
fn files_made_moved_and_removed_in_the_document_reach_the_folder_and_nothing_else_does() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    for (p, t) in [
        ("README.md", "# Project\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("src/old.rs", "pub fn old() {}\n"),
        ("src/keep.rs", "pub fn keep() {}\n"),
    ] {
        let f = proj.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, t).unwrap();
    }
    let elf = tmp.path().join("d.elf");
    json_ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let dir = json_ok(&elf, &["dir", "import", proj.to_str().unwrap()])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let st = json_ok(&elf, &["dir", "status", &dir]);
    assert_eq!(st["clean"], 4, "{st}");
    assert_eq!(st["new"], serde_json::json!([]), "{st}");

    // Inside the document: a new file, a rename, two removals, an edit.
    let added = json_ok(
        &elf,
        &[
            "dir",
            "add",
            &dir,
            "src/pdf.rs",
            "--text",
            "pub fn pdf() {}\n",
        ],
    );
    assert!(added["block_id"].as_str().is_some(), "{added}");
    json_ok(&elf, &["dir", "mv", &dir, "src/old.rs", "src/renamed.rs"]);
    json_ok(&elf, &["dir", "rm", &dir, "README.md"]);
    json_ok(&elf, &["dir", "rm", &dir, "src/keep.rs"]);
    json_ok(
        &elf,
        &[
            "code",
            "write",
            "src/main.rs",
            "--text",
            "fn main() { println!(\"doc\"); }\n",
        ],
    );
    // ... while the disk changes too: main.rs (edited in both) and keep.rs (removed in the
    // document, edited on disk).
    std::fs::write(proj.join("src/main.rs"), "fn main() { /* disk */ }\n").unwrap();
    std::fs::write(proj.join("src/keep.rs"), "pub fn keep() { /* disk */ }\n").unwrap();

    let st = json_ok(&elf, &["dir", "status", &dir]);
    assert_eq!(
        strings(&st["new"]),
        ["src/pdf.rs", "src/renamed.rs"],
        "{st}"
    );
    assert_eq!(strings(&st["modified"]), ["src/main.rs"], "{st}");
    assert_eq!(
        strings(&st["removed"]),
        ["README.md", "src/keep.rs", "src/old.rs"],
        "{st}"
    );

    // A path that would leave the root, or one already taken, is refused.
    for bad in ["../escape.rs", "/etc/x", "src/../../x"] {
        let out = elfiee(&elf, &["dir", "add", &dir, bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("root"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = elfiee(&elf, &["dir", "add", &dir, "src/pdf.rs"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already has 'src/pdf.rs'"));

    // --dry-run says what it would do and writes nothing.
    let before = tree(&proj);
    let plan = json_ok(&elf, &["dir", "export", &dir, "--dry-run"]);
    assert_eq!(tree(&proj), before, "a dry run wrote something");
    assert_eq!(
        strings(&plan["write"]),
        ["src/pdf.rs", "src/renamed.rs"],
        "{plan}"
    );
    assert_eq!(
        strings(&plan["remove"]),
        ["README.md", "src/old.rs"],
        "{plan}"
    );
    let refused: Vec<&str> = plan["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(refused, ["src/main.rs", "src/keep.rs"], "{plan}");

    // The export does it: conflicts are reported, not overwritten.
    let out = json_ok(&elf, &["dir", "export", &dir]);
    assert_eq!(
        strings(&out["written"]),
        ["src/pdf.rs", "src/renamed.rs"],
        "{out}"
    );
    assert_eq!(
        strings(&out["removed"]),
        ["README.md", "src/old.rs"],
        "{out}"
    );
    assert!(out["refused"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("changed on disk"));
    let files = tree(&proj);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["src/keep.rs", "src/main.rs", "src/pdf.rs", "src/renamed.rs"]
    );
    assert_eq!(files["src/renamed.rs"], "pub fn old() {}\n");
    assert_eq!(files["src/pdf.rs"], "pub fn pdf() {}\n");
    assert_eq!(
        files["src/main.rs"], "fn main() { /* disk */ }\n",
        "disk edit kept"
    );
    assert_eq!(
        files["src/keep.rs"], "pub fn keep() { /* disk */ }\n",
        "disk edit kept"
    );
    let st = json_ok(&elf, &["dir", "status", &dir]);
    assert_eq!(strings(&st["modified"]), ["src/main.rs"], "{st}");
    assert_eq!(strings(&st["removed"]), ["src/keep.rs"], "{st}");
    assert_eq!(st["new"], serde_json::json!([]), "{st}");

    // --force settles the conflicts the document's way.
    let out = json_ok(&elf, &["dir", "export", &dir, "--force"]);
    assert_eq!(strings(&out["written"]), ["src/main.rs"], "{out}");
    assert_eq!(strings(&out["removed"]), ["src/keep.rs"], "{out}");
    assert_eq!(
        std::fs::read_to_string(proj.join("src/main.rs")).unwrap(),
        "fn main() { println!(\"doc\"); }\n"
    );
    let st = json_ok(&elf, &["dir", "status", &dir]);
    assert_eq!(st["clean"], 3, "{st}");
    assert!(st["modified"].as_array().unwrap().is_empty(), "{st}");
    assert!(st["removed"].as_array().unwrap().is_empty(), "{st}");
    // A second export has nothing to do.
    let out = json_ok(&elf, &["dir", "export", &dir]);
    assert_eq!(out["written"], serde_json::json!([]), "{out}");
    assert_eq!(out["unchanged"], 3, "{out}");
    assert_eq!(json_ok(&elf, &["verify"])["ok"], true);
}

/// Seed 002 §2.2B: a run in a terminal linked to a directory with changes not exported yet
/// exports first, runs as is, or (in a script that did not say) refuses with what to pass;
/// the choice can be remembered per terminal.
#[test]
fn terminal_run_exports_first_or_not_and_a_script_must_say_which() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(proj.join("src/main.rs"), "fn main() {}\n").unwrap();
    let elf = tmp.path().join("r.elf");
    json_ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let dir = json_ok(&elf, &["dir", "import", proj.to_str().unwrap()])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = json_ok(&elf, &["terminal", "create", "--name", "sh", "--dir", &dir])["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Clean: no question.
    let v = json_ok(&elf, &["terminal", "run", &t, "--", "ls src"]);
    assert_eq!(v["stdout"], "main.rs\n");

    json_ok(
        &elf,
        &[
            "dir",
            "add",
            &dir,
            "src/pdf.rs",
            "--text",
            "pub fn pdf() {}\n",
        ],
    );
    let out = elfiee(&elf, &["terminal", "run", &t, "--", "ls src"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a script that did not choose is refused"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 new") && err.contains("--export") && err.contains("--no-export"),
        "{err}"
    );
    assert!(!proj.join("src/pdf.rs").exists());

    let v = json_ok(
        &elf,
        &["terminal", "run", &t, "--no-export", "--", "ls src"],
    );
    assert_eq!(v["stdout"], "main.rs\n", "ran as is");
    assert!(v.get("export").is_none());

    let v = json_ok(
        &elf,
        &["terminal", "run", &t, "--export", "--", "cat src/pdf.rs"],
    );
    assert_eq!(v["stdout"], "pub fn pdf() {}\n", "exported, then ran: {v}");
    assert_eq!(v["export"]["written"], serde_json::json!(["src/pdf.rs"]));
    assert_eq!(
        json_ok(&elf, &["dir", "status", &dir])["new"],
        serde_json::json!([])
    );

    // Remembered: this terminal always runs as is.
    json_ok(&elf, &["dir", "add", &dir, "src/later.rs"]);
    json_ok(
        &elf,
        &[
            "terminal",
            "run",
            &t,
            "--no-export",
            "--remember",
            "--",
            "true",
        ],
    );
    let v = json_ok(&elf, &["terminal", "run", &t, "--", "ls src"]);
    assert_eq!(
        v["stdout"], "main.rs\npdf.rs\n",
        "the remembered rule applied: {v}"
    );
    let out = elfiee(&elf, &["terminal", "run", &t, "--remember", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "--remember needs a choice");
}
