//! Agent steps as checkpoints, and undo / redo on both sides (issue 26): the document's blocks
//! and directory entries, and the project folder byte for byte (compared file by file and with
//! `git status --porcelain`). Driven through the agent loop with a scripted provider, and by a
//! property test over random steps and undo / redo orders.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use elfiee_adapters::agent_loop::{AgentSession, Autonomy, Confirm, SessionOptions};
use elfiee_adapters::checkpoint::{self, Selection, StepRecorder};
use elfiee_adapters::llm::{LlmResponse, ScriptedProvider};
use elfiee_adapters::{attach, EffectsConfig, EffectsHandle};
use elfiee_engine::{Engine, EngineConfig, FileHandle};
use elfiee_model::{Block, Command};
use proptest::prelude::*;
use serde_json::{json, Value};

fn calls(uses: &[(&str, &str, Value)]) -> LlmResponse {
    support::tool_calls(uses)
}

fn done(text: &str) -> LlmResponse {
    LlmResponse::text("scripted", text)
}

fn git(root: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "core.autocrlf=false",
        ])
        .args(args)
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Every file under `root` but `.git`, byte for byte, with its permission bits.
fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (Vec<u8>, u32)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_name() == ".git" {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
                out.insert(rel, (std::fs::read(&p).unwrap(), mode));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The document's blocks (the directory's entries are its contents).
fn blocks(file: &FileHandle) -> BTreeMap<String, Block> {
    file.with_state(|s| {
        s.blocks
            .iter()
            .map(|(k, b)| (k.to_owned(), b.clone()))
            .collect()
    })
}

async fn check_log(file: &FileHandle) {
    let v = file.verify().await.expect("verify runs");
    assert!(v.ok, "verify: {v:?}");
    let (_, replayed) = file.replay().await.unwrap();
    assert_eq!(
        replayed.digest(),
        file.state_digest(),
        "replay equals the live state"
    );
}

/// A document (at `elf`) that imported the folder `root`, with an agent its owner pointed at
/// the directory: (engine, file, directory block, agent block).
async fn agent_on_folder(
    elf: &Path,
    root: &Path,
    name: &str,
) -> (Engine, FileHandle, String, String) {
    let engine = Engine::new(EngineConfig::default());
    let file = engine.init(elf, "Alice").await.unwrap();
    let dir = support::import_folder(&file, root).await;
    let (agent, _) = support::create_agent(&file, "alice", name).await;
    support::reference(&file, &agent, &dir).await;
    (engine, file, dir, agent)
}

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    _engine: Engine,
    file: FileHandle,
    _fx: EffectsHandle,
    agent: String,
    dir: String,
    notes: String,
}

async fn project() -> Project {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("proj");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("Cargo.toml"), "[package]\nname = \"proj\"\n").unwrap();
    std::fs::write(
        root.join("src/main.rs"),
        "fn main() {\r\n\tprintln!(\"hello\");\r\n}",
    )
    .unwrap();
    std::fs::write(root.join("README.md"), "# proj\nsay hello\n").unwrap();
    std::fs::write(root.join(".gitignore"), "/target\n").unwrap();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "init"]);
    let (engine, file, dir, agent) =
        agent_on_folder(&tmp.path().join("a.elf"), &root, "builder").await;
    let fx = attach(&file, EffectsConfig::default()).await.unwrap();
    let notes = support::create_block(&file, "Notes", "markdown").await;
    Project {
        _tmp: tmp,
        root,
        _engine: engine,
        file,
        _fx: fx,
        agent,
        dir,
        notes,
    }
}

fn no_ask(tool: &str, _: &Value) -> Confirm {
    panic!("unexpected confirmation for {tool}")
}

/// What the document and the folder look like at one moment.
#[derive(Debug, Clone, PartialEq)]
struct Shot {
    tree: BTreeMap<String, (Vec<u8>, u32)>,
    porcelain: String,
    blocks: BTreeMap<String, Block>,
}

fn shot(p: &Project) -> Shot {
    Shot {
        tree: tree(&p.root),
        porcelain: git(&p.root, &["status", "--porcelain"]),
        blocks: blocks(&p.file),
    }
}

fn dir_clean(p: &Project) {
    let st = p.file.with_state(|s| {
        elfiee_capabilities::builtin::directory_status(s, s.block(&p.dir).unwrap())
    });
    assert!(!st.is_dirty(), "dir status clean: {st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agent_steps_undo_two_and_redo_them_on_both_sides_byte_for_byte() {
    let p = project().await;
    let provider = Arc::new(ScriptedProvider::new([
        // Step 1: a block write.
        calls(&[(
            "t1",
            "elfiee_markdown_write",
            json!({"block_id": p.notes, "markdown": "step one"}),
        )]),
        done("noted"),
        // Step 2: the shell edits a project file in place and deletes another.
        calls(&[(
            "t2",
            "shell",
            json!({"command": "sed -i 's/hello/HELLO/' src/main.rs && rm README.md"}),
        )]),
        done("edited"),
        // Step 3: a new file in the directory, written out before the shell runs.
        calls(&[
            (
                "t3",
                "elfiee_directory_add",
                json!({"directory": p.dir, "path": "src/agent_made.rs", "content": "pub fn made() -> u32 {\n    7\n}\n"}),
            ),
            ("t4", "shell", json!({"command": "ls src"})),
        ]),
        done("made"),
    ]));
    let mut opts = SessionOptions::new(provider.clone(), "scripted");
    opts.autonomy = Autonomy::Full;
    let mut s = AgentSession::open(&p.file, "alice", &p.agent, None, opts).unwrap();
    let sid = s.session_id().to_owned();
    let before = shot(&p);
    s.run_turn("write a note", &mut no_ask).await.unwrap();
    let after1 = shot(&p);
    s.run_turn("edit main", &mut no_ask).await.unwrap();
    let after2 = shot(&p);
    s.run_turn("add a file", &mut no_ask).await.unwrap();
    let after3 = shot(&p);
    assert_eq!(
        after1.tree, before.tree,
        "a block write leaves the folder alone"
    );
    assert!(
        after3.tree.contains_key("src/agent_made.rs"),
        "the new file is in the project"
    );
    assert!(!after2.tree.contains_key("README.md"));

    // The steps say what each changed.
    let h = checkpoint::History::load(&p.file, &sid).unwrap();
    let steps = h.infos(&p.file);
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(steps[0].files_created.is_empty() && steps[0].events > 0);
    assert_eq!(steps[1].files_modified, vec!["src/main.rs"]);
    assert_eq!(steps[1].files_deleted, vec!["README.md"]);
    assert_eq!(steps[2].files_created, vec!["src/agent_made.rs"]);
    assert_eq!(steps[2].tools, vec!["elfiee_directory_add", "shell"]);

    // Undo the last two: folder and document as after step 1.
    let r = checkpoint::undo(&p.file, "alice", &sid, Selection::Last(2), false)
        .await
        .unwrap();
    assert_eq!(r.steps, vec![2, 3]);
    let now = shot(&p);
    assert_eq!(now.tree, after1.tree, "the project tree byte for byte");
    assert_eq!(now.porcelain, after1.porcelain);
    assert_eq!(now.blocks, after1.blocks, "blocks and directory entries");
    dir_clean(&p);
    check_log(&p.file).await;
    let statuses: Vec<String> = checkpoint::History::load(&p.file, &sid)
        .unwrap()
        .infos(&p.file)
        .into_iter()
        .map(|s| s.status)
        .collect();
    assert_eq!(statuses, vec!["done", "undone", "undone"]);

    // Redo brings steps 2 and 3 back.
    let r = checkpoint::redo(&p.file, "alice", &sid, false)
        .await
        .unwrap();
    assert_eq!(r.steps, vec![2, 3]);
    let now = shot(&p);
    assert_eq!(now.tree, after3.tree);
    assert_eq!(now.porcelain, after3.porcelain);
    assert_eq!(now.blocks, after3.blocks);
    check_log(&p.file).await;
    assert!(
        checkpoint::redo(&p.file, "alice", &sid, false)
            .await
            .is_err(),
        "nothing left to redo"
    );

    // The user changes the agent's new file: undoing step 3 is refused, naming it.
    std::fs::write(p.root.join("src/agent_made.rs"), "// mine now\n").unwrap();
    let mine = shot(&p);
    let e = checkpoint::undo(&p.file, "alice", &sid, Selection::Last(1), false)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("src/agent_made.rs"), "{e}");
    assert!(e.to_string().contains("--force"), "{e}");
    assert_eq!(shot(&p), mine, "a refused undo changes nothing");
    // With force it goes back to after step 2.
    let r = checkpoint::undo(&p.file, "alice", &sid, Selection::To(2), true)
        .await
        .unwrap();
    assert_eq!(r.forced, vec!["src/agent_made.rs"]);
    let now = shot(&p);
    assert_eq!(now.tree, after2.tree);
    assert_eq!(now.blocks, after2.blocks);
    check_log(&p.file).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_changed_after_the_step_by_someone_else_is_named_and_left_alone() {
    let p = project().await;
    let provider = Arc::new(ScriptedProvider::new([
        calls(&[(
            "t1",
            "elfiee_markdown_write",
            json!({"block_id": p.notes, "markdown": "agent text"}),
        )]),
        done("ok"),
    ]));
    let mut opts = SessionOptions::new(provider, "scripted");
    opts.autonomy = Autonomy::Full;
    let mut s = AgentSession::open(&p.file, "alice", &p.agent, None, opts).unwrap();
    let sid = s.session_id().to_owned();
    s.run_turn("write", &mut no_ask).await.unwrap();
    support::alice(
        &p.file,
        "markdown.write",
        Some(&p.notes),
        json!({"markdown": "alice's text"}),
    )
    .await;
    let e = checkpoint::undo(&p.file, "alice", &sid, Selection::Last(1), false)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("block 'Notes'"), "{e}");
    let text = p.file.resolve(&p.file.block(&p.notes).unwrap()).unwrap();
    assert_eq!(text.contents["markdown"], "alice's text");
    // An editor without the owner's rights cannot restore blocks.
    let e = checkpoint::undo(&p.file, "nobody", &sid, Selection::Last(1), true)
        .await
        .unwrap_err();
    assert!(!e.to_string().is_empty());
    let e = checkpoint::undo(
        &p.file,
        "alice",
        "no-such-session",
        Selection::Last(1),
        false,
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("no agent session"), "{e}");
}

/// Issue 37: a directory is undone file by file. A file the user made (and exported) after
/// the agent's step is theirs: the undo of the step keeps it and takes back only the agent's
/// file, from the document and from the disk the user's export wrote it to. An entry of the
/// step's that the user changed since is the conflict, named by its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_is_undone_file_by_file_others_files_stay() {
    let p = project().await;
    let provider = Arc::new(ScriptedProvider::new([
        calls(&[(
            "t1",
            "elfiee_directory_add",
            json!({"directory": p.dir, "path": "src/agent_made.rs", "content": "pub fn made() {}\n"}),
        )]),
        done("made"),
    ]));
    let mut opts = SessionOptions::new(provider, "scripted");
    opts.autonomy = Autonomy::Full;
    let mut s = AgentSession::open(&p.file, "alice", &p.agent, None, opts).unwrap();
    let sid = s.session_id().to_owned();
    let before = shot(&p);
    s.run_turn("make a file", &mut no_ask).await.unwrap();
    // The user makes a file of their own, then exports both.
    support::alice(
        &p.file,
        "directory.add",
        Some(&p.dir),
        json!({"path": "src/alice.rs", "content": "// alice\n"}),
    )
    .await;
    elfiee_adapters::service::export_directory(&p.file, "alice", &p.dir)
        .await
        .unwrap();
    assert!(p.root.join("src/agent_made.rs").exists());
    let r = checkpoint::undo(&p.file, "alice", &sid, Selection::Last(1), false)
        .await
        .unwrap();
    assert_eq!(r.files_removed, vec!["src/agent_made.rs"], "{r:?}");
    assert!(!p.root.join("src/agent_made.rs").exists());
    assert_eq!(
        std::fs::read_to_string(p.root.join("src/alice.rs")).unwrap(),
        "// alice\n",
        "the user's file stays on disk"
    );
    let entries: Vec<String> = p.file.with_state(|st| {
        elfiee_capabilities::builtin::directory_list::<elfiee_model::DirectoryEntry>(
            st.block(&p.dir).unwrap(),
            "entries",
        )
        .into_iter()
        .map(|e| e.path)
        .collect()
    });
    assert!(entries.contains(&"src/alice.rs".to_owned()), "{entries:?}");
    assert!(
        !entries.contains(&"src/agent_made.rs".to_owned()),
        "{entries:?}"
    );
    dir_clean(&p);
    check_log(&p.file).await;
    let mut without_alice = shot(&p).tree;
    without_alice.remove("src/alice.rs");
    assert_eq!(without_alice, before.tree);

    // Back again; the user removes the agent's file from the directory: that is the conflict.
    checkpoint::redo(&p.file, "alice", &sid, false)
        .await
        .unwrap();
    support::alice(
        &p.file,
        "directory.remove",
        Some(&p.dir),
        json!({"path": "src/agent_made.rs", "keep_block": true}),
    )
    .await;
    let e = checkpoint::undo(&p.file, "alice", &sid, Selection::Last(1), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'src/agent_made.rs' in directory 'proj'") && !e.contains("block 'proj'"),
        "{e}"
    );
    check_log(&p.file).await;
}

// The property: random steps (block writes and creates, file creates, edits, deletes,
// binary, empty, CRLF and mode changes) and random undo / redo orders; after each operation
// the folder and the blocks equal the model's expectation, and the log verifies and replays.

#[derive(Debug, Clone)]
enum FsOp {
    Write(usize, Vec<u8>),
    Delete(usize),
    Chmod(usize, bool),
}

#[derive(Debug, Clone)]
enum DocOp {
    Write(usize, String),
    Create(String),
}

#[derive(Debug, Clone)]
enum Op {
    Step(Vec<FsOp>, Vec<DocOp>),
    Undo(u64),
    Redo,
}

const PATHS: [&str; 4] = ["a.txt", "sub/b.rs", "sub/deep/c.bin", "empty"];

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"x".to_vec()),
        Just(b"line one\r\nline two\r\n".to_vec()),
        Just(b"\ttabbed\nno final newline".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..300),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let fs = prop_oneof![
        (0..PATHS.len(), content()).prop_map(|(i, c)| FsOp::Write(i, c)),
        (0..PATHS.len()).prop_map(FsOp::Delete),
        (0..PATHS.len(), any::<bool>()).prop_map(|(i, x)| FsOp::Chmod(i, x)),
    ];
    let doc = prop_oneof![
        (0..2usize, "[a-z ]{0,40}").prop_map(|(i, t)| DocOp::Write(i, t)),
        "[a-z]{1,8}".prop_map(DocOp::Create),
    ];
    prop_oneof![
        3 => (proptest::collection::vec(fs, 0..4), proptest::collection::vec(doc, 0..3))
            .prop_map(|(f, d)| Op::Step(f, d)),
        2 => (1..3u64).prop_map(Op::Undo),
        1 => Just(Op::Redo),
    ]
}

fn apply_fs(root: &Path, op: &FsOp) {
    use std::os::unix::fs::PermissionsExt;
    match op {
        FsOp::Write(i, c) => {
            let p = root.join(PATHS[*i]);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, c).unwrap();
        }
        FsOp::Delete(i) => {
            let _ = std::fs::remove_file(root.join(PATHS[*i]));
        }
        FsOp::Chmod(i, exec) => {
            let p = root.join(PATHS[*i]);
            if p.is_file() {
                let mode = if *exec { 0o755 } else { 0o644 };
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
    }
}

/// Files only (restore leaves folders it made; an empty folder holds nothing to compare).
fn files(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    tree(root)
}

async fn run_ops(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "start").unwrap();
    let (_engine, file, _dir, agent) =
        agent_on_folder(&tmp.path().join("p.elf"), &root, "prop").await;
    let mut md = Vec::new();
    for name in ["m0", "m1"] {
        md.push(support::create_block(&file, name, "markdown").await);
    }
    let sid = "prop-session";
    // Each step: (before, after) snapshots; the model's done stack and redo groups.
    type Snap = (BTreeMap<String, (Vec<u8>, u32)>, BTreeMap<String, Block>);
    let mut snaps: Vec<(Snap, Snap)> = Vec::new();
    let mut done_steps: Vec<usize> = Vec::new();
    let mut redo: Vec<Vec<usize>> = Vec::new();
    let mut recorder = StepRecorder::new(&file, &agent);
    let snap = |file: &FileHandle| (files(&root), blocks(file));
    // The session exists once it has an entry.
    support::alice(
        &file,
        "agent.session",
        Some(&agent),
        json!({"session_id": sid, "entry": "title", "title": "prop"}),
    )
    .await;
    for op in ops {
        match op {
            Op::Step(fs, doc) => {
                let before = snap(&file);
                let start = recorder.begin().unwrap();
                for f in &fs {
                    apply_fs(&root, f);
                }
                for d in &doc {
                    let cmd = match d {
                        DocOp::Write(i, t) => Command::new(
                            "alice",
                            "markdown.write",
                            Some(&md[*i]),
                            json!({"markdown": t}),
                        ),
                        DocOp::Create(n) => Command::new(
                            "alice",
                            "core.create",
                            None,
                            json!({"name": n, "block_type": "code"}),
                        ),
                    };
                    file.submit(cmd).await.unwrap();
                }
                let n = snaps.len() as u64 + 1;
                let mut entry = recorder.end(start, n).unwrap();
                entry["session_id"] = json!(sid);
                support::alice(&file, "agent.session", Some(&agent), entry).await;
                recorder.committed();
                snaps.push((before, snap(&file)));
                done_steps.push(snaps.len() - 1);
                redo.clear();
            }
            Op::Undo(n) => {
                let r = checkpoint::undo(&file, "alice", sid, Selection::Last(n), false).await;
                if done_steps.is_empty() {
                    prop_assert!(r.is_err());
                    continue;
                }
                r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                let m = (n as usize).min(done_steps.len());
                let group = done_steps.split_off(done_steps.len() - m);
                let expected = &snaps[group[0]].0;
                prop_assert_eq!(&snap(&file), expected);
                redo.push(group);
            }
            Op::Redo => {
                let r = checkpoint::redo(&file, "alice", sid, false).await;
                let Some(group) = redo.pop() else {
                    prop_assert!(r.is_err(), "nothing to redo: {:?}", r);
                    continue;
                };
                r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                let expected = &snaps[*group.last().unwrap()].1;
                prop_assert_eq!(&snap(&file), expected);
                done_steps.extend(group);
            }
        }
        let v = file.verify().await.unwrap();
        prop_assert!(v.ok, "verify: {:?}", v);
        let (_, replayed) = file.replay().await.unwrap();
        prop_assert_eq!(replayed.digest(), file.state_digest());
    }
    file.close().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn random_steps_and_undo_redo_orders_keep_folder_and_document_in_step(
        ops in proptest::collection::vec(op(), 1..9)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run_ops(ops))?;
    }
}

// A checkpoint from file events must see exactly what a walk sees: random changes (files
// made, changed, removed, folders made and renamed, ignore rules changed, ignored files
// written), then the watched rescan is compared with a fresh walk.

#[derive(Debug, Clone)]
enum Change {
    Write(usize, Vec<u8>),
    Delete(usize),
    Chmod(usize, bool),
    RenameDir,
    IgnoreLogs(bool),
    Log(u8),
}

const WPATHS: [&str; 6] = [
    "a.txt",
    "d/b.rs",
    "d/e/c.md",
    "x.log",
    "target/out",
    "n/new.rs",
];

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (0..WPATHS.len(), content()).prop_map(|(i, c)| Change::Write(i, c)),
        2 => (0..WPATHS.len()).prop_map(Change::Delete),
        1 => (0..WPATHS.len(), any::<bool>()).prop_map(|(i, x)| Change::Chmod(i, x)),
        1 => Just(Change::RenameDir),
        1 => any::<bool>().prop_map(Change::IgnoreLogs),
        1 => any::<u8>().prop_map(Change::Log),
    ]
}

fn apply_change(root: &Path, c: &Change) {
    use std::os::unix::fs::PermissionsExt;
    match c {
        Change::Write(i, bytes) => {
            let p = root.join(WPATHS[*i]);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        Change::Delete(i) => {
            let _ = std::fs::remove_file(root.join(WPATHS[*i]));
        }
        Change::Chmod(i, x) => {
            let p = root.join(WPATHS[*i]);
            if p.is_file() {
                let mode = if *x { 0o755 } else { 0o600 };
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        Change::RenameDir => {
            if root.join("d").is_dir() {
                let _ = std::fs::remove_dir_all(root.join("d2"));
                std::fs::rename(root.join("d"), root.join("d2")).unwrap();
            } else if root.join("d2").is_dir() {
                std::fs::rename(root.join("d2"), root.join("d")).unwrap();
            }
        }
        Change::IgnoreLogs(on) => {
            let rules = if *on { "*.log\n" } else { "# nothing\n" };
            std::fs::write(root.join(".gitignore"), rules).unwrap();
        }
        Change::Log(n) => {
            std::fs::write(root.join(format!("run-{n}.log")), [*n]).unwrap();
        }
    }
}

fn contents(m: &checkpoint::Manifest) -> BTreeMap<String, (String, u64, u32)> {
    m.files
        .iter()
        .map(|(k, v)| (k.clone(), (v.hash.clone(), v.len, v.mode)))
        .collect()
}

async fn watched_equals_walk(rounds: Vec<Vec<Change>>) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("w");
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    std::fs::write(root.join("d/b.rs"), "b").unwrap();
    let engine = Engine::new(EngineConfig::default());
    let file = engine
        .init(&tmp.path().join("w.elf"), "Alice")
        .await
        .unwrap();
    let mut tracker = checkpoint::FolderTracker::open(&file, "dir", &root);
    tracker.scan().unwrap();
    for round in rounds {
        for c in &round {
            apply_change(&root, c);
        }
        let (watched, _) = tracker.scan().unwrap();
        let (walked, _) =
            checkpoint::scan::scan(&root, &Default::default(), |_, _, _| Ok(())).unwrap();
        prop_assert_eq!(contents(watched), contents(&walked), "after {:?}", round);
    }
    file.close().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn a_checkpoint_from_file_events_sees_what_a_walk_sees(
        rounds in proptest::collection::vec(proptest::collection::vec(change(), 0..5), 1..6)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(watched_equals_walk(rounds))?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_too_large_to_keep_is_named_when_an_undo_needs_it_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("big");
    std::fs::create_dir_all(&root).unwrap();
    let big = vec![7u8; (checkpoint::MAX_KEPT_BYTES + 1) as usize];
    std::fs::write(root.join("video.bin"), &big).unwrap();
    std::fs::write(root.join("notes.txt"), "keep me").unwrap();
    let (_engine, file, _dir, agent) =
        agent_on_folder(&tmp.path().join("b.elf"), &root, "big").await;
    let mut rec = StepRecorder::new(&file, &agent);
    let start = rec.begin().unwrap();
    std::fs::remove_file(root.join("video.bin")).unwrap();
    std::fs::write(root.join("notes.txt"), "changed").unwrap();
    let mut entry = rec.end(start, 1).unwrap();
    entry["session_id"] = json!("big-session");
    support::alice(&file, "agent.session", Some(&agent), entry).await;
    rec.committed();
    let e = checkpoint::undo(&file, "alice", "big-session", Selection::Last(1), false)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("video.bin") && e.to_string().contains("not kept"),
        "{e}"
    );
    assert!(!root.join("video.bin").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "changed",
        "nothing was undone, not even the small file"
    );
    file.close().await;
}
