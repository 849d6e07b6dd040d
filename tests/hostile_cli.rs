//! Issue 39's findings F2–F5 and F8 through the `elfiee` binary, as a hostile tester met
//! them: a salvage into its own input, a backup onto the document's own files, inputs read
//! without bound, redo after a forced undo, and the smaller ones (a damaged newest backup
//! point, `--steps` exit codes, names like id prefixes, paths `dir add` must refuse, a
//! salvage's partial output on a full disk). Each test failed on the code before its mend.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

fn run(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee(elf, args, &[])
}

fn ok(elf: &Path, args: &[&str]) -> Value {
    common::elfiee_json(elf, args)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `root` with its size, sorted.
fn listing(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push((p, e.metadata().map(|m| m.len()).unwrap_or(0)));
        }
    }
    out.sort();
    out
}

/// A document `dir/d.elf` with a few written blocks.
fn document(dir: &Path) -> PathBuf {
    common::markdown_document(dir, 3)
}

#[test]
fn salvage_into_its_own_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    let before = listing(&elf);
    for inside in ["x.elf", "log/x.elf", "content"] {
        let to = elf.join(inside);
        let out = run(
            &elf,
            &["salvage", elf.to_str().unwrap(), to.to_str().unwrap()],
        );
        assert!(!out.status.success(), "salvage into {inside} was accepted");
        let err = stderr(&out);
        assert!(
            err.starts_with("error:") && err.contains("inside the document"),
            "salvage into {inside}: {err}"
        );
        assert_eq!(
            listing(&elf),
            before,
            "salvage into {inside} wrote to the document"
        );
    }
    // Beside it is fine.
    let beside = dir.path().join("saved.elf");
    ok(
        &elf,
        &["salvage", elf.to_str().unwrap(), beside.to_str().unwrap()],
    );
}

#[test]
fn backup_onto_the_documents_own_files_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    for inside in ["log/db", "HEAD", "d.backup"] {
        let to = elf.join(inside);
        let before = listing(&elf);
        let started = Instant::now();
        let mut child = std::process::Command::new(common::elfiee_bin())
            .args(["backup", "--to", to.to_str().unwrap()])
            .env("ELFIEE_ELF", &elf)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("backup --to {inside} hangs");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success(), "backup --to {inside} was accepted");
        let err = stderr(&out);
        assert!(
            err.starts_with("error:") && err.contains("inside the document"),
            "backup --to {inside}: {err}"
        );
        // (An open and close of the document rotates sled's own snapshot files: only what
        // the backup would have written is compared.)
        let sizes = |l: Vec<(PathBuf, u64)>| -> Vec<(PathBuf, u64)> {
            l.into_iter()
                .filter(|(p, _)| !p.to_string_lossy().contains("/log/snap."))
                .filter(|(p, _)| !p.ends_with("log/closed"))
                .collect()
        };
        assert_eq!(
            sizes(listing(&elf)),
            sizes(before),
            "backup --to {inside} wrote to the document"
        );
    }
    let out = run(&elf, &["verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The peak resident memory of a finished child, in KiB (`wait4`'s rusage).
fn run_measured(
    elf: &Path,
    args: &[&str],
    stdin: std::process::Stdio,
) -> (std::process::Output, i64) {
    let child = std::process::Command::new(common::elfiee_bin())
        .args(args)
        .env("ELFIEE_ELF", elf)
        .env_remove("RUST_LOG")
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child, writing into locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{args:?} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    use std::io::Read;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut child = child;
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    let output = std::process::Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: out,
        stderr: err,
    };
    (output, usage.ru_maxrss)
}

#[test]
fn endless_inputs_are_refused_at_the_limit_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    let id = common::new_block(ok, &elf, "markdown", "target");
    let cases: Vec<(Vec<&str>, bool)> = vec![
        (
            vec![
                "exec",
                "markdown.write",
                "--block",
                &id,
                "--payload",
                "@/dev/zero",
            ],
            false,
        ),
        (
            vec!["exec", "markdown.write", "--block", &id, "--payload", "-"],
            true,
        ),
        (vec!["markdown", "write", &id, "--file", "/dev/zero"], false),
        (vec!["markdown", "write", &id, "--file", "-"], true),
        (vec!["markdown", "write", &id], true),
    ];
    for (args, from_stdin) in cases {
        let stdin = if from_stdin {
            std::process::Stdio::from(std::fs::File::open("/dev/zero").unwrap())
        } else {
            std::process::Stdio::null()
        };
        let (out, peak_kib) = run_measured(&elf, &args, stdin);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            err.starts_with("error:") && err.contains("16 MiB"),
            "{args:?} must name the limit: {err}"
        );
        assert!(
            peak_kib < 256 * 1024,
            "{args:?} peaked at {} MiB",
            peak_kib >> 10
        );
    }
    let out = run(&elf, &["verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

const KEY_ENV: &str = "ELFIEE_HOSTILE_KEY";

async fn run_async(elf: &Path, args: &[&str]) -> std::process::Output {
    common::run_elfiee_async(elf, args, &[(KEY_ENV, "sk-local")]).await
}

/// Points agent `a1` (block `id`) at the provider at `url` and runs one turn of it with
/// `message`, approving every tool call.
async fn configure_and_run(elf: &Path, id: &str, url: &str, message: &str) {
    let configure = [
        "agent",
        "configure",
        id,
        "--base-url",
        url,
        "--api-key-env",
        KEY_ENV,
    ];
    ok_async(elf, &configure).await;
    let turn = ["agent", "run", "a1", "--approve-all", "--message", message];
    let out = run_async(elf, &turn).await;
    assert!(out.status.success(), "{}", stderr(&out));
}

async fn ok_async(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    common::success_json(&all, &run_async(elf, &all).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redo_after_a_forced_undo_brings_the_step_back() {
    std::env::set_var(KEY_ENV, "sk-local");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("proj");
    std::fs::create_dir_all(root.join("src")).unwrap();
    let first = format!("fn main() {{}}\n{}", "// the first version\n".repeat(20));
    std::fs::write(root.join("src/main.rs"), &first).unwrap();
    let elf = tmp.path().join("p.elf");
    ok_async(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]).await;
    let dir = ok_async(
        &elf,
        &["dir", "import", root.to_str().unwrap(), "--name", "b1"],
    )
    .await["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The agent's step rewrites src/main.rs (a body large enough for the content store).
    let agents = format!(
        "fn main() {{ agent(); }}\n{}",
        "// the agent's version\n".repeat(20)
    );
    let (url, _) = common::llm_turns(
        vec![
            common::anthropic_tool_calls(&[(
                "c1",
                "elfiee_code_write",
                serde_json::json!({"block_id": "src/main.rs", "text": agents}),
            )]),
            common::anthropic_answer("Done."),
        ],
        common::anthropic_answer("Title"),
    )
    .await;
    let a = ok_async(&elf, &["agent", "create", "--name", "a1"]).await;
    let id = a["agent_block_id"].as_str().unwrap().to_owned();
    ok_async(
        &elf,
        &["block", "link", &id, &dir, "--relation", "reference"],
    )
    .await;
    configure_and_run(&elf, &id, &url, "rewrite main").await;
    // Someone changes the file's block since: the undo conflicts, and is forced.
    let mine = format!("fn main() {{ mine(); }}\n{}", "// my version\n".repeat(20));
    ok_async(&elf, &["code", "write", "src/main.rs", "--text", &mine]).await;
    let refused = run_async(&elf, &["agent", "undo", "a1"]).await;
    assert!(!refused.status.success(), "the undo must name its conflict");
    ok_async(&elf, &["agent", "undo", "a1", "--force"]).await;
    // Redo brings back what the forced undo took back.
    let out = run_async(&elf, &["--json", "agent", "redo", "a1"]).await;
    assert!(
        out.status.success(),
        "redo after a forced undo: {}",
        stderr(&out)
    );
    let out = run_async(&elf, &["code", "read", "src/main.rs"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        mine.trim_end()
    );
    // And a file the step made, changed since, forced away and brought back.
    let made = format!(
        "pub fn made() {{}}\n{}",
        "// made by the agent\n".repeat(20)
    );
    let (url, _) = common::llm_turns(
        vec![
            common::anthropic_tool_calls(&[(
                "c2",
                "elfiee_directory_add",
                serde_json::json!({"directory": "b1", "path": "src/made.rs", "content": made}),
            )]),
            common::anthropic_answer("Done."),
        ],
        common::anthropic_answer("Title"),
    )
    .await;
    configure_and_run(&elf, &id, &url, "make a file").await;
    ok_async(&elf, &["dir", "export", &dir]).await;
    let changed = format!("pub fn changed() {{}}\n{}", "// changed by me\n".repeat(20));
    ok_async(&elf, &["code", "write", "src/made.rs", "--text", &changed]).await;
    ok_async(&elf, &["agent", "undo", "a1", "--force"]).await;
    let out = run_async(&elf, &["--json", "agent", "redo", "a1"]).await;
    assert!(
        out.status.success(),
        "redo after a forced undo of a made file: {}",
        stderr(&out)
    );
    // And a step whose file was changed on disk since (not in the document): the forced
    // undo overwrites the disk's version, and redo brings the step's back.
    let third = format!(
        "pub fn third() {{}}\n{}",
        "// the agent's third\n".repeat(20)
    );
    let (url, _) = common::llm_turns(
        vec![
            common::anthropic_tool_calls(&[(
                "c3",
                "elfiee_code_write",
                serde_json::json!({"block_id": "src/main.rs", "text": third}),
            )]),
            common::anthropic_answer("Done."),
        ],
        common::anthropic_answer("Title"),
    )
    .await;
    configure_and_run(&elf, &id, &url, "rewrite main again").await;
    ok_async(&elf, &["dir", "export", &dir]).await;
    let by_hand = format!(
        "fn main() {{ by_hand(); }}\n{}",
        "// edited on disk\n".repeat(20)
    );
    std::fs::write(root.join("src/main.rs"), &by_hand).unwrap();
    let refused = run_async(&elf, &["agent", "undo", "a1"]).await;
    assert!(
        !refused.status.success(),
        "the undo must name the file changed on disk"
    );
    ok_async(&elf, &["agent", "undo", "a1", "--force"]).await;
    let out = run_async(&elf, &["--json", "agent", "redo", "a1"]).await;
    assert!(
        out.status.success(),
        "redo after a forced undo over a file changed on disk: {}",
        stderr(&out)
    );
    let out = run_async(&elf, &["code", "read", "src/main.rs"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        third.trim_end(),
        "redo must bring the step's version back"
    );
    assert_eq!(ok_async(&elf, &["verify"]).await["ok"], true);
}

#[test]
fn restore_says_when_the_newest_backup_point_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    let backup = dir.path().join("d.backup");
    ok(&elf, &["backup", "--to", backup.to_str().unwrap()]);
    let id = common::new_block(ok, &elf, "markdown", "later");
    ok(
        &elf,
        &["markdown", "write", &id, "--text", "after the first point"],
    );
    ok(&elf, &["backup", "--to", backup.to_str().unwrap()]);
    // The newest point is the file's last frame: one byte of it flipped.
    let mut bytes = std::fs::read(&backup).unwrap();
    let n = bytes.len();
    bytes[n - 6] ^= 0x40;
    std::fs::write(&backup, &bytes).unwrap();
    let to = dir.path().join("restored.elf");
    let out = run(
        &elf,
        &["restore", backup.to_str().unwrap(), to.to_str().unwrap()],
    );
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an older point was taken silently: {err}"
    );
    assert!(
        err.starts_with("error:") && err.contains("damaged at byte") && err.contains("head -c"),
        "{err}"
    );
    assert!(!to.exists(), "a refused restore leaves nothing behind");
}

#[test]
fn steps_of_zero_and_below_are_both_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    for args in [
        &["undo", "--steps", "0"][..],
        &["undo", "--steps", "-1"][..],
        &["agent", "undo", "a1", "--steps", "0"][..],
        &["agent", "undo", "a1", "--steps", "-1"][..],
    ] {
        let out = run(&elf, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_block_named_like_the_start_of_another_blocks_id_is_reached_by_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    let first = common::new_block(ok, &elf, "markdown", "first");
    let prefix = &first[..8];
    let named = common::new_block(ok, &elf, "markdown", prefix);
    ok(&elf, &["markdown", "write", prefix, "--text", "by name"]);
    let out = run(&elf, &["markdown", "read", &named]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "by name");
    let out = run(&elf, &["markdown", "read", &first]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "");
}

#[test]
fn dir_add_refuses_gits_folder_and_paths_no_export_could_write() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    let project = dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "# proj\n").unwrap();
    let d = ok(
        &elf,
        &["dir", "import", project.to_str().unwrap(), "--name", "p"],
    )["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = "x".repeat(300);
    for path in [".git/hooks/pre-commit", "sub/.GIT/config", long.as_str()] {
        let out = run(&elf, &["dir", "add", &d, path, "--text", "echo owned"]);
        let err = stderr(&out);
        assert!(!out.status.success(), "dir add {path} was accepted");
        assert!(err.starts_with("error:"), "{path}: {err}");
    }
    ok(&elf, &["dir", "export", &d]);
    assert!(!project.join(".git").exists());
}

#[test]
fn a_salvage_that_fails_on_a_full_disk_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let elf = document(dir.path());
    let big: String = (0..3_000_000u32)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let id = common::new_block(ok, &elf, "markdown", "big");
    let file = dir.path().join("big.md");
    std::fs::write(&file, &big).unwrap();
    ok(
        &elf,
        &["markdown", "write", &id, "--file", file.to_str().unwrap()],
    );
    let disk = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(disk.path())
        .output();
    match mounted {
        Ok(o) if o.status.success() => {}
        other => {
            eprintln!(
                "SKIPPED: this test needs a 2 MiB tmpfs of its own (run it as root): {other:?}"
            );
            return;
        }
    }
    let to = disk.path().join("saved.elf");
    let out = run(
        &elf,
        &["salvage", elf.to_str().unwrap(), to.to_str().unwrap()],
    );
    let left: Vec<_> = std::fs::read_dir(disk.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let _ = std::process::Command::new("umount")
        .arg(disk.path())
        .status();
    let err = stderr(&out);
    assert!(!out.status.success(), "the salvage fit on 2 MiB?");
    assert!(err.starts_with("error:") && err.contains("full"), "{err}");
    assert!(left.is_empty(), "a failed salvage left {left:?}");
}
