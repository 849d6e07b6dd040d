//! The `checkpoint` phase (issue 26): what recording an agent step's checkpoint of the project
//! folder costs on a generated 10,000-file, 100 MB project (2,000 files / 20 MB with --quick)
//! when one file changed, beside a full rescan (every file read and hashed) in the same run.
//!
//! - `baseline_ms`: the first checkpoint of a folder (every file hashed and its bytes stored
//!   in the document's content store; paid once per folder, then kept in the cache);
//! - `one_changed_ms`: a checkpoint after one file was changed (median of several, a
//!   different file each time), as every checkpoint after the first in a process takes it:
//!   the folder's file events since the last one (a cookie file proves they all arrived),
//!   then only the changed file read, hashed and stored;
//! - `one_changed_first_in_process_ms`: the first checkpoint of a new process (a CLI call):
//!   no events yet, so a walk (a `stat` per file, on every core) that trusts the
//!   `(size, mtime, ctime, inode)` cache saved on disk;
//! - `full_rescan_ms`: the same walk with no cache, every file read and hashed (nothing
//!   stored), median of three.
//!
//! Targets: one changed ≤ 50 ms, and ≤ 0.05 × the full rescan; the first in a process is
//! reported beside them (its floor is the walk, `walk_ms`).

use std::path::Path;
use std::time::{Duration, Instant};

use elfiee_adapters::checkpoint::{scan, FolderTracker, Manifest};
use elfiee_bench::project_gen;
use elfiee_engine::Engine;
use serde_json::{json, Value};

use crate::common::{median, ms_since, round, BoxError, Plan, Targets};

const TARGET_MS: f64 = 50.0;
const TARGET_RATIO: f64 = 0.05;

pub(super) fn checkpoint_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    let quick = plan.mode == "quick";
    let spec = project_gen::Spec {
        seed: 26,
        files: if quick { 2_000 } else { 10_000 },
        total_bytes: if quick { 20_000_000 } else { 100_000_000 },
        size_factor: 1,
    };
    let root = base.join("checkpoint-project");
    let t = Instant::now();
    let gen = project_gen::generate(&root, &spec)?;
    info!(
        "checkpoint: generated {} text files ({} bytes) in {:.1} s",
        gen.files,
        gen.text_bytes,
        t.elapsed().as_secs_f64()
    );
    // Files written this close to a scan are hashed again by it (the racy-clean rule): a real
    // project's files are older than that.
    std::thread::sleep(Duration::from_millis(2500));
    let file = rt.block_on(engine.init(base.join("checkpoint.elf"), "Bench"))?;
    let mut tracker = FolderTracker::open(&file, "bench-dir", &root);
    let t = Instant::now();
    let (_, first) = tracker.scan()?;
    let baseline_ms = ms_since(t);
    // What the baseline stored becomes durable with the next commit; the cache is saved then.
    tracker.save();
    let runs = if quick { 5 } else { 9 };
    let mut one = Vec::new();
    let mut hashed = Vec::new();
    for i in 0..runs {
        let path = root.join(&gen.paths[(i * 997) % gen.paths.len()]);
        let mut text = std::fs::read(&path)?;
        text.extend_from_slice(format!("\n// changed {i}\n").as_bytes());
        std::fs::write(&path, text)?;
        let t = Instant::now();
        let (_, stats) = tracker.scan()?;
        one.push(ms_since(t));
        hashed.push(stats.hashed);
    }
    // The first checkpoint of a new process: no events yet, so a walk that trusts the cache
    // saved on disk (a CLI call that runs one agent step).
    tracker.save();
    let mut walked = Vec::new();
    let mut walked_hashed = Vec::new();
    for i in 0..runs {
        let path = root.join(&gen.paths[(i * 991 + 13) % gen.paths.len()]);
        let mut text = std::fs::read(&path)?;
        text.extend_from_slice(format!("\n// changed again {i}\n").as_bytes());
        std::fs::write(&path, text)?;
        let mut fresh = FolderTracker::open(&file, "bench-dir", &root);
        let t = Instant::now();
        let (_, stats) = fresh.scan()?;
        walked.push(ms_since(t));
        // The changed file, and the ones changed in the last two seconds (racily clean).
        walked_hashed.push(stats.hashed);
        fresh.save();
    }
    let mut full = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let (m, _) = scan::scan(&root, &Manifest::default(), |_, _, _| Ok(()))?;
        full.push(ms_since(t));
        assert_eq!(m.files.len(), first.files, "both scans see the same files");
    }
    // The walk alone (every file's metadata, no hashing): the floor of any rescan.
    let mut walk = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let n = scan::walk(&root)?.len();
        walk.push(ms_since(t));
        assert_eq!(n, first.files);
    }
    rt.block_on(file.close());
    let (one_ms, full_ms) = (median(&one), median(&full));
    let ratio = one_ms / full_ms;
    let mut targets = Targets::default();
    targets.at_most(
        "checkpoint: one file changed",
        Some(one_ms),
        TARGET_MS,
        "ms",
    );
    targets.at_most(
        "checkpoint: one changed / full rescan",
        Some(ratio),
        TARGET_RATIO,
        "",
    );
    targets.summary("checkpoint");
    Ok(json!({
        "files": first.files,
        "text_bytes": gen.text_bytes,
        "baseline_ms": round(baseline_ms, 1),
        "baseline_hashed_bytes": first.hashed_bytes,
        "one_changed_ms": round(one_ms, 2),
        "one_changed_runs_ms": one.iter().map(|x| round(*x, 2)).collect::<Vec<_>>(),
        "one_changed_files_hashed": hashed,
        "one_changed_first_in_process_ms": round(median(&walked), 2),
        "one_changed_first_in_process_runs_ms": walked.iter().map(|x| round(*x, 2)).collect::<Vec<_>>(),
        "one_changed_first_in_process_files_hashed": walked_hashed,
        "walk_ms": round(median(&walk), 2),
        "full_rescan_ms": round(full_ms, 1),
        "full_rescan_runs_ms": full.iter().map(|x| round(*x, 1)).collect::<Vec<_>>(),
        "ratio": round(ratio, 4),
        "targets": targets.0,
    }))
}
