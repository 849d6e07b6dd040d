//! The `agent undo` scenario: the project folder of the export scenario, an agent whose steps
//! rewrite its files (a scripted model on 127.0.0.1), and a loop of `agent run`, `dir export`
//! and `agent undo` (which writes the project files back) until the cut. After it every
//! project file holds one whole version (the first, or one a step wrote), never a mix, and no
//! temporary file of an undo is left.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::anthropic_standin::{Scripted, StandIn};
use super::export::{content, Project, FILES};
use super::{elfiee, must, wait_or_kill};

/// The variable the agent's key is read from (the stand-in takes any key).
const KEY_ENV: &str = "ELFIEE_POWER_KEY";

/// Steps the scripted model has for one campaign: more than its rounds can use.
const STEPS: usize = 1500;

/// What step `k` writes: one file, a whole new version of it.
fn step(k: usize) -> (String, String) {
    (
        format!("f{}.txt", k % FILES),
        content(&format!("<agent step {k}>")),
    )
}

/// The scripted model (one step per turn: a `code write`, then "Done.") and every version a
/// step may write, added to the project's versions.
pub fn prepare(elf: &Path, p: &mut Project) -> StandIn {
    let mut script = Vec::with_capacity(2 * STEPS);
    for k in 0..STEPS {
        let (rel, text) = step(k);
        p.versions.get_mut(&rel).unwrap().push(text.clone());
        script.push(Scripted::tool(
            "elfiee_code_write",
            serde_json::json!({"block_id": rel, "text": text}),
        ));
        script.push(Scripted::text("Done."));
    }
    let model = StandIn::start(script);
    std::env::set_var(KEY_ENV, "sk-local");
    let a: serde_json::Value =
        serde_json::from_str(&must(elf, &["--json", "agent", "create", "--name", "a1"])).unwrap();
    let id = a["agent_block_id"].as_str().unwrap().to_owned();
    must(
        elf,
        &[
            "block",
            "link",
            &id,
            &p.dir_block,
            "--relation",
            "reference",
        ],
    );
    must(
        elf,
        &[
            "agent",
            "configure",
            &id,
            "--base-url",
            &model.base_url,
            "--api-key-env",
            KEY_ENV,
        ],
    );
    model
}

/// Runs a step, exports it and undoes it (forced: a cut may have left a file apart from its
/// block), again and again until the cut; the undos acknowledged.
pub fn undoer(elf: &Path, dir_block: &str, stop: &AtomicBool) -> u64 {
    let mut undone = 0;
    let turn = ["agent", "run", "a1", "--approve-all", "--message", "step"];
    let export = ["dir", "export", dir_block, "--force"];
    let undo = ["agent", "undo", "a1", "--force"];
    while !stop.load(Ordering::SeqCst) {
        for (i, args) in [&turn[..], &export[..], &undo[..]].into_iter().enumerate() {
            let child = elfiee(elf)
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn an agent command");
            match wait_or_kill(child, stop) {
                Ok(()) if i == 2 => undone += 1,
                Ok(()) => {}
                Err(_) => break,
            }
        }
    }
    undone
}

/// After the cut, with the document checked: every file one whole version; the undo's
/// temporary files left behind (removed, as a person would).
pub fn check(p: &Project) -> (Vec<String>, Vec<String>) {
    let mut torn = Vec::new();
    for (rel, _) in &p.files {
        let disk = std::fs::read_to_string(p.root.join(rel)).unwrap_or_default();
        if !p.versions[rel].contains(&disk) {
            torn.push(format!(
                "{rel}: {} bytes, {:?}…",
                disk.len(),
                disk.lines().next()
            ));
        }
    }
    let mut litter = Vec::new();
    for e in std::fs::read_dir(&p.root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.contains("elfiee-undo") || name.contains("elfiee-tmp") {
            let _ = std::fs::remove_file(e.path());
            litter.push(name);
        }
    }
    let _ = std::fs::File::open(&p.root).and_then(|d| d.sync_all());
    (torn, litter)
}
