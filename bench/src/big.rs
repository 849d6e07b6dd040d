//! The `big` phase: a large log built, then replayed and opened, beside raw sled reading the
//! same records.

use crate::common::*;
use crate::raw::*;

pub(crate) fn big_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
    out: &mut Value,
) -> Result<(), BoxError> {
    let snapshot_every = engine.config().snapshot_every;
    // ---- the big log ----
    let big_path = base.join("big.elf");
    let build = rt.block_on(build_big_log(engine, &big_path, plan))?;
    let disk_mb = dir_size(&big_path) as f64 / 1e6;
    info!(
        "big log: {} events in {:.1} s ({:.0} events/s), {:.0} MB on disk",
        build.events,
        build.secs,
        build.events as f64 / build.secs,
        disk_mb
    );
    let snapshot_seq = snapshot_seq(&big_path.join("log"))?;

    // ---- replay ----
    let mut eng_replay = Vec::new();
    let mut raw_replay = Vec::new();
    let mut engine_internal_ms = Vec::new();
    // The raw floor reads the same records from a plain sled tree (the engine keeps bulk
    // commands in events.pack; reading that is no sled floor). Built once, untimed.
    let raw_sled = base.join("big-raw-sled");
    let copied = raw_sled_copy(&big_path.join("log"), &raw_sled, plan.build_batch as u64)?;
    check_count("raw sled copy", copied, build.events)?;
    for i in 0..plan.replay_runs {
        let (n, secs) = raw_replay_run(&raw_sled)?;
        check_count("raw replay", n, build.events)?;
        raw_replay.push(n as f64 / secs);
        let t = Instant::now();
        let (report, _state) = retry_locked(|| elfiee_engine::replay(&big_path, |_, _| {}))?;
        let secs = t.elapsed().as_secs_f64();
        check_count("engine replay", report.events, build.events)?;
        eng_replay.push(report.events as f64 / secs);
        engine_internal_ms.push(report.elapsed_ms as f64);
        info!(
            "replay run {}: engine {:.0} events/s, raw {:.0} events/s",
            i + 1,
            eng_replay[i],
            raw_replay[i]
        );
    }
    let (n0, s0) = raw_replay_variant(&big_path.join("log"), false, false)?;
    let (n1, s1) = raw_replay_variant(&big_path.join("log"), true, false)?;
    let (n2, s2) = raw_replay_variant(&big_path.join("log"), true, true)?;
    info!("replay diagnostics (the engine's own layout): raw decode {:.0}, + chain {:.0}, + apply {:.0} events/s", n0 as f64 / s0, n1 as f64 / s1, n2 as f64 / s2);
    let replay = pair(
        median(&eng_replay),
        median(&raw_replay),
        json!({
            "unit": "events/s (higher is better)",
            "events": build.events,
            "runs": plan.replay_runs,
            "statistic": "median",
            "engine_runs": eng_replay.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "raw_runs": raw_replay.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "engine_reported_elapsed_ms": engine_internal_ms,
            "diagnostics": {
                "unit": "events/s, one run each, no engine code",
                "layout_raw_decode": round(n0 as f64 / s0, 0),
                "layout_raw_decode_and_chain_check": round(n1 as f64 / s1, 0),
                "layout_raw_decode_chain_check_and_apply": round(n2 as f64 / s2, 0),
                "is": "the raw loop over the engine's own files (sled keys + events.pack groups, one positioned read per group, no blake3), then plus the blake3 chain check (codec::open with the previous hash), then plus the built-in folds (Registry::builtin().folds().apply) into a State: what the engine's replay does, minus the group blake3, its per-record copy and iterator plumbing",
            },
            "target": "ratio >= 0.85",
            "how": "engine: elfiee_engine::replay(path) timed around the call (sled open, hash-chain check, decode, apply, final state digest); raw: the same records copied (untimed) into a sled database of their own as plain e‖seq keys, as the engine stored every event before bulk commands went to events.pack; sled open + iterate the events tree + codec::open(seq, bytes, None) per record (decode only, no chain check, no apply) + close; both timed from before the open to after the database is dropped; runs alternate raw/engine",
        }),
    );
    info!("replay: {}", replay);

    // ---- open ----
    let mut eng_open = Vec::new();
    let mut raw_open = Vec::new();
    let mut snapshot_bytes = 0;
    // Raw sled opens a copy of the log (made untimed): a raw open rewrites sled's files, and the
    // engine takes a log whose files changed since its clean close for one not closed cleanly
    // (it then opens a trial copy first, issue 39 F6), which no user's open meets.
    let raw_log = base.join("raw-open-log");
    let _ = std::fs::remove_dir_all(&raw_log);
    elfiee_engine::layout::copy_tree(&big_path.join("log"), &raw_log, |_, e| Err(e))?;
    for i in 0..plan.open_runs {
        let (ms, len) = raw_open_run(&raw_log, &big_path.join("log"))?;
        snapshot_bytes = len;
        raw_open.push(ms);
        let ms = rt.block_on(engine_open_run(engine, &big_path, build.events))?;
        eng_open.push(ms);
        info!(
            "open run {}: engine {:.1} ms, raw {:.1} ms",
            i + 1,
            eng_open[i],
            raw_open[i]
        );
    }
    let e = median(&eng_open);
    let r = median(&raw_open);
    let big_commands = elfiee_engine::cmd_index::load(&big_path.join("commands.idx"))?.len();
    let (index_load_ms, index_entries) = command_index_load(base)?;
    info!("command index: {index_entries} records load in {index_load_ms:.1} ms");
    let mut open = json!({
        "engine": round(e, 2),
        "raw": round(r, 2),
        "ratio": round(e / r, 3),
        "unit": "ms (lower is better)",
        "events": build.events,
        "snapshot_seq": snapshot_seq,
        "snapshot_bytes": snapshot_bytes,
        "commands": big_commands,
        "diagnostics": {
            "command_index_load_ms": round(index_load_ms, 1),
            "command_index_records": index_entries,
            "is": "what opening a file with that many commands adds: elfiee_engine::cmd_index::load of commands.idx plus building the in-memory index (a DashMap), one run on synthetic records",
        },
        "runs": plan.open_runs,
        "statistic": "median",
        "engine_runs": eng_open.iter().map(|r| round(*r, 2)).collect::<Vec<_>>(),
        "raw_runs": raw_open.iter().map(|r| round(*r, 2)).collect::<Vec<_>>(),
        "target": "ratio <= 2",
        "how": "engine: Engine::open(path) until the handle answers owner()/last_seq() (sled open, tail lookup, snapshot decode + check, tail replay, actor + flusher start), then close (not timed); raw: sled::open of the same log directory + Tree 'snapshots' get('latest') copied out; runs alternate raw/engine",
    });
    // Its target is "ratio <= 2" (issue 27): met, and by how much (see `pair`).
    open["met"] = json!(e / r <= 2.0);
    open["margin"] = round(2.0 * r / e - 1.0, 3);
    info!("open: {}", open);

    out["replay"] = replay;
    out["open"] = open;
    out["big_log"] = json!({
        "events": build.events,
        "blocks": plan.big_blocks,
        "build_seconds": round(build.secs, 1),
        "build_events_per_s": round(build.events as f64 / build.secs, 0),
        "disk_mb": round(disk_mb, 0),
        "snapshot_every": snapshot_every,
        "note": format!(
            "built through the engine by {} concurrent tokio tasks, each calling FileHandle::submit_all with batches of {} commands (one atomic group, one durable flush per group commit): {} core.create then markdown.write (~150 bytes of text) cycling over the blocks; 'open' starts from the newest snapshot file (written every 1000 events) and replays the tail after it",
            plan.build_tasks, plan.build_batch, plan.big_blocks
        ),
    });
    Ok(())
}

pub(crate) struct EngineRun {
    pub(crate) rate: f64,
    pub(crate) first_seq: u64,
    pub(crate) last_seq: u64,
}

pub(crate) struct Build {
    pub(crate) events: u64,
    pub(crate) secs: f64,
}

pub(crate) async fn build_big_log(
    engine: &Engine,
    path: &Path,
    plan: &Plan,
) -> Result<Build, BoxError> {
    info!(
        "building a {}-event log through the engine ({} tasks, submit_all batches of {})",
        plan.big_events, plan.build_tasks, plan.build_batch
    );
    let t = Instant::now();
    let f = engine.init(path, "Bench").await?;
    // Blocks first, in batches.
    let mut blocks = Vec::with_capacity(plan.big_blocks);
    for chunk in (0..plan.big_blocks)
        .collect::<Vec<_>>()
        .chunks(plan.build_batch.max(1))
    {
        let evs = f
            .submit_all(chunk.iter().map(|i| create_cmd(*i)).collect())
            .await?;
        blocks.extend(evs.into_iter().map(|e| e.entity));
    }
    let blocks = Arc::new(blocks);
    let start_seq = f.last_seq();
    let total = plan.big_events.saturating_sub(start_seq);
    let claimed = Arc::new(AtomicU64::new(0));
    let batch = plan.build_batch.max(1) as u64;
    let mut joins = Vec::new();
    for _ in 0..plan.build_tasks {
        let (f, blocks, claimed) = (f.clone(), blocks.clone(), claimed.clone());
        joins.push(tokio::spawn(async move {
            loop {
                let from = claimed.fetch_add(batch, Ordering::Relaxed);
                if from >= total {
                    return Ok::<(), EngineError>(());
                }
                let to = (from + batch).min(total);
                let cmds: Vec<Command> = (from..to)
                    .map(|i| write_cmd(&blocks[(i % blocks.len() as u64) as usize], i))
                    .collect();
                if cmds.len() == 1 {
                    f.submit(cmds.into_iter().next().unwrap_or_else(|| unreachable!()))
                        .await?;
                } else {
                    f.submit_all(cmds).await?;
                }
            }
        }));
    }
    let mut last_report = Instant::now();
    let mut done = false;
    while !done {
        done = joins.iter().all(|j| j.is_finished());
        if last_report.elapsed() > Duration::from_secs(5) {
            last_report = Instant::now();
            info!("  … {} events", f.last_seq());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for j in joins {
        j.await??;
    }
    let events = f.last_seq();
    f.close().await; // writes the final snapshot
    Ok(Build {
        events,
        secs: t.elapsed().as_secs_f64(),
    })
}

pub(crate) async fn engine_open_run(
    engine: &Engine,
    path: &Path,
    expect: u64,
) -> Result<f64, BoxError> {
    let mut tries = 0;
    loop {
        let t = Instant::now();
        match engine.open(path).await {
            Ok(h) => {
                let owner = h.owner();
                let seq = h.last_seq();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                h.close().await;
                if owner.as_deref() != Some(OWNER) || seq != expect {
                    return Err(format!(
                        "opened file has owner {owner:?}, seq {seq}; expected {OWNER}, {expect}"
                    )
                    .into());
                }
                return Ok(ms);
            }
            Err(EngineError::Locked(_)) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
