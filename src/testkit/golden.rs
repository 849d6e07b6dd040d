//! Golden documents: `.elf` files an earlier build wrote, checked in with what they hold
//! (`MANIFEST.json`: events, commands and state digest per document; see
//! `scripts/make-golden` and docs/EVENTS.md, "The format promise"). Every later build must
//! open, replay and verify them to the same digests; a change that breaks one needs a
//! migration. An embedder keeps golden documents of its own block types the same way and
//! checks them with [`check_golden`] against its own binary.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Checks every document of the manifest in `dir` whose `binary` is `binary_name`, with the
/// program `binary` (a build of `elfiee::cli`), on a copy (the checked-in files are never
/// opened in place): `verify` is ok with the recorded event and command counts, `replay` and
/// an open (`state-digest`) give the recorded digests, a write succeeds, and the document
/// still verifies and reopens after it. Returns the names checked; panics naming the
/// document and what differed.
pub fn check_golden(dir: &Path, binary: &Path, binary_name: &str) -> Vec<String> {
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.join("MANIFEST.json")).expect("read MANIFEST.json"),
    )
    .expect("MANIFEST.json is JSON");
    let docs = manifest["documents"].as_object().expect("a documents map");
    let mut checked = Vec::new();
    for (name, want) in docs {
        if want["binary"] != binary_name {
            continue;
        }
        let work = tempfile::tempdir().expect("temp dir");
        let elf = work.path().join(format!("{name}.elf"));
        crate::engine::layout::copy_tree(&dir.join(format!("{name}.elf")), &elf, |_, e| Err(e))
            .expect("copy the golden document");
        let run = |args: &[&str]| -> Value {
            let out = Command::new(binary)
                .arg("--elf")
                .arg(&elf)
                .arg("--json")
                .args(args)
                .output()
                .expect("run the program");
            assert!(
                out.status.success(),
                "golden {name}: `{}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).expect("JSON output")
        };
        let verify = run(&["verify"]);
        assert_eq!(verify["ok"], true, "golden {name}: verify: {verify}");
        assert_eq!(verify["events"], want["events"], "golden {name}: events");
        assert_eq!(
            verify["commands"], want["commands"],
            "golden {name}: commands"
        );
        let replay = run(&["replay"]);
        assert_eq!(
            replay["state_digest"], want["state_digest"],
            "golden {name}: the replayed state differs from the one this document was made with"
        );
        if want.get("synced_digest").is_some() {
            assert_eq!(
                replay["synced_digest"], want["synced_digest"],
                "golden {name}: synced digest"
            );
        }
        let opened = run(&["state-digest"]);
        assert_eq!(
            opened["state_digest"], want["state_digest"],
            "golden {name}: opened state"
        );
        // Still a living document: it takes a write, and verifies and reopens after it.
        let created = run(&[
            "block",
            "create",
            "--type",
            "markdown",
            "--name",
            "golden-check",
        ]);
        assert!(created["block_id"].is_string(), "golden {name}: {created}");
        let verify = run(&["verify"]);
        assert_eq!(
            verify["ok"], true,
            "golden {name}: verify after a write: {verify}"
        );
        let after = run(&["state-digest"]);
        assert_eq!(after["seq"], want["events"].as_u64().unwrap_or(0) + 1);
        checked.push(name.clone());
    }
    checked
}
