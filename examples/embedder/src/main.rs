//! `elfiee-embedder <path.elf>`: a short session of a desktop app's backend on the engine core
//! alone — create the document, add and write a block, list the blocks, print each event the
//! page would receive — one JSON object per line on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use elfiee_embedder::Host;
use serde_json::json;

#[tokio::main]
async fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: elfiee-embedder <new-document.elf>");
        return ExitCode::from(2);
    };
    match run(&path).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("elfiee-embedder: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(path: &std::path::Path) -> Result<(), elfiee_embedder::HostError> {
    let host = Host::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    host.open(path, Some("alice"), move |f| {
        let _ = tx.send(f);
    })
    .await?;
    let created = host
        .submit(
            path,
            "alice",
            "core.create",
            None,
            json!({"name": "Notes", "block_type": "markdown"}),
        )
        .await?;
    let id = created[0].entity.clone();
    host.submit(
        path,
        "alice",
        "markdown.write",
        Some(&id),
        json!({"markdown": "# Hello"}),
    )
    .await?;
    for block in host.list_blocks(path, "alice")? {
        println!("{}", json!({"block": block.block_id, "name": block.name}));
    }
    host.close_all().await;
    // The forwarding task ends with the document; print what the page received.
    while let Some(f) = rx.recv().await {
        println!(
            "{}",
            json!({"event": f.event.attribute, "entity": f.event.entity})
        );
    }
    Ok(())
}
