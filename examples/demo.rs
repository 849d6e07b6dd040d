//! The whole flow on the embedded sled store, narrated:
//! init → editors → blocks → links → grants (and a refused command) → live subscription →
//! optimistic concurrency → group commit → effects (folder import, terminal, Claude Code agent
//! enable/disable) → close → reopen from snapshot → replay from the log → verify.
//!
//! Run: `cargo run --example demo` (add a directory argument to keep the .elf).

use std::time::Instant;

use elfiee::{CapError, Command, Engine, EngineError};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keep = std::env::args().nth(1);
    let tmp = tempfile::tempdir()?;
    let dir = keep
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_owned());
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("demo.elf");
    let engine = Engine::global();

    step(
        "1. init",
        &format!("create {} owned by Alice", path.display()),
    );
    let file = engine.init(&path, "Alice").await?;
    let alice = file.owner().expect("init sets the owner");
    say(&format!(
        "owner editor id: {alice}; she holds every capability on '*'"
    ));

    let mut live = file.subscribe();
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(e) = live.recv().await {
            seen.push(format!("#{} {}", e.seq, e.attribute));
        }
        seen
    });

    step("2. editors", "Alice adds Bob (human) and a helper agent");
    let bob = file
        .submit(Command::new(
            &alice,
            "editor.create",
            None,
            json!({"name": "Bob", "editor_id": "bob"}),
        ))
        .await?[0]
        .entity
        .clone();
    let agent = file
        .submit(Command::new(
            &alice,
            "editor.create",
            None,
            json!({"name": "Helper", "editor_type": "agent"}),
        ))
        .await?[0]
        .entity
        .clone();
    say(&format!("bob = {bob}, agent = {agent}"));

    step(
        "3. blocks",
        "a requirement (markdown) and its implementation (code)",
    );
    let req = create(&file, &alice, "Requirement", "markdown").await?;
    let imp = create(&file, &alice, "parser.rs", "code").await?;
    file.submit(Command::new(
        &alice,
        "markdown.write",
        Some(&req),
        json!({"markdown": "# Parse commands\nThe parser must accept `<command>` blocks."}),
    ))
    .await?;
    file.submit(Command::new(
        &alice,
        "code.write",
        Some(&imp),
        json!({"text": "fn parse() {}", "language": "rust"}),
    ))
    .await?;
    file.submit(Command::new(
        &alice,
        "core.link",
        Some(&imp),
        json!({"to": req, "relation": "implement"}),
    ))
    .await?;
    say(&format!("{imp} -implement-> {req}"));

    step(
        "4. CBAC",
        "Bob may not write the code block until Alice grants it",
    );
    let denied = file
        .submit(Command::new(
            &bob,
            "code.write",
            Some(&imp),
            json!({"text": "fn parse() { todo!() }"}),
        ))
        .await;
    match denied {
        Err(EngineError::Rejected(CapError::Unauthorized { .. })) => {
            say("refused as expected: nothing was written")
        }
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    file.submit(Command::new(
        &alice,
        "core.grant",
        Some(&imp),
        json!({"editor_id": bob, "cap_id": "code.write"}),
    ))
    .await?;
    file.submit(Command::new(
        &bob,
        "code.write",
        Some(&imp),
        json!({"text": "fn parse(input: &str) -> Vec<Command> { todo!() }"}),
    ))
    .await?;
    say("after the grant Bob's write committed");

    step(
        "5. optimistic concurrency",
        "two writers start from the same seq; the second gets Conflict",
    );
    let seen = file.last_seq();
    file.submit(
        Command::new(
            &alice,
            "markdown.write",
            Some(&req),
            json!({"markdown": "v2 by Alice"}),
        )
        .expecting(seen),
    )
    .await?;
    let late = file
        .submit(
            Command::new(
                &alice,
                "markdown.write",
                Some(&req),
                json!({"markdown": "v2 by someone else"}),
            )
            .expecting(seen),
        )
        .await;
    say(&format!(
        "second writer: {}",
        late.err().map(|e| e.to_string()).unwrap_or_default()
    ));

    step(
        "6. group commit",
        "64 concurrent submitters, each answered only once durable",
    );
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (f, a) = (file.clone(), alice.clone());
        tasks.push(tokio::spawn(async move {
            f.submit(Command::new(
                &a,
                "core.create",
                None,
                json!({"name": format!("note {i}"), "block_type": "markdown"}),
            ))
            .await
        }));
    }
    for t in tasks {
        t.await??;
    }
    say(&format!(
        "64 commands durable in {:?}; log now at seq {}",
        t.elapsed(),
        file.last_seq()
    ));

    step(
        "7. effects",
        "import a project folder, run a terminal command, integrate Claude Code",
    );
    let effects =
        elfiee::adapters::attach(&file, elfiee::adapters::EffectsConfig::default()).await?;
    let project = dir.join("project");
    std::fs::create_dir_all(project.join(".claude"))?;
    std::fs::write(project.join("README.md"), "# Demo project\n")?;
    std::fs::write(project.join("main.rs"), "fn main() { println!(\"hi\"); }\n")?;
    let limits = elfiee::adapters::import::ImportLimits::default();
    let import =
        elfiee::adapters::service::import_directory(&file, &alice, &project, None, &limits, |_| {})
            .await?;
    say(&format!(
        "imported {} files as directory block {} (streamed in {} chunk(s); bodies of 256 bytes and more live in the content store, not in the state)",
        import.files, import.block_id, import.sync.chunks
    ));
    let before_edit = file.last_seq();
    std::fs::write(
        project.join("README.md"),
        "# Demo project\n\nEdited on disk.\n",
    )?;
    let rescan =
        elfiee::adapters::service::sync_directory(&file, &alice, &import.block_id, &limits, |_| {})
            .await?;
    say(&format!(
        "rescan: {} changed, {} added, {} deleted, {} unchanged (events only for what changed)",
        rescan.changed, rescan.added, rescan.deleted, rescan.unchanged
    ));
    let readme_id = file
        .with_state(|s| {
            s.blocks
                .values()
                .find(|b| b.name == "README.md")
                .map(|b| b.block_id.clone())
        })
        .unwrap_or_default();
    let then = file.state_at(before_edit).await?;
    let old = then
        .block(&readme_id)
        .map(|b| file.resolve(b))
        .transpose()?
        .map(|b| b.contents["markdown"].clone());
    say(&format!(
        "time travel: README.md at seq {before_edit} was {old:?}; now {:?}",
        file.block(&readme_id)
            .map(|b| b.contents["markdown"].clone())
    ));
    let term = file
        .submit(Command::new(
            &alice,
            "terminal.create",
            None,
            json!({"name": "shell", "linked_directory_id": import.block_id}),
        ))
        .await?[0]
        .entity
        .clone();
    let out =
        elfiee::adapters::service::run_terminal(&file, &alice, &term, "ls && echo done", None)
            .await?;
    say(&format!(
        "terminal ran `ls && echo done` in the project: exit {} — {:?}",
        out["exit_code"],
        out["stdout"].as_str().unwrap_or("")
    ));
    let agent =
        elfiee::adapters::service::create_agent(&file, &alice, Some(&import.block_id), None)
            .await?;
    say(&format!(
        "agent {} ({}) {}: {}",
        agent.agent_block_id, agent.editor_id, agent.status, agent.message
    ));
    say(&format!(
        ".mcp.json now holds: {}",
        std::fs::read_to_string(project.join(".mcp.json"))?.replace('\n', " ")
    ));
    let off =
        elfiee::adapters::service::set_agent_enabled(&file, &alice, &agent.agent_block_id, false)
            .await?;
    say(&format!(
        "disabled: {} (.mcp.json exists: {})",
        off.message,
        project.join(".mcp.json").exists()
    ));
    effects
        .settle(&file, std::time::Duration::from_secs(30))
        .await?;
    // Each effect is an actor supervised by the file's actor (restarted with backoff if it
    // fails); the host can read how they are doing.
    for fx in effects.status() {
        say(&format!(
            "effect {:<9} starts {}, checkpoint {}, retries {}, failed triggers {:?}",
            fx.name, fx.starts, fx.checkpoint, fx.retries, fx.failed_triggers
        ));
    }

    let live_digest = file.state_digest();
    let last_seq = file.last_seq();
    step("8. close", "drain, flush, write a snapshot");
    file.close().await;
    effects.join().await;
    let seen = watcher.await?;
    say(&format!(
        "the live subscriber saw {} events, first {:?}, last {:?}",
        seen.len(),
        seen.first(),
        seen.last()
    ));

    step("9. reopen", "newest valid snapshot + tail");
    let file = engine.open(&path).await?;
    say(&format!(
        "reopened at seq {}; digest equal to live: {}",
        file.last_seq(),
        file.state_digest() == live_digest
    ));
    let blocks = file.with_state(|s| s.blocks.len());
    file.close().await;

    step(
        "10. replay",
        "rebuild from the log alone (no snapshot), checking the hash chain",
    );
    let (report, _) = elfiee::replay(&path, |_, _| {})?;
    say(&format!(
        "{} events → {} blocks in {} ms; digest equal: {}",
        report.events,
        report.blocks,
        report.elapsed_ms,
        report.state_digest == live_digest
    ));
    assert_eq!(report.events, last_seq);
    assert_eq!(report.blocks, blocks);

    step("11. verify", "hash chain, command index, snapshot");
    let v = elfiee::verify(&path, |_, _| {})?;
    say(&format!(
        "{} events in {} commands, snapshot {}, ok = {}",
        v.events,
        v.commands,
        v.snapshot.unwrap_or_default(),
        v.ok
    ));
    if !v.ok || report.state_digest != live_digest {
        return Err("the demo found an inconsistency".into());
    }

    step(
        "12. backup, damage, salvage",
        "one backup file; a damaged log; every provable event back",
    );
    let file = engine.open(&path).await?;
    let backup = elfiee::engine::backup::default_path(file.path());
    let b = file.backup(&backup).await?;
    file.close().await;
    say(&format!(
        "backup {}: events 1..{} and {} bodies in {} ms",
        backup.display(),
        b.seq,
        b.bodies,
        b.elapsed_ms
    ));
    let db = path.join("log").join("db");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)?
        .set_len(300)?;
    match engine.open(&path).await {
        Ok(f) => {
            f.close().await;
            say("the damaged document still opened");
        }
        Err(e) => say(&format!("open refuses it: {e}")),
    }
    let saved = path.with_file_name("demo-salvaged.elf");
    let folds = engine.config().registry.folds().clone();
    let s = elfiee::engine::salvage::salvage(&path, &saved, None, &folds, |_| {})?;
    say(&format!(
        "salvaged events 1..{} ({} lost); digest equal to live: {}",
        s.seq,
        s.lost.len(),
        s.state_digest == live_digest
    ));
    if s.state_digest != live_digest || !elfiee::verify(&saved, |_, _| {})?.ok {
        return Err("the salvaged document differs".into());
    }
    println!("\ndone: {}", path.display());
    Ok(())
}

async fn create(
    file: &elfiee::FileHandle,
    editor: &str,
    name: &str,
    ty: &str,
) -> Result<String, EngineError> {
    let ev = file
        .submit(Command::new(
            editor,
            "core.create",
            None,
            json!({"name": name, "block_type": ty}),
        ))
        .await?;
    say(&format!("created {ty} block '{name}' = {}", ev[0].entity));
    Ok(ev[0].entity.clone())
}

fn step(title: &str, what: &str) {
    println!("\n== {title}: {what}");
}

fn say(s: &str) {
    println!("   {s}");
}
