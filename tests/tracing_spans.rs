//! One `commit` span per command carries what an embedder needs to find a slow command:
//! `cmd_id`, `cap_id`, `editor`, `seq`, and the handler, write + flush, and apply durations.

mod common;
use common::Captured;

use elfiee::{Command, Engine, EngineConfig};
use serde_json::json;

#[tokio::test]
async fn every_command_gets_a_commit_span_with_ids_and_durations() {
    let out = Captured::default();
    let sink = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("elfiee_engine=debug")
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    // This test's runtime is single-threaded, so the command runs on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(EngineConfig {
        node_id: "n".into(),
        ..EngineConfig::default()
    });
    let f = engine
        .init(dir.path().join("t.elf"), "Alice")
        .await
        .unwrap();
    let created = f
        .submit(Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": "Spec", "block_type": "markdown"}),
        ))
        .await
        .unwrap();
    let cmd = Command::new(
        "alice",
        "markdown.write",
        Some(&created[0].entity),
        json!({"markdown": "# Hi"}),
    );
    let cmd_id = cmd.cmd_id;
    let written = f.submit(cmd).await.unwrap();
    f.close().await;

    let text = out.text();
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("cmd_id={cmd_id}")))
        .collect();
    let span_fields = format!("cap_id=markdown.write editor=alice seq={}", written[0].seq);
    let sequenced = mine
        .iter()
        .find(|l| l.contains("sequenced"))
        .unwrap_or_else(|| panic!("no 'sequenced' line for {cmd_id} in:\n{text}"));
    assert!(sequenced.contains(&span_fields), "{sequenced}");
    assert!(sequenced.contains("handler_us="), "{sequenced}");
    let committed = mine
        .iter()
        .find(|l| l.contains("committed"))
        .unwrap_or_else(|| panic!("no 'committed' line for {cmd_id} in:\n{text}"));
    assert!(committed.contains(&span_fields), "{committed}");
    for field in ["write_flush_us=", "apply_us=", "group=1"] {
        assert!(committed.contains(field), "{field} missing: {committed}");
    }
}
