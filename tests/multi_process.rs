//! One writer per `.elf` across processes: a second process works through the owner's socket,
//! sees its writes, and its own writes reach the owner's subscribers; nothing is lost or
//! duplicated when both write at once; killing the owner loses no acknowledged command.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use elfiee::{Engine, EngineConfig};
use serde_json::{json, Value};

fn elfiee(elf: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(args)
        .env("ELFIEE_ELF", elf)
        .env("ELFIEE_NODE_ID", "proc-b")
        .output()
        .expect("run elfiee")
}

/// `elfiee serve` on `elf`, once it serves its owner socket.
fn serve(elf: &Path) -> std::process::Child {
    let owner = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["serve"])
        .env("ELFIEE_ELF", elf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        common::owner_socket_appears(elf, Duration::from_secs(30)),
        "`elfiee serve` did not open its socket within 30 s"
    );
    owner
}

fn ok_json(out: Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_works_through_the_owner_and_nothing_is_lost_or_duplicated() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("shared.elf");
    let engine = Engine::new(EngineConfig {
        node_id: "proc-a".into(),
        ..EngineConfig::default()
    });
    let a = engine.init(&elf, "Alice").await.unwrap();
    let mut sub = a.subscribe();
    let start = a.last_seq();
    let mine = a
        .submit(elfiee::Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": "by-a", "block_type": "markdown"}),
        ))
        .await
        .unwrap();

    // B sees A's write.
    let list = ok_json(elfiee(&elf, &["--json", "block", "list"]));
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["block_id"] == mine[0].entity.as_str()));

    // A and four B processes write at the same time.
    let writers: Vec<_> = (0..4)
        .map(|p| {
            let elf = elf.clone();
            tokio::task::spawn_blocking(move || {
                (0..5)
                    .map(|i| {
                        ok_json(elfiee(
                            &elf,
                            &[
                                "--json",
                                "block",
                                "create",
                                "--type",
                                "code",
                                "--name",
                                &format!("b{p}-{i}"),
                            ],
                        ))["block_id"]
                            .as_str()
                            .unwrap()
                            .to_owned()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut a_ids = vec![mine[0].entity.clone()];
    for i in 0..20 {
        let ev = a
            .submit(elfiee::Command::new(
                "alice",
                "core.create",
                None,
                json!({"name": format!("a{i}"), "block_type": "markdown"}),
            ))
            .await
            .unwrap();
        a_ids.push(ev[0].entity.clone());
    }
    let mut b_ids = Vec::new();
    for w in writers {
        b_ids.extend(w.await.unwrap());
    }
    assert_eq!(b_ids.len(), 20);

    // A's subscriber saw every event exactly once, in order, B's writes included.
    let total = a.last_seq() - start;
    let mut seen = Vec::new();
    while (seen.len() as u64) < total {
        let e = tokio::time::timeout(Duration::from_secs(10), sub.recv())
            .await
            .expect("event")
            .expect("open");
        seen.push(e);
    }
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (start + 1..=a.last_seq()).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    let created: BTreeSet<String> = seen
        .iter()
        .filter(|e| e.cap_id() == "core.create")
        .map(|e| e.entity.clone())
        .collect();
    let expected: BTreeSet<String> = a_ids.iter().chain(&b_ids).cloned().collect();
    assert_eq!(created, expected);
    assert_eq!(a.with_state(|s| s.blocks.len()), 41);

    // B's replay and verify run in the owner; B's digest equals A's.
    assert_eq!(ok_json(elfiee(&elf, &["--json", "verify"]))["ok"], true);
    let digest = ok_json(elfiee(&elf, &["--json", "state-digest"]));
    assert_eq!(digest["state_digest"], a.state_digest().as_str());
    assert_eq!(
        ok_json(elfiee(&elf, &["--json", "replay"]))["state_digest"],
        a.state_digest().as_str()
    );
    a.close().await;
    // The owner left: the next process owns the file itself.
    assert_eq!(
        ok_json(elfiee(&elf, &["--json", "block", "list"]))
            .as_array()
            .unwrap()
            .len(),
        41
    );
}

#[test]
fn killing_the_owner_mid_stream_loses_no_acknowledged_command() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("k.elf");
    ok_json(elfiee(
        &elf,
        &["--json", "init", elf.to_str().unwrap(), "--owner", "Alice"],
    ));
    let mut acknowledged = Vec::new();
    for round in 0..3 {
        let mut owner = serve(&elf);
        // Writers through the owner; the owner is killed while they run.
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let elf = elf.clone();
                std::thread::spawn(move || {
                    let mut acks = Vec::new();
                    for i in 0..12 {
                        let out = elfiee(
                            &elf,
                            &[
                                "--json",
                                "block",
                                "create",
                                "--type",
                                "markdown",
                                "--name",
                                &format!("r{round}w{w}i{i}"),
                            ],
                        );
                        // The owner may die under this call: the client takes over (or
                        // reaches whoever did) and resubmits; it never fails for that.
                        assert!(
                            out.status.success(),
                            "a write failed when the owner was killed: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                        acks.push(v["block_id"].as_str().unwrap().to_owned());
                    }
                    acks
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150 + 100 * round));
        owner.kill().unwrap();
        owner.wait().unwrap();
        for w in writers {
            acknowledged.extend(w.join().unwrap());
        }
    }
    assert_eq!(
        acknowledged.len(),
        3 * 3 * 12,
        "every write was acknowledged"
    );
    // The next process opens the file and finds every acknowledged command, once.
    let list = ok_json(elfiee(&elf, &["--json", "block", "list"]));
    let present: BTreeSet<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["block_id"].as_str().unwrap())
        .collect();
    for id in &acknowledged {
        assert!(
            present.contains(id.as_str()),
            "acknowledged block {id} is missing"
        );
    }
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .filter(|n| n.starts_with('r'))
        .collect();
    let distinct: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), distinct.len(), "a resubmitted write ran twice");
    assert_eq!(ok_json(elfiee(&elf, &["--json", "verify"]))["ok"], true);
}

/// Many short-lived processes on one `.elf` with no long-lived owner: each becomes the owner
/// or a client of whichever process owns the file at that moment, and owners come and go under
/// their clients all the time. Every write must be acknowledged and in the log once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_writing_fifty_times_each_all_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("busy.elf");
    ok_json(elfiee(
        &elf,
        &["--json", "init", elf.to_str().unwrap(), "--owner", "Alice"],
    ));
    let blocks: Vec<String> = (0..8)
        .map(|w| {
            let v = ok_json(elfiee(
                &elf,
                &[
                    "--json",
                    "block",
                    "create",
                    "--type",
                    "markdown",
                    "--name",
                    &format!("w{w}"),
                ],
            ));
            v["block_id"].as_str().unwrap().to_owned()
        })
        .collect();
    let workers: Vec<_> = blocks
        .iter()
        .enumerate()
        .map(|(w, block)| {
            let (elf, block) = (elf.clone(), block.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for i in 0..50 {
                    let out = elfiee(
                        &elf,
                        &["markdown", "write", &block, "--text", &format!("w{w} i{i}")],
                    );
                    if !out.status.success() {
                        failures.push(String::from_utf8_lossy(&out.stderr).to_string());
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of 400 writes failed, e.g.: {}",
        failures.len(),
        failures[0]
    );
    let engine = Engine::new(EngineConfig::default());
    let file = engine.open(&elf).await.unwrap();
    let written: Vec<String> = file
        .events(1)
        .unwrap()
        .iter()
        .filter(|e| e.cap_id() == "markdown.write")
        .map(|e| {
            file.resolve_value(&e.value).unwrap()["contents"]["markdown"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        written.len(),
        400,
        "every acknowledged write is in the log, once"
    );
    let distinct: BTreeSet<&String> = written.iter().collect();
    assert_eq!(distinct.len(), 400);
    assert!(file.verify().await.unwrap().ok);
    file.close().await;
}

#[test]
fn a_process_that_finds_the_file_locked_takes_over_once_the_holder_lets_go() {
    // The lock is held without an owner socket, as by an owner that is closing: the socket is
    // gone but sled has not released the lock yet. The CLI must wait and take the file over,
    // not give up because nobody answers on the socket.
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("d.elf");
    let out = elfiee(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created = ok_json(elfiee(
        &elf,
        &[
            "--json", "block", "create", "--type", "markdown", "--name", "n",
        ],
    ));
    let block = created["block_id"].as_str().unwrap().to_owned();

    let root = elf.canonicalize().unwrap();
    let held = elfiee_engine::log::SledEventLog::open(&root.join("log"), &root).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["markdown", "write", &block, "--text", "after the hand-over"])
        .env("ELFIEE_ELF", &elf)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    drop(held);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the write gave up instead of taking over: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = elfiee(&elf, &["block", "show", &block]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("after the hand-over"),
        "{}",
        String::from_utf8_lossy(&shown.stdout)
    );
}

/// A client waiting for an effect's outcome (a terminal run) when its owner is killed takes
/// the file over, runs the effect itself (the dead owner never recorded the outcome) and gets
/// the output: no hang, no guess.
#[test]
fn a_client_waiting_for_an_effect_takes_over_when_the_owner_is_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("fx.elf");
    ok_json(elfiee(
        &elf,
        &["--json", "init", elf.to_str().unwrap(), "--owner", "Alice"],
    ));
    let t = ok_json(elfiee(
        &elf,
        &["--json", "terminal", "create", "--name", "sh"],
    ))["block_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut owner = serve(&elf);
    let marker = tmp.path().join("runs.txt");
    let script = format!("echo run >> '{}'; sleep 1; echo done", marker.display());
    let client = Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(["--json", "terminal", "run", &t, "--", &script])
        .env("ELFIEE_ELF", &elf)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the owner once it has started the run.
    for _ in 0..500 {
        if marker.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(marker.exists(), "the owner never started the run");
    owner.kill().unwrap();
    owner.wait().unwrap();
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the client did not carry on under a new owner: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stdout"], "done\n", "{v}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().lines().count(),
        2,
        "the new owner ran the command again (the killed owner's run left no outcome)"
    );
    let log = ok_json(elfiee(&elf, &["--json", "log"]));
    let outputs = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["attribute"]
                .as_str()
                .is_some_and(|a| a.ends_with("/terminal.output"))
        })
        .count();
    assert_eq!(outputs, 1, "one outcome for the one run: {log}");
    assert_eq!(ok_json(elfiee(&elf, &["--json", "verify"]))["ok"], true);
}

/// `elfiee backup` from another process while four processes write through the owner: each
/// backup restores (`elfiee restore`) to the state at its seq, and the second one appended.
#[test]
fn a_backup_from_another_process_while_four_processes_write_restores_to_the_state_at_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("x.elf");
    ok_json(elfiee(&elf, &["--json", "init", elf.to_str().unwrap()]));
    let created = ok_json(elfiee(
        &elf,
        &[
            "--json", "block", "create", "--type", "markdown", "--name", "doc",
        ],
    ));
    let block = created["block_id"].as_str().unwrap().to_owned();
    let mut owner = serve(&elf);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (elf, block, stop) = (elf.clone(), block.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while i < 10 || !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let text = format!(
                        "writer {w} write {i} {}",
                        "x".repeat(if i % 2 == 0 { 300 } else { 5 })
                    );
                    ok_json(elfiee(
                        &elf,
                        &["--json", "markdown", "write", &block, "--text", &text],
                    ));
                    i += 1;
                }
            })
        })
        .collect();
    let backup = dir.path().join("x.backup");
    let mut taken = Vec::new();
    for k in 0..2 {
        std::thread::sleep(Duration::from_millis(400));
        let r = ok_json(elfiee(
            &elf,
            &["--json", "backup", "--to", backup.to_str().unwrap()],
        ));
        let copy = dir.path().join(format!("x.backup.{k}"));
        std::fs::copy(&backup, &copy).unwrap();
        taken.push((r, copy));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Release);
    for w in writers {
        w.join().unwrap();
    }
    unsafe { libc::kill(owner.id() as i32, libc::SIGINT) };
    owner.wait().unwrap();
    assert_eq!(taken[1].0["incremental"], true);
    assert_eq!(
        taken[1].0["from_seq"].as_u64(),
        taken[0].0["seq"].as_u64().map(|s| s + 1)
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = Engine::new(EngineConfig::default());
    let file = rt.block_on(engine.open(&elf)).unwrap();
    let last = file.last_seq();
    for (k, (r, copy)) in taken.iter().enumerate() {
        let seq = r["seq"].as_u64().unwrap();
        assert!(
            seq < last,
            "backup {k} ran while the writers wrote ({seq} < {last})"
        );
        let target = dir.path().join(format!("r{k}.elf"));
        let restored = ok_json(elfiee(
            &elf,
            &[
                "--json",
                "restore",
                copy.to_str().unwrap(),
                target.to_str().unwrap(),
            ],
        ));
        assert_eq!(restored["seq"].as_u64(), Some(seq));
        let expected = rt.block_on(file.state_at(seq)).unwrap().digest();
        assert_eq!(
            restored["state_digest"].as_str(),
            Some(expected.as_str()),
            "backup {k}"
        );
        let verified = ok_json(elfiee(&target, &["--json", "verify"]));
        assert_eq!(verified["ok"], true, "{verified}");
    }
    rt.block_on(file.close());
}
