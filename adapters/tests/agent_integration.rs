//! The Claude Code integration against real project folders (seed 001 §15, DESIGN.md §7).

mod support;
use std::path::{Path, PathBuf};
use std::process::Command as Proc;
use std::sync::{Arc, Mutex};

use elfiee_adapters::service::{create_agent, set_agent_enabled, AgentResult};
use elfiee_adapters::{attach, EffectsConfig, EffectsHandle};
use elfiee_engine::{Engine, EngineConfig, EngineError, FileHandle};
use elfiee_model::Command;
use serde_json::{json, Value};

struct Fixture {
    _tmp: tempfile::TempDir,
    elf: PathBuf,
    project: PathBuf,
    engine: Engine,
}

fn git(project: &Path, args: &[&str]) -> String {
    let out = Proc::new("git")
        .args(args)
        .current_dir(project)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git repository with `.claude/`, optionally an existing `.mcp.json` with another server and
/// an existing `settings.local.json`, all committed.
fn fixture(existing_configs: bool) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    std::fs::write(project.join("README.md"), "# project\n").unwrap();
    if existing_configs {
        std::fs::write(
            project.join(".mcp.json"),
            "{\n  \"mcpServers\": {\n    \"other\": {\n      \"command\": \"other-tool\",\n      \"args\": [\"--flag\"]\n    }\n  },\n  \"note\": \"keep me\"\n}\n",
        )
        .unwrap();
        std::fs::write(
            project.join(".claude/settings.local.json"),
            "{\n  \"permissions\": {\"allow\": [\"Bash(ls)\"]},\n  \"enabledMcpjsonServers\": [\"other\"]\n}\n",
        )
        .unwrap();
    } else {
        std::fs::write(project.join(".claude/keep.txt"), "x").unwrap();
    }
    git(&project, &["init", "-q"]);
    git(&project, &["add", "-A"]);
    git(
        &project,
        &[
            "-c",
            "user.email=t@e.st",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "init",
        ],
    );
    let project = project.canonicalize().unwrap();
    let elf = tmp.path().join("doc.elf");
    Fixture {
        _tmp: tmp,
        elf,
        project,
        engine: Engine::new(EngineConfig {
            node_id: "t".into(),
            ..EngineConfig::default()
        }),
    }
}

/// Effect runs seen by the observer: `(effect, seq)`.
type Runs = Arc<Mutex<Vec<(String, u64)>>>;

fn config(observer: Option<Runs>) -> EffectsConfig {
    let mut c = EffectsConfig {
        elfiee_bin: PathBuf::from("/usr/local/bin/elfiee"),
        ..EffectsConfig::default()
    };
    if let Some(rec) = observer {
        c.runtime.observer = Some(Arc::new(move |name: &str, seq: u64| {
            rec.lock().unwrap().push((name.to_owned(), seq))
        }));
    }
    c
}

async fn open(f: &Fixture, init: bool) -> (FileHandle, EffectsHandle) {
    let file = if init {
        f.engine.init(&f.elf, "Alice").await.unwrap()
    } else {
        f.engine.open(&f.elf).await.unwrap()
    };
    let fx = attach(&file, config(None)).await.unwrap();
    (file, fx)
}

async fn project_dir(f: &Fixture, file: &FileHandle) -> String {
    support::import_folder(file, &f.project).await
}

/// A new document with the fixture's project imported: the file, its effects and the
/// directory block's id.
async fn with_project(f: &Fixture) -> (FileHandle, EffectsHandle, String) {
    let (file, fx) = open(f, true).await;
    let dir = project_dir(f, &file).await;
    (file, fx, dir)
}

/// Alice creates an agent on the directory block `dir`.
async fn agent_for(file: &FileHandle, dir: &str) -> AgentResult {
    create_agent(file, "alice", Some(dir), None).await.unwrap()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[tokio::test]
async fn create_enable_enable_disable_leaves_git_status_exactly_as_before() {
    let f = fixture(true);
    let before = git(&f.project, &["status", "--porcelain", "--ignored"]);
    let (file, fx, dir) = with_project(&f).await;
    let r = agent_for(&file, &dir).await;
    assert_eq!((r.status.as_str(), r.needs_restart), ("enabled", true));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    // What Claude Code reads: .mcp.json at the root, the approval, the skill link.
    let mcp = read_json(&f.project.join(".mcp.json"));
    let server = &mcp["mcpServers"]["elfiee"];
    assert_eq!(server["command"], "/usr/local/bin/elfiee");
    let elf_abs = f.elf.canonicalize().unwrap().display().to_string();
    assert_eq!(
        server["args"],
        json!(["mcp-server", "--elf", elf_abs, "--editor", r.editor_id])
    );
    assert_eq!(
        mcp["mcpServers"]["other"],
        json!({"command": "other-tool", "args": ["--flag"]}),
        "other servers untouched"
    );
    assert_eq!(mcp["note"], "keep me");
    assert_eq!(
        read_json(&f.project.join(".claude/mcp.json"))["mcpServers"]["elfiee"],
        *server,
        "seed path kept in sync"
    );
    let settings = read_json(&f.project.join(".claude/settings.local.json"));
    assert_eq!(
        settings["enabledMcpjsonServers"],
        json!(["other", "elfiee"])
    );
    assert_eq!(settings["permissions"], json!({"allow": ["Bash(ls)"]}));
    let link = f.project.join(".claude/skills/elfiee-client");
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    let skill = std::fs::read_to_string(link.join("SKILL.md")).unwrap();
    assert!(
        skill.starts_with("---\nname: elfiee-client\ndescription: "),
        "{skill}"
    );

    let again = set_agent_enabled(&file, "alice", &r.agent_block_id, true)
        .await
        .unwrap();
    assert!(
        again.warnings.is_empty(),
        "enable is idempotent: {:?}",
        again.warnings
    );
    assert_eq!(
        read_json(&f.project.join(".mcp.json"))["mcpServers"]["elfiee"],
        *server
    );
    let off = set_agent_enabled(&file, "alice", &r.agent_block_id, false)
        .await
        .unwrap();
    assert_eq!(off.status, "disabled");
    assert!(off.warnings.is_empty(), "{:?}", off.warnings);
    assert_eq!(
        git(&f.project, &["status", "--porcelain", "--ignored"]),
        before
    );
    assert!(!f.project.join(".claude/skills").exists());

    // Disabling a disabled agent succeeds and changes nothing.
    let twice = set_agent_enabled(&file, "alice", &r.agent_block_id, false)
        .await
        .unwrap();
    assert!(twice.warnings.is_empty());
    assert_eq!(
        git(&f.project, &["status", "--porcelain", "--ignored"]),
        before
    );
    support::settle_and_close(&file, fx).await;
}

#[tokio::test]
async fn a_project_without_mcp_json_or_skills_has_none_after_disable() {
    let f = fixture(false);
    let (file, fx, dir) = with_project(&f).await;
    let r = create_agent(&file, "alice", Some(&dir), Some("helper"))
        .await
        .unwrap();
    assert!(f.project.join(".mcp.json").exists() && f.project.join(".claude/skills").exists());
    set_agent_enabled(&file, "alice", &r.agent_block_id, false)
        .await
        .unwrap();
    for p in [
        ".mcp.json",
        ".claude/mcp.json",
        ".claude/skills",
        ".claude/settings.local.json",
    ] {
        assert!(
            !f.project.join(p).exists(),
            "{p} was created by enable and must be gone"
        );
    }
    assert!(f.project.join(".claude/keep.txt").exists());
    assert_eq!(git(&f.project, &["status", "--porcelain", "--ignored"]), "");
    support::settle_and_close(&file, fx).await;
}

#[tokio::test]
async fn reopening_or_replaying_after_a_manual_delete_does_not_redo_io() {
    let f = fixture(false);
    let (file, fx, dir) = with_project(&f).await;
    agent_for(&file, &dir).await;
    support::settle_and_close(&file, fx).await;
    std::fs::remove_file(f.project.join(".mcp.json")).unwrap();

    let runs = Arc::new(Mutex::new(Vec::new()));
    let file = f.engine.open(&f.elf).await.unwrap();
    let fx = attach(&file, config(Some(runs.clone()))).await.unwrap();
    support::settle_and_close(&file, fx).await;
    assert!(
        runs.lock().unwrap().is_empty(),
        "no effect ran on reopen: {:?}",
        runs.lock().unwrap()
    );
    let (report, _) = elfiee_engine::replay(&f.elf, |_, _| {}).unwrap();
    assert!(report.events > 0);
    assert!(
        !f.project.join(".mcp.json").exists(),
        "neither reopen nor replay recreated the file"
    );
}

#[tokio::test]
async fn missing_claude_dir_is_refused_before_anything_is_committed() {
    let f = fixture(false);
    std::fs::remove_dir_all(f.project.join(".claude")).unwrap();
    let (file, fx, dir) = with_project(&f).await;
    let seq = file.last_seq();
    let err = create_agent(&file, "alice", Some(&dir), None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Claude not initialized in target project: {}. Run 'claude' first.",
            f.project.display()
        )
    );
    assert_eq!(file.last_seq(), seq);
    support::settle_and_close(&file, fx).await;
}

#[tokio::test]
async fn a_duplicate_agent_for_one_project_is_refused() {
    let f = fixture(false);
    let (file, fx, dir) = with_project(&f).await;
    let first = agent_for(&file, &dir).await;
    let err = create_agent(&file, "alice", Some(&dir), None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "Agent already exists for project: project (block_id: {})",
            first.agent_block_id
        )),
        "{err}"
    );
    support::settle_and_close(&file, fx).await;
}

#[tokio::test]
async fn invalid_json_is_a_warning_and_the_file_is_left_untouched() {
    let f = fixture(false);
    std::fs::write(f.project.join(".mcp.json"), "{ broken").unwrap();
    let (file, fx, dir) = with_project(&f).await;
    let r = agent_for(&file, &dir).await;
    assert!(
        r.warnings
            .iter()
            .any(|w| w.starts_with("Invalid JSON in") && w.contains(".mcp.json")),
        "{:?}",
        r.warnings
    );
    assert_eq!(
        std::fs::read_to_string(f.project.join(".mcp.json")).unwrap(),
        "{ broken"
    );
    assert_eq!(
        r.status, "enabled",
        "partial failure: the event stands, the outcome carries warnings"
    );
    set_agent_enabled(&file, "alice", &r.agent_block_id, false)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(f.project.join(".mcp.json")).unwrap(),
        "{ broken"
    );
    assert!(!f.project.join(".claude/mcp.json").exists());
    support::settle_and_close(&file, fx).await;
}

#[tokio::test]
async fn a_foreign_symlink_or_real_directory_is_never_removed() {
    for foreign_is_dir in [false, true] {
        let f = fixture(false);
        let skills = f.project.join(".claude/skills");
        std::fs::create_dir_all(&skills).unwrap();
        let link = skills.join("elfiee-client");
        if foreign_is_dir {
            std::fs::create_dir(&link).unwrap();
            std::fs::write(link.join("mine.md"), "user data").unwrap();
        } else {
            std::os::unix::fs::symlink(&f.project, &link).unwrap();
        }
        let (file, fx, dir) = with_project(&f).await;
        let r = agent_for(&file, &dir).await;
        assert!(
            r.warnings.iter().any(|w| w.contains("left alone")),
            "{:?}",
            r.warnings
        );
        set_agent_enabled(&file, "alice", &r.agent_block_id, false)
            .await
            .unwrap();
        if foreign_is_dir {
            assert_eq!(
                std::fs::read_to_string(link.join("mine.md")).unwrap(),
                "user data"
            );
        } else {
            assert_eq!(std::fs::read_link(&link).unwrap(), f.project);
        }
        support::settle_and_close(&file, fx).await;
    }
}

#[tokio::test]
async fn enabling_needs_ownership_or_a_grant() {
    let f = fixture(false);
    let (file, fx) = open(&f, true).await;
    file.submit(Command::new(
        "alice",
        "editor.create",
        None,
        json!({"name": "Bob", "editor_id": "bob"}),
    ))
    .await
    .unwrap();
    let dir = project_dir(&f, &file).await;
    let r = agent_for(&file, &dir).await;
    let err = set_agent_enabled(&file, "bob", &r.agent_block_id, false)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Rejected(_)), "{err}");
    file.submit(Command::new(
        "alice",
        "core.grant",
        Some(&r.agent_block_id),
        json!({"editor_id": "bob", "cap_id": "agent.disable"}),
    ))
    .await
    .unwrap();
    let off = set_agent_enabled(&file, "bob", &r.agent_block_id, false)
        .await
        .unwrap();
    assert_eq!(off.status, "disabled");
    let last = file
        .events(1)
        .unwrap()
        .into_iter()
        .rev()
        .find(|e| e.cap_id() == "agent.effect_outcome")
        .unwrap();
    assert_eq!(
        last.editor_id(),
        "bob",
        "the outcome is attributed to the editor who asked"
    );
    support::settle_and_close(&file, fx).await;
}

#[tokio::test]
async fn every_outcome_is_committed_once_per_trigger() {
    let f = fixture(false);
    let (file, fx, dir) = with_project(&f).await;
    let r = agent_for(&file, &dir).await;
    for on in [true, false, true] {
        set_agent_enabled(&file, "alice", &r.agent_block_id, on)
            .await
            .unwrap();
    }
    support::settle_and_close(&file, fx).await;
    let (file, fx) = open(&f, false).await;
    support::settle_and_close(&file, fx).await;
    let file = f.engine.open(&f.elf).await.unwrap();
    let events = file.events(1).unwrap();
    let triggers = events
        .iter()
        .filter(|e| matches!(e.cap_id(), "agent.enable" | "agent.disable"))
        .count();
    let outcomes = events
        .iter()
        .filter(|e| e.cap_id() == "agent.effect_outcome")
        .count();
    assert_eq!(
        outcomes, triggers,
        "one outcome per trigger, none repeated by reopening"
    );
    file.close().await;
}
