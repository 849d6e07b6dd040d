//! The terminal, directory import and directory export effects end to end: a real `.elf` on
//! sled, the built-in effects attached, and the host operations of `service`.

mod support;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use elfiee_adapters::effects::{Observer, RuntimeConfig};
use elfiee_adapters::import::SyncReport;
use elfiee_adapters::service::{
    export_directory, import_directory, run_terminal, sync_directory, ImportReport,
};
use elfiee_adapters::{attach, EffectsConfig, EffectsHandle};
use elfiee_engine::{Engine, EngineConfig, FileHandle};
use elfiee_model::EXTERNAL_ROOT_PATH;
use serde_json::{json, Value};
use tempfile::TempDir;

fn engine() -> Engine {
    Engine::new(EngineConfig {
        node_id: "test-node".into(),
        ..EngineConfig::default()
    })
}

/// Effect runs seen by an observer: (effect name, trigger seq).
type Runs = Arc<Mutex<Vec<(String, u64)>>>;

fn observer() -> (Observer, Runs) {
    let runs: Runs = Arc::default();
    let sink = runs.clone();
    (
        Arc::new(move |name: &str, seq: u64| sink.lock().unwrap().push((name.to_owned(), seq))),
        runs,
    )
}

/// A fresh `.elf` owned by Alice (editor `alice`) with the built-in effects attached.
struct Doc {
    tmp: TempDir,
    engine: Engine,
    file: FileHandle,
    effects: Option<EffectsHandle>,
}

impl Doc {
    async fn new(config: EffectsConfig) -> Doc {
        let tmp = tempfile::tempdir().unwrap();
        let engine = engine();
        let file = engine
            .init(tmp.path().join("doc.elf"), "Alice")
            .await
            .unwrap();
        let effects = Some(attach(&file, config).await.unwrap());
        Doc {
            tmp,
            engine,
            file,
            effects,
        }
    }

    async fn default() -> Doc {
        Doc::new(EffectsConfig::default()).await
    }

    fn elf(&self) -> PathBuf {
        self.tmp.path().join("doc.elf")
    }

    async fn close(&mut self) {
        self.file.close().await;
        if let Some(fx) = self.effects.take() {
            fx.join().await;
        }
    }

    async fn terminal(&self, payload: Value) -> String {
        let ev = support::alice(&self.file, "terminal.create", None, payload).await;
        ev[0].entity.clone()
    }

    async fn run(&self, terminal: &str, command: &str, timeout: Option<u64>) -> Value {
        run_terminal(&self.file, "alice", terminal, command, timeout)
            .await
            .unwrap()
    }

    async fn import(&self, folder: &Path) -> ImportReport {
        import_directory(
            &self.file,
            "alice",
            folder,
            None,
            &Default::default(),
            |_| {},
        )
        .await
        .unwrap()
    }

    /// Alice exports the directory block `dir` to its folder; the outcome.
    async fn export(&self, dir: &str) -> Value {
        export_directory(&self.file, "alice", dir).await.unwrap()
    }

    /// Alice rescans the directory block `dir` (default limits).
    async fn rescan(&self, dir: &str) -> SyncReport {
        sync_directory(&self.file, "alice", dir, &Default::default(), |_| {})
            .await
            .unwrap()
    }

    /// `path` → block id of the directory block's entries.
    fn entries(&self, dir: &str) -> Vec<(String, String)> {
        self.file.with_state(|s| {
            s.block(dir).unwrap().contents["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["path"].as_str().unwrap().to_owned(),
                        e["block_id"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
    }

    fn entry(&self, dir: &str, path: &str) -> String {
        self.entries(dir)
            .into_iter()
            .find(|(p, _)| p == path)
            .map(|(_, id)| id)
            .unwrap_or_else(|| panic!("no entry {path}"))
    }
}

fn text(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string '{key}' in {v}"))
        .to_owned()
}

/// The strings of the JSON array `v`.
fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

fn write(path: &Path, contents: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// A project folder with one markdown and one code file.
fn project() -> TempDir {
    let p = tempfile::tempdir().unwrap();
    write(&p.path().join("README.md"), "# Readme\n");
    write(&p.path().join("src/main.rs"), "fn main() {}\n");
    p
}

/// Whether the process `pid` is gone (or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

// ---------------------------------------------------------------------------------------------
// Terminal
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_echo_returns_its_stdout_and_exit_code_zero() {
    let mut d = Doc::default().await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let out = d.run(&t, "echo hi", Some(10)).await;
    assert_eq!(text(&out, "stdout"), "hi\n", "{out}");
    assert_eq!(text(&out, "stderr"), "", "{out}");
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_eq!(out["timed_out"], false, "{out}");
    assert_eq!(out["truncated"], false, "{out}");
    assert_eq!(out["command"], "echo hi");
    assert_eq!(
        d.file.block(&t).unwrap().contents["last_output"]["stdout"],
        "hi\n",
        "the block shows the last output"
    );
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_keeps_stderr_and_a_non_zero_exit_code() {
    let mut d = Doc::default().await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let out = d.run(&t, "echo out; echo oops >&2; exit 3", Some(10)).await;
    assert_eq!(text(&out, "stdout"), "out\n", "{out}");
    assert_eq!(text(&out, "stderr"), "oops\n", "{out}");
    assert_eq!(out["exit_code"], 3, "{out}");
    assert_eq!(out["timed_out"], false, "{out}");
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_runs_in_the_folder_of_its_linked_directory() {
    let mut d = Doc::default().await;
    let proj = project();
    let dir = d.import(proj.path()).await.block_id;
    let t = d
        .terminal(json!({"name": "sh", "linked_directory_id": dir}))
        .await;
    let out = d.run(&t, "pwd -P; ls", Some(10)).await;
    let canonical = proj.path().canonicalize().unwrap();
    let stdout = text(&out, "stdout");
    assert_eq!(
        stdout.lines().next().unwrap(),
        canonical.to_str().unwrap(),
        "{out}"
    );
    assert!(
        stdout.lines().any(|l| l == "README.md"),
        "the command sees the project's files: {out}"
    );
    assert_eq!(out["cwd"], canonical.to_str().unwrap());
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_without_a_link_runs_in_the_elf_terminals_block_folder() {
    let mut d = Doc::default().await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let out = d.run(&t, "pwd -P", Some(10)).await;
    let expected = d.elf().canonicalize().unwrap().join("terminals").join(&t);
    assert_eq!(
        text(&out, "stdout").trim_end(),
        expected.to_str().unwrap(),
        "{out}"
    );
    assert!(expected.is_dir());
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_env_of_the_block_reaches_the_command() {
    let mut d = Doc::default().await;
    let t = d
        .terminal(json!({"name": "sh", "env": {"ELFIEE_GREETING": "hello world", "SECOND": "2"}}))
        .await;
    let out = d
        .run(
            &t,
            "printf '%s|%s' \"$ELFIEE_GREETING\" \"$SECOND\"",
            Some(10),
        )
        .await;
    assert_eq!(text(&out, "stdout"), "hello world|2", "{out}");
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_command_over_its_timeout_is_killed_and_its_partial_output_kept() {
    let mut d = Doc::default().await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let started = Instant::now();
    let out = d
        .run(
            &t,
            "echo before; echo err-before >&2; sleep 30; echo after",
            Some(1),
        )
        .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "returned after {took:?}: {out}"
    );
    assert_eq!(out["timed_out"], true, "{out}");
    assert_eq!(text(&out, "stdout"), "before\n", "{out}");
    assert_eq!(text(&out, "stderr"), "err-before\n", "{out}");
    assert!(
        out["exit_code"].is_null(),
        "a killed command has no exit code: {out}"
    );
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_timeout_kills_background_children_of_the_shell_too() {
    let mut d = Doc::default().await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let started = Instant::now();
    // The background `sleep` holds the output pipes: unless the whole group is killed, the
    // reads would never end.
    let out = d.run(&t, "sleep 30 & echo child=$!; wait", Some(1)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "returned after {took:?}: {out}"
    );
    assert_eq!(out["timed_out"], true, "{out}");
    let stdout = text(&out, "stdout");
    let pid: u32 = stdout
        .trim()
        .strip_prefix("child=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    let deadline = Instant::now() + Duration::from_secs(3);
    while !process_gone(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(process_gone(pid), "the background child {pid} still runs");
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_output_over_the_limit_is_truncated_with_a_note() {
    let mut d = Doc::new(EffectsConfig {
        terminal_output_limit: 1000,
        ..EffectsConfig::default()
    })
    .await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let out = d
        .run(
            &t,
            "yes a | head -c 5000; yes b | head -c 3000 >&2",
            Some(10),
        )
        .await;
    assert_eq!(out["truncated"], true, "{out}");
    assert_eq!(out["exit_code"], 0);
    let stdout = text(&out, "stdout");
    let (kept, note) = stdout
        .split_once("\n[elfiee: output truncated")
        .unwrap_or_else(|| panic!("no truncation note: {stdout:?}"));
    assert_eq!(kept.len(), 1000, "exactly the limit is kept");
    assert!(kept.bytes().all(|b| b == b'a' || b == b'\n'));
    assert!(
        note.contains("1000") && note.contains("5000"),
        "the note says how much was cut: {note:?}"
    );
    let stderr = text(&out, "stderr");
    assert!(
        stderr.contains("[elfiee: output truncated") && stderr.contains("3000"),
        "stderr is capped too: {stderr:?}"
    );

    // Output under the limit is untouched.
    let out = d.run(&t, "yes a | head -c 999", Some(10)).await;
    assert_eq!(out["truncated"], false, "{out}");
    assert_eq!(text(&out, "stdout").len(), 999);
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_output_is_committed_as_exactly_one_event_attributed_to_the_caller() {
    let mut d = Doc::default().await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let before = d.file.last_seq();
    let out = d.run(&t, "echo once", Some(10)).await;
    let events = d.file.events(before + 1).unwrap();
    let exec: Vec<_> = events
        .iter()
        .filter(|e| e.cap_id() == "terminal.execute")
        .collect();
    let outputs: Vec<_> = events
        .iter()
        .filter(|e| e.cap_id() == "terminal.output")
        .collect();
    assert_eq!(exec.len(), 1);
    assert_eq!(outputs.len(), 1, "{events:#?}");
    let o = outputs[0];
    assert_eq!(o.attribute, "alice/terminal.output");
    assert_eq!(o.entity, t);
    assert_eq!(o.value["trigger_seq"], exec[0].seq);
    assert_eq!(o.value, out, "run_terminal returns the committed output");
    assert!(o.seq > exec[0].seq);
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_command_does_not_run_again_after_close_and_reopen() {
    let (obs1, runs1) = observer();
    let mut d = Doc::new(EffectsConfig {
        runtime: RuntimeConfig {
            observer: Some(obs1),
            ..RuntimeConfig::default()
        },
        ..EffectsConfig::default()
    })
    .await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let counter = d.tmp.path().join("count.txt");
    let cmd = format!("echo ran >> '{}'", counter.display());
    d.run(&t, &cmd, Some(10)).await;
    assert_eq!(
        runs1
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == "terminal")
            .count(),
        1
    );
    d.close().await;

    // Twice, to also cover a reopen of a reopened file.
    for _ in 0..2 {
        let (obs, runs) = observer();
        let file = d.engine.open(d.elf()).await.unwrap();
        let fx = attach(
            &file,
            EffectsConfig {
                runtime: RuntimeConfig {
                    observer: Some(obs),
                    ..RuntimeConfig::default()
                },
                ..EffectsConfig::default()
            },
        )
        .await
        .unwrap();
        // Effects handle events in seq order, so once this later command's output is in, the
        // catch-up has passed the old `terminal.execute`.
        let barrier = run_terminal(&file, "alice", &t, "echo barrier", Some(10))
            .await
            .unwrap();
        assert_eq!(text(&barrier, "stdout"), "barrier\n");
        let terminal_runs: Vec<u64> = runs
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == "terminal")
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            terminal_runs.len(),
            1,
            "only the barrier ran: {terminal_runs:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&counter).unwrap(),
            "ran\n",
            "the old command ran exactly once"
        );
        let outputs = file
            .events(1)
            .unwrap()
            .into_iter()
            .filter(|e| e.cap_id() == "terminal.output")
            .count();
        file.close().await;
        fx.join().await;
        assert!(outputs >= 2);
    }
}

// ---------------------------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------------------------

fn skip_reason(report: &ImportReport, path: &str) -> String {
    report
        .skipped
        .iter()
        .find(|s| s.path == path)
        .map(|s| s.reason.clone())
        .unwrap_or_else(|| panic!("'{path}' not reported as skipped: {:?}", report.skipped))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_skips_vcs_build_and_dependency_folders_and_elf_documents() {
    let mut d = Doc::default().await;
    let proj = project();
    let p = proj.path();
    write(&p.join(".git/config"), "[core]\n");
    write(&p.join("target/debug/out.rs"), "// built\n");
    write(
        &p.join("node_modules/pkg/index.js"),
        "module.exports = 1;\n",
    );
    write(&p.join("sub/node_modules/x.js"), "1\n");
    write(&p.join("other.elf/marker"), "elfiee document\n");
    write(&p.join("notes.elf"), "not text we want\n");
    let r = d.import(p).await;

    assert!(skip_reason(&r, ".git").contains("not imported"));
    assert!(skip_reason(&r, "target").contains("not imported"));
    assert!(skip_reason(&r, "node_modules").contains("not imported"));
    assert!(skip_reason(&r, "sub/node_modules").contains("not imported"));
    assert!(skip_reason(&r, "other.elf").contains("not imported"));
    assert!(skip_reason(&r, "notes.elf").contains(".elf"));
    let paths: Vec<String> = d.entries(&r.block_id).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["README.md", "src/main.rs"]);
    assert_eq!(r.files, 2);
    // The skips are recorded in the log too, with the last chunk of the import.
    let recorded = d
        .file
        .events(1)
        .unwrap()
        .into_iter()
        .rfind(|e| e.cap_id() == "directory.sync" && e.value["done"] == true)
        .unwrap();
    assert_eq!(
        recorded.value["skipped"].as_array().unwrap().len(),
        r.skipped.len()
    );
    d.close().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_skips_binary_oversize_files_and_symlinks_leaving_the_root() {
    use std::os::unix::fs::symlink;
    let mut d = Doc::default().await;
    let proj = project();
    let outside = tempfile::tempdir().unwrap();
    let p = proj.path();
    write(&p.join("blob.bin"), b"abc\0def");
    write(&p.join("big.txt"), "x".repeat(1024 * 1024 + 1));
    write(&p.join("just_fits.txt"), "y".repeat(1024 * 1024));
    write(&outside.path().join("secret.txt"), "secret\n");
    symlink(outside.path().join("secret.txt"), p.join("escape.txt")).unwrap();
    symlink("/etc/passwd", p.join("passwd")).unwrap();
    symlink(outside.path(), p.join("outside_dir")).unwrap();
    symlink(p.join("nowhere"), p.join("dangling")).unwrap();
    let r = d.import(p).await;

    assert!(skip_reason(&r, "blob.bin").contains("binary"));
    let big = skip_reason(&r, "big.txt");
    assert!(big.contains("limit") && big.contains("1048577"), "{big}");
    assert!(skip_reason(&r, "escape.txt").contains("leaves the root"));
    assert!(skip_reason(&r, "passwd").contains("leaves the root"));
    assert!(skip_reason(&r, "outside_dir").contains("leaves the root"));
    assert!(skip_reason(&r, "dangling").contains("broken"));
    let paths: Vec<String> = d.entries(&r.block_id).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        ["README.md", "just_fits.txt", "src/main.rs"],
        "exactly 1 MiB is still imported"
    );
    let all_text: String = d
        .file
        .with_state(|s| s.blocks.values().map(|b| b.contents.to_string()).collect());
    assert!(
        !all_text.contains("secret"),
        "nothing from outside the root was imported"
    );
    d.close().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_follows_a_symlink_to_a_file_inside_the_root() {
    let mut d = Doc::default().await;
    let proj = project();
    std::os::unix::fs::symlink(proj.path().join("README.md"), proj.path().join("link.md")).unwrap();
    std::os::unix::fs::symlink("src/main.rs", proj.path().join("relative_link.rs")).unwrap();
    let r = d.import(proj.path()).await;
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    let link = d.file.block(&d.entry(&r.block_id, "link.md")).unwrap();
    assert_eq!(link.contents["markdown"], "# Readme\n");
    let rel = d
        .file
        .block(&d.entry(&r.block_id, "relative_link.rs"))
        .unwrap();
    assert_eq!(rel.contents["text"], "fn main() {}\n");
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_makes_markdown_blocks_for_md_files_and_code_blocks_for_the_rest() {
    let mut d = Doc::default().await;
    let proj = project();
    write(&proj.path().join("docs/guide.markdown"), "guide\n");
    write(&proj.path().join("NOTES.MD"), "upper\n");
    write(&proj.path().join("Makefile"), "all:\n");
    write(&proj.path().join("web/app.ts"), "let x = 1;\n");
    let r = d.import(proj.path()).await;
    assert_eq!(r.files, 6);
    let block = |path: &str| d.file.block(&d.entry(&r.block_id, path)).unwrap();

    for md in ["README.md", "docs/guide.markdown", "NOTES.MD"] {
        let b = block(md);
        assert_eq!(b.block_type, "markdown", "{md}");
        assert!(b.contents["markdown"].is_string(), "{md}: {}", b.contents);
        assert_eq!(b.name, md);
    }
    assert_eq!(block("README.md").contents["markdown"], "# Readme\n");
    for (code, lang) in [
        ("src/main.rs", "rust"),
        ("Makefile", "text"),
        ("web/app.ts", "typescript"),
    ] {
        let b = block(code);
        assert_eq!(b.block_type, "code", "{code}");
        assert_eq!(b.contents["language"], lang, "{code}");
        assert!(b.contents["text"].is_string());
    }
    assert_eq!(block("src/main.rs").contents["text"], "fn main() {}\n");
    assert!(d
        .file
        .with_state(|s| s.blocks.values().all(|b| b.owner == "alice")));
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_records_the_canonical_root_as_external_root_path() {
    let mut d = Doc::default().await;
    let proj = project();
    std::fs::create_dir(proj.path().join("sub")).unwrap();
    // A non-canonical spelling of the folder.
    let spelled = proj.path().join("sub").join("..").join(".");
    let r = d.import(&spelled).await;
    let canonical = proj.path().canonicalize().unwrap();
    let dir = d.file.block(&r.block_id).unwrap();
    assert_eq!(dir.block_type, "directory");
    assert_eq!(
        dir.metadata.custom[EXTERNAL_ROOT_PATH],
        canonical.to_str().unwrap()
    );
    assert_eq!(r.root, canonical.to_str().unwrap());
    assert_eq!(dir.name, canonical.file_name().unwrap().to_str().unwrap());
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_of_a_missing_path_is_a_clear_error_and_writes_nothing() {
    let mut d = Doc::default().await;
    let missing = d.tmp.path().join("no-such-folder");
    let seq = d.file.last_seq();
    let err = import_directory(
        &d.file,
        "alice",
        &missing,
        None,
        &Default::default(),
        |_| {},
    )
    .await
    .unwrap_err();
    assert!(err.is_rejection(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("cannot import") && msg.contains("no-such-folder"),
        "{msg}"
    );
    assert_eq!(d.file.last_seq(), seq);

    // A file is not a folder either.
    let file = d.tmp.path().join("plain.txt");
    write(&file, "x");
    let err = import_directory(&d.file, "alice", &file, None, &Default::default(), |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a folder"), "{err}");
    assert_eq!(d.file.last_seq(), seq);
    d.close().await;
}

// ---------------------------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_writes_an_edited_markdown_block_back_to_its_file() {
    let mut d = Doc::default().await;
    let proj = project();
    let r = d.import(proj.path()).await;
    let readme = d.entry(&r.block_id, "README.md");
    support::alice(
        &d.file,
        "markdown.write",
        Some(&readme),
        json!({"markdown": "# Changed in elfiee\n"}),
    )
    .await;
    let out = d.export(&r.block_id).await;
    assert_eq!(
        std::fs::read_to_string(proj.path().join("README.md")).unwrap(),
        "# Changed in elfiee\n"
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
    let mut written: Vec<&str> = strings(&out["written"]);
    written.sort();
    assert_eq!(
        written,
        ["README.md"],
        "only what the document changed is written: {out}"
    );
    assert_eq!(out["unchanged"], 1, "{out}");
    assert_eq!(out["refused"], json!([]), "{out}");
    let leftovers: Vec<_> = std::fs::read_dir(proj.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "no temp files left behind: {leftovers:?}"
    );
    let outcome = d
        .file
        .events(1)
        .unwrap()
        .into_iter()
        .find(|e| e.cap_id() == "directory.export_outcome")
        .unwrap();
    assert_eq!(outcome.attribute, "alice/directory.export_outcome");
    d.close().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_refuses_a_path_that_escapes_through_a_symlink_made_after_import() {
    let mut d = Doc::default().await;
    let proj = project();
    write(&proj.path().join("docs/guide.md"), "guide\n");
    let outside = tempfile::tempdir().unwrap();
    let r = d.import(proj.path()).await;
    let guide = d.entry(&r.block_id, "docs/guide.md");
    support::alice(
        &d.file,
        "markdown.write",
        Some(&guide),
        json!({"markdown": "ESCAPED\n"}),
    )
    .await;

    // Replace the imported subfolder by a symlink to a folder outside the root.
    std::fs::remove_dir_all(proj.path().join("docs")).unwrap();
    std::os::unix::fs::symlink(outside.path(), proj.path().join("docs")).unwrap();

    let out = d.export(&r.block_id).await;
    assert!(
        !outside.path().join("guide.md").exists(),
        "written outside the root: {out}"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing at all outside the root: {out}"
    );
    let refused = out["refused"].as_array().unwrap();
    let entry = refused
        .iter()
        .find(|e| e["path"] == "docs/guide.md")
        .unwrap_or_else(|| panic!("not refused: {out}"));
    assert!(
        entry["reason"].as_str().unwrap().contains("symlink"),
        "{entry}"
    );
    let written: Vec<&str> = strings(&out["written"]);
    assert!(!written.contains(&"docs/guide.md"), "{out}");
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_of_a_directory_whose_root_was_deleted_reports_a_refusal() {
    let mut d = Doc::default().await;
    let proj = project();
    let root = proj.path().canonicalize().unwrap();
    let r = d.import(&root).await;
    std::fs::remove_dir_all(&root).unwrap();
    let out = d.export(&r.block_id).await;
    assert_eq!(out["written"], json!([]), "{out}");
    let refused = out["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{out}");
    assert_eq!(refused[0]["path"], root.to_str().unwrap());
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{out}"
    );
    assert!(!root.exists(), "export does not recreate a deleted root");

    // The file still works afterwards.
    let t = d.terminal(json!({"name": "sh"})).await;
    assert_eq!(
        text(&d.run(&t, "echo alive", Some(10)).await, "stdout"),
        "alive\n"
    );
    d.close().await;
}

// ---------------------------------------------------------------------------------------------
// Regression tests for bugs found in review (background children holding pipes, a root that
// became a symlink, symlinks into skipped folders).
// ---------------------------------------------------------------------------------------------

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_output_is_kept_when_a_background_child_holds_the_pipes_open() {
    let mut d = Doc::default().await;
    let t = d.terminal(json!({"name": "sh"})).await;
    let pidfile = d.tmp.path().join("bg.pid");
    let started = Instant::now();
    let out = d
        .run(
            &t,
            &format!(
                "echo hi; echo err >&2; sleep 30 & echo $! > '{}'",
                pidfile.display()
            ),
            Some(20),
        )
        .await;
    let took = started.elapsed();
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let orphan_alive = !process_gone(pid);
    // SAFETY: plain syscall on the pid our own command just started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    d.close().await;
    assert!(took < Duration::from_secs(8), "returned after {took:?}");
    assert!(
        text(&out, "stdout").starts_with("hi\n"),
        "stdout silently dropped: {out}"
    );
    assert!(
        text(&out, "stderr").starts_with("err\n"),
        "stderr silently dropped: {out}"
    );
    assert!(
        !orphan_alive,
        "the background child {pid} still holds the pipes after the run was recorded"
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_refuses_when_the_root_folder_itself_became_a_symlink() {
    let mut d = Doc::default().await;
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("proj");
    write(&root.join("a.md"), "a\n");
    let outside = tempfile::tempdir().unwrap();
    let r = d.import(&root).await;
    std::fs::remove_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(outside.path(), &root).unwrap();
    let out = d.export(&r.block_id).await;
    d.close().await;
    assert!(
        !outside.path().join("a.md").exists(),
        "written outside the recorded root: {out}"
    );
    assert_eq!(out["written"], json!([]), "{out}");
    assert_eq!(out["refused"].as_array().map(Vec::len), Some(1), "{out}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_skips_a_symlink_that_points_into_a_skipped_folder() {
    let mut d = Doc::default().await;
    let proj = project();
    write(
        &proj.path().join(".git/config"),
        "[remote \"origin\"]\n\turl = https://token@example.com/x\n",
    );
    std::os::unix::fs::symlink(
        proj.path().join(".git/config"),
        proj.path().join("gitconfig"),
    )
    .unwrap();
    let r = d.import(proj.path()).await;
    let paths: Vec<String> = d.entries(&r.block_id).into_iter().map(|(p, _)| p).collect();
    d.close().await;
    assert!(!paths.contains(&"gitconfig".to_owned()), "{paths:?}");
    assert!(
        r.skipped.iter().any(|s| s.path == "gitconfig"),
        "{:?}",
        r.skipped
    );
}

// ------------------------------------------------------------------ streaming import and rescan

/// A text of `len` bytes, different for each `seed`, with multi-byte characters and CRLF.
fn body(seed: usize, len: usize) -> String {
    let mut s = String::with_capacity(len + 16);
    let mut i = seed;
    while s.len() < len {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match i % 7 {
            0 => s.push_str("fn café() {}\r\n"),
            1 => s.push_str("// 注释 ✓\n"),
            2 => s.push('\t'),
            _ => s.push_str(&format!("let v{} = {};\n", i % 1000, i % 97)),
        }
    }
    s
}

/// Every entry's block holds exactly the bytes of its file on disk.
fn assert_blocks_equal_files(d: &Doc, dir: &str, root: &Path) {
    for (path, id) in d.entries(dir) {
        let b = d
            .file
            .block(&id)
            .unwrap_or_else(|| panic!("{path}: block unreadable"));
        let key = if b.block_type == "markdown" {
            "markdown"
        } else {
            "text"
        };
        let on_disk = std::fs::read_to_string(root.join(&path)).unwrap();
        assert_eq!(b.contents[key].as_str(), Some(on_disk.as_str()), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_streams_in_chunks_and_reads_back_byte_for_byte_with_bodies_out_of_the_state() {
    let mut d = Doc::default().await;
    let proj = project();
    // 120 files from 0 bytes to 60 KB (one 1-byte, one empty, no final newline in some).
    for i in 0..120 {
        let len = match i {
            0 => 0,
            1 => 1,
            _ => (i * 997) % 60_000,
        };
        write(
            &proj.path().join(format!("src/m{}/f{i}.rs", i % 7)),
            body(i, len),
        );
    }
    let limits = elfiee_adapters::import::ImportLimits {
        chunk_bytes: 256 * 1024,
        chunk_files: 25,
        ..Default::default()
    };
    let r = import_directory(&d.file, "alice", proj.path(), None, &limits, |_| {})
        .await
        .unwrap();
    assert_eq!(r.files, 122, "120 files + README.md + src/main.rs");
    assert!(
        r.sync.chunks >= 8,
        "several bounded chunks: {}",
        r.sync.chunks
    );
    assert!(!r.resumed);
    assert_blocks_equal_files(&d, &r.block_id, proj.path());
    // The state keeps references, not bodies: its encoding is far smaller than the text.
    let (state_bytes, refs) = d.file.with_state(|s| {
        (
            s.canonical_bytes().len(),
            s.blocks
                .values()
                .map(|b| b.content_refs.len())
                .sum::<usize>(),
        )
    });
    assert!(refs > 100, "{refs} bodies in the content store");
    assert!(
        (state_bytes as u64) < r.sync.bytes / 10,
        "state {state_bytes} bytes for {} bytes of text",
        r.sync.bytes
    );
    let dir = d.file.block(&r.block_id).unwrap();
    assert!(!dir.metadata.custom.contains_key("import_incomplete"));
    assert!(d.file.verify().await.unwrap().ok);
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_honours_gitignore_and_ignore_files_and_keeps_hidden_files_like_git() {
    let mut d = Doc::default().await;
    let proj = project();
    let p = proj.path();
    write(&p.join(".gitignore"), "build/\n*.log\n/secret.txt\n");
    write(&p.join("sub/.gitignore"), "local.rs\n");
    write(&p.join(".ignore"), "scratch/\n");
    write(&p.join("build/out.rs"), "// generated\n");
    write(&p.join("run.log"), "log\n");
    write(&p.join("src/deep/trace.log"), "log\n");
    write(&p.join("secret.txt"), "top secret\n");
    write(&p.join("sub/secret.txt"), "only the root one is ignored\n");
    write(
        &p.join("sub/local.rs"),
        "ignored by the nested .gitignore\n",
    );
    write(&p.join("sub/kept.rs"), "kept\n");
    write(&p.join("scratch/x.md"), "ignored by .ignore\n");
    write(&p.join(".env.example"), "KEY=value\n");
    let r = d.import(p).await;
    let mut paths: Vec<String> = d.entries(&r.block_id).into_iter().map(|(p, _)| p).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            ".env.example",
            ".gitignore",
            ".ignore",
            "README.md",
            "src/main.rs",
            "sub/.gitignore",
            "sub/kept.rs",
            "sub/secret.txt"
        ]
    );
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescan_writes_exactly_the_modified_added_and_deleted_files() {
    let mut d = Doc::default().await;
    let proj = project();
    let p = proj.path();
    for i in 0..20 {
        write(&p.join(format!("lib/f{i}.rs")), body(i, 2_000 + i * 10));
    }
    let r = d.import(p).await;
    // The deleted file's block is linked: its relations go with it.
    let gone = d.entry(&r.block_id, "lib/f3.rs");
    let readme = d.entry(&r.block_id, "README.md");
    support::alice(
        &d.file,
        "core.link",
        Some(&readme),
        json!({"to": gone, "relation": "reference"}),
    )
    .await;
    let before = d.file.last_seq();
    write(&p.join("lib/f1.rs"), body(101, 3_000)); // changed, longer
    write(
        &p.join("README.md"),
        "# Readme\r\nchanged, CRLF, no final newline",
    ); // changed, small
    write(&p.join("lib/f5.rs"), body(5, 2_050)); // rewritten with the same bytes: unchanged
    write(&p.join("lib/new.rs"), "fn new() {}\n"); // added
    std::fs::remove_file(p.join("lib/f3.rs")).unwrap(); // deleted
    let s = d.rescan(&r.block_id).await;
    assert_eq!((s.changed, s.added, s.deleted, s.unchanged), (2, 1, 1, 19));
    let kinds: Vec<String> = d
        .file
        .events(before + 1)
        .unwrap()
        .iter()
        .map(|e| e.cap_id().to_owned())
        .collect();
    let count = |k: &str| kinds.iter().filter(|x| *x == k).count();
    assert_eq!(count("code.write"), 1, "{kinds:?}");
    assert_eq!(count("markdown.write"), 1, "{kinds:?}");
    assert_eq!(count("core.create"), 1, "{kinds:?}");
    assert_eq!(count("core.delete"), 1, "{kinds:?}");
    assert_eq!(count("core.unlink"), 1, "{kinds:?}");
    assert_eq!(count("directory.sync"), 1, "{kinds:?}");
    assert_eq!(kinds.len(), 6, "{kinds:?}");
    assert!(d.file.block(&gone).is_none());
    assert_blocks_equal_files(&d, &r.block_id, p);
    // Nothing changed since: a second rescan writes no event at all.
    let seq = d.file.last_seq();
    let again = d.rescan(&r.block_id).await;
    assert_eq!((again.changed, again.added, again.deleted), (0, 0, 0));
    assert_eq!(d.file.last_seq(), seq);
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn importing_the_same_folder_again_resumes_an_interrupted_import() {
    let mut d = Doc::default().await;
    let proj = project();
    for i in 0..10 {
        write(&proj.path().join(format!("f{i}.md")), body(i, 1_500));
    }
    let root = proj.path().canonicalize().unwrap();
    // What an import killed after its first chunk leaves behind.
    let ev = support::alice(
        &d.file,
        "directory.import",
        None,
        json!({"root": root.to_str().unwrap(), "files": [], "pending": true}),
    )
    .await;
    let dir = ev[0].entity.clone();
    support::alice(
        &d.file,
        "directory.sync",
        Some(&dir),
        json!({"files": [{"path": "f0.md", "content": body(0, 1_500)}]}),
    )
    .await;
    assert!(d
        .file
        .block(&dir)
        .unwrap()
        .metadata
        .custom
        .contains_key("import_incomplete"));
    let r = d.import(proj.path()).await;
    assert!(r.resumed);
    assert_eq!(r.block_id, dir);
    assert_eq!((r.sync.added, r.sync.unchanged), (11, 1));
    assert_eq!(r.files, 12);
    assert!(!d
        .file
        .block(&dir)
        .unwrap()
        .metadata
        .custom
        .contains_key("import_incomplete"));
    assert_blocks_equal_files(&d, &dir, proj.path());
    // A finished import is not resumed: importing again makes a second directory block.
    let r2 = d.import(proj.path()).await;
    assert!(!r2.resumed);
    assert_ne!(r2.block_id, dir);
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescan_skips_files_whose_size_and_mtime_are_unchanged_and_reads_the_rest() {
    use std::time::{Duration, SystemTime};
    let mut d = Doc::default().await;
    let proj = project();
    let p = proj.path();
    let past = SystemTime::now() - Duration::from_secs(60);
    let set_mtime = |rel: &str, t: SystemTime| {
        std::fs::File::options()
            .write(true)
            .open(p.join(rel))
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    for i in 0..5 {
        write(&p.join(format!("f{i}.rs")), body(i, 900));
        set_mtime(&format!("f{i}.rs"), past);
    }
    set_mtime("README.md", past);
    set_mtime("src/main.rs", past);
    let r = d.import(p).await;
    let cache = d
        .elf()
        .join("cache")
        .join(format!("dirsync-{}.json", r.block_id));
    assert!(cache.is_file(), "the import leaves a rescan cache");
    // f1: new content and a new mtime (seen). f2: same size, content changed, mtime put back
    // (the stat cache cannot see it, as git's index cannot).
    write(&p.join("f1.rs"), body(101, 950));
    set_mtime("f1.rs", past + Duration::from_secs(5));
    let mut same_size = body(2, 900).into_bytes();
    same_size[0] = if same_size[0] == b'x' { b'y' } else { b'x' };
    std::fs::write(p.join("f2.rs"), &same_size).unwrap();
    set_mtime("f2.rs", past);
    let limits = elfiee_adapters::import::ImportLimits::default();
    let sync = || sync_directory(&d.file, "alice", &r.block_id, &limits, |_| {});
    let s = sync().await.unwrap();
    assert_eq!(
        (s.changed, s.unchanged),
        (1, 6),
        "f1 read again; the rest from the cache"
    );
    // Without the cache every file is read, and f2's change is found.
    std::fs::remove_file(&cache).unwrap();
    let s = sync().await.unwrap();
    assert_eq!((s.changed, s.unchanged), (1, 6), "f2 found by reading it");
    assert_blocks_equal_files(&d, &r.block_id, p);
    // A damaged cache is only a slower rescan.
    std::fs::write(&cache, b"{not json").unwrap();
    let s = sync().await.unwrap();
    assert_eq!((s.changed, s.added, s.deleted), (0, 0, 0));
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_tools_import_and_rescan_a_folder() {
    use elfiee_adapters::mcp::tools::call;
    let mut d = Doc::default().await;
    let proj = project();
    let p = proj.path();
    let r = call(
        &d.file,
        "alice",
        "elfiee_directory_import",
        json!({"path": p.to_str().unwrap()}),
    )
    .await
    .unwrap();
    let block = r["block_id"].as_str().unwrap().to_owned();
    assert_eq!(r["files"], 2);
    write(
        &p.join("src/main.rs"),
        "fn main() { println!(\"changed\"); }\n",
    );
    write(&p.join("src/lib.rs"), "pub fn added() {}\n");
    let s = call(
        &d.file,
        "alice",
        "elfiee_directory_sync",
        json!({"block_id": block}),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            s["changed"].as_u64(),
            s["added"].as_u64(),
            s["deleted"].as_u64()
        ),
        (Some(1), Some(1), Some(0)),
        "{s}"
    );
    assert_blocks_equal_files(&d, &block, p);
    let bad = call(
        &d.file,
        "alice",
        "elfiee_directory_sync",
        json!({"block_id": "nope"}),
    )
    .await;
    assert!(bad.is_err());
    d.close().await;
}
