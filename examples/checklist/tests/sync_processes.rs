//! Two devices sharing a checklist document through the `elfiee-checklist` binary alone, as
//! an embedder's user runs them: `init`, `sync join`, `sync node-id`, `sync add-node`,
//! `serve --sync` on each device, one `nats-server` on 127.0.0.1 reached through relays the
//! test cuts. The checklist's notes written on both sides of a partition end with one winner
//! and the same conflict mark on every device, as `markdown.write` does: the kind says how it
//! merges (`Capability::merge`), sync asks the kind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use elfiee::testkit::serve::{self, serve_synced};
use elfiee_sync::testing::{NatsServer, Relay};
use serde_json::{json, Value};

fn cli(elf: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_elfiee-checklist"))
        .arg("--elf")
        .arg(elf)
        .arg("--json")
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run elfiee-checklist")
}

fn ok(elf: &Path, args: &[&str]) -> Value {
    let out = cli(elf, args);
    assert!(
        out.status.success(),
        "elfiee-checklist {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

struct Device {
    elf: PathBuf,
    key: PathBuf,
    relay: Relay,
    serve: Option<Child>,
    log: PathBuf,
}

impl Device {
    fn new(dir: &Path, name: &str, relay: Relay) -> Device {
        Device {
            elf: dir.join(format!("{name}.elf")),
            key: dir.join(format!("{name}.key")),
            relay,
            serve: None,
            log: dir.join(format!("{name}.serve.log")),
        }
    }

    /// `serve --sync`, once the status file names the serving process.
    fn serve(&mut self, doc: &str) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfiee-checklist"));
        cmd.env_remove("RUST_LOG");
        self.serve = Some(serve_synced(
            cmd,
            &self.elf,
            &self.key,
            &self.relay.url(),
            doc,
            &self.log,
            Duration::from_secs(20),
        ));
    }

    fn status(&self) -> Value {
        ok(&self.elf, &["sync", "status"])
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(mut c) = self.serve.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until both devices have the same merged digest and event count with nothing left
/// to publish.
fn converge(devices: &[&Device], within: Duration) -> String {
    let logs: Vec<&Path> = devices.iter().map(|d| d.log.as_path()).collect();
    serve::converge(
        || devices.iter().map(|d| d.status()).collect(),
        |x| x["to_publish"] == 0,
        &logs,
        within,
        Duration::from_millis(100),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checklist_notes_written_on_two_partitioned_devices_get_one_winner_and_a_conflict_mark_everywhere(
) {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Device::new(dir.path(), "a", Relay::start(server.addr()).await.unwrap());
    let mut b = Device::new(dir.path(), "b", Relay::start(server.addr()).await.unwrap());
    let doc = "trip";

    ok(
        &a.elf,
        &["init", a.elf.to_str().unwrap(), "--owner", "Alice"],
    );
    let created = ok(
        &a.elf,
        &[
            "block",
            "create",
            "--type",
            "checklist",
            "--name",
            "packing",
        ],
    );
    let list = created["block_id"].as_str().unwrap().to_owned();
    ok(
        &b.elf,
        &[
            "sync",
            "join",
            b.elf.to_str().unwrap(),
            "--broker",
            &b.relay.url(),
            "--doc",
            doc,
            "--key",
            b.key.to_str().unwrap(),
        ],
    );
    let node = ok(
        &b.elf,
        &["sync", "node-id", "--key", b.key.to_str().unwrap()],
    );
    let node = node["node_id"].as_str().unwrap().to_owned();
    ok(&a.elf, &["sync", "add-node", &node, "--name", "laptop"]);
    ok(
        &a.elf,
        &["editor", "create", "--name", "bob", "--id", "bob"],
    );
    ok(&a.elf, &["grant", "bob", "checklist.notes", "*"]);
    a.serve(doc);
    b.serve(doc);
    converge(&[&a, &b], Duration::from_secs(30));

    // Cut off from each other, each side writes the notes.
    a.relay.cut();
    b.relay.cut();
    let notes = |who: &str| json!({"notes": format!("pack {who}")}).to_string();
    let write = |d: &Device, editor: &str, who: &str| {
        ok(
            &d.elf,
            &[
                "--as",
                editor,
                "exec",
                "checklist.notes",
                "--block",
                &list,
                "--payload",
                &notes(who),
            ],
        )
    };
    write(&a, "alice", "from A");
    write(&b, "bob", "from B");
    // Each side sees its own write while cut off.
    for (d, who) in [(&a, "from A"), (&b, "from B")] {
        let shown = ok(&d.elf, &["block", "show", &list]);
        let block = shown.get("block").unwrap_or(&shown);
        assert_eq!(block["contents"]["notes"], format!("pack {who}"), "{shown}");
    }

    a.relay.restore();
    b.relay.restore();
    let digest = converge(&[&a, &b], Duration::from_secs(60));
    let blocks: Vec<Value> = [&a, &b]
        .iter()
        .map(|d| {
            let shown = ok(&d.elf, &["block", "show", &list]);
            shown.get("block").cloned().unwrap_or(shown)
        })
        .collect();
    // One winner, the same on both devices, and one of the two writes.
    let winner = &blocks[0]["contents"]["notes"];
    assert_eq!(&blocks[1]["contents"]["notes"], winner);
    assert!(
        *winner == json!("pack from A") || *winner == json!("pack from B"),
        "{winner}"
    );
    // A conflict mark on every device, as markdown.write gets one, naming the losing write.
    for (block, name) in blocks.iter().zip(["a", "b"]) {
        let conflicts = block["metadata"]["custom"]["conflicts"]
            .as_array()
            .unwrap_or_else(|| panic!("no conflict mark on {name}: {block}"));
        assert_eq!(conflicts.len(), 1, "{name}: {conflicts:?}");
        let (w, l) = (&conflicts[0]["winner"], &conflicts[0]["loser"]);
        assert!(
            w.is_string() && l.is_string() && w != l,
            "{name}: {conflicts:?}"
        );
    }
    assert_eq!(blocks[0]["metadata"], blocks[1]["metadata"]);
    assert_eq!(b.status()["digest"], digest);
}
