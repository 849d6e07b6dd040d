//! The power-cut campaign: a document on the lazy filesystem, rounds of work each ended by a
//! cut, a check after each, and the figures.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use elfiee_lazyfs::{Cut, LazyFs};

#[path = "../common/anthropic_standin.rs"]
mod anthropic_standin;
mod backup;
mod export;
mod restore;
mod sync;
mod undo;

/// What a campaign runs between cuts.
#[derive(Clone, Copy, Debug)]
pub enum Scenario {
    /// [`WRITERS`] processes each writing markdown in a loop (`elfiee markdown write`), with or
    /// without an `elfiee serve` owner they go through.
    Writers { serve: bool },
    /// One process rewriting project files in the document and exporting them (`elfiee code
    /// write`, `elfiee dir export`) until the cut; see `export.rs`.
    Export,
    /// Two writers while `elfiee backup` appends to one backup file again and again; see
    /// `backup.rs`.
    Backup,
    /// `elfiee restore` (or `elfiee salvage`) writing a new document, cut part-way; see
    /// `restore.rs`.
    Restore { salvage: bool },
    /// An agent's steps rewriting project files, exported and undone (`elfiee agent run`,
    /// `dir export`, `agent undo`) until the cut; see `undo.rs`.
    Undo,
    /// A `serve --sync` device ingesting another device's writes from a broker until the cut;
    /// see `sync.rs`.
    Ingest,
}

/// Writer processes at once.
const WRITERS: usize = 4;

/// The figures of a campaign.
#[derive(Debug, Default)]
pub struct Figures {
    pub cuts: u32,
    pub acknowledged: u64,
    pub lost: u64,
    /// Commands refused before the cut (not a durability failure; counted to see they are few).
    pub refused_before_cut: u64,
    /// Documents that failed to open or `verify` after a cut.
    pub unopenable: u32,
    /// Of those, the ones with an empty `log/snap.*.generating` (F1, issue 39).
    pub f1: u32,
    /// Of those, the ones whose `log/conf` a cut left damaged (sled never syncs it; the engine
    /// syncs it after the open that wrote it and writes a torn one anew: issue 39, with F1).
    pub conf: u32,
    /// Of those, P1: sled's snapshot names data the disk does not hold (found by this harness,
    /// with a `serve` owner; the document is replaced by a fresh one).
    pub p1: u32,
    /// Of those, P3: bodies of acknowledged events missing from the content store (found by
    /// this harness; the document is replaced by a fresh one).
    pub p3: u32,
    /// Unopenable documents not explained by a known failure: what the harness is for.
    pub new_failures: u32,
    pub torn_files: u64,
    /// Project files older than their last acknowledged export after the cut.
    pub export_lost: u64,
    /// Paths the first export after a cut refused (the document and the folder disagree).
    pub refused_after_cut: u64,
    /// Temporary files interrupted exports left in the project.
    pub litter: u64,
    /// Backup runs acknowledged.
    pub backups: u64,
    /// `agent undo` runs acknowledged ([`Scenario::Undo`]).
    pub undos: u64,
    /// Cuts after which the backup file did not restore to its last acknowledged point.
    pub backup_failures: u64,
    /// Cuts after which the restore skipped what a stopped backup run left after its point.
    pub backup_tails: u64,
    /// Restores or salvages cut part-way that left a partial document in the way.
    pub partial_left: u64,
    /// Acknowledged restores or salvages whose document was damaged or short after the cut.
    pub new_document_broken: u64,
    pub writes_lost: u64,
    pub writes_kept: u64,
    pub writes_torn: u64,
    pub failures: Vec<String>,
}

/// A small seeded generator (splitmix64), so a campaign can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The binary under test: `ELFIEE_BIN` (`scripts/power-cuts` copies the one it built, so that
/// another build in a shared target cannot swap it during a long run), else cargo's.
fn binary() -> PathBuf {
    std::env::var_os("ELFIEE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_elfiee")))
}

fn elfiee(elf: &Path) -> Command {
    let mut c = Command::new(binary());
    c.arg("--elf").arg(elf).env_remove("RUST_LOG");
    c
}

/// Runs to the end; `(exit 0, stdout, stderr)`.
fn run(elf: &Path, args: &[&str]) -> (bool, String, String) {
    let out = elfiee(elf).args(args).output().expect("run elfiee");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn must(elf: &Path, args: &[&str]) -> String {
    let (ok, out, err) = run(elf, args);
    assert!(ok, "{args:?} failed: {err}");
    out
}

/// Runs a child until it exits or `stop` is set (then it is killed): `Ok` when it exited 0,
/// else its stderr.
fn wait_or_kill(mut child: Child, stop: &AtomicBool) -> Result<(), String> {
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            if status.success() {
                return Ok(());
            }
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(err);
        }
        if stop.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            return Err("killed at the cut".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Like [`wait_or_kill`], keeping stdout: `None` when killed at the cut, `Some("")` when it
/// failed.
fn wait_for_output(mut child: Child, stop: &AtomicBool) -> Option<String> {
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        if let Some(s) = stdout.as_mut() {
            let _ = std::io::Read::read_to_string(s, &mut out);
        }
        out
    });
    let r = wait_or_kill(child, stop);
    let out = reader.join().unwrap_or_default();
    match r {
        Ok(()) => Some(out),
        Err(_) if stop.load(Ordering::SeqCst) => None,
        Err(_) => Some(String::new()),
    }
}

/// One document on one lazy filesystem, cut again and again.
pub struct Campaign {
    scenario: Scenario,
    backing: tempfile::TempDir,
    mnt: tempfile::TempDir,
    lazy: Option<LazyFs>,
    rng: Rng,
    figures: Figures,
    seed: u64,
    documents: u32,
    /// Every write acknowledged on the current document, over all its rounds.
    acked: Vec<String>,
    /// The seq of the last backup acknowledged on this document ([`Scenario::Backup`]).
    backup_at_least: u64,
    /// How long the last acknowledged restore or salvage took ([`Scenario::Restore`]).
    restore_took: Duration,
    /// The project folder of [`Scenario::Export`].
    project: Option<export::Project>,
    /// `log/conf` as sled wrote it for the first document.
    healthy_conf: Option<Vec<u8>>,
    /// The scripted model of [`Scenario::Undo`].
    model: Option<anthropic_standin::StandIn>,
    /// The broker and the writing device of [`Scenario::Ingest`].
    pair: Option<sync::Pair>,
}

impl Campaign {
    /// Runs `cuts` cuts of `scenario` (or `ELFIEE_POWER_CUTS`), prints the figures, and fails
    /// on any lost command, unopenable document or torn file. Without root or `/dev/fuse` it
    /// says so loudly and returns.
    pub fn run(scenario: Scenario, cuts: u32) -> Figures {
        if let Some(why) = elfiee_lazyfs::unavailable() {
            eprintln!(
                "\n!!! SKIPPED {scenario:?}: power-cut tests need root and /dev/fuse: {why}. \
                 NOTHING WAS TESTED. !!!\n"
            );
            return Figures::default();
        }
        let cuts = std::env::var("ELFIEE_POWER_CUTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(cuts);
        let seed = std::env::var("ELFIEE_POWER_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        let mut c = Campaign {
            scenario,
            backing: tempfile::tempdir().unwrap(),
            mnt: tempfile::tempdir().unwrap(),
            lazy: None,
            rng: Rng(seed),
            figures: Figures::default(),
            seed,
            documents: 0,
            healthy_conf: None,
            model: None,
            pair: None,
            acked: Vec::new(),
            project: None,
            backup_at_least: 0,
            restore_took: Duration::from_millis(300),
        };
        let started = Instant::now();
        c.fresh_document();
        for round in 0..cuts {
            c.round(round);
        }
        c.lazy.take().map(|l| l.unmount());
        let f = c.figures;
        let version = Command::new(binary())
            .arg("--version")
            .output()
            .unwrap()
            .stdout;
        println!(
            "power cuts {scenario:?} (seed {seed}, {}): {} cuts in {:.0?}, {} documents; \
             acknowledged {}, lost {}, refused before the cut {}; unopenable {} (F1 {}, log/conf {}, P1 {}, P3 {}, new {}); \
             torn files {}, acknowledged exports lost {}, refused after the cut {}, temporary \
             files left {}; backups acknowledged {}, not restorable to their point {}, restored past a stopped run's bytes {}; agent undos acknowledged {}; new documents broken {}, partial ones left {}; unsynced writes lost {}, kept {}, torn {}",
            String::from_utf8_lossy(&version).trim(),
            f.cuts,
            started.elapsed(),
            c.documents,
            f.acknowledged,
            f.lost,
            f.refused_before_cut,
            f.unopenable,
            f.f1,
            f.conf,
            f.p1,
            f.p3,
            f.new_failures,
            f.torn_files,
            f.export_lost,
            f.refused_after_cut,
            f.litter,
            f.backups,
            f.backup_failures,
            f.backup_tails,
            f.undos,
            f.new_document_broken,
            f.partial_left,
            f.writes_lost,
            f.writes_kept,
            f.writes_torn,
        );
        for failure in &f.failures {
            println!("FAILURE {failure}");
        }
        // Every document opens with no manual step (F1, the torn conf, P1 and P3 are mended:
        // one that recurs fails here, named by its signature).
        assert!(
            f.lost == 0
                && f.unopenable == 0
                && f.conf == 0
                && f.torn_files == 0
                && f.backup_failures == 0
                && f.new_document_broken == 0
                && f.partial_left == 0,
            "power cuts lost data or left a document that needs a manual step (seed {seed}): {:#?}",
            f.failures
        );
        if f.export_lost + f.refused_after_cut > 0 {
            eprintln!(
                "KNOWN P2 (issue 39, found by this harness): {} acknowledged exports lost at a cut \
                 and {} paths the next export refused: an export renames its temporary file \
                 over the project file but never syncs the folder (write_atomic)",
                f.export_lost, f.refused_after_cut
            );
        }
        f
    }

    fn elf(&self) -> PathBuf {
        self.mnt.path().join("d.elf")
    }

    fn mount(&mut self) {
        self.lazy = Some(LazyFs::mount(self.backing.path(), self.mnt.path()).expect("mount"));
    }

    /// A new document (after an unopenable one, or at the start), created on the lazy disk
    /// without a sync: what `init` and `block create` acknowledged must survive too.
    fn fresh_document(&mut self) {
        if let Some(l) = self.lazy.take() {
            l.unmount().unwrap();
        }
        self.backing = tempfile::tempdir().unwrap();
        self.mount();
        self.documents += 1;
        self.acked.clear();
        self.backup_at_least = 0;
        let elf = self.elf();
        if let Scenario::Ingest = self.scenario {
            self.pair.get_or_insert_with(sync::Pair::start).join(&elf);
            if self.healthy_conf.is_none() {
                self.healthy_conf = std::fs::read(elf.join("log/conf")).ok();
            }
            return;
        }
        must(&elf, &["init", elf.to_str().unwrap(), "--owner", "alice"]);
        if self.healthy_conf.is_none() {
            self.healthy_conf = std::fs::read(elf.join("log/conf")).ok();
        }
        for w in 0..WRITERS {
            must(
                &elf,
                &[
                    "block",
                    "create",
                    "--type",
                    "markdown",
                    "--name",
                    &format!("b{w}"),
                ],
            );
        }
        if let Scenario::Restore { .. } = self.scenario {
            restore::prepare(&elf);
            self.lazy.as_ref().unwrap().sync_all();
        }
        if let Scenario::Export | Scenario::Undo = self.scenario {
            let mut p = export::Project::create(&self.mnt.path().join("proj"));
            // The project existed long before the document: on the disk for good.
            self.lazy.as_ref().unwrap().sync_all();
            p.import(&elf);
            if let Scenario::Undo = self.scenario {
                self.model = Some(undo::prepare(&elf, &mut p));
            }
            self.project = Some(p);
        }
    }

    fn round(&mut self, round: u32) {
        let elf = self.elf();
        let stop = Arc::new(AtomicBool::new(false));
        let serve = matches!(self.scenario, Scenario::Writers { serve: true });
        let owner = match &self.pair {
            Some(pair) => Some(pair.serve_b(&elf)),
            None => serve.then(|| start_serve(&elf)),
        };
        let writers: Vec<_> = match self.scenario {
            Scenario::Backup => (0..2)
                .map(|w| {
                    let (elf, stop) = (elf.clone(), stop.clone());
                    std::thread::spawn(move || writer(&elf, round, w, &stop))
                })
                .collect(),
            Scenario::Writers { .. } => (0..WRITERS)
                .map(|w| {
                    let (elf, stop) = (elf.clone(), stop.clone());
                    std::thread::spawn(move || writer(&elf, round, w, &stop))
                })
                .collect(),
            // Two writers on device A, whose writes B ingests.
            Scenario::Ingest => (0..2)
                .map(|w| {
                    let (a, stop) = (self.pair.as_ref().unwrap().a().to_owned(), stop.clone());
                    std::thread::spawn(move || writer(&a, round, w, &stop))
                })
                .collect(),
            Scenario::Export | Scenario::Restore { .. } | Scenario::Undo => Vec::new(),
        };
        let restorer = match self.scenario {
            Scenario::Restore { salvage } => {
                let (elf, stop) = (elf.clone(), stop.clone());
                Some(std::thread::spawn(move || {
                    restore::writer(&elf, salvage, round, &stop)
                }))
            }
            _ => None,
        };
        let backer = matches!(self.scenario, Scenario::Backup).then(|| {
            let (elf, stop) = (elf.clone(), stop.clone());
            std::thread::spawn(move || backup::backer(&elf, &stop))
        });
        let undoer = matches!(self.scenario, Scenario::Undo).then(|| {
            let (elf, stop) = (elf.clone(), stop.clone());
            let dir = self.project.as_ref().unwrap().dir_block.clone();
            std::thread::spawn(move || undo::undoer(&elf, &dir, &stop))
        });
        let exporter = self
            .project
            .as_ref()
            .filter(|_| matches!(self.scenario, Scenario::Export))
            .map(|p| {
                let (elf, stop) = (elf.clone(), stop.clone());
                let (files, dir) = (p.files.clone(), p.dir_block.clone());
                std::thread::spawn(move || export::exporter(&elf, &files, &dir, round, &stop))
            });
        let delay = match self.scenario {
            // Somewhere inside the run, or just after it.
            Scenario::Restore { .. } => self
                .rng
                .below(self.restore_took.as_millis() as u64 * 5 / 4 + 1),
            _ => 100 + self.rng.below(900),
        };
        std::thread::sleep(Duration::from_millis(delay));
        if matches!(self.scenario, Scenario::Backup) && round % 2 == 1 {
            // Every other cut lands as a backup run writes its frames (before their sync), the
            // moment that leaves a stopped run's bytes after the last point.
            backup::wait_for_a_run(&elf, Duration::from_secs(2));
        }
        let how = if round.is_multiple_of(3) {
            Cut::DropAll
        } else {
            Cut::Some {
                seed: self.rng.next(),
                tear: true,
            }
        };
        let lazy = self.lazy.take().expect("mounted");
        let cut_at = Instant::now();
        let report = lazy.cut(how);
        stop.store(true, Ordering::SeqCst);
        let mut acked = Vec::new();
        for w in writers {
            let (a, refused) = w.join().expect("writer thread");
            acked.extend(a);
            // A process that failed between the cut and `stop` failed because of the cut.
            for (_, why) in refused.into_iter().filter(|(at, _)| *at < cut_at) {
                self.figures.refused_before_cut += 1;
                eprintln!("a writer was refused before the cut: {why}");
            }
        }
        let restored = restorer.map(|r| r.join().expect("restore thread"));
        if let Some((Some(_), took)) = restored {
            self.restore_took = took;
            self.figures.acknowledged += 1;
        }
        if let Some(b) = backer {
            let seqs = b.join().expect("backup thread");
            self.figures.backups += seqs.len() as u64;
            if let Some(last) = seqs.iter().max() {
                self.backup_at_least = self.backup_at_least.max(*last);
            }
        }
        if let Some(u) = undoer {
            self.figures.undos += u.join().expect("undo thread");
        }
        if let Some(e) = exporter {
            let e = e.join().expect("exporter thread");
            acked.extend(e.acked);
            let p = self.project.as_mut().unwrap();
            for (rel, text) in e.asked {
                p.versions.get_mut(&rel).unwrap().push(text);
            }
            for (rel, text) in e.exported {
                let at = p.versions[&rel].iter().rposition(|v| *v == text).unwrap();
                let e = p.exported.get_mut(&rel).unwrap();
                *e = (*e).max(at);
            }
        }
        if let Some(mut o) = owner {
            let _ = o.kill();
            let _ = o.wait();
        }
        lazy.unmount().expect("unmount after the cut");
        self.figures.cuts += 1;
        self.figures.writes_lost += report.writes_lost;
        self.figures.writes_kept += report.writes_kept;
        self.figures.writes_torn += report.writes_torn;
        self.figures.acknowledged += acked.len() as u64;
        match self.pair.as_mut() {
            // A acknowledged them; B must get them from the broker after the cut.
            Some(pair) => pair.acked.extend(acked),
            None => self.acked.extend(acked),
        }
        let f1 = empty_generating_snapshot(self.backing.path());
        self.mount();
        if self.check(round, how, f1) {
            self.check_project(round, how);
            if let Some(Err((missing, why))) = self.pair.as_ref().map(|p| p.check(&self.elf())) {
                self.figures.lost += missing;
                let kept = self.keep_copy(round);
                self.figures.failures.push(format!(
                    "{:?} round {round} (seed {}, {how:?}): {why}; copy in {}",
                    self.scenario,
                    self.seed,
                    kept.display()
                ));
            }
            if let Some((acked, _)) = restored {
                self.check_new_document(round, how, acked);
            }
            if let Scenario::Backup = self.scenario {
                let checked = backup::check(&self.elf(), self.backup_at_least, round);
                self.figures.backup_tails += u64::from(checked == Ok(true));
                if let Err(e) = checked {
                    self.figures.backup_failures += 1;
                    let kept = self.keep_copy(round);
                    self.figures.failures.push(format!(
                        "{:?} round {round} (seed {}, {how:?}): BACKUP {e}; copy in {}",
                        self.scenario,
                        self.seed,
                        kept.display()
                    ));
                }
            }
        }
    }

    /// After a cut during a restore or salvage: what it left at its new document's path.
    fn check_new_document(&mut self, round: u32, how: Cut, acked: Option<u64>) {
        let healthy = self.healthy_conf.clone();
        let left = restore::check(
            &self.elf(),
            round,
            acked,
            healthy.as_deref(),
            &mut self.figures.conf,
        );
        let what = match left {
            restore::Left::Whole | restore::Left::Nothing => return,
            restore::Left::Partial(why) => {
                self.figures.partial_left += 1;
                format!("a partial new document left in the way (the next run refuses it): {why}")
            }
            restore::Left::Broken(why) => {
                self.figures.new_document_broken += 1;
                format!("NEW DOCUMENT BROKEN: {why}")
            }
        };
        self.figures.failures.push(format!(
            "{:?} round {round} (seed {}, {how:?}): {what}",
            self.scenario, self.seed
        ));
    }

    /// After a cut that left the document whole: the project files (see `export.rs`).
    fn check_project(&mut self, round: u32, how: Cut) {
        let elf = self.elf();
        let Some(p) = self.project.as_mut() else {
            return;
        };
        if let Scenario::Undo = self.scenario {
            let (torn, litter) = undo::check(p);
            self.figures.torn_files += torn.len() as u64;
            self.figures.litter += litter.len() as u64;
            if !torn.is_empty() {
                self.figures.failures.push(format!(
                    "{:?} round {round} (seed {}, {how:?}): TORN {}",
                    self.scenario,
                    self.seed,
                    torn.join("; TORN ")
                ));
            }
            return;
        }
        let (c, refused) = p.check(&elf);
        let f = &mut self.figures;
        f.torn_files += c.torn.len() as u64;
        f.export_lost += c.export_lost.len() as u64;
        f.litter += c.litter.len() as u64;
        f.refused_after_cut += refused.len() as u64;
        let problems: Vec<String> = c
            .torn
            .iter()
            .map(|t| format!("TORN {t}"))
            .chain(
                c.export_lost
                    .iter()
                    .map(|t| format!("acknowledged export lost: {t}")),
            )
            .chain(
                refused
                    .iter()
                    .map(|r| format!("export refused after the cut: {r}")),
            )
            .collect();
        if !problems.is_empty() {
            f.failures.push(format!(
                "{:?} round {round} (seed {}, {how:?}): {}",
                self.scenario,
                self.seed,
                problems.join("; ")
            ));
            p.mend(&elf);
        }
    }

    /// After a cut: the document opens, verifies, and holds every acknowledged write.
    fn check(&mut self, round: u32, how: Cut, f1: Option<PathBuf>) -> bool {
        let elf = self.elf();
        let (mut ok, out, err) = run(&elf, &["--json", "verify"]);
        if !ok {
            self.figures.unopenable += 1;
            let kept = self.keep_copy(round);
            // A failure the engine mends (F1, the torn conf, P1, P3; issue 39) that recurs is
            // named by its signature and fails the campaign; where a hand can mend it, the
            // document is mended as the report says and checked on: nothing acknowledged may be
            // missing behind it either.
            let known = match &f1 {
                Some(p) => {
                    self.figures.f1 += 1;
                    Some(("F1: empty snapshot being generated", p.clone()))
                }
                None if self.conf_damaged() => {
                    self.figures.conf += 1;
                    Some((
                        "sled's log/conf damaged (the engine writes a torn one anew at open)",
                        self.backing.path().join("d.elf/log/conf"),
                    ))
                }
                None => None,
            };
            let was_known = known.is_some();
            let what = match known {
                Some((what, path)) => {
                    let rel = path.strip_prefix(self.backing.path()).unwrap();
                    let on_mount = self.mnt.path().join(rel);
                    std::fs::remove_file(&on_mount).expect("remove the damaged file");
                    std::fs::File::open(on_mount.parent().unwrap())
                        .and_then(|d| d.sync_all())
                        .expect("sync its folder");
                    ok = run(&elf, &["verify"]).0;
                    if ok {
                        format!("known, {what}: opens once {} is removed", rel.display())
                    } else {
                        format!("NEW FAILURE: {what}, and still unopenable without it")
                    }
                }
                // P1's signature: sled's snapshot names a page the disk does not hold.
                None if err.contains("sled found damaged data in its file (at ") => {
                    self.figures.p1 += 1;
                    "P1 (found by this harness, mended): sled's snapshot points at data the \
                     disk does not hold; cannot be mended by hand"
                        .into()
                }
                // P3's signature: a synced body behind a hole in the content pack, unindexed.
                None if out.contains("content store: the body") && out.contains("is missing") => {
                    self.figures.p3 += 1;
                    "P3 (found by this harness, mended): bodies synced after a hole a cut left in \
                     the content pack are not re-indexed; cannot be mended by hand"
                        .into()
                }
                None => {
                    self.figures.new_failures += 1;
                    "NEW FAILURE".into()
                }
            };
            if !ok && was_known {
                self.figures.new_failures += 1;
            }
            self.figures.failures.push(format!(
                "{:?} round {round} (seed {}, {how:?}): verify failed after the cut, {what}; \
                 copy in {}: {} {}",
                self.scenario,
                self.seed,
                kept.display(),
                first_lines(&out),
                first_lines(&err)
            ));
            if !ok {
                self.fresh_document();
                return false;
            }
        }
        // A device that only ingests acknowledged nothing itself: what it must get back is
        // checked once it serves again (`sync::Pair::check`), and until it has the document's
        // key its `log` says the document has not arrived yet.
        if let Scenario::Ingest = self.scenario {
            return true;
        }
        let (ok, mut log, err) = run(&elf, &["--json", "log"]);
        assert!(ok, "log failed after verify passed: {err}");
        // Bodies of 256 bytes or more are in the content store: `log --block` reads them back.
        for (_, id) in self.project.iter().flat_map(|p| p.files.iter()) {
            log.push_str(&must(&elf, &["--json", "log", "--block", id]));
        }
        let present = markers(&log);
        let missing: Vec<&String> = self
            .acked
            .iter()
            .filter(|t| !present.contains(t.as_str()))
            .collect();
        if !missing.is_empty() {
            self.figures.lost += missing.len() as u64;
            let kept = self.keep_copy(round);
            self.figures.failures.push(format!(
                "{:?} round {round} (seed {}, {how:?}): {} acknowledged writes missing, e.g. \
                 {:?}; copy in {}",
                self.scenario,
                self.seed,
                missing.len(),
                &missing[..missing.len().min(3)],
                kept.display()
            ));
            let missing: Vec<String> = missing.into_iter().cloned().collect();
            self.acked.retain(|t| !missing.contains(t));
        }
        true
    }

    /// Whether the cut left `log/conf` neither empty nor as sled writes it (the same bytes at
    /// every open of one program, so the first document's is the reference).
    fn conf_damaged(&self) -> bool {
        let conf = std::fs::read(self.backing.path().join("d.elf/log/conf")).unwrap_or_default();
        !conf.is_empty() && Some(&conf) != self.healthy_conf.as_ref()
    }

    /// A copy of the backing directory as the cut left it, for whoever reads the failure.
    fn keep_copy(&self, round: u32) -> PathBuf {
        let to = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("power-cuts")
            .join(format!("seed{}-round{round}", self.seed));
        let _ = std::fs::remove_dir_all(&to);
        let _ = std::fs::create_dir_all(to.parent().unwrap());
        let _ = Command::new("cp")
            .arg("-a")
            .arg(self.backing.path())
            .arg(&to)
            .status();
        to
    }
}

/// The `<…>` markers the writers wrote, as they appear in `elfiee log`.
fn markers(log: &str) -> std::collections::HashSet<&str> {
    let mut out = std::collections::HashSet::new();
    let mut rest = log;
    while let Some(start) = rest.find("<r") {
        let Some(len) = rest[start..].find('>') else {
            break;
        };
        out.insert(&rest[start..start + len + 1]);
        rest = &rest[start + len + 1..];
    }
    out
}

fn first_lines(s: &str) -> String {
    s.lines()
        .filter(|l| !l.contains("\u{1b}["))
        .take(3)
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `log/snap.*.generating` left empty (F1): the path, if the cut left one.
fn empty_generating_snapshot(backing: &Path) -> Option<PathBuf> {
    let log = backing.join("d.elf").join("log");
    std::fs::read_dir(log)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.to_string_lossy().ends_with(".generating")
                && std::fs::metadata(p).map(|m| m.len() == 0).unwrap_or(false)
        })
}

fn start_serve(elf: &Path) -> Child {
    let child = elfiee(elf)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let sock = elf.join("owner.sock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// Writes `<r{round}w{w}n{n}>` to block `b{w}` again and again until the cut; the texts of the
/// writes acknowledged, and when and why others were refused.
fn writer(
    elf: &Path,
    round: u32,
    w: usize,
    stop: &AtomicBool,
) -> (Vec<String>, Vec<(Instant, String)>) {
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let text = format!("<r{round}w{w}n{n}>");
        let child = elfiee(elf)
            .args(["markdown", "write", &format!("b{w}"), "--text", &text])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a writer");
        match wait_or_kill(child, stop) {
            Ok(()) => acked.push(text),
            Err(_) if stop.load(Ordering::SeqCst) => break,
            Err(e) => refused.push((Instant::now(), first_lines(&e))),
        }
    }
    (acked, refused)
}
