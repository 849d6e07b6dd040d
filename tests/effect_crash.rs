//! A crash between commit and effect: the process dies after `agent.enable` is committed and
//! before the integration effect runs. On the next open the effect runs once and its outcome
//! is committed once.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn elfiee(elf: &Path, args: &[&str], crash: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_elfiee"));
    c.args(args)
        .env("ELFIEE_ELF", elf)
        .env("ELFIEE_NODE_ID", "crash-test")
        .env_remove("ELFIEE_TEST_CRASH_BEFORE_EFFECT");
    if let Some(effect) = crash {
        c.env("ELFIEE_TEST_CRASH_BEFORE_EFFECT", effect);
    }
    c.output().expect("run elfiee")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Counts events by kind, reading the log through the library (no effects attached).
fn count(elf: &Path, attribute_suffix: &str) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let engine = elfiee::Engine::new(elfiee::EngineConfig {
            node_id: "reader".into(),
            ..Default::default()
        });
        let file = engine.open(elf).await.unwrap();
        let n = file
            .events(1)
            .unwrap()
            .iter()
            .filter(|e| e.attribute.ends_with(attribute_suffix))
            .count();
        file.close().await;
        n
    })
}

#[test]
fn an_effect_interrupted_by_a_crash_runs_once_on_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("proj");
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    let elf = tmp.path().join("c.elf");
    json(&elfiee(
        &elf,
        &["--json", "init", elf.to_str().unwrap(), "--owner", "Alice"],
        None,
    ));
    let dir = json(&elfiee(
        &elf,
        &["--json", "dir", "import", project.to_str().unwrap()],
        None,
    ))["block_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The process aborts right before the effect would touch the project.
    let crashed = elfiee(
        &elf,
        &["--json", "agent", "create", "--target", &dir],
        Some("claude"),
    );
    assert!(
        !crashed.status.success(),
        "the test hook must kill the process"
    );
    assert_eq!(
        count(&elf, "/agent.enable"),
        1,
        "the command was committed before the crash"
    );
    assert_eq!(count(&elf, "/agent.effect_outcome"), 0);
    assert!(
        !project.join(".mcp.json").exists(),
        "the effect did not run before the crash"
    );
    // Any elfiee command opens the file with effects attached: they catch up.
    json(&elfiee(&elf, &["--json", "block", "list"], None));
    assert!(
        project.join(".mcp.json").exists(),
        "the effect ran on reopen"
    );
    assert!(project
        .join(".claude/skills/elfiee-client")
        .symlink_metadata()
        .is_ok());
    assert_eq!(count(&elf, "/agent.effect_outcome"), 1);
    // Reopening again runs nothing more.
    json(&elfiee(&elf, &["--json", "agent", "list"], None));
    assert_eq!(count(&elf, "/agent.effect_outcome"), 1);
    assert_eq!(count(&elf, "/agent.effect_plan"), 1);

    // The same for disable.
    let agent = json(&elfiee(&elf, &["--json", "agent", "list"], None))[0]["agent_block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!elfiee(&elf, &["agent", "disable", &agent], Some("claude"))
        .status
        .success());
    json(&elfiee(&elf, &["--json", "agent", "list"], None));
    assert!(!project.join(".mcp.json").exists());
    assert_eq!(count(&elf, "/agent.effect_outcome"), 2);
    assert_eq!(json(&elfiee(&elf, &["--json", "verify"], None))["ok"], true);
}
