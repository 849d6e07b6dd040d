//! The system calls of a real `elfiee markdown write`, traced with strace: the write of the
//! event to sled's file is followed by an `fdatasync` (or `fsync`) of that file before the
//! process prints its answer. Needs `strace` (scripts/test installs it).

use std::process::Command;

mod common;
use common::{run_elfiee, success_json};

#[test]
fn a_cli_write_is_fdatasynced_before_it_is_answered() {
    if Command::new("strace").arg("-V").output().is_err() {
        panic!("strace is not installed; scripts/test installs it (apt-get install strace)");
    }
    // A sandbox that forbids ptrace cannot run this check at all: say so loudly and stop
    // (engine/tests/durability.rs still checks every answer through the counting hook).
    let probe = Command::new("strace")
        .args(["-o", "/dev/null", "true"])
        .output()
        .unwrap();
    if !probe.status.success() {
        eprintln!(
            "SKIPPED: strace cannot trace here ({}); run this test where ptrace is allowed",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("d.elf");
    let init = ["init", elf.to_str().unwrap(), "--owner", "Alice"];
    let out = run_elfiee(&elf, &init, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let create = [
        "--json", "block", "create", "--type", "markdown", "--name", "n",
    ];
    let v = success_json(&create, &run_elfiee(&elf, &create, &[]));
    let block = v["block_id"].as_str().unwrap().to_owned();

    let trace = dir.path().join("trace.txt");
    common::output_ok(
        Command::new("strace")
            .args(["-f", "-y", "-s", "64", "-o"])
            .arg(&trace)
            .args([
                "-e",
                "trace=pwrite64,pwritev,pwritev2,write,fdatasync,fsync",
            ])
            .arg(env!("CARGO_BIN_EXE_elfiee"))
            .arg("--elf")
            .arg(&elf)
            .args(["markdown", "write", &block, "--text", "durable-text-0123"]),
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let db = "/log/db>";
    // The answer on stdout ("wrote … bytes to …").
    let answer = lines
        .iter()
        .position(|l| l.contains("write(1<") && l.contains("wrote "))
        .unwrap_or_else(|| panic!("no answer on stdout in the trace:\n{text}"));
    // The last write into sled's file before the answer carries the event.
    let written = lines[..answer]
        .iter()
        .rposition(|l| l.contains("pwrite") && l.contains(db))
        .unwrap_or_else(|| panic!("no write to sled's file before the answer:\n{text}"));
    let synced = lines[written..answer]
        .iter()
        .any(|l| (l.contains("fdatasync(") || l.contains("fsync(")) && l.contains(db));
    assert!(
        synced,
        "sled's file was not fdatasynced between the event's write and the answer:\n{}",
        lines[written..=answer].join("\n")
    );
}
