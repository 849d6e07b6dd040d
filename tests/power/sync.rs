//! The sync ingest scenario: device A (on an ordinary disk) takes writes from CLI processes
//! through its `elfiee serve --sync` owner; device B, whose document is on the lazy disk, runs
//! `elfiee serve --sync` and ingests them from a `nats-server` on 127.0.0.1 until the cut. B
//! acknowledges nothing to anyone, so what must hold after the cut is: B's document opens and
//! verifies with no manual step (checked by the campaign), and once B serves again it ingests
//! every write A acknowledged — the ingest checkpoint and the events it covers were made
//! durable together, or the broker gives back what the cut took.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use elfiee::testkit::serve::serve_synced;
use elfiee_sync::testing::NatsServer;

use super::{binary, first_lines, markers, must, run};

/// The document's name on the broker.
const DOC: &str = "power";
/// How long B gets after the cut to ingest every write A acknowledged.
const CATCH_UP: Duration = Duration::from_secs(60);

/// Device A, the broker, and B's key (B's document is the campaign's).
pub struct Pair {
    _server: NatsServer,
    dir: tempfile::TempDir,
    url: String,
    a: PathBuf,
    b_key: PathBuf,
    owner: Option<Child>,
    b_added: bool,
    /// Every write A acknowledged, over every round.
    pub acked: Vec<String>,
}

impl Pair {
    /// Starts a broker and device A with blocks `b0`, `b1` (what the writers write).
    pub fn start() -> Pair {
        let server = NatsServer::start().expect("start nats-server (issue 39's sync scenario)");
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.elf");
        must(&a, &["init", a.to_str().unwrap(), "--owner", "alice"]);
        for w in 0..2 {
            let name = format!("b{w}");
            must(
                &a,
                &["block", "create", "--type", "markdown", "--name", &name],
            );
        }
        let mut p = Pair {
            url: server.url(),
            _server: server,
            a,
            b_key: dir.path().join("b.key"),
            dir,
            owner: None,
            b_added: false,
            acked: Vec::new(),
        };
        p.owner = Some(p.serve(&p.a.clone(), &p.dir.path().join("a.key"), "a"));
        p
    }

    /// A's document, where the writers write.
    pub fn a(&self) -> &Path {
        &self.a
    }

    /// `elfiee serve --sync` on `elf` with `key`, once its status names it.
    fn serve(&self, elf: &Path, key: &Path, name: &str) -> Child {
        serve_synced(
            Command::new(binary()),
            elf,
            key,
            &self.url,
            DOC,
            &self.dir.path().join(format!("{name}.serve.log")),
            Duration::from_secs(20),
        )
    }

    /// B joins the document at `b` (a fresh document on the lazy disk), and A adds B's node
    /// the first time.
    pub fn join(&mut self, b: &Path) {
        let (key, url) = (self.b_key.to_str().unwrap(), self.url.as_str());
        let args = [
            "sync",
            "join",
            b.to_str().unwrap(),
            "--broker",
            url,
            "--doc",
            DOC,
            "--key",
            key,
        ];
        must(b, &args);
        if !self.b_added {
            let out = must(b, &["--json", "sync", "node-id", "--key", key]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            let node = v["node_id"].as_str().unwrap();
            must(&self.a, &["sync", "add-node", node, "--name", "b"]);
            self.b_added = true;
        }
    }

    /// B's `serve --sync` for a round (its document is on the lazy disk).
    pub fn serve_b(&self, b: &Path) -> Child {
        self.serve(b, &self.b_key.clone(), "b")
    }

    /// After the cut (B's document opened and verified): B serves again until it has every
    /// write A acknowledged, then stops as a user stops it; how many it never got, and why.
    pub fn check(&self, b: &Path) -> Result<(), (u64, String)> {
        let mut serve = self.serve_b(b);
        let deadline = Instant::now() + CATCH_UP;
        let missing = loop {
            let (ok, log, err) = run(b, &["--json", "log"]);
            let missing: Vec<&String> = if ok {
                let present = markers(&log);
                self.acked
                    .iter()
                    .filter(|t| !present.contains(t.as_str()))
                    .collect()
            } else {
                eprintln!("log on B failed while it caught up: {}", first_lines(&err));
                self.acked.iter().collect()
            };
            if missing.is_empty() || Instant::now() > deadline {
                break missing;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        unsafe { libc::kill(serve.id() as i32, libc::SIGINT) };
        let stopped = Instant::now() + Duration::from_secs(20);
        while serve.try_wait().unwrap().is_none() && Instant::now() < stopped {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = serve.kill();
        let _ = serve.wait();
        if missing.is_empty() {
            Ok(())
        } else {
            let log =
                std::fs::read_to_string(self.dir.path().join("b.serve.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            Err((missing.len() as u64, format!(
                "{} of {} writes A acknowledged never reached B after {:?}, e.g. {:?}; B's serve log ends {:?}",
                missing.len(),
                self.acked.len(),
                CATCH_UP,
                &missing[..missing.len().min(3)],
                tail
            )))
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if let Some(mut o) = self.owner.take() {
            let _ = o.kill();
            let _ = o.wait();
        }
    }
}
