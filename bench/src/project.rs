//! The `project` phase (issue 11): a generated real-sized project imported, rescanned and
//! written through the CLI, beside raw sled doing the same.

use crate::common::*;
use crate::raw::open_raw;

/// Seed of the generated trees (fixed, so every run measures the same bytes).
pub(crate) const PROJECT_SEED: u64 = 0x00E1_F1EE;

/// The "ten times larger" tree: same paths, every file ten times longer.
pub(crate) const BIG_FACTOR: u64 = 10;

/// The importer's default per-file limit; the big tree has files above it.
pub(crate) const DEFAULT_MAX_FILE: u64 = 1024 * 1024;

/// `--max-file-bytes` passed to `dir import` when a tree has files above the default
/// ([`project_gen::HARD_CAP`], 4 MiB: no generated file is larger).
pub(crate) const BIG_MAX_FILE: u64 = project_gen::HARD_CAP;

/// Length of every text written by `markdown write` in the write and growth steps.
pub(crate) const WRITE_LEN: usize = 2048;

/// The constant of the growth target: growth ≤ 2 × bytes written + this.
pub(crate) const GROWTH_SLACK: u64 = 8 * 1024 * 1024;

pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// Sizes of the `project` phase.
pub(crate) struct ProjectPlan {
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    pub(crate) writes: usize,
    pub(crate) write_runs: usize,
    pub(crate) list_runs: usize,
    pub(crate) seed: u64,
}

impl ProjectPlan {
    pub(crate) fn new(args: &Args) -> ProjectPlan {
        let (files, bytes, writes) = if args.quick {
            (2_000, 20_000_000, 200)
        } else {
            (10_000, 100_000_000, 1_000)
        };
        ProjectPlan {
            files: args.project_files.unwrap_or(files),
            bytes: args.project_bytes.unwrap_or(bytes),
            writes: args.project_writes.unwrap_or(writes),
            // Medians of many short runs: one process run lasts ~15 ms on a shared machine.
            write_runs: 21,
            list_runs: 9,
            seed: PROJECT_SEED,
        }
    }
}

/// Number of the last committed event (`state-digest`'s `seq`).
pub(crate) fn last_seq(cli: &mut Cli, doc: &Path) -> Result<u64, BoxError> {
    let v = cli.run(Some(doc), &["--json", "state-digest"])?.json()?;
    v["seq"]
        .as_u64()
        .ok_or_else(|| format!("state-digest printed no seq: {v}").into())
}

/// Deterministic prose of exactly `len` bytes, different for every `i`.
pub(crate) fn write_text(i: usize, len: usize) -> String {
    let mut s = format!("# Write {i}\n\n");
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ PROJECT_SEED;
    const W: &[&str] = &[
        "the", "block", "event", "log", "sled", "write", "bench", "content", "store", "hash",
        "chain", "snapshot", "replay", "import", "folder", "sync", "rescan", "editor", "grant",
    ];
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(W[(x % W.len() as u64) as usize]);
        s.push(if x.is_multiple_of(11) { '\n' } else { ' ' });
    }
    s.truncate(len);
    s
}

/// Bytes of each top-level entry of a `.elf` folder.
pub(crate) fn elf_breakdown(doc: &Path) -> Value {
    let mut m = serde_json::Map::new();
    if let Ok(rd) = std::fs::read_dir(doc) {
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let n = if p.is_dir() {
                dir_size(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
            m.insert(e.file_name().to_string_lossy().into_owned(), json!(n));
        }
    }
    Value::Object(m)
}

pub(crate) fn gen_json(r: &project_gen::GenReport, secs: f64, factor: u64) -> Value {
    json!({
        "files": r.files, "text_bytes": r.text_bytes, "text_mib": round(r.text_bytes as f64 / MIB, 1),
        "largest_file": r.largest_file, "size_factor": factor,
        "ignored_files": r.ignored_files, "binary_files": r.binary_files, "meta_files": r.meta_paths,
        "seconds": round(secs, 2),
    })
}

/// Raw floor of an import: read every text file, blake3 it, insert the bytes into a fresh
/// sled db (key = relative path) with the engine's sled settings, one `flush`, drop the db.
pub(crate) fn raw_import_run(
    tree: &Path,
    paths: &[String],
    db: &Path,
) -> Result<(f64, u64), BoxError> {
    let _ = std::fs::remove_dir_all(db);
    let t = Instant::now();
    let raw = open_raw(db)?;
    let mut bytes = 0u64;
    for rel in paths {
        let b = std::fs::read(tree.join(rel))?;
        // blake3 of the bytes (through the engine's chain hash: blake3 over a 40-byte prefix
        // and the bytes; the root crate has no direct blake3 dependency).
        std::hint::black_box(codec::chain_hash(&EventHash([0; 32]), 0, &b));
        bytes += b.len() as u64;
        raw.insert(rel.as_bytes(), b)?;
    }
    raw.flush()?;
    SledSync::new(db)?.sync()?;
    drop(raw);
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(db);
    Ok((secs, bytes))
}

/// Raw floor of a rescan: stat every text file, read + blake3 the changed ones, insert them
/// into a fresh sled db, one `flush`.
pub(crate) fn raw_rescan_run(
    tree: &Path,
    paths: &[String],
    changed: &[String],
    db: &Path,
) -> Result<f64, BoxError> {
    let _ = std::fs::remove_dir_all(db);
    let raw = open_raw(db)?;
    let t = Instant::now();
    let mut seen = 0u64;
    for rel in paths {
        seen += std::fs::metadata(tree.join(rel))?.len();
    }
    std::hint::black_box(seen);
    for rel in changed {
        let b = std::fs::read(tree.join(rel))?;
        std::hint::black_box(codec::chain_hash(&EventHash([0; 32]), 0, &b));
        raw.insert(rel.as_bytes(), b)?;
    }
    raw.flush()?;
    SledSync::new(db)?.sync()?;
    let secs = t.elapsed().as_secs_f64();
    drop(raw);
    let _ = std::fs::remove_dir_all(db);
    Ok(secs)
}

/// Result of one `dir import` through the CLI.
pub(crate) struct Imported {
    pub(crate) run: ChildRun,
    pub(crate) block_id: String,
    pub(crate) report: Value,
}

pub(crate) fn cli_import(
    cli: &mut Cli,
    doc: &Path,
    tree: &Path,
    max_file: Option<u64>,
) -> Result<Imported, BoxError> {
    cli.run(None, &["init", path_str(doc)?, "--owner", "Bench"])?;
    let limit = max_file.map(|m| m.to_string());
    let mut args = vec!["--json", "dir", "import", path_str(tree)?];
    if let Some(l) = &limit {
        args.extend(["--max-file-bytes", l.as_str()]);
    }
    let run = cli.run(Some(doc), &args)?;
    let report = run.json()?;
    let block_id = report["block_id"]
        .as_str()
        .ok_or_else(|| format!("dir import printed no block_id: {report}"))?
        .to_owned();
    Ok(Imported {
        run,
        block_id,
        report,
    })
}

/// What an import brought in, beside what the generator wrote.
pub(crate) fn import_check(imp: &Imported, gen: &project_gen::GenReport) -> (Value, bool) {
    let files = imp.report["files"].as_u64().unwrap_or(0) as usize;
    let skipped: Vec<(String, String)> = imp.report["skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["path"].as_str().unwrap_or("").to_owned(),
                s["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let is_ignored = |p: &str| {
        gen.ignored_paths.iter().any(|i| i == p)
            || p == "build"
            || p.starts_with("build/")
            || p.ends_with(".log")
    };
    let skipped_binary = skipped
        .iter()
        .filter(|(p, _)| gen.binary_paths.contains(p))
        .count();
    let skipped_ignored = skipped.iter().filter(|(p, _)| is_ignored(p)).count();
    let skipped_text: Vec<&(String, String)> = skipped
        .iter()
        .filter(|(p, _)| gen.paths.binary_search(p).is_ok())
        .collect();
    // `.gitignore` is itself a text file an importer may keep.
    let ok = (files == gen.files || files == gen.files + gen.meta_paths.len())
        && skipped_text.is_empty();
    let v = json!({
        "imported_files": files, "generated_text_files": gen.files,
        "extra_imported": files as i64 - gen.files as i64,
        "note": "extra_imported is 0, or 1 when .gitignore itself is imported; more means ignored (build/, *.log) or binary files came in",
        "skipped": skipped.len(), "skipped_binary": skipped_binary, "binary_files": gen.binary_files,
        "skipped_ignored_entries": skipped_ignored, "ignored_files": gen.ignored_files,
        "skipped_text_files": skipped_text.len(),
        "skipped_examples": skipped.iter().take(12).map(|(p, r)| json!({"path": p, "reason": r})).collect::<Vec<_>>(),
    });
    (v, ok)
}

/// A markdown `markdown write` run; `Err` when the child fails.
/// Creates a markdown block named `name` in `doc` through the CLI; returns its id.
pub(crate) fn create_markdown(cli: &mut Cli, doc: &Path, name: &str) -> Result<String, BoxError> {
    let v = cli
        .run(
            Some(doc),
            &[
                "--json", "block", "create", "--type", "markdown", "--name", name,
            ],
        )?
        .json()?;
    match v["block_id"].as_str() {
        Some(id) => Ok(id.to_owned()),
        None => Err(format!("`block create` printed no block_id: {v}").into()),
    }
}

pub(crate) fn cli_write(
    cli: &mut Cli,
    doc: &Path,
    block: &str,
    text: &str,
) -> Result<ChildRun, BoxError> {
    cli.run(Some(doc), &["markdown", "write", block, "--text", text])
}

pub(crate) fn project_phase(base: &Path, args: &Args) -> Value {
    let pp = ProjectPlan::new(args);
    let mut out = json!({
        "spec": {"files": pp.files, "total_bytes": pp.bytes, "seed": pp.seed, "big_size_factor": BIG_FACTOR, "writes": pp.writes},
    });
    let mut targets = Targets::default();
    let started = Instant::now();
    if let Err(e) = project_steps(base, &pp, &mut out, &mut targets) {
        info!("project: stopped: {e}");
        out["error"] = json!(e.to_string());
    }
    out["seconds"] = round(started.elapsed().as_secs_f64(), 1);
    targets.summary("project");
    out["targets"] = json!(targets.0);
    out
}

/// Records `r`'s error under `out[key]["error"]` and returns `None`, or the value.
pub(crate) fn soft<T>(out: &mut Value, key: &str, r: Result<T, BoxError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            info!("project: {key} failed: {e}");
            if !out[key].is_object() {
                out[key] = json!({});
            }
            out[key]["error"] = json!(e.to_string());
            None
        }
    }
}

pub(crate) fn project_steps(
    base: &Path,
    pp: &ProjectPlan,
    out: &mut Value,
    targets: &mut Targets,
) -> Result<(), BoxError> {
    let dir = base.join("project");
    std::fs::create_dir_all(&dir)?;
    let mut cli = Cli::new(&dir)?;
    out["rss_from_spawn_server"] = json!(cli.clean_rss());

    // 1. the trees
    let spec = project_gen::Spec {
        seed: pp.seed,
        files: pp.files,
        total_bytes: pp.bytes,
        size_factor: 1,
    };
    let (small_tree, big_tree) = (dir.join("tree"), dir.join("tree-x10"));
    info!(
        "project: generating {} files, {:.1} MiB, and the ten-times-larger tree",
        pp.files,
        pp.bytes as f64 / MIB
    );
    let t = Instant::now();
    let small = project_gen::generate(&small_tree, &spec)?;
    let small_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let big_spec = project_gen::Spec {
        size_factor: BIG_FACTOR,
        ..spec
    };
    let big = project_gen::generate(&big_tree, &big_spec)?;
    let big_s = t.elapsed().as_secs_f64();
    out["generate"] = json!({
        "small": gen_json(&small, small_s, 1), "big": gen_json(&big, big_s, BIG_FACTOR),
        "how": "bench/src/project_gen.rs: exactly `files` text files (.rs most, .ts .py .md .json .toml .yaml .txt) in nested folders, log-normal sizes (many of a few hundred bytes to a few KB, tail to ~300 KB) scaled to total_bytes; plus .gitignore (build/, *.log), ignored files under build/ and x.log, binary files with NUL bytes, none counted in text_bytes",
    });
    info!("project: generate: {}", out["generate"]);

    // Process floor: the cheapest child run of the CLI.
    let mut floor = Vec::new();
    for _ in 0..5 {
        floor.push(cli.run(None, &["--version"])?);
    }
    out["process_floor"] = json!({"command": "elfiee --version", "stats": ms_stats(&floor)});
    let floor_ms = median(&floor.iter().map(ChildRun::ms).collect::<Vec<_>>());
    let floor_rss = median(&floor.iter().map(ChildRun::rss_mib).collect::<Vec<_>>());

    // 2. raw floor of the import
    let raw_db = dir.join("raw-sled");
    let (first, bytes) = raw_import_run(&small_tree, &small.paths, &raw_db)?;
    let mut raw_runs = vec![first];
    if first < 5.0 {
        for _ in 0..2 {
            raw_runs.push(raw_import_run(&small_tree, &small.paths, &raw_db)?.0);
        }
    }
    let raw_s = median(&raw_runs);
    out["raw_import"] = json!({
        "seconds": round(raw_s, 3), "statistic": format!("median of {}", raw_runs.len()),
        "runs": raw_runs.iter().map(|s| round(*s, 3)).collect::<Vec<_>>(), "bytes": bytes,
        "mib_per_s": round(bytes as f64 / MIB / raw_s, 1),
        "how": "in-process: read each generated text file, blake3 it, insert the bytes into a fresh sled db (key = relative path, the engine's sled settings), one flush + SledSync::sync, drop; files hot in the page cache as for the engine import that follows",
    });
    info!("project: raw import: {}", out["raw_import"]);

    // 3. engine import (child process)
    let small_doc = dir.join("project.elf");
    let help = cli.run(None, &["dir", "import", "--help"])?;
    let has_max_flag = String::from_utf8_lossy(&help.stdout).contains("--max-file-bytes");
    let flag_for = |g: &project_gen::GenReport| {
        (g.largest_file > DEFAULT_MAX_FILE && has_max_flag).then_some(BIG_MAX_FILE)
    };
    info!(
        "project: importing {} through the CLI",
        small_tree.display()
    );
    let imported = soft(
        out,
        "import",
        cli_import(&mut cli, &small_doc, &small_tree, flag_for(&small)),
    );
    // Two more imports of the same tree into fresh documents (deleted again), when the first
    // was quick: the wall is the median of three, as the raw floor's is. One child run moves
    // by ±30 % on this machine, and the target is a ratio of the two.
    let mut walls: Vec<f64> = imported.iter().map(|i| i.run.ms()).collect();
    let mut rss: Vec<f64> = imported.iter().map(|i| i.run.rss_mib()).collect();
    if walls.first().is_some_and(|ms| *ms < 5000.0) {
        for k in 0..2 {
            let again = dir.join(format!("project-again-{k}.elf"));
            let run = cli_import(&mut cli, &again, &small_tree, flag_for(&small));
            let _ = std::fs::remove_dir_all(&again);
            if let Some(imp) = soft(out, "import_again", run) {
                walls.push(imp.run.ms());
                rss.push(imp.run.rss_mib());
            }
        }
    }
    let import_ms = imported.as_ref().map(|_| median(&walls));
    if let (Some(imp), Some(wall_ms)) = (&imported, import_ms) {
        let (check, ok) = import_check(imp, &small);
        let r = wall_ms / 1000.0 / raw_s;
        out["import"] = json!({
            "wall_s": round(wall_ms / 1000.0, 3), "peak_rss_mib": round(rss.iter().copied().fold(0.0, f64::max), 1),
            "statistic": format!("median of {} (peak RSS: the largest)", walls.len()),
            "runs_s": walls.iter().map(|ms| round(ms / 1000.0, 3)).collect::<Vec<_>>(),
            "raw_s": round(raw_s, 3), "ratio": round(r, 3), "block_id": imp.block_id,
            "mib_per_s": round(small.text_bytes as f64 / MIB / (wall_ms / 1000.0), 1),
            "check": check,
            "how": "`elfiee --elf D --json dir import TREE` as a child process after `elfiee init D`; wall from spawn to reaping, peak RSS = ru_maxrss from wait4",
        });
        targets.check(
            "import: every text file, no ignored/binary",
            format!(
                "{} of {}",
                imp.report["files"].as_u64().unwrap_or(0),
                small.files
            ),
            Some(ok),
        );
        info!("project: import: {}", out["import"]);
    }
    targets.at_most(
        "import wall / raw floor",
        import_ms.map(|m| m / 1000.0 / raw_s),
        3.0,
        "x",
    );
    targets.at_most(
        "import peak RSS",
        imported
            .as_ref()
            .map(|_| rss.iter().copied().fold(0.0, f64::max)),
        128.0,
        "MiB",
    );

    // 4. .elf size
    if imported.is_some() {
        let size = dir_size(&small_doc);
        out["elf_size"] = json!({
            "elf_bytes": size, "text_bytes": small.text_bytes, "ratio": round(size as f64 / small.text_bytes as f64, 3),
            "breakdown": elf_breakdown(&small_doc),
            "how": "every file under the .elf folder (walked) right after the import vs the text bytes imported",
        });
        info!("project: .elf size: {}", out["elf_size"]);
    }
    targets.at_most(
        ".elf bytes / text bytes",
        imported
            .as_ref()
            .map(|_| out["elf_size"]["ratio"].as_f64().unwrap_or(f64::NAN)),
        1.5,
        "x",
    );

    // 5. open + list, small and ten-times-larger documents
    let big_doc = dir.join("project-x10.elf");
    info!(
        "project: importing the ten-times-larger tree ({:.0} MiB)",
        big.text_bytes as f64 / MIB
    );
    let big_imported = soft(
        out,
        "import_x10",
        cli_import(&mut cli, &big_doc, &big_tree, flag_for(&big)),
    );
    if let Some(imp) = &big_imported {
        let (check, _) = import_check(imp, &big);
        let size = dir_size(&big_doc);
        out["import_x10"] = json!({
            "wall_s": round(imp.run.ms() / 1000.0, 3), "peak_rss_mib": round(imp.run.rss_mib(), 1),
            "text_bytes": big.text_bytes, "elf_bytes": size, "elf_ratio": round(size as f64 / big.text_bytes as f64, 3),
            "max_file_bytes_flag": flag_for(&big), "max_file_bytes_flag_supported": has_max_flag,
            "check": check, "note": "not a target; the document for the big/small open + list ratio",
        });
        info!("project: import x10: {}", out["import_x10"]);
    } else {
        out["import_x10"]["max_file_bytes_flag_supported"] = json!(has_max_flag);
    }
    let mut list = json!({});
    let (mut ls, mut lb) = (Vec::new(), Vec::new());
    if imported.is_some() {
        let list_runs = (|| -> Result<(), BoxError> {
            let docs: Vec<&Path> = if big_imported.is_some() {
                vec![&small_doc, &big_doc]
            } else {
                vec![&small_doc]
            };
            for i in 0..pp.list_runs {
                // Alternate which document goes first.
                for k in 0..docs.len() {
                    let which = (i + k) % docs.len();
                    let r = cli.run(Some(docs[which]), &["--json", "block", "list"])?;
                    let side = if which == 0 { "small" } else { "big" };
                    if i == 0 {
                        list[format!("{side}_blocks")] = json!(r.json()?.as_array().map(Vec::len));
                        list[format!("{side}_stdout_bytes")] = json!(r.stdout.len());
                    }
                    if which == 0 {
                        ls.push(r);
                    } else {
                        lb.push(r);
                    }
                }
            }
            Ok(())
        })();
        soft(&mut list, "runs", list_runs);
    }
    let stat = |runs: &[ChildRun], f: fn(&ChildRun) -> f64| {
        (!runs.is_empty()).then(|| median(&runs.iter().map(f).collect::<Vec<_>>()))
    };
    let (lw, lr) = (stat(&ls, ChildRun::ms), stat(&ls, ChildRun::rss_mib));
    let (bw, br) = (stat(&lb, ChildRun::ms), stat(&lb, ChildRun::rss_mib));
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    if !ls.is_empty() {
        list["small"] = ms_stats(&ls);
        list["floor"] = json!({"wall_ms": round(floor_ms, 1), "peak_rss_mib": round(floor_rss, 1), "command": "elfiee --version"});
        list["statistic"] = json!(format!(
            "median of {} (small and big runs alternate, order swapped each round)",
            pp.list_runs
        ));
        list["how"] = json!("`elfiee --elf D --json block list` as a child process (open the document, list every block, print JSON)");
    }
    if !lb.is_empty() {
        list["big"] = ms_stats(&lb);
        list["ratio_wall"] = json!(ratio(bw, lw).map(|r| round(r, 3)));
        list["ratio_rss"] = json!(ratio(br, lr).map(|r| round(r, 3)));
    }
    info!("project: open + list: {list}");
    out["open_list"] = list;
    targets.at_most("open + list wall (imported doc)", lw, 100.0, "ms");
    targets.at_most("open + list peak RSS", lr, 64.0, "MiB");
    targets.at_most("open + list wall x10 / x1", ratio(bw, lw), 1.2, "x");
    targets.at_most("open + list RSS x10 / x1", ratio(br, lr), 1.2, "x");

    // 6. rescan
    if let Some(imp) = &imported {
        let n = ((small.files as f64) * 0.01).round().max(1.0) as usize;
        let changed = project_gen::modify(&small_tree, &small, n, pp.seed + 1)?;
        let raw_rescan = raw_rescan_run(&small_tree, &small.paths, &changed, &raw_db)?;
        let mut sync = json!({
            "modified": changed.len(), "block_id": imp.block_id,
            "raw_s": round(raw_rescan, 4),
            "raw_how": "in-process: stat every text file, read + blake3 the modified ones, insert them into a fresh sled db, one flush + SledSync::sync",
        });
        let r = (|| -> Result<(ChildRun, Value, u64, u64), BoxError> {
            let before = last_seq(&mut cli, &small_doc)?;
            let run = cli.run(Some(&small_doc), &["--json", "dir", "sync", &imp.block_id])?;
            let v = run.json()?;
            let after = last_seq(&mut cli, &small_doc)?;
            Ok((run, v, before, after))
        })();
        let mut sync_ratio = None;
        let mut counts_ok = None;
        if let Some((run, v, before, after)) = soft(&mut sync, "run", r) {
            let import_ms = import_ms.unwrap_or(f64::NAN);
            sync_ratio = Some(run.ms() / import_ms);
            let (c, a, d) = (
                v["changed"].as_u64(),
                v["added"].as_u64(),
                v["deleted"].as_u64(),
            );
            counts_ok = Some(c == Some(changed.len() as u64) && a == Some(0) && d == Some(0));
            sync["wall_s"] = round(run.ms() / 1000.0, 3);
            sync["peak_rss_mib"] = round(run.rss_mib(), 1);
            sync["import_wall_s"] = round(import_ms / 1000.0, 3);
            sync["ratio_to_import"] = round(run.ms() / import_ms, 4);
            sync["ratio_to_raw"] = round(run.ms() / 1000.0 / raw_rescan, 2);
            sync["output"] = v.clone();
            sync["events_before"] = json!(before);
            sync["events_after"] = json!(after);
            sync["events_written"] = json!(after - before);
            sync["events_beyond_changed"] =
                json!(after as i64 - before as i64 - changed.len() as i64);
            sync["how"] = json!("modify() rewrites 1% of the text files (content changed, length changed), then `elfiee --elf D --json dir sync BLOCK` as a child; events counted by `--json state-digest`'s seq before and after");
        }
        info!("project: sync: {sync}");
        out["sync"] = sync;
        targets.at_most("dir sync wall / import wall", sync_ratio, 0.2, "x");
        targets.check(
            "dir sync counts (changed = modified, 0 added/deleted)",
            match &out["sync"]["output"] {
                Value::Null => "-".to_owned(),
                v => format!(
                    "{}/{}/{} of {}",
                    v["changed"],
                    v["added"],
                    v["deleted"],
                    changed.len()
                ),
            },
            counts_ok,
        );
    }

    // 7. one CLI write: a 10-block document vs the 10,000-block one
    let ten_doc = dir.join("ten.elf");
    let mut write = json!({});
    let write_result = (|| -> Result<(Vec<ChildRun>, Vec<ChildRun>, String), BoxError> {
        cli.run(None, &["init", path_str(&ten_doc)?, "--owner", "Bench"])?;
        let ten_block = create_markdown(&mut cli, &ten_doc, "m0")?;
        for i in 1..10 {
            create_markdown(&mut cli, &ten_doc, &format!("m{i}"))?;
        }
        if imported.is_none() {
            return Err("no 10,000-block document (the import failed)".into());
        }
        let big_block = create_markdown(&mut cli, &small_doc, "bench-write")?;
        let (mut s, mut b) = (Vec::new(), Vec::new());
        for i in 0..pp.write_runs {
            let text = write_text(i, WRITE_LEN);
            // Alternate which document goes first.
            if i % 2 == 0 {
                s.push(cli_write(&mut cli, &ten_doc, &ten_block, &text)?);
                b.push(cli_write(&mut cli, &small_doc, &big_block, &text)?);
            } else {
                b.push(cli_write(&mut cli, &small_doc, &big_block, &text)?);
                s.push(cli_write(&mut cli, &ten_doc, &ten_block, &text)?);
            }
        }
        Ok((s, b, big_block))
    })();
    let mut growth_block = None;
    let (mut ww, mut wr) = (None, None);
    if let Some((s, b, block)) = soft(&mut write, "run", write_result) {
        let (sw, sr) = (stat(&s, ChildRun::ms), stat(&s, ChildRun::rss_mib));
        let (bw, br) = (stat(&b, ChildRun::ms), stat(&b, ChildRun::rss_mib));
        ww = ratio(bw, sw);
        wr = ratio(br, sr);
        write = json!({
            "ten_blocks": ms_stats(&s), "big": ms_stats(&b),
            "big_blocks": out["open_list"]["small_blocks"].as_u64().map(|n| n + 1),
            "ratio_wall": ww.map(|r| round(r, 3)), "ratio_rss": wr.map(|r| round(r, 3)),
            "floor": {"wall_ms": round(floor_ms, 1), "peak_rss_mib": round(floor_rss, 1), "command": "elfiee --version"},
            "text_bytes": WRITE_LEN, "statistic": format!("median of {} each, alternating", pp.write_runs),
            "how": "`elfiee --elf D markdown write BLOCK --text <2048 bytes>` as a child process; D = a 10-block document vs the imported 10,000-file document (one new markdown block each)",
        });
        growth_block = Some(block);
    }
    info!("project: cli write: {write}");
    out["cli_write"] = write;
    targets.at_most("markdown write wall 10k / 10 blocks", ww, 1.2, "x");
    targets.at_most("markdown write RSS 10k / 10 blocks", wr, 1.2, "x");

    // 8. growth over many writes
    let mut growth = json!({});
    let mut growth_met = None;
    let mut growth_ratio = None;
    if let Some(block) = growth_block {
        let before = dir_size(&small_doc);
        let before_parts = elf_breakdown(&small_doc);
        let t = Instant::now();
        let r = (|| -> Result<(Vec<f64>, u64), BoxError> {
            let (mut lat, mut written) = (Vec::with_capacity(pp.writes), 0u64);
            for i in 0..pp.writes {
                let text = write_text(1_000_000 + i, WRITE_LEN);
                written += text.len() as u64;
                lat.push(cli_write(&mut cli, &small_doc, &block, &text)?.ms());
                if (i + 1) % 100 == 0 {
                    info!("project: growth: {} of {} writes", i + 1, pp.writes);
                }
            }
            Ok((lat, written))
        })();
        if let Some((lat, written)) = soft(&mut growth, "run", r) {
            let after = dir_size(&small_doc);
            let g = after as i64 - before as i64;
            growth_met = Some(g <= 2 * written as i64 + GROWTH_SLACK as i64);
            growth_ratio = Some(g as f64 / written as f64);
            growth = json!({
                "writes": lat.len(), "bytes_written": written, "elf_before": before, "elf_after": after,
                "growth": g, "growth_per_written": round(g as f64 / written as f64, 3),
                "growth_minus_2x_written": g - 2 * written as i64, "constant_allowed": GROWTH_SLACK,
                "breakdown_before": before_parts, "breakdown_after": elf_breakdown(&small_doc),
                "write_ms_median": round(median(&lat), 1), "seconds": round(t.elapsed().as_secs_f64(), 1),
                "how": "sequential `elfiee --elf D markdown write BLOCK --text T` child processes on the 10,000-file document (one block, a different 2048-byte text each time); .elf folder size walked before and after",
            });
        }
    }
    info!("project: growth: {growth}");
    out["growth"] = growth;
    targets.check(
        "growth <= 2 x written + 8 MiB",
        growth_ratio
            .map(|r| format!("{r:.2} x written"))
            .unwrap_or_else(|| "-".into()),
        growth_met,
    );
    Ok(())
}
