//! The damage campaign of issue 39, through the `elfiee` binary as a user meets it: a
//! 2,000-event document with a backup taken at three quarters of its events, then seeded
//! random damages — byte flips (1 to 16 bytes), zeroed ranges (up to 4 KiB) and truncations —
//! each on a fresh copy, going round every file of the document and the backup file (sled's
//! `log/db`, `log/conf`, its snapshot and blobs, `events.pack`, `content/pack` and its index,
//! snapshots, `commands.idx`, `HEAD`, the markers, the backup). For each: `block list` and
//! `verify` on the damaged document, `salvage` into a new one (the backup found where a user
//! keeps it, beside the document, damaged or not), `verify` of what salvage wrote, and
//! `restore` of the backup when the backup is the damaged file; every call under a time limit.
//!
//! Counted: panics (exit 101 or `panicked` on stderr), hangs (a call past [`CALL_LIMIT`]),
//! salvaged documents that `verify` refuses, salvaged events that differ from the original
//! (all must be 0), and the share of intact events salvage recovers (target ≥ 99 %).
//!
//! **Intact**, precisely: before the trials, every place where an event's stored record
//! (`hash ‖ body`, byte for byte) lies in any file of the document or the backup is found, and
//! every place where each content body an event refers to lies (the content pack, the
//! backup). After a damage, a place is intact when the damaged file still holds the same bytes
//! there (a truncation that cuts it, or a flip or zeroing that changes any of its bytes, does
//! not). An event is intact when at least one place of its record is intact and, for each
//! body it refers to, at least one place of that body is. An intact event is recovered when
//! the salvaged document holds it at its seq with the same body (past a lost event salvage
//! seals the chain anew over the same bodies, with a `salvage.lost` placeholder in place of
//! each lost event; placeholders are not counted as recovered). The events after an event
//! that is not intact still count as intact, and salvage must get past the lost one to
//! recover them: this strict share is the (target ≥ 99 %). The **provable** share
//! counts only the intact events before the first one that is not: every one of those must
//! come back (target ≥ 99 %, met at 100 %).
//!
//! `ELFIEE_CAMPAIGN_TRIALS` (default 200, about a minute), `ELFIEE_CAMPAIGN_SEED`
//! (default 39, printed), `ELFIEE_CAMPAIGN_EVENTS` (default 2,000), `ELFIEE_CAMPAIGN_JOBS`
//! (trials at once, default 2), `ELFIEE_CAMPAIGN_VERBOSE=1` (a line per trial),
//! `ELFIEE_CAMPAIGN_ONLY=5,17` (those trials alone), `ELFIEE_CAMPAIGN_KEEP=1` (their folders
//! left behind).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use elfiee::engine::log::{EventLog, SledEventLog};
use elfiee::engine::{Engine, EngineConfig, FixedCtx};
use elfiee::model::Command;
use serde_json::json;

const DOC: &str = "campaign.elf";
const BACKUP: &str = "campaign.elf.backup";
/// A CLI call that takes longer than this hangs.
const CALL_LIMIT: Duration = Duration::from_secs(120);

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

/// A command with the next fixed id (with a fixed time and id base, the same document every
/// run: the seed alone decides the trials).
fn command(cap: &str, block: Option<&str>, payload: serde_json::Value) -> Command {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    Command {
        cmd_id: format!(
            "00000000-0000-4000-8000-{:012x}",
            NEXT.fetch_add(1, Ordering::SeqCst)
        )
        .parse()
        .expect("a uuid"),
        ..Command::new("alice", cap, block, payload)
    }
}

/// A bulk import of `n` files (one group of events in `events.pack`).
fn import(n: usize, tag: &str) -> Command {
    let files: Vec<_> = (0..n)
        .map(|i| json!({"path": format!("{tag}/f{i}.md"), "content": format!("# {tag} {i}\n")}))
        .collect();
    command(
        "directory.import",
        None,
        json!({"root": format!("/proj-{tag}"), "files": files}),
    )
}

/// Where a needle (a record or a body) lies: file (index into `Original::files`), offset.
type Place = (usize, usize);

/// The undamaged document and backup, and where every record and body lies in their files.
struct Original {
    _dir: tempfile::TempDir,
    /// Holds `DOC` and `BACKUP`.
    root: PathBuf,
    /// Every non-empty file, relative to `root` (the document's, then the backup).
    files: Vec<PathBuf>,
    contents: Vec<Vec<u8>>,
    /// The stored record of event `seq` at `[seq - 1]`.
    records: Vec<Vec<u8>>,
    record_places: Vec<Vec<Place>>,
    /// For each event, the bodies it refers to (indices into `body_places`).
    bodies_of: Vec<Vec<usize>>,
    body_lens: Vec<usize>,
    body_places: Vec<Vec<Place>>,
    backup_seq: u64,
}

/// Every place of every needle in `hay` (needles of 8 bytes or more), by a table of their
/// first 8 bytes: one pass over the file whatever the number of needles.
fn find_all(needles: &[&[u8]], hay: &[u8], file: usize, out: &mut [Vec<Place>]) {
    let mut by_key: HashMap<&[u8], Vec<usize>> = HashMap::new();
    for (i, n) in needles.iter().enumerate() {
        by_key.entry(&n[..8]).or_default().push(i);
    }
    for at in 0..hay.len().saturating_sub(7) {
        if let Some(is) = by_key.get(&hay[at..at + 8]) {
            for &i in is {
                if hay[at..].starts_with(needles[i]) {
                    out[i].push((file, at));
                }
            }
        }
    }
}

/// Every non-empty file under `root`, relative to `base`, sorted.
fn files_under(base: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_under(base, &p, out);
        } else if std::fs::metadata(&p).unwrap().len() > 0 {
            out.push(p.strip_prefix(base).unwrap().to_owned());
        }
    }
}

/// Writes `events` events (writes alone and in batches, bodies in the content store, two
/// bulk imports), backs the document up at three quarters of them, writes the rest, closes,
/// and finds every record and body in the files.
fn build_original(events: u64) -> Original {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let elf = root.join(DOC);
    let backup = root.join(BACKUP);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (backup_seq, bodies, refs) = rt.block_on(async {
        let engine = Engine::new(EngineConfig {
            fixed_ctx: Some(FixedCtx {
                now: chrono::DateTime::from_timestamp(1_750_000_000, 0).unwrap(),
                id_base: [39; 16],
            }),
            ..EngineConfig::default()
        });
        let f = engine.init(&elf, "Alice").await.unwrap();
        let mut blocks = Vec::new();
        for b in 0..8 {
            let c = command(
                "core.create",
                None,
                json!({"name": format!("b{b}"), "block_type": "markdown"}),
            );
            blocks.push(f.submit(c).await.unwrap()[0].entity.clone());
        }
        let write = |i: u64| {
            let id = &blocks[(i % 8) as usize];
            command("markdown.write", Some(id), json!({"markdown": text(i)}))
        };
        let (mut i, mut imported, mut backup_seq) = (0u64, 0, 0);
        while f.last_seq() < events {
            let at = f.last_seq();
            if imported == 0 && at >= events / 4 || imported == 1 && at >= events * 7 / 8 {
                f.submit(import(30, &format!("i{imported}"))).await.unwrap();
                imported += 1;
            }
            if backup_seq == 0 && at >= events * 3 / 4 {
                backup_seq = f.backup(&backup).await.unwrap().seq;
            }
            if i % 5 == 4 {
                f.submit_all((0..5).map(|k| write(i + k)).collect())
                    .await
                    .unwrap();
                i += 5;
            } else {
                f.submit(write(i)).await.unwrap();
                i += 1;
            }
        }
        let all = f.events(1).unwrap();
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        let mut index = HashMap::new();
        let mut refs = Vec::new();
        for e in &all {
            let mut of = Vec::new();
            for r in elfiee::projections::content::event_refs(&e.value) {
                let k = *index.entry(r.hash).or_insert_with(|| {
                    bodies.push(f.content(&r).unwrap().into_bytes());
                    bodies.len() - 1
                });
                of.push(k);
            }
            refs.push(of);
        }
        f.close().await;
        (backup_seq, bodies, refs)
    });
    // Opened and closed once by the CLI, as a document in use is: sled then keeps a snapshot
    // of its own (`log/snap.*`), one more file for the trials to damage.
    let opened = call(Some(&elf), &["block", "list"]);
    assert!(opened.ok(), "{}", opened.stderr);
    // The stored records, read from a copy (an open of the log rewrites its close marker).
    let copy = root.join("records-copy.elf");
    common::copy_dir(&elf, &copy);
    let records: Vec<Vec<u8>> = {
        let log = SledEventLog::open(&copy.join("log"), &copy).unwrap();
        log.records(1, u64::MAX).map(|r| r.unwrap().1).collect()
    };
    std::fs::remove_dir_all(&copy).unwrap();
    assert_eq!(records.len(), refs.len());
    let mut files = Vec::new();
    files_under(&root, &elf, &mut files);
    files.push(PathBuf::from(BACKUP));
    let contents: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(root.join(f)).unwrap())
        .collect();
    let mut record_places = vec![Vec::new(); records.len()];
    let mut body_places = vec![Vec::new(); bodies.len()];
    let record_needles: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let body_needles: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    for (k, bytes) in contents.iter().enumerate() {
        find_all(&record_needles, bytes, k, &mut record_places);
        find_all(&body_needles, bytes, k, &mut body_places);
    }
    for (i, p) in record_places.iter().enumerate() {
        assert!(!p.is_empty(), "the record of event {} is in no file", i + 1);
    }
    for (i, p) in body_places.iter().enumerate() {
        assert!(!p.is_empty(), "body {i} is in no file");
    }
    Original {
        _dir: dir,
        root,
        files,
        contents,
        body_lens: bodies.iter().map(Vec::len).collect(),
        records,
        record_places,
        bodies_of: refs,
        body_places,
        backup_seq,
    }
}

/// Damages `bytes` (a file of length > 0) by `kind`; what was done.
fn damage(bytes: &mut Vec<u8>, kind: u64, rng: &mut Rng) -> String {
    let len = bytes.len() as u64;
    match kind {
        0 => {
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
        1 => {
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(4096));
            bytes[from as usize..(from + n) as usize].fill(0);
            format!("zeroed {n} bytes at {from}")
        }
        _ => {
            let at = rng.below(len);
            bytes.truncate(at as usize);
            format!("cut at {at} of {len}")
        }
    }
}

/// One CLI call's end.
struct Call {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    hung: bool,
}

impl Call {
    fn panicked(&self) -> bool {
        // Rust's panic message (`thread '…' panicked at …`); an error that reports a panic
        // it caught (`sled panicked while opening it`) is not one.
        self.code == Some(101) || self.stderr.contains("panicked at")
    }
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `elfiee args` (on `elf` when given) under [`CALL_LIMIT`]; killed past it.
fn call(elf: Option<&Path>, args: &[&str]) -> Call {
    let mut c = Process::new(common::elfiee_bin());
    c.args(args)
        .env_remove("RUST_LOG")
        .env_remove("ELFIEE_ELF")
        .env_remove("ELFIEE_AUTO_BACKUP_EVERY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(elf) = elf {
        c.env("ELFIEE_ELF", elf);
    }
    let mut child = c.spawn().expect("start elfiee");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let reader_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + CALL_LIMIT;
    let (code, hung) = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break (s.code(), false);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Call {
        code,
        stdout: reader_out.join().unwrap(),
        stderr: String::from_utf8_lossy(&reader_err.join().unwrap()).into_owned(),
        hung,
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        1.0
    } else {
        part as f64 / whole as f64
    }
}

/// What one trial found.
#[derive(Default, Clone)]
struct Found {
    panics: u64,
    hangs: u64,
    /// Salvaged documents that `verify` refused, and salvaged events unlike the original's.
    bad_salvage: u64,
    wrong_events: u64,
    /// `salvage` refused (exit 1: nothing provable).
    salvage_refused: u64,
    intact: u64,
    recovered_intact: u64,
    /// The intact events before the first event that is not intact, and those recovered.
    provable: u64,
    recovered_provable: u64,
    /// Failed calls whose first stderr line is not `error: …`.
    not_error_first: u64,
    /// Events salvage brought back that were not counted intact (found where the count
    /// did not look, e.g. a record sled reads whole from a damaged place).
    recovered_other: u64,
    notes: Vec<String>,
}

impl Found {
    fn add(&mut self, o: &Found) {
        self.panics += o.panics;
        self.hangs += o.hangs;
        self.bad_salvage += o.bad_salvage;
        self.wrong_events += o.wrong_events;
        self.salvage_refused += o.salvage_refused;
        self.intact += o.intact;
        self.recovered_intact += o.recovered_intact;
        self.provable += o.provable;
        self.recovered_provable += o.recovered_provable;
        self.not_error_first += o.not_error_first;
        self.recovered_other += o.recovered_other;
    }

    fn share(&self) -> f64 {
        ratio(self.recovered_intact, self.intact)
    }

    fn provable_share(&self) -> f64 {
        ratio(self.recovered_provable, self.provable)
    }

    /// Counts the call's panic or hang, with a note naming it.
    fn check(&mut self, what: &str, c: &Call) {
        if c.hung {
            self.hangs += 1;
            self.notes.push(format!("{what} hung"));
        } else if c.panicked() {
            self.panics += 1;
            self.notes
                .push(format!("{what} panicked: {}", c.stderr.trim()));
        } else if !c.ok() && !c.stderr.starts_with("error:") {
            self.not_error_first += 1;
            self.notes.push(format!(
                "{what}: the first line is not the error: {}",
                c.stderr.lines().next().unwrap_or_default()
            ));
        }
    }
}

/// Which events are intact after `file` took `damaged` bytes (see the module docs).
fn intact_events(o: &Original, file: usize, damaged: &[u8]) -> Vec<bool> {
    let whole = |&(f, at): &Place, len: usize| {
        f != file || damaged.get(at..at + len) == Some(&o.contents[f][at..at + len])
    };
    let body_ok: Vec<bool> = o
        .body_places
        .iter()
        .zip(&o.body_lens)
        .map(|(ps, &len)| ps.iter().any(|p| whole(p, len)))
        .collect();
    o.records
        .iter()
        .zip(&o.record_places)
        .zip(&o.bodies_of)
        .map(|((r, ps), bodies)| {
            ps.iter().any(|p| whole(p, r.len())) && bodies.iter().all(|&b| body_ok[b])
        })
        .collect()
}

/// The stored records of the (undamaged) document at `elf`, or why they cannot be read.
fn records_of(elf: &Path) -> Result<Vec<Vec<u8>>, String> {
    let log = SledEventLog::open(&elf.join("log"), elf).map_err(|e| e.to_string())?;
    log.records(1, u64::MAX)
        .map(|r| r.map(|r| r.1).map_err(|e| e.to_string()))
        .collect()
}

/// Trial `n`: damage file `n % files` of a fresh copy, run the CLI on it, count.
fn trial(o: &Original, base: &Path, n: u64, seed: u64) -> (String, Found) {
    let mut rng = Rng(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let file = (n as usize) % o.files.len();
    let work = base.join(format!("trial-{n}"));
    common::copy_dir(&o.root.join(DOC), &work.join(DOC));
    std::fs::copy(o.root.join(BACKUP), work.join(BACKUP)).unwrap();
    let mut bytes = o.contents[file].clone();
    let what = damage(&mut bytes, rng.below(3), &mut rng);
    std::fs::write(work.join(&o.files[file]), &bytes).unwrap();
    let name = format!("trial {n} ({}: {what})", o.files[file].display());
    let intact = intact_events(o, file, &bytes);
    let provable = intact.iter().take_while(|&&i| i).count();
    let mut found = Found {
        intact: intact.iter().filter(|&&i| i).count() as u64,
        provable: provable as u64,
        ..Found::default()
    };
    let doc = work.join(DOC);
    let backup = work.join(BACKUP);
    for args in [&["block", "list"][..], &["verify"][..]] {
        let c = call(Some(&doc), args);
        found.check(&format!("{args:?}"), &c);
    }
    let saved = work.join("saved.elf");
    let c = call(
        None,
        &[
            "--json",
            "salvage",
            doc.to_str().unwrap(),
            saved.to_str().unwrap(),
        ],
    );
    found.check("salvage", &c);
    if c.ok() {
        let v = call(Some(&saved), &["verify"]);
        found.check("verify of the salvaged document", &v);
        if !v.ok() {
            found.bad_salvage += 1;
            found.notes.push(format!("salvaged: verify: {}", v.stderr));
        }
        let report: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap_or_default();
        // Read in this process (two trials run at once here): a failed read is tried once
        // more, and both reasons are noted.
        let got = records_of(&saved).or_else(|first| {
            found
                .notes
                .push(format!("reading the salvaged document: {first}"));
            std::thread::sleep(Duration::from_millis(200));
            records_of(&saved)
        });
        let got = got.unwrap_or_else(|e| {
            found
                .notes
                .push(format!("reading the salvaged document again: {e}"));
            Vec::new()
        });
        if Some(got.len() as u64) != report["seq"].as_u64() {
            found.bad_salvage += 1;
            found.notes.push(format!(
                "salvage said seq {} but its document holds {} events",
                report["seq"],
                got.len()
            ));
        }
        // Past a lost event salvage seals the chain anew (same bodies, new hashes), with a
        // placeholder in place of each lost event: bodies are compared, placeholders skipped.
        let lost: Vec<(u64, u64)> = report["lost"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| Some((l["from"].as_u64()?, l["to"].as_u64()?)))
            .collect();
        for (i, r) in got.iter().enumerate() {
            let seq = i as u64 + 1;
            if lost.iter().any(|&(from, to)| (from..=to).contains(&seq)) {
                continue;
            }
            if o.records.get(i).map(|o| &o[32..]) != Some(&r[32..]) {
                found.wrong_events += 1;
            } else if intact[i] {
                found.recovered_intact += 1;
                found.recovered_provable += u64::from(i < provable);
            } else {
                found.recovered_other += 1;
            }
        }
        if (got.len() as u64) < found.intact {
            found.notes.push(format!("salvage: {}", report["lost"]));
        }
    } else if !c.hung {
        found.salvage_refused += 1;
        found
            .notes
            .push(format!("salvage refused: {}", c.stderr.trim()));
    }
    if o.files[file] == Path::new(BACKUP) {
        let restored = work.join("restored.elf");
        let c = call(
            None,
            &[
                "--json",
                "restore",
                backup.to_str().unwrap(),
                restored.to_str().unwrap(),
            ],
        );
        found.check("restore", &c);
        if c.ok() {
            let v = call(Some(&restored), &["verify"]);
            found.check("verify of the restored document", &v);
            if !v.ok() {
                found.bad_salvage += 1;
                found.notes.push(format!("restored: verify: {}", v.stderr));
            }
        } else if restored.exists() {
            found.bad_salvage += 1;
            found
                .notes
                .push("a refused restore left its output behind".into());
        }
    }
    if env_u64("ELFIEE_CAMPAIGN_KEEP", 0) == 0 {
        std::fs::remove_dir_all(&work).unwrap();
    }
    (name, found)
}

#[test]
fn random_damage_to_every_file_salvages_the_intact_events_without_panic_or_hang() {
    let trials = env_u64("ELFIEE_CAMPAIGN_TRIALS", 200);
    let seed = env_u64("ELFIEE_CAMPAIGN_SEED", 39);
    let events = env_u64("ELFIEE_CAMPAIGN_EVENTS", 2_000);
    let jobs = env_u64("ELFIEE_CAMPAIGN_JOBS", 2).max(1);
    let verbose = env_u64("ELFIEE_CAMPAIGN_VERBOSE", 0) > 0;
    let started = Instant::now();
    let o = build_original(events);
    eprintln!(
        "damage campaign: seed {seed}, {trials} trials, {} events (backup at {}), {} files, built in {:.1} s",
        o.records.len(),
        o.backup_seq,
        o.files.len(),
        started.elapsed().as_secs_f64()
    );
    let base = tempfile::Builder::new()
        .disable_cleanup(env_u64("ELFIEE_CAMPAIGN_KEEP", 0) > 0)
        .tempdir()
        .unwrap();
    if env_u64("ELFIEE_CAMPAIGN_KEEP", 0) > 0 {
        eprintln!("trials kept in {}", base.path().display());
    }
    let only: Vec<u64> = std::env::var("ELFIEE_CAMPAIGN_ONLY")
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let next = AtomicU64::new(0);
    let results: Mutex<Vec<(u64, String, Found)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= trials {
                    break;
                }
                if !only.is_empty() && !only.contains(&n) {
                    continue;
                }
                let (name, found) = trial(&o, base.path(), n, seed);
                if verbose {
                    eprintln!(
                        "{name}: intact {}, recovered {} {:?}",
                        found.intact, found.recovered_intact, found.notes
                    );
                }
                results.lock().unwrap().push((n, name, found));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let mut total = Found::default();
    let mut by_file: BTreeMap<String, Found> = BTreeMap::new();
    let mut trouble = Vec::new();
    for (_, name, f) in &results {
        total.add(f);
        let file = name
            .split_once('(')
            .and_then(|(_, r)| r.split_once(':'))
            .map_or(String::new(), |(f, _)| f.to_owned());
        by_file.entry(file).or_default().add(f);
        if f.panics + f.hangs + f.bad_salvage + f.wrong_events + f.not_error_first > 0
            || f.recovered_intact < f.intact
        {
            trouble.push(format!("{name}: {:?}", f.notes));
        }
    }
    for (file, f) in &by_file {
        eprintln!(
            "  {file:<48} intact {:>6} recovered {:>6} ({:.3} %), provable {:.3} %, panics {} hangs {}",
            f.intact,
            f.recovered_intact,
            100.0 * f.share(),
            100.0 * f.provable_share(),
            f.panics,
            f.hangs
        );
    }
    for t in &trouble {
        eprintln!("  {t}");
    }
    eprintln!(
        "damage campaign: seed {seed}, {trials} trials in {:.0} s: panics {}, hangs {}, bad salvages {}, wrong events {}, salvage refused {}, first lines not `error:` {}; intact events {}, recovered {} = {:.3} %; provable {}, recovered {} = {:.3} % (and {} recovered not counted intact)",
        started.elapsed().as_secs_f64(),
        total.panics,
        total.hangs,
        total.bad_salvage,
        total.wrong_events,
        total.salvage_refused,
        total.not_error_first,
        total.intact,
        total.recovered_intact,
        100.0 * total.share(),
        total.provable,
        total.recovered_provable,
        100.0 * total.provable_share(),
        total.recovered_other
    );
    assert_eq!(total.panics, 0, "panics: {trouble:#?}");
    assert_eq!(total.hangs, 0, "hangs: {trouble:#?}");
    assert_eq!(total.bad_salvage, 0, "{trouble:#?}");
    assert_eq!(total.wrong_events, 0, "{trouble:#?}");
    assert_eq!(total.not_error_first, 0, "{trouble:#?}");
    assert!(
        total.provable_share() >= 0.99,
        "salvage recovered {:.3} % of the provable events: {trouble:#?}",
        100.0 * total.provable_share()
    );
    // Past a lost event salvage goes on (a placeholder in its place): the strict share too.
    assert!(
        total.share() >= 0.99,
        "salvage recovered {:.3} % of the intact events: {trouble:#?}",
        100.0 * total.share()
    );
}
