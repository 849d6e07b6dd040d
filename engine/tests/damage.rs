//! Damage (issue 29): trials that flip, truncate or zero bytes at random offsets of one file of
//! a closed document that has an automatic backup. Every trial must end either in an open at
//! the original's state (and, when `verify` finds the damage, a salvage) or in a refusal that
//! names the document and says to salvage it; no panic, no hang. Salvage, given a copy of the
//! automatic backup taken before the document's last events, must then recover every event up
//! to the backup's point and the log's intact tail past it, report the rest as lost up to the
//! original's last seq, and leave a document that `verify` accepts, that opens at the
//! original's state at its seq and that takes a write.
//!
//! `ELFIEE_DAMAGE_TRIALS` (default 330) and `ELFIEE_DAMAGE_EVENTS` (default 400) scale the run
//! (docs/damage-run.md); `ELFIEE_DAMAGE_SEED` changes the damage, `ELFIEE_DAMAGE_ONLY=3,17`
//! runs those trials alone, `ELFIEE_DAMAGE_JOBS` sets how many run at once (default 2),
//! `ELFIEE_DAMAGE_KEEP=1` leaves their folders behind.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::copy_dir;
use elfiee_engine::log::{EventLog, SledEventLog};
use elfiee_engine::salvage::{salvage, SalvageReport};
use elfiee_engine::{AutoBackup, Engine, EngineConfig, EngineError, FileHandle, FixedCtx};
use elfiee_model::{Command, ContentRef, EventHash};
use serde_json::json;
use tempfile::TempDir;

/// The document's folder name in every trial (a refusal must name it).
const DOC: &str = "damaged-notes.elf";
/// The automatic backup runs after this many events.
const BACKUP_EVERY: u64 = 40;
/// A trial that takes longer than this hangs.
const TRIAL_LIMIT: Duration = Duration::from_secs(30);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// splitmix64: a seeded generator with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    /// 1 to 16 bytes, each XORed with a random non-zero byte.
    Flip,
    /// The file cut at a random offset.
    Truncate,
    /// A random range of up to 4 KiB set to zero.
    Zero,
}

const KINDS: [Kind; 3] = [Kind::Flip, Kind::Truncate, Kind::Zero];

/// What a damaged file holds, for what salvage must get back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holds {
    /// Events: sled's files, `events.pack`. Salvage may stop where the log stops being
    /// provable (after the backup's point).
    Log,
    /// Bodies: salvage may stop at an event whose body is provable nowhere.
    Content,
    /// No event and no body (`ELFIEE`, `HEAD`, `commands.idx`, snapshots): salvage gets
    /// every event back.
    Nothing,
}

fn holds(rel: &Path) -> Holds {
    if rel.starts_with("log") || rel == Path::new("events.pack") {
        Holds::Log
    } else if rel.starts_with("content") {
        Holds::Content
    } else {
        Holds::Nothing
    }
}

/// Damages the file at `path`; what was done, and whether any byte changed.
fn damage(path: &Path, kind: Kind, rng: &mut Rng) -> (String, bool) {
    let mut bytes = std::fs::read(path).unwrap();
    let before = bytes.clone();
    let len = bytes.len() as u64;
    let what = match kind {
        Kind::Flip => {
            let n = 1 + rng.below(16);
            let mut at = Vec::new();
            for _ in 0..n {
                let i = rng.below(len) as usize;
                bytes[i] ^= 1 + rng.below(255) as u8;
                at.push(i);
            }
            at.sort_unstable();
            format!("flipped {n} bytes at {at:?}")
        }
        Kind::Truncate => {
            let at = rng.below(len);
            bytes.truncate(at as usize);
            format!("cut at {at} of {len}")
        }
        Kind::Zero => {
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(4096));
            bytes[from as usize..(from + n) as usize].fill(0);
            format!("zeroed {n} bytes at {from}")
        }
    };
    std::fs::write(path, &bytes).unwrap();
    (what, bytes != before)
}

/// Text of write `i`: every third one long enough for the content store, each one unique.
fn text(i: u64) -> String {
    if i.is_multiple_of(3) {
        format!(
            "write {i}: {}",
            "a body long enough for the content store ".repeat(8)
        )
    } else {
        format!("write {i}")
    }
}

/// A command with a fixed id (with the engine's fixed context, the same document every run).
fn command(n: &mut u128, cap: &str, block: Option<&str>, payload: serde_json::Value) -> Command {
    *n += 1;
    Command {
        cmd_id: uuid::Uuid::from_u128(*n),
        ..Command::new("alice", cap, block, payload)
    }
}

fn config(auto_backup: Option<AutoBackup>, events: u64) -> EngineConfig {
    EngineConfig {
        node_id: "test-node".into(),
        // A few snapshot files over the document's history.
        snapshot_every: (events / 6).max(50),
        fixed_ctx: Some(FixedCtx {
            now: chrono::DateTime::from_timestamp(1_750_000_000, 0).unwrap(),
            id_base: [29; 16],
        }),
        auto_backup,
        ..EngineConfig::default()
    }
}

/// The undamaged document, what it holds, and an open copy of it for its past states.
struct Original {
    _dir: TempDir,
    elf: PathBuf,
    /// A copy of the automatic backup taken at about two thirds of the events.
    backup: PathBuf,
    backup_seq: u64,
    /// The hash of event `seq` at `[seq - 1]`, and the bodies it refers to.
    hashes: Vec<EventHash>,
    refs: Vec<Vec<ContentRef>>,
    last: u64,
    digest: String,
    /// Every file of the document (relative to it), in a fixed order.
    files: Vec<PathBuf>,
    pristine: FileHandle,
    digests: tokio::sync::Mutex<HashMap<u64, String>>,
}

impl Original {
    /// The state digest at `seq`.
    async fn digest_at(&self, seq: u64) -> String {
        let mut known = self.digests.lock().await;
        if let Some(d) = known.get(&seq) {
            return d.clone();
        }
        let d = self.pristine.state_at(seq).await.unwrap().digest();
        known.insert(seq, d.clone());
        d
    }
}

/// Writes about `events` events with an automatic backup every [`BACKUP_EVERY`], copies the
/// backup file at two thirds of them, writes the rest, and closes.
async fn build_original(trials: &Engine, events: u64) -> Original {
    let dir = TempDir::new().unwrap();
    let backups = dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let auto = AutoBackup {
        every_events: BACKUP_EVERY,
        dir: Some(backups.clone()),
    };
    let engine = Engine::new(config(Some(auto.clone()), events));
    let elf = dir.path().join(DOC);
    let f = engine.create_empty(&elf).await.unwrap();
    let n = &mut 0u128;
    f.submit(command(n, "elf.init", None, json!({"name": "Alice"})))
        .await
        .unwrap();
    let mut blocks = Vec::new();
    for b in 0..4 {
        let c = command(
            n,
            "core.create",
            None,
            json!({"name": format!("b{b}"), "block_type": "markdown"}),
        );
        blocks.push(f.submit(c).await.unwrap()[0].entity.clone());
    }
    let write = |n: &mut u128, i: u64| {
        let id = &blocks[(i % 4) as usize];
        command(n, "markdown.write", Some(id), json!({"markdown": text(i)}))
    };
    let import = |n: &mut u128, tag: &str| {
        let mut c = common::import(40, tag);
        *n += 1;
        c.cmd_id = uuid::Uuid::from_u128(*n);
        c
    };
    // Writes alone and in batches (runs of several commands), with a bulk import (a group in
    // events.pack) before the backup's copy and one after it.
    let mut i = 0u64;
    let mut imported = 0;
    let mut backup_copy = None;
    while f.last_seq() < events {
        let at = f.last_seq();
        if imported == 0 && at >= events / 4 || imported == 1 && at >= events * 5 / 6 {
            f.submit(import(n, &format!("i{imported}"))).await.unwrap();
            imported += 1;
        }
        if backup_copy.is_none() && at >= events * 2 / 3 {
            backup_copy = Some(copy_backup(&f, &auto, &dir).await);
        }
        if i % 5 == 4 {
            let batch = (0..5).map(|k| write(n, i + k)).collect();
            f.submit_all(batch).await.unwrap();
            i += 5;
        } else {
            f.submit(write(n, i)).await.unwrap();
            i += 1;
        }
    }
    let (backup, backup_seq) = backup_copy.expect("the backup was copied");
    let all = f.events(1).unwrap();
    let last = f.last_seq();
    assert_eq!(all.len() as u64, last);
    assert!(
        backup_seq < last && backup_seq > last / 2,
        "the backup's copy holds events 1..={backup_seq} of {last}: a tail it lacks"
    );
    let digest = f.state_digest();
    f.close().await;
    let files = files_of(&elf);
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    for must in [
        "ELFIEE",
        "HEAD",
        "commands.idx",
        "events.pack",
        "log/conf",
        "log/db",
        "content/pack",
        "content/index",
    ] {
        assert!(names.iter().any(|n| n == must), "{must} in {names:?}");
    }
    assert!(
        names.iter().any(|n| n.starts_with("snapshots/")),
        "{names:?}"
    );
    let pristine_path = dir.path().join("pristine.elf");
    copy_dir(&elf, &pristine_path);
    let pristine = trials.open(&pristine_path).await.unwrap();
    assert_eq!(pristine.state_digest(), digest);
    Original {
        _dir: dir,
        elf,
        backup,
        backup_seq,
        hashes: all.iter().map(|e| e.hash).collect(),
        refs: all
            .iter()
            .map(|e| elfiee_projections::content::event_refs(&e.value))
            .collect(),
        last,
        digest,
        files,
        pristine,
        digests: Default::default(),
    }
}

/// Waits until the automatic backup has caught up with the writes (it then does not run
/// until [`BACKUP_EVERY`] more events), and copies it; the copy and its point.
async fn copy_backup(f: &FileHandle, auto: &AutoBackup, dir: &TempDir) -> (PathBuf, u64) {
    let from = auto.path_for(f.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let point = elfiee_engine::backup::newest_point(&from).map_or(0, |p| p.seq);
        if point > 0 && point + BACKUP_EVERY > f.last_seq() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no automatic backup (at {point})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let to = dir.path().join("trial.backup");
    std::fs::copy(&from, &to).unwrap();
    let point = elfiee_engine::backup::newest_point(&to).unwrap();
    (to, point.seq)
}

/// Every non-empty file under `root`, relative to it, sorted.
fn files_of(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if std::fs::metadata(&p).unwrap().len() > 0 {
                out.push(p.strip_prefix(root).unwrap().to_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// One trial: which file, how, with which generator.
#[derive(Clone, Debug)]
struct Trial {
    n: u64,
    file: PathBuf,
    kind: Kind,
    seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Opened at the original's state and `verify` found nothing.
    OpenedRight,
    /// Opened at the original's state, `verify` found the damage, salvaged.
    OpenedThenSalvaged,
    /// Refused with a clear error, salvaged.
    RefusedThenSalvaged,
}

struct Done {
    outcome: Outcome,
    /// The salvaged document's last seq.
    salvaged: Option<u64>,
    changed: bool,
    /// What happened, in a line (printed with `ELFIEE_DAMAGE_VERBOSE=1`).
    story: String,
}

/// Runs trial `t` on a copy of the original in `base` (see the module docs); panics naming
/// the trial when something is wrong.
async fn run_trial(o: Arc<Original>, engine: Engine, base: PathBuf, t: Trial) -> Done {
    // `ELFIEE_DAMAGE_KEEP=1` leaves each trial's folder (named after it) for a look.
    let work = tempfile::Builder::new()
        .prefix(&format!("trial-{}-", t.n))
        .disable_cleanup(env_u64("ELFIEE_DAMAGE_KEEP", 0) > 0)
        .tempdir_in(&base)
        .unwrap();
    let doc = work.path().join(DOC);
    copy_dir(&o.elf, &doc);
    let mut rng = Rng(t.seed);
    let (what, changed) = damage(&doc.join(&t.file), t.kind, &mut rng);
    let name = format!("trial {} ({}: {what})", t.n, t.file.display());
    // What salvage must find is judged on the document as damaged, before an open, a close
    // or `verify` mended (or cut) anything.
    let as_damaged = work.path().join("as-damaged.elf");
    copy_dir(&doc, &as_damaged);
    // The document's automatic backup, where the trials' engine keeps it (beside it); an
    // open and close may append to it, so salvage is given the original copy instead.
    std::fs::copy(&o.backup, work.path().join(format!("{DOC}.backup"))).unwrap();
    let outcome = match engine.open(&doc).await {
        Ok(f) => {
            let (seq, digest) = (f.last_seq(), f.state_digest());
            f.close().await;
            assert_eq!(
                (seq, digest.as_str()),
                (o.last, o.digest.as_str()),
                "{name}: opened at another state"
            );
            let path = doc.clone();
            let verified =
                tokio::task::spawn_blocking(move || elfiee_engine::verify(&path, |_, _| {}))
                    .await
                    .unwrap();
            match verified {
                Ok(r) if r.ok => {
                    return Done {
                        outcome: Outcome::OpenedRight,
                        salvaged: None,
                        changed,
                        story: format!("{name}: opened right, verify ok"),
                    }
                }
                Ok(r) => (
                    Outcome::OpenedThenSalvaged,
                    format!("verify: {:?}", r.problems),
                ),
                Err(e) => (Outcome::OpenedThenSalvaged, format!("verify: {e}")),
            }
        }
        Err(e) => {
            assert_clear_refusal(&e, &doc, &name);
            (Outcome::RefusedThenSalvaged, format!("refused: {e}"))
        }
    };
    let (outcome, why) = outcome;
    let (seq, said) = check_salvage(&o, &engine, &doc, &as_damaged, &t, &name).await;
    Done {
        outcome,
        salvaged: Some(seq),
        changed,
        story: format!("{said}; {why}"),
    }
}

/// A refusal to open must name the document, say to salvage it, and read as a sentence.
fn assert_clear_refusal(e: &EngineError, doc: &Path, name: &str) {
    let msg = e.to_string();
    for dump in [
        "Os {",
        "kind: ",
        "Custom {",
        "Error {",
        "Corrupt {",
        "Storage(",
        "Io {",
        "panicked with message",
    ] {
        assert!(
            !msg.contains(dump),
            "{name}: the refusal reads like a Debug dump or a panic: {msg}"
        );
    }
    assert!(
        msg.contains(DOC),
        "{name}: the refusal does not name {}: {msg}",
        doc.display()
    );
    if msg.contains("salvage") {
        assert!(
            msg.contains(&format!("{DOC}.backup")),
            "{name}: the advice does not name the document's backup: {msg}"
        );
    }
    if let EngineError::NewerFormat { found, .. } = e {
        // A damaged marker that reads as a newer format: the message cannot tell it from a
        // document written by a newer elfiee.
        assert!(
            msg.contains(&format!("format version {found}")),
            "{name}: {msg}"
        );
    } else {
        assert!(
            msg.contains("salvage"),
            "{name}: the refusal does not say to salvage the document: {msg}"
        );
    }
}

/// Salvages the damaged `doc` with the backup's copy and checks what it got back (see the
/// module docs); the salvaged document's last seq, and what salvage said.
async fn check_salvage(
    o: &Arc<Original>,
    engine: &Engine,
    doc: &Path,
    as_damaged: &Path,
    t: &Trial,
    name: &str,
) -> (u64, String) {
    let work = as_damaged.parent().unwrap();
    let to = work.join("salvaged.elf");
    let r: SalvageReport = {
        let (doc, to, backup) = (doc.to_owned(), to.clone(), o.backup.clone());
        tokio::task::spawn_blocking(move || {
            let folds = elfiee_capabilities::Registry::builtin().folds().clone();
            salvage(&doc, &to, Some(&backup), &folds, |_| {})
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: salvage failed: {e}"))
    };
    let said = format!(
        "{name}: salvage recovered 1..={} {:?}, lost {:?}, notes {:?}",
        r.seq, r.recovered, r.lost, r.notes
    );
    assert_eq!(r.backup_seq, Some(o.backup_seq), "{said}");
    assert!(
        r.seq >= o.backup_seq,
        "{said}: less than the backup holds ({})",
        o.backup_seq
    );
    assert!(
        r.seq <= o.last,
        "{said}: more events than the original ({})",
        o.last
    );
    // Past a lost event the chain is sealed again; up to it the hashes are the original's.
    if r.rechained_from.is_none() {
        assert_eq!(
            r.head,
            o.hashes[r.seq as usize - 1].to_hex(),
            "{said}: another last event"
        );
    }
    // The lost ranges inside what was salvaged (placeholders), then at most one past it.
    let (gaps, tail): (Vec<_>, Vec<_>) = r.lost.iter().partition(|l| l.from <= r.seq);
    assert_eq!(
        r.rechained_from,
        gaps.first().map(|l| l.from),
        "{said}: the chain is sealed again from the first lost event"
    );
    // The spans and the lost ranges follow one another from 1 to the salvaged seq.
    let mut tiles: Vec<(u64, u64, bool)> = r
        .recovered
        .iter()
        .map(|s| {
            assert!(
                s.to >= s.from && ["log", "scan", "backup"].contains(&s.source.as_str()),
                "{said}"
            );
            (s.from, s.to, false)
        })
        .chain(
            gaps.iter()
                .map(|l| (l.from, l.to.expect("a gap ends"), true)),
        )
        .collect();
    tiles.sort();
    let mut next = 1;
    for (from, to, _) in &tiles {
        assert_eq!(*from, next, "{said}: spans with a gap or an overlap");
        next = to + 1;
    }
    assert_eq!(
        next,
        r.seq + 1,
        "{said}: the spans do not reach the salvaged seq"
    );
    assert!(
        tiles.last().is_some_and(|t| !t.2),
        "{said}: a salvage that ends on a lost event"
    );
    // What is lost past the salvaged seq is exactly what the original held past it.
    if r.seq == o.last {
        assert!(
            tail.is_empty(),
            "{said}: lost events although every one was recovered"
        );
    } else {
        assert_eq!(tail.len(), 1, "{said}");
        let lost = tail[0];
        assert_eq!(lost.from, r.seq + 1, "{said}");
        let end = lost.to.unwrap_or_else(|| {
            panic!(
                "{said}: the end of the lost range is unknown although the backup and HEAD know it"
            )
        });
        if end != o.last {
            // Only a damaged HEAD that still reads as a later seq with a hash no event
            // has can mislead: nothing else in the document says where the log ended.
            let head = unprovable_head(as_damaged, o);
            assert_eq!(
                head,
                Some(end),
                "{said}: the lost range ends at {end}, the original at {}",
                o.last
            );
        }
    }
    for l in &r.lost {
        assert!(!l.why.trim().is_empty(), "{said}: no reason given");
        // Why each lost range begins where it does, told independently: from the document
        // salvage was given, and from the document as damaged (before the open, a close or
        // `verify` mended anything: what they lose is their failure, not salvage's).
        let next = l.from;
        let prev = o.hashes[next as usize - 2];
        match holds(&t.file) {
            Holds::Nothing => panic!(
                "{said}: {} holds no event, yet event {next} was not recovered",
                t.file.display()
            ),
            Holds::Content => {
                let lost = |doc: &Path| {
                    o.refs[next as usize - 1]
                        .iter()
                        .any(|b| !provable_body(doc, b, o))
                };
                assert!(
                    lost(doc),
                    "{said}: every body of event {next} is whole in the damaged store or the backup"
                );
                assert!(
                    lost(as_damaged),
                    "{said}: every body of event {next} was whole in the damaged store or the backup before the open (and close, verify) changed the store"
                );
            }
            Holds::Log => {
                let read = |doc: &Path, check: &str| {
                    let (doc, check) = (doc.to_owned(), work.join(check));
                    tokio::task::spawn_blocking(move || provable_record(&doc, &check, next, prev))
                };
                let given = read(doc, "check-given.elf").await.unwrap();
                assert!(
                    given.is_err(),
                    "{said}: event {next} is readable in the damaged log and continues the chain"
                );
                let damaged = read(as_damaged, "check-as-damaged.elf").await.unwrap();
                if damaged.is_ok() {
                    // The known limitation (docs/decisions/0039-salvage-after-a-refused-open.md):
                    // sled mends the data of a cut `db` while the engine opens it, before the
                    // open can be refused. Counted and named; anything else fails.
                    assert!(
                        t.file.ends_with("log/db"),
                        "{said}: event {next} was readable in the log as damaged, and continued the chain; the open lost it ({})",
                        given.unwrap_err()
                    );
                    SLED_MENDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    eprintln!("{said}: event {next} on was lost to sled mending the cut db at the refused open (known)");
                }
            }
        }
    }
    // The salvaged document: verify accepts it; it opens at the original's state at its seq
    // with the original's events, and takes a write.
    let path = to.clone();
    let verified = tokio::task::spawn_blocking(move || elfiee_engine::verify(&path, |_, _| {}))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{said}: verify of the salvaged document failed: {e}"));
    assert!(
        verified.ok,
        "{said}: verify rejects the salvaged document: {:?}",
        verified.problems
    );
    assert_eq!(verified.events, r.seq, "{said}");
    let g = engine
        .open(&to)
        .await
        .unwrap_or_else(|e| panic!("{said}: the salvaged document does not open: {e}"));
    assert_eq!(
        r.state_digest,
        g.state_digest(),
        "{said}: the report's digest"
    );
    if !gaps.is_empty() {
        BRIDGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if gaps.is_empty() {
        let expected = o.digest_at(r.seq).await;
        assert_eq!(
            g.state_digest(),
            expected,
            "{said}: the salvaged document's state"
        );
    }
    // Every event is the original's, but for a placeholder in place of each lost one.
    let events = g.events(1).unwrap();
    assert_eq!(events.len() as u64, r.seq, "{said}");
    let originals = o.pristine.events(1).unwrap();
    for e in &events {
        let lost = gaps
            .iter()
            .any(|l| (l.from..=l.to.unwrap()).contains(&e.seq));
        let was = &originals[e.seq as usize - 1];
        if lost {
            assert_eq!(e.cap_id(), "salvage.lost", "{said}: event {}", e.seq);
        } else if r.rechained_from.is_some_and(|f| e.seq >= f) {
            assert_eq!(
                (
                    &e.event_id,
                    &e.cmd_id,
                    &e.entity,
                    &e.attribute,
                    &e.value,
                    &e.clock,
                    e.created_at
                ),
                (
                    &was.event_id,
                    &was.cmd_id,
                    &was.entity,
                    &was.attribute,
                    &was.value,
                    &was.clock,
                    was.created_at
                ),
                "{said}: event {} differs",
                e.seq
            );
        } else {
            assert_eq!(
                e.hash,
                o.hashes[e.seq as usize - 1],
                "{said}: event {} differs",
                e.seq
            );
        }
    }
    let c = Command::new(
        "alice",
        "core.create",
        None,
        json!({"name": "after", "block_type": "markdown"}),
    );
    let written = g
        .submit(c)
        .await
        .unwrap_or_else(|e| panic!("{said}: the salvaged document refuses a write: {e}"));
    assert_eq!(written[0].seq, r.seq + 1, "{said}");
    g.close().await;
    (r.seq, said)
}

/// The damaged document's `HEAD`, when it names a seq past the original's last with a hash
/// of no event of it (salvage cannot tell it from a log that lost its tail).
fn unprovable_head(doc: &Path, o: &Original) -> Option<u64> {
    let (seq, hash) = elfiee_engine::layout::ElfPaths::new(doc).read_head()?;
    (seq > o.last && !o.hashes.contains(&hash)).then_some(seq)
}

/// Whether body `r` is whole somewhere salvage can find it: in the backup (an event up to
/// its point refers to it), or anywhere in the damaged pack (a record `len ‖ hash ‖ bytes`
/// whose bytes hash to it), whatever the damaged index says.
fn provable_body(doc: &Path, r: &ContentRef, o: &Original) -> bool {
    if o.refs[..o.backup_seq as usize]
        .iter()
        .flatten()
        .any(|b| b == r)
    {
        return true;
    }
    let Ok(pack) = std::fs::read(doc.join("content/pack")) else {
        return false;
    };
    let key = &r.hash.0[..];
    (8..pack.len().saturating_sub(32)).any(|at| {
        pack[at..at + 32] == *key && {
            let len = u64::from_le_bytes(pack[at - 8..at].try_into().unwrap());
            let body = at + 32;
            len == r.len
                && pack.len() >= body + len as usize
                && blake3::hash(&pack[body..body + len as usize]).as_bytes() == &r.hash.0
        }
    })
}

/// Reads record `seq` of a copy (at `check`) of the damaged log: `Ok` when it is there and
/// continues the chain after `prev`, else why not.
fn provable_record(doc: &Path, check: &Path, seq: u64, prev: EventHash) -> Result<(), String> {
    copy_dir(doc, check);
    let open = || {
        std::panic::catch_unwind(|| SledEventLog::open(&check.join("log"), check))
            .map_err(|_| "sled panicked while opening it".to_string())?
            .map_err(|e| e.to_string())
    };
    // sled's page-table snapshots (`log/snap.*`) are rebuilt from its data, and its settings
    // (`log/conf`) are the same for every document: damaged, they hide nothing of the log.
    let log = open().or_else(|_| {
        for entry in std::fs::read_dir(check.join("log")).unwrap() {
            let p = entry.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("snap.") {
                std::fs::remove_file(&p).unwrap();
            }
        }
        open()
    });
    let log = log.or_else(|_| {
        let _ = std::fs::remove_file(check.join("log/conf"));
        open()
    })?;
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        log.records(seq, seq).next()
    }))
    .map_err(|_| "sled panicked reading it".to_string())?;
    match read {
        Some(Ok((s, bytes))) if s == seq => {
            elfiee_engine::codec::open(seq, &bytes, Some(&prev)).map(|_| ())
        }
        Some(Ok((s, _))) => Err(format!("the next record is {s}")),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("missing".into()),
    }
}

/// Counts of outcomes, by file and by kind.
#[derive(Default)]
struct Tally {
    trials: u64,
    unchanged: u64,
    outcomes: BTreeMap<Outcome, u64>,
    /// Salvages that got every event back, and those that stopped short.
    whole: u64,
    short: u64,
}

impl Tally {
    fn add(&mut self, d: &Done, last: u64) {
        self.trials += 1;
        self.unchanged += u64::from(!d.changed);
        *self.outcomes.entry(d.outcome).or_default() += 1;
        match d.salvaged {
            Some(s) if s == last => self.whole += 1,
            Some(_) => self.short += 1,
            None => {}
        }
    }

    fn row(&self, what: &str) -> String {
        let n = |o| self.outcomes.get(&o).copied().unwrap_or(0);
        format!(
            "| {what} | {} | {} | {} | {} | {} | {} | {} |",
            self.trials,
            n(Outcome::OpenedRight),
            n(Outcome::OpenedThenSalvaged),
            n(Outcome::RefusedThenSalvaged),
            self.whole,
            self.short,
            self.unchanged
        )
    }
}

/// The threads of the trials' runtime (the engine's own threads have their own names).
const RUNTIME: &str = "damage-trials";

/// The panics seen anywhere in the process (sled's, caught by the engine, among them), but
/// on other tests' runtimes.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Trials whose tail sled's mending of a cut `db` at the refused open cost (the known
/// limitation; counted, shown in the table).
static SLED_MENDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Trials whose salvage recovered events past a lost one (placeholders in its place).
static BRIDGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn record_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current().name().unwrap_or("?").to_owned();
        if thread == "tokio-rt-worker" {
            return default(info);
        }
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANICS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{thread} at {at}"));
        default(info);
    }));
}

async fn damage_run(trials: u64, events: u64) {
    let seed = env_u64("ELFIEE_DAMAGE_SEED", 0x29_da_3a_9e);
    let jobs = env_u64("ELFIEE_DAMAGE_JOBS", 2).max(1) as usize;
    let verbose = env_u64("ELFIEE_DAMAGE_VERBOSE", 0) > 0;
    let only: Option<HashSet<u64>> = std::env::var("ELFIEE_DAMAGE_ONLY")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect());
    let started = Instant::now();
    // The trials' engine backs documents up beside them, as the user's would.
    let auto = AutoBackup {
        every_events: BACKUP_EVERY,
        dir: None,
    };
    let engine = Engine::new(config(Some(auto), events));
    let o = Arc::new(build_original(&engine, events).await);
    let built = started.elapsed();
    let mut base = TempDir::new().unwrap();
    if env_u64("ELFIEE_DAMAGE_KEEP", 0) > 0 {
        base.disable_cleanup(true);
        eprintln!("trials in {}", base.path().display());
    }
    let plan: Vec<Trial> = (0..trials)
        .filter(|n| only.as_ref().is_none_or(|o| o.contains(n)))
        .map(|n| {
            let files = o.files.len() as u64;
            Trial {
                n,
                file: o.files[(n % files) as usize].clone(),
                kind: KINDS[((n / files) % 3) as usize],
                seed: seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d),
            }
        })
        .collect();
    let mut failures = Vec::new();
    let mut by_file: BTreeMap<PathBuf, Tally> = BTreeMap::new();
    let mut by_kind: BTreeMap<Kind, Tally> = BTreeMap::new();
    let mut salvaged_seqs = Vec::new();
    let mut running = tokio::task::JoinSet::new();
    let mut queue = plan.into_iter();
    loop {
        while running.len() < jobs {
            let Some(t) = queue.next() else { break };
            let job = tokio::spawn(run_trial(
                o.clone(),
                engine.clone(),
                base.path().to_owned(),
                t.clone(),
            ));
            running.spawn(async move { (t, tokio::time::timeout(TRIAL_LIMIT, job).await) });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (t, result) = joined.unwrap();
        let what = format!(
            "trial {} ({} {:?}, seed {:#x})",
            t.n,
            t.file.display(),
            t.kind,
            t.seed
        );
        match result {
            Err(_) => failures.push(format!("{what}: no answer within {TRIAL_LIMIT:?} (a hang)")),
            Ok(Err(e)) if e.is_panic() => {
                let p = e.into_panic();
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                // The message names the trial and the damage; the seed repeats it.
                failures.push(format!("{msg} [{:?}, seed {:#x}]", t.kind, t.seed));
            }
            Ok(Err(e)) => failures.push(format!("{what}: {e}")),
            Ok(Ok(d)) => {
                if verbose {
                    eprintln!("{}", d.story);
                }
                by_file.entry(t.file.clone()).or_default().add(&d, o.last);
                by_kind.entry(t.kind).or_default().add(&d, o.last);
                salvaged_seqs.extend(d.salvaged);
            }
        }
    }
    let ran = by_file.values().map(|t| t.trials).sum::<u64>() + failures.len() as u64;
    let head = "| | trials | opened right | opened, verify found it, salvaged | refused, salvaged | salvaged whole | salvaged short | damage changed nothing |\n|---|---|---|---|---|---|---|---|";
    let mut table = format!(
        "damage run: {ran} trials, seed {seed:#x}, document of {} events ({} files), backup copy at {}, built in {:.1} s, trials in {:.1} s ({jobs} at once)\n{head}\n",
        o.last,
        o.files.len(),
        o.backup_seq,
        built.as_secs_f64(),
        (started.elapsed() - built).as_secs_f64()
    );
    for (f, t) in &by_file {
        table += &t.row(&format!("`{}`", f.display()));
        table += "\n";
    }
    for (k, t) in &by_kind {
        table += &t.row(&format!("{k:?}"));
        table += "\n";
    }
    if !salvaged_seqs.is_empty() {
        let at_backup = salvaged_seqs.iter().filter(|&&s| s == o.backup_seq).count();
        let between = salvaged_seqs
            .iter()
            .filter(|&&s| s > o.backup_seq && s < o.last)
            .count();
        table += &format!(
            "salvaged documents: {} in all; {} ended at the backup's point {}, {} between it and the last event {}\n",
            salvaged_seqs.len(),
            at_backup,
            o.backup_seq,
            between,
            o.last
        );
    }
    let panics = PANICS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut distinct: BTreeMap<String, usize> = BTreeMap::new();
    for p in panics {
        *distinct.entry(p).or_default() += 1;
    }
    table += &format!("panics seen (sled's are caught by the engine): {distinct:?}\n");
    table += &format!(
        "trials whose tail sled's mending of a cut db at the refused open cost (known): {}\n",
        SLED_MENDED.load(std::sync::atomic::Ordering::Relaxed)
    );
    let bridged = BRIDGED.load(std::sync::atomic::Ordering::Relaxed);
    table += &format!("trials whose salvage recovered events past a lost one: {bridged}\n");
    eprintln!("{table}");
    if ran >= 200 && bridged == 0 {
        failures
            .push("no salvage went past a lost event: the damage does not reach that path".into());
    }
    for (p, n) in &distinct {
        if !p.contains("/sled-") && !p.contains("tests/damage.rs") {
            failures.push(format!(
                "{n} panics at {p} (not sled's, which the engine catches)"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures in {ran} trials:\n{}",
        failures.len(),
        failures.join("\n")
    );
    if only.is_none() {
        assert!(ran >= 200 || ran == trials, "{ran} trials ran");
        for f in &o.files {
            let n = by_file.get(f).map_or(0, |t| t.trials);
            assert!(
                n * 3 >= trials / o.files.len() as u64,
                "{} was damaged in {n} trials only",
                f.display()
            );
        }
    }
}

/// The damage test of issue 29 (see the module docs).
#[test]
fn damaged_files_open_right_or_refuse_clearly_and_salvage_recovers_every_provable_event() {
    record_panics();
    let trials = env_u64("ELFIEE_DAMAGE_TRIALS", 330);
    let events = env_u64("ELFIEE_DAMAGE_EVENTS", 400);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name(RUNTIME)
        .enable_all()
        .build()
        .unwrap();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(damage_run(trials, events))
    }));
    // A trial that hung is reported by the run; its blocking thread is left behind.
    rt.shutdown_timeout(Duration::from_secs(5));
    if let Err(failed) = run {
        std::panic::resume_unwind(failed);
    }
}

/// A record of `commands.idx` zeroed (its id nil, its first seq and count 0) must leave the
/// document opening at its state, the index rebuilt from the log. Found by the damage run:
/// `load_state` computes `first + count - 1` for it, which overflows (a panic in a debug build,
/// the open refused as "opening task failed").
#[tokio::test]
async fn a_zeroed_command_index_record_does_not_stop_the_open() {
    let dir = TempDir::new().unwrap();
    let engine = Engine::new(EngineConfig {
        snapshot_at_close_after: 1,
        ..config(None, 0)
    });
    let f = common::init(&engine, &dir).await;
    for i in 0..5 {
        f.submit(common::create("alice", &format!("b{i}")))
            .await
            .unwrap();
    }
    let (path, digest) = (f.path().to_owned(), f.state_digest());
    f.close().await;
    let index = path.join("commands.idx");
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 8 + 2 * 28, "the close wrote the index");
    bytes[8 + 28..8 + 2 * 28].fill(0);
    std::fs::write(&index, &bytes).unwrap();
    let opened = tokio::spawn(async move { engine.open(&path).await.map(|g| g.state_digest()) });
    let digest_now = opened
        .await
        .expect("no panic")
        .unwrap_or_else(|e| panic!("the open is refused: {e}"));
    assert_eq!(digest_now, digest);
}

/// Two damaged records of `content/index`: one whose length grew past the next record's end
/// (still inside the pack), and a later one pointing past the pack's end. Every body is
/// still whole in `content/pack`, so `verify` must report the damage without cutting
/// anything, and salvage (with no backup) must get every event back. Found by the damage run
/// (trial 234 of seed 0x29da3a9e): loading the store keeps the records before the one that
/// points past the pack, drops it and the rest, and re-indexes the pack from the furthest
/// end the kept records name; the grown one's falls inside a record, the walk finds no whole
/// record there, and the pack is cut at it, losing every whole body after it (by `verify`,
/// or by any read of a body, e.g. the automatic backup at close).
#[tokio::test]
async fn a_damaged_content_index_does_not_make_verify_cut_the_pack() {
    let dir = TempDir::new().unwrap();
    let engine = common::engine();
    let f = common::init(&engine, &dir).await;
    let block = f.submit(common::create("alice", "b")).await.unwrap()[0]
        .entity
        .clone();
    for i in 0..6 {
        let p = json!({"markdown": text(3 * i)});
        common::alice(&f, "markdown.write", Some(&block), p).await;
    }
    let (path, last) = (f.path().to_owned(), f.last_seq());
    f.close().await;
    let (index, pack) = (path.join("content/index"), path.join("content/pack"));
    let mut records = std::fs::read(&index).unwrap();
    assert_eq!(records.len(), 6 * 48);
    let whole = std::fs::read(&pack).unwrap();
    // The second record's length grows past the third record's end; the fourth points past
    // the pack.
    let len = u64::from_le_bytes(records[48 + 40..2 * 48].try_into().unwrap());
    records[48 + 40..2 * 48].copy_from_slice(&(len + 500).to_le_bytes());
    records[3 * 48 + 32..3 * 48 + 40].copy_from_slice(&(whole.len() as u64).to_le_bytes());
    std::fs::write(&index, &records).unwrap();
    // Salvage finds every body in the pack whatever the index says.
    let folds = elfiee_capabilities::Registry::builtin().folds().clone();
    let copy = dir.path().join("copy.elf");
    copy_dir(&path, &copy);
    let r = salvage(&copy, &dir.path().join("s1.elf"), None, &folds, |_| {}).unwrap();
    assert_eq!((r.seq, r.lost.clone()), (last, vec![]), "{r:?}");
    let report = elfiee_engine::verify(&path, |_, _| {}).unwrap();
    assert!(!report.ok, "verify finds the damaged index");
    let after = std::fs::read(&pack).unwrap();
    assert!(
        after == whole,
        "verify changed the pack from {} to {} bytes: {:?}",
        whole.len(),
        after.len(),
        report.problems
    );
    let r = salvage(&path, &dir.path().join("s2.elf"), None, &folds, |_| {}).unwrap();
    assert_eq!((r.seq, r.lost.clone()), (last, vec![]), "{r:?}");
}

/// The events sled can still give of the document at `doc` (read from a copy at `scratch`,
/// with the same fallbacks as salvage), from 1 for as long as the chain holds.
fn readable_events(doc: &Path, scratch: &Path) -> u64 {
    copy_dir(doc, scratch);
    let log = std::panic::catch_unwind(|| {
        let open = || SledEventLog::open(&scratch.join("log"), scratch).ok();
        open().or_else(|| {
            for entry in std::fs::read_dir(scratch.join("log")).unwrap() {
                let p = entry.unwrap().path();
                if p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("snap.")
                {
                    std::fs::remove_file(&p).unwrap();
                }
            }
            open()
        })
    });
    let Ok(Some(log)) = log else { return 0 };
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        elfiee_engine::log::read_events(&log, 1, u64::MAX, Some(EventHash::ZERO))
            .take_while(Result::is_ok)
            .count() as u64
    }));
    read.unwrap_or(0)
}

/// A refused open of a document whose sled file (`log/db`) was cut short must leave the log
/// as readable as it found it: salvage comes after it. Found by the damage run (trial 579 of
/// seed 0x29da3a9e, 6,004 events): sled opens the cut file, the engine refuses it (the log
/// ends before `HEAD`), and what sled wrote meanwhile (the snapshot it leaves does not fit
/// the data; without it, the data reads shorter) loses the last readable events. Here, 12 of
/// 32 cuts in the segment before the last lose 1 to 4 events each.
///
/// Mended by issue 39 (docs/decisions/0042-sled-is-tried-on-a-copy-and-read-by-its-bytes.md):
/// a log not closed cleanly is tried on a copy first and refused untouched, and salvage reads
/// on past where sled stops from the records the files hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_open_of_a_cut_sled_file_loses_no_readable_event() {
    let dir = TempDir::new().unwrap();
    let engine = Engine::new(config(None, 6000));
    let o = build_original(&engine, 6000).await;
    let path = o.elf.clone();
    let size = std::fs::metadata(path.join("log/db")).unwrap().len();
    let mut lost = Vec::new();
    // Cuts over the segment before the last (sled's segments are 512 KiB), where each trial
    // of the run that lost events cut it.
    let last_segment = size / (512 << 10) * (512 << 10);
    for k in 0..32u64 {
        let at = last_segment.saturating_sub((k + 1) * (16 << 10));
        let trial = dir.path().join(format!("cut-{k}"));
        let doc = trial.join("x.elf");
        copy_dir(&path, &doc);
        let db = std::fs::OpenOptions::new()
            .write(true)
            .open(doc.join("log/db"))
            .unwrap();
        db.set_len(at).unwrap();
        drop(db);
        let before = readable_events(&doc, &trial.join("before.elf"));
        if let Ok(g) = engine.open(&doc).await {
            g.close().await;
            continue;
        }
        // What salvage reads after the refused open (with sled's snapshot from before it,
        // which the engine keeps).
        let folds = elfiee_capabilities::Registry::builtin().folds().clone();
        let after =
            elfiee_engine::salvage::salvage(&doc, &trial.join("after.elf"), None, &folds, |_| {})
                .map_or(0, |r| r.seq);
        if after < before {
            lost.push(format!(
                "cut at {at} of {size}: events {}..={before}",
                after + 1
            ));
        }
        std::fs::remove_dir_all(&trial).unwrap();
    }
    assert!(
        lost.is_empty(),
        "the refused open lost readable events: {lost:?}"
    );
}

/// A body lost in the middle of the log (its bytes damaged in the content pack, no backup):
/// salvage puts a `salvage.lost` placeholder in place of that one event and recovers every
/// event after it, whose bodies and values are the original's (issue 39: "salvage recovers
/// every event whose bytes are intact, past a damaged record or body"). Before, it stopped at
/// the lost body and lost every event after it.
#[tokio::test]
async fn salvage_goes_on_past_an_event_whose_body_is_lost() {
    let dir = TempDir::new().unwrap();
    let engine = common::engine();
    let f = common::init(&engine, &dir).await;
    let elf = dir.path().join("x.elf");
    let b = f.submit(common::create("alice", "notes")).await.unwrap()[0]
        .entity
        .clone();
    let text = |i: usize| format!("version {i} of a body the content store keeps. ").repeat(12);
    let mut lost_seq = 0;
    for i in 0..20 {
        let e = f
            .submit(Command::new(
                "alice",
                "markdown.write",
                Some(&b),
                json!({"markdown": text(i)}),
            ))
            .await
            .unwrap();
        if i == 7 {
            lost_seq = e[0].seq;
        }
    }
    let original = f.events(1).unwrap();
    let last = f.last_seq();
    let digest = f.state_digest();
    f.close().await;
    // Damage the body of write 7 wherever the pack holds it.
    let pack = elf.join("content/pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    let needle = text(7).into_bytes();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("the body is in the pack");
    bytes[at + 10] ^= 0x55;
    std::fs::write(&pack, bytes).unwrap();

    let to = dir.path().join("salvaged.elf");
    let folds = elfiee_capabilities::Registry::builtin().folds().clone();
    let r = salvage(&elf, &to, None, &folds, |_| {}).unwrap();
    assert_eq!(r.seq, last, "{r:?}");
    assert_eq!(r.lost.len(), 1, "{r:?}");
    assert_eq!(
        (r.lost[0].from, r.lost[0].to),
        (lost_seq, Some(lost_seq)),
        "{r:?}"
    );
    assert!(r.lost[0].why.contains("body"), "{r:?}");
    assert_eq!(r.rechained_from, Some(lost_seq), "{r:?}");
    assert!(elfiee_engine::verify(&to, |_, _| {}).unwrap().ok);
    let g = engine.open(&to).await.unwrap();
    let events = g.events(1).unwrap();
    assert_eq!(events.len(), original.len());
    for (e, o) in events.iter().zip(&original) {
        if e.seq == lost_seq {
            assert_eq!(e.cap_id(), elfiee_projections::SALVAGE_LOST);
            assert_eq!(e.cmd_id, o.cmd_id, "the placeholder keeps its command");
        } else {
            assert_eq!((&e.event_id, &e.value), (&o.event_id, &o.value));
            assert_eq!(e.hash == o.hash, e.seq < lost_seq, "event {}", e.seq);
        }
    }
    // Later writes replaced what the lost one wrote: the state is the original's.
    assert_eq!(g.state_digest(), digest);
    assert_eq!(r.state_digest, digest);
    g.submit(common::create("alice", "after")).await.unwrap();
    g.close().await;
}
