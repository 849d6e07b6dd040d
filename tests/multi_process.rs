//! One writer per `.elf` across processes: a second process works through the owner's socket,
//! sees its writes, and its own writes reach the owner's subscribers; nothing is lost or
//! duplicated when both write at once; killing the owner loses no acknowledged command.

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
        let mut owner = Command::new(env!("CARGO_BIN_EXE_elfiee"))
            .args(["serve"])
            .env("ELFIEE_ELF", &elf)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the owner serves its socket.
        let sock = elf.join("owner.sock");
        for _ in 0..200 {
            if sock.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
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
                        if out.status.success() {
                            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                            acks.push(v["block_id"].as_str().unwrap().to_owned());
                        } else {
                            let err = String::from_utf8_lossy(&out.stderr);
                            assert!(err.starts_with("error: "), "a failed write says why: {err}");
                        }
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
    assert!(!acknowledged.is_empty());
    // The next process opens the file and finds every acknowledged command.
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
    assert_eq!(ok_json(elfiee(&elf, &["--json", "verify"]))["ok"], true);
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
