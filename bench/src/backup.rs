//! The `backup` phase (issue 29): a document with a generated project imported (bodies in
//! the content store) and many small writes, then
//!
//! - `cp -r` of the closed `.elf` (median of three; no fsync), the floor, and `cp -r` with
//!   every copied file then made durable (fdatasync), as a backup must be;
//! - a full `backup` of the same document (median of three, each into a new file, ending
//!   with its fdatasync): throughput in the `.elf`'s bytes per second, beside `cp -r`;
//! - 1 % more events (the same mix), then an incremental `backup` into the full one's file
//!   (median of three rounds), beside the full backup's time;
//! - `restore` of the result, checked against the document's digest.
//!
//! Targets: full ≥ 0.5 × `cp -r` (issue 29's; the backup checks every body and group hash
//! and makes its file durable, which `cp -r` does not) and ≥ 0.5 × the durable `cp -r`;
//! incremental ≤ 0.05 × full.

use elfiee_adapters::import::{import_folder, ImportLimits};

use crate::common::*;

const FULL_VS_CP: f64 = 0.5;
const INCREMENTAL_VS_FULL: f64 = 0.05;

pub(crate) fn backup_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    let quick = plan.mode == "quick";
    let spec = project_gen::Spec {
        seed: 29,
        files: if quick { 1_000 } else { 5_000 },
        total_bytes: if quick { 10_000_000 } else { 50_000_000 },
        size_factor: 1,
    };
    let writes: u64 = if quick { 20_000 } else { 100_000 };
    let root = base.join("backup-project");
    project_gen::generate(&root, &spec)?;
    let elf = base.join("backup.elf");
    let file = rt.block_on(engine.init(&elf, "Bench"))?;
    let t = Instant::now();
    rt.block_on(import_folder(
        &file,
        OWNER,
        &root,
        Some("project"),
        &ImportLimits::default(),
        |_| {},
    ))?;
    let block = rt.block_on(file.submit(create_cmd(0)))?[0].entity.clone();
    rt.block_on(write_many(&file, &block, 0, writes))?;
    info!(
        "backup: document of {} events built in {:.1} s",
        file.last_seq(),
        t.elapsed().as_secs_f64()
    );
    rt.block_on(file.close());
    let elf_bytes = dir_size(&elf);

    // ---- cp -r, plain and with every copied file then made durable (as a backup must be) ----
    let cp = copy_runs(&elf, base, false)?;
    let cp_synced = copy_runs(&elf, base, true)?;

    // ---- full backups ----
    let file = rt.block_on(engine.open(&elf))?;
    let mut full = Vec::new();
    let mut full_sync = Vec::new();
    let mut report = None;
    for i in 0..3 {
        let to = std::env::var_os("BENCH_BACKUP_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| base.to_owned())
            .join(format!("backup-full-{i}.backup"));
        let t = Instant::now();
        let r = rt.block_on(file.backup(&to))?;
        full.push(t.elapsed().as_secs_f64());
        full_sync.push(r.sync_ms as f64 / 1e3);
        if i < 2 {
            std::fs::remove_file(&to)?;
        }
        report = Some(r);
    }
    let report = report.ok_or("no backup")?;
    let target = std::env::var_os("BENCH_BACKUP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| base.to_owned())
        .join("backup-full-2.backup");

    // ---- incremental: 1 % more events, three rounds ----
    let mut incremental = Vec::new();
    let mut added = Vec::new();
    let mut seq = file.last_seq();
    for round in 0..3u64 {
        let n = (seq / 100).max(1);
        rt.block_on(write_many(&file, &block, writes + round * n, n))?;
        let t = Instant::now();
        let r = rt.block_on(file.backup(&target))?;
        incremental.push(t.elapsed().as_secs_f64());
        added.push(r.events);
        seq = file.last_seq();
    }
    let digest = file.state_digest();
    rt.block_on(file.close());

    // ---- restore ----
    let t = Instant::now();
    let folds = engine.config().registry.folds().clone();
    let restored = elfiee_engine::backup::restore(
        &target,
        &base.join("backup-restored.elf"),
        &folds,
        |_, _| {},
    )?;
    let restore_s = t.elapsed().as_secs_f64();
    if restored.state_digest != digest {
        return Err("the restored document's digest differs from the source's".into());
    }

    let (cp_s, full_s, inc_s) = (median(&cp), median(&full), median(&incremental));
    let throughput = |s: f64| elf_bytes as f64 / 1e6 / s;
    let full_ratio = throughput(full_s) / throughput(cp_s);
    let durable_ratio = throughput(full_s) / throughput(median(&cp_synced));
    let inc_ratio = inc_s / full_s;
    let mut targets = Targets(Vec::new());
    targets.check(
        "full backup throughput / cp -r",
        format!("{full_ratio:.3}"),
        Some(full_ratio >= FULL_VS_CP),
    );
    targets.check(
        "full backup throughput / (cp -r + fdatasync)",
        format!("{durable_ratio:.3}"),
        Some(durable_ratio >= FULL_VS_CP),
    );
    targets.at_most(
        "incremental after 1 % new / full",
        Some(inc_ratio),
        INCREMENTAL_VS_FULL,
        "",
    );
    targets.check(
        "restore gives the source's digest",
        restored.state_digest.clone(),
        Some(true),
    );
    targets.summary("backup");
    Ok(json!({
        "events": report.seq,
        "bodies": report.bodies,
        "elf_mb": round(elf_bytes as f64 / 1e6, 1),
        "backup_file_mb": round(report.file_bytes as f64 / 1e6, 1),
        "cp_r_s": cp.iter().map(|s| round(*s, 3)).collect::<Vec<_>>(),
        "full_backup_s": full.iter().map(|s| round(*s, 3)).collect::<Vec<_>>(),
        "cp_r_mb_per_s": round(throughput(cp_s), 1),
        "full_backup_mb_per_s": round(throughput(full_s), 1),
        "full_vs_cp_ratio": round(full_ratio, 3),
        "cp_r_then_fdatasync_s": cp_synced.iter().map(|s| round(*s, 3)).collect::<Vec<_>>(),
        "full_vs_durable_cp_ratio": round(durable_ratio, 3),
        "full_backup_fdatasync_s": full_sync.iter().map(|s| round(*s, 3)).collect::<Vec<_>>(),
        "full_vs_cp_target": format!(">= {FULL_VS_CP}"),
        "incremental_events": added,
        "incremental_s": incremental.iter().map(|s| round(*s, 4)).collect::<Vec<_>>(),
        "incremental_vs_full_ratio": round(inc_ratio, 4),
        "incremental_vs_full_target": format!("<= {INCREMENTAL_VS_FULL}"),
        "restore_s": round(restore_s, 3),
        "targets": targets.0,
    }))
}

/// `n` markdown writes on `block` from 16 submitters (numbered from `from`).
async fn write_many(file: &FileHandle, block: &str, from: u64, n: u64) -> Result<(), BoxError> {
    let next = Arc::new(AtomicU64::new(from));
    let end = from + n;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (file, block, next) = (file.clone(), block.to_owned(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        return Ok::<(), EngineError>(());
                    }
                    file.submit(write_cmd(&block, i)).await?;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Three timed `cp -r` of `elf` (each copy then made durable with `durable`), in seconds.
fn copy_runs(elf: &Path, base: &Path, durable: bool) -> Result<Vec<f64>, BoxError> {
    let mut runs = Vec::new();
    for i in 0..3 {
        let to = base.join(format!("backup-cp-{i}.elf"));
        let t = Instant::now();
        let ok = std::process::Command::new("cp")
            .arg("-r")
            .arg(elf)
            .arg(&to)
            .status()?
            .success();
        if !ok {
            return Err("cp -r failed".into());
        }
        if durable {
            sync_tree(&to)?;
        }
        runs.push(t.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&to)?;
    }
    Ok(runs)
}

/// fdatasync of every file under `dir`, then of the folders (what makes a copy durable).
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.is_dir() {
            sync_tree(&p)?;
        } else {
            std::fs::File::open(&p)?.sync_data()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}
