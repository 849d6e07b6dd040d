//! The restore and salvage scenario: `elfiee restore BACKUP NEW` (or `elfiee salvage DOC NEW`)
//! writing a new document when the power goes. After the cut a run that was acknowledged left a
//! document that verifies at the seq it reported; one that was not left nothing, or a document
//! that verifies, or — counted, not failed — a partial one in the way of the next run.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::{elfiee, first_lines, must, run, wait_for_output};

/// Markdown writes that give the document (and its backup) some body before the cuts.
const EVENTS: usize = 40;

/// Gives the fresh document some history and a backup of it.
pub fn prepare(elf: &Path) {
    for n in 0..EVENTS {
        must(
            elf,
            &[
                "markdown",
                "write",
                &format!("b{}", n % 4),
                "--text",
                &format!("<p{n}>"),
            ],
        );
    }
    must(elf, &["backup", "--to", backup(elf).to_str().unwrap()]);
}

fn backup(elf: &Path) -> PathBuf {
    elf.with_file_name("d.elf.backup")
}

/// The new document of round `round`.
pub fn target(elf: &Path, round: u32) -> PathBuf {
    elf.with_file_name(format!("new{round}.elf"))
}

/// Runs one restore (or salvage) into [`target`], cut by `stop`; its seq when acknowledged.
pub fn writer(elf: &Path, salvage: bool, round: u32, stop: &AtomicBool) -> (Option<u64>, Duration) {
    let new = target(elf, round);
    let args: Vec<String> = if salvage {
        vec![
            "--json".into(),
            "salvage".into(),
            elf.display().to_string(),
            new.display().to_string(),
        ]
    } else {
        vec![
            "--json".into(),
            "restore".into(),
            backup(elf).display().to_string(),
            new.display().to_string(),
        ]
    };
    let started = Instant::now();
    let child = elfiee(elf)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn a restore");
    let out = wait_for_output(child, stop);
    let took = started.elapsed();
    let seq = out
        .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
        .and_then(|v| v["seq"].as_u64());
    (seq, took)
}

/// What the cut left at the new document's path.
pub enum Left {
    Whole,
    Nothing,
    /// A partial document: it does not verify and the next run into the path is refused.
    Partial(String),
    /// An acknowledged run whose document is damaged or short.
    Broken(String),
}

/// `healthy_conf`: sled's `log/conf` as it writes it; a new document whose conf the cut damaged
/// is the known unsynced-conf failure (issue 39): it is counted in `conf`, the conf removed as
/// its report says, and the document checked on.
pub fn check(
    elf: &Path,
    round: u32,
    acked: Option<u64>,
    healthy_conf: Option<&[u8]>,
    conf: &mut u32,
) -> Left {
    let new = target(elf, round);
    let exists = new.exists();
    let (mut ok, mut out, mut err) = if exists {
        run(&new, &["--json", "verify"])
    } else {
        (false, String::new(), String::new())
    };
    let conf_file = new.join("log/conf");
    let bytes = std::fs::read(&conf_file).unwrap_or_default();
    if exists && !ok && !bytes.is_empty() && Some(bytes.as_slice()) != healthy_conf {
        *conf += 1;
        let _ = std::fs::remove_file(&conf_file);
        (ok, out, err) = run(&new, &["--json", "verify"]);
    }
    let events = serde_json::from_str::<serde_json::Value>(&out)
        .ok()
        .and_then(|v| v["events"].as_u64());
    let left = match acked {
        Some(seq) if !exists => {
            Left::Broken(format!("acknowledged at seq {seq}, gone after the cut"))
        }
        Some(seq) if !ok => Left::Broken(format!(
            "acknowledged at seq {seq}, fails verify: {} {}",
            first_lines(&out),
            first_lines(&err)
        )),
        Some(seq) if events != Some(seq) => Left::Broken(format!(
            "acknowledged at seq {seq}, verify counts {events:?} events"
        )),
        Some(_) => Left::Whole,
        None if !exists => Left::Nothing,
        None if ok => Left::Whole,
        None => Left::Partial(format!("{} {}", first_lines(&out), first_lines(&err))),
    };
    let _ = std::fs::remove_dir_all(&new);
    if let Some(dir) = new.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    left
}
