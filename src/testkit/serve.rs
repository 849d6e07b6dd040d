//! Synced serving processes for end-to-end tests: a binary built on `elfiee::cli` (the
//! `elfiee` binary or an embedder's) started as `<bin> serve --sync`, and a wait until several
//! devices agree. The tests that run devices as a user does (the root crate's
//! `tests/sync_processes.rs`, the checklist example's) share these.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Spawns `cmd serve --sync <url> --doc <doc>` on the document folder `elf` with the node key
/// `key` (through `ELFIEE_ELF` and `ELFIEE_NODE_KEY`), stdout dropped and stderr appended to
/// `log`, and returns the child once `<elf>/sync-status.json` names it as the serving process
/// (`served_by` == its pid) — or after `within`, leaving the failure to the test's next step.
///
/// `cmd` is the binary with whatever else the test wants set (extra environment, a removed
/// `RUST_LOG`). The child is not killed on drop: the caller owns it.
pub fn serve_synced(
    mut cmd: Command,
    elf: &Path,
    key: &Path,
    url: &str,
    doc: &str,
    log: &Path,
    within: Duration,
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open the serve log");
    let child = cmd
        .args(["serve", "--sync", url, "--doc", doc])
        .env("ELFIEE_ELF", elf)
        .env("ELFIEE_NODE_KEY", key)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn serve --sync");
    let status = elf.join("sync-status.json");
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let served = std::fs::read(&status)
            .ok()
            .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
            .is_some_and(|v| v["served_by"].as_u64() == Some(child.id() as u64));
        if served {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Polls `statuses` (one `sync status` JSON per device) every `every` until all devices have
/// the same merged `digest` and `events` count and each is `settled` (the caller's rule, e.g.
/// nothing left to publish); returns the digest. Panics after `within` with the last statuses
/// and the devices' serve logs (`logs`).
pub fn converge(
    mut statuses: impl FnMut() -> Vec<Value>,
    settled: impl Fn(&Value) -> bool,
    logs: &[&Path],
    within: Duration,
    every: Duration,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let s = statuses();
        let same = s
            .iter()
            .all(|x| x["digest"] == s[0]["digest"] && x["events"] == s[0]["events"] && settled(x));
        if same {
            return s[0]["digest"].as_str().unwrap().to_owned();
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = logs
                .iter()
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect();
            panic!("no convergence within {within:?}:\n{s:#?}\n{logs:#?}");
        }
        std::thread::sleep(every);
    }
}
