//! The format promise (docs/EVENTS.md): the golden documents an earlier build made open,
//! replay and verify to their recorded digests with this build, and a document of a newer
//! format is refused, naming both versions.

use std::path::Path;

fn golden() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

#[test]
fn every_golden_document_opens_replays_and_verifies_to_its_recorded_digest() {
    let bin = Path::new(env!("CARGO_BIN_EXE_elfiee"));
    let mut sets = 0;
    for set in std::fs::read_dir(golden()).unwrap() {
        let set = set.unwrap().path();
        let mut checked = elfiee::testkit::golden::check_golden(&set, bin, "elfiee");
        checked.sort();
        assert_eq!(
            checked,
            ["builtins", "snapshot-content", "synced"],
            "{}",
            set.display()
        );
        sets += 1;
    }
    assert!(sets >= 1, "no golden set under tests/golden");
}

#[test]
fn a_document_of_a_newer_format_is_refused_naming_both_versions() {
    let work = tempfile::tempdir().unwrap();
    let elf = work.path().join("newer.elf");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["init", elf.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let marker = elf.join("ELFIEE");
    let now = elfiee::model::FORMAT_VERSION;
    let text = std::fs::read_to_string(&marker).unwrap();
    std::fs::write(
        &marker,
        text.replace(
            &format!("format_version = {now}"),
            &format!("format_version = {}", now + 7),
        ),
    )
    .unwrap();
    for args in [&["verify"][..], &["replay"], &["block", "list"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_elfiee"))
            .arg("--elf")
            .arg(&elf)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must refuse it");
        assert!(
            err.contains(&format!("format version {}", now + 7))
                && err.contains(&format!("up to {now}"))
                && err.contains("newer elfiee"),
            "{args:?}: {err}"
        );
    }
}
