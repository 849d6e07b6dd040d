//! Real-sized projects through the `elfiee` binary (issue 11): an import larger than the old
//! 15 MB limit read back byte for byte, SIGKILL in the middle of an import then `verify` and a
//! resumed import, time travel with `block show --at`, `log --block` with the content of each
//! version, and a flipped byte in the content store reported by `verify`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{run_elfiee, success_json};
use elfiee_bench::project_gen::{generate, Spec};
use serde_json::Value;

fn json(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    success_json(&all, &run_elfiee(elf, &all, &[]))
}

/// Opens the document in this process and checks that every imported file's block holds
/// exactly the bytes on disk; returns how many files were compared.
async fn blocks_equal_files(elf: &Path, dir_block: &str, root: &Path) -> usize {
    let engine = elfiee::Engine::new(elfiee::EngineConfig::default());
    let file = engine.open(elf).await.unwrap();
    let dir = file.block(dir_block).expect("the directory block");
    let entries = elfiee::capabilities::builtin::directory_entries(&dir);
    for (path, id) in &entries {
        let b = file
            .block(id)
            .unwrap_or_else(|| panic!("{path}: block {id} unreadable"));
        let key = if b.block_type == "markdown" {
            "markdown"
        } else {
            "text"
        };
        let disk = std::fs::read(root.join(path)).unwrap();
        assert_eq!(
            b.contents[key].as_str().map(str::as_bytes),
            Some(disk.as_slice()),
            "{path}"
        );
    }
    file.close().await;
    entries.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_over_the_old_15_mb_limit_reads_back_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("proj");
    let g = generate(
        &tree,
        &Spec {
            seed: 11,
            files: 1_500,
            total_bytes: 20_000_000,
            size_factor: 1,
        },
    )
    .unwrap();
    assert!(g.text_bytes > 15 * 1024 * 1024, "{} bytes", g.text_bytes);
    let elf = tmp.path().join("d.elf");
    json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let r = json(&elf, &["dir", "import", tree.to_str().unwrap()]);
    // The generated text files and the .gitignore; build/ and *.log are ignored, binaries
    // skipped.
    assert_eq!(r["files"], g.files + 1, "{r}");
    assert_eq!(
        r["skipped"].as_array().unwrap().len(),
        g.binary_files,
        "{}",
        r["skipped"]
    );
    let block = r["block_id"].as_str().unwrap().to_owned();
    assert_eq!(blocks_equal_files(&elf, &block, &tree).await, g.files + 1);
    let v = json(&elf, &["verify"]);
    assert_eq!(v["ok"], true, "{v}");
    // The state holds references: the snapshot is far smaller than the text.
    let snap: u64 = std::fs::read_dir(elf.join("snapshots"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    assert!(snap < g.text_bytes / 10, "snapshot {snap} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_an_import_leaves_a_valid_document_and_the_same_import_completes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("proj");
    let g = generate(
        &tree,
        &Spec {
            seed: 12,
            files: 2_000,
            total_bytes: 30_000_000,
            size_factor: 1,
        },
    )
    .unwrap();
    let elf = tmp.path().join("d.elf");
    json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["dir", "import", tree.to_str().unwrap()])
        .env("ELFIEE_ELF", &elf)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once some chunks are in (the content pack grows as chunks commit).
    let pack = elf.join("content/pack");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&pack).map_or(0, |m| m.len()) < 6_000_000 {
        assert!(Instant::now() < deadline, "the import never got going");
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed = child.try_wait().unwrap().is_none();
    child.kill().unwrap_or_default();
    child.wait().unwrap();
    assert!(killed, "the import finished before it could be killed");
    let v = json(&elf, &["verify"]);
    assert_eq!(v["ok"], true, "{v}");
    let listed = json(&elf, &["block", "list"]);
    let dirs: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["block_type"] == "directory")
        .collect();
    assert_eq!(dirs.len(), 1);
    let partial = listed.as_array().unwrap().len() - 1;
    assert!(
        partial < g.files,
        "{partial} of {} files before the kill",
        g.files
    );
    // The same command again resumes and completes the import.
    let r = json(&elf, &["dir", "import", tree.to_str().unwrap()]);
    assert_eq!(r["resumed"], true, "{r}");
    assert_eq!(r["block_id"], dirs[0]["block_id"]);
    assert_eq!(r["files"], g.files + 1);
    let block = r["block_id"].as_str().unwrap().to_owned();
    assert_eq!(blocks_equal_files(&elf, &block, &tree).await, g.files + 1);
    let shown = json(&elf, &["block", "show", &block]);
    assert!(shown["metadata"]["custom"]
        .get("import_incomplete")
        .is_none());
    assert_eq!(json(&elf, &["verify"])["ok"], true);
}

#[test]
fn block_show_at_and_log_block_give_every_version_of_a_body() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("d.elf");
    json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    json(
        &elf,
        &["block", "create", "--type", "markdown", "--name", "Spec"],
    );
    let v1 = "# first\n".repeat(400); // over 256 bytes: kept in the content store
    let v2 = "short second version";
    let v3 = "third ✓\r\n".repeat(300);
    let mut seqs = Vec::new();
    for text in [v1.as_str(), v2, v3.as_str()] {
        let w = json(&elf, &["markdown", "write", "Spec", "--text", text]);
        seqs.push(w["seq"].as_u64().unwrap());
    }
    for (seq, text) in seqs.iter().zip([v1.as_str(), v2, v3.as_str()]) {
        let b = json(&elf, &["block", "show", "Spec", "--at", &seq.to_string()]);
        assert_eq!(b["contents"]["markdown"], text, "at {seq}");
        assert_eq!(b["at_seq"], *seq);
        assert!(
            b.get("content_refs").is_none(),
            "readers never see references"
        );
    }
    let now = json(&elf, &["block", "show", "Spec"]);
    assert_eq!(now["contents"]["markdown"], v3.as_str());
    // Before the block existed, and past the end: clear errors.
    let out = run_elfiee(&elf, &["block", "show", "Spec", "--at", "1"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found at seq 1"));
    let out = run_elfiee(&elf, &["block", "show", "Spec", "--at", "999"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("elfiee log"));
    let log = json(&elf, &["log", "--block", "Spec"]);
    let bodies: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["attribute"].as_str().unwrap().ends_with("markdown.write"))
        .map(|e| e["value"]["contents"]["markdown"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, [v1.as_str(), v2, v3.as_str()]);
}

#[test]
fn a_flipped_byte_in_stored_content_is_reported_by_verify_and_never_served() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("d.elf");
    json(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    json(
        &elf,
        &["block", "create", "--type", "markdown", "--name", "Spec"],
    );
    let w = json(
        &elf,
        &[
            "markdown",
            "write",
            "Spec",
            "--text",
            &"body text ".repeat(200),
        ],
    );
    let seq = w["seq"].as_u64().unwrap();
    assert_eq!(json(&elf, &["verify"])["ok"], true);
    let pack = elf.join("content/pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0x01;
    std::fs::write(&pack, bytes).unwrap();
    let out = run_elfiee(&elf, &["--json", "verify"], &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "verify fails on damaged content"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let problems = report["problems"].to_string();
    assert!(
        problems.contains(&format!("event {seq}")) && problems.contains("does not match its hash"),
        "{problems}"
    );
    // Reading the block refuses rather than serving the damaged text.
    let out = run_elfiee(&elf, &["markdown", "read", "Spec"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("damaged"));
}
