//! The `sequential` and `concurrent` phases: commits through the engine beside raw sled
//! writing the same records.

use crate::big::EngineRun;
use crate::common::*;
use crate::raw::*;

pub(crate) fn sequential_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
) -> Result<Value, BoxError> {
    let path = base.join("sequential.elf");
    let (f, block) = rt.block_on(async {
        let f = engine.init(&path, "Bench").await?;
        let block = create_block(&f, 0).await?;
        Ok::<_, EngineError>((f, block))
    })?;
    let mut next = 0u64;
    rt.block_on(sequential_window(&f, &block, plan.warmup, &mut next))?;
    let runs = alternate(
        "sequential",
        plan.commit_runs,
        &f,
        || rt.block_on(sequential_window(&f, &block, plan.seq_window, &mut next)),
        |r, records| {
            sequential_raw(
                &base.join(format!("sequential-raw-{r}")),
                records,
                plan.raw_min,
            )
        },
    )?;
    rt.block_on(f.close());
    let sequential = pair(
        median(&runs.eng),
        median(&runs.raw),
        json!({
            "unit": "events/s (durable, higher is better)",
            "runs": plan.commit_runs,
            "statistic": "median",
            "engine_runs": runs.eng.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "raw_runs": runs.raw.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "engine_events": runs.events,
            "event_bytes_avg": runs.event_bytes_avg,
            "window_s": plan.seq_window.as_secs_f64(),
            "raw_min_s": plan.raw_min.as_secs_f64(),
            "target": "ratio >= 0.85",
            "how": "engine: 1 submitter awaiting FileHandle::submit(markdown.write, ~150 bytes of text) in a loop for window_s; raw: the very record bytes of that run (re-sealed with codec::seal, hash checked equal), sled Tree::insert + Db::flush + SledSync::sync (the engine's fdatasync) per event, re-fed under continuing seq keys until the raw run lasts >= raw_min_s; runs alternate engine/raw",
        }),
    );
    info!("sequential: {}", sequential);
    Ok(sequential)
}

pub(crate) fn concurrent_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
    tasks: usize,
) -> Result<Value, BoxError> {
    let path = base.join("concurrent.elf");
    let (f, blocks) = rt.block_on(async {
        let f = engine.init(&path, "Bench").await?;
        let mut blocks = Vec::with_capacity(tasks);
        for i in 0..tasks {
            blocks.push(create_block(&f, i).await?);
        }
        Ok::<_, EngineError>((f, blocks))
    })?;
    rt.block_on(concurrent_window(&f, &blocks, plan.warmup))?;
    let runs = alternate(
        "concurrent",
        plan.commit_runs,
        &f,
        || rt.block_on(concurrent_window(&f, &blocks, plan.conc_window)),
        |r, records| {
            concurrent_raw(
                &base.join(format!("concurrent-raw-{r}")),
                records,
                tasks,
                plan.raw_min,
            )
        },
    )?;
    rt.block_on(f.close());
    let concurrent = pair(
        median(&runs.eng),
        median(&runs.raw),
        json!({
            "unit": "events/s (durable, higher is better)",
            "submitters": tasks,
            "runs": plan.commit_runs,
            "statistic": "median",
            "engine_runs": runs.eng.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "raw_runs": runs.raw.iter().map(|r| round(*r, 0)).collect::<Vec<_>>(),
            "engine_events": runs.events,
            "window_s": plan.conc_window.as_secs_f64(),
            "raw_min_s": plan.raw_min.as_secs_f64(),
            "target": "ratio >= 0.6",
            "how": format!("engine: {tasks} tokio tasks on the multi-thread runtime, each awaiting FileHandle::submit(markdown.write on its own block) in a loop for window_s; raw: the very record bytes of that run (re-sealed with codec::seal, hash checked equal), one sled::Batch of {tasks} inserts + one Db::flush + SledSync::sync (the engine's fdatasync) per batch on one thread, re-fed under continuing seq keys until the raw run lasts >= raw_min_s; runs alternate engine/raw"),
        }),
    );
    info!("concurrent: {}", concurrent);
    Ok(concurrent)
}

/// The runs of a commit phase.
struct Runs {
    /// Engine and raw rates (events/s), run by run.
    eng: Vec<f64>,
    raw: Vec<f64>,
    /// Events the engine runs committed.
    events: usize,
    /// The average stored record size of the last engine run.
    event_bytes_avg: Value,
}

/// `runs` runs alternating engine and raw: `engine_run` commits through `f`, then `raw_run(r,
/// records)` writes the very records that run committed; each pair is logged as
/// `"{name} run N: …"`.
fn alternate(
    name: &str,
    runs: usize,
    f: &FileHandle,
    mut engine_run: impl FnMut() -> Result<EngineRun, BoxError>,
    mut raw_run: impl FnMut(usize, &Records) -> Result<f64, BoxError>,
) -> Result<Runs, BoxError> {
    let mut out = Runs {
        eng: Vec::new(),
        raw: Vec::new(),
        events: 0,
        event_bytes_avg: avg_len(&[]),
    };
    for r in 0..runs {
        let run = engine_run()?;
        let records = sealed_records(f, run.first_seq, run.last_seq)?;
        out.events += records.len();
        out.event_bytes_avg = avg_len(&records);
        out.eng.push(run.rate);
        out.raw.push(raw_run(r, &records)?);
        info!(
            "{name} run {}: engine {:.0} events/s, raw {:.0} events/s",
            r + 1,
            out.eng[r],
            out.raw[r]
        );
    }
    Ok(out)
}

/// The stored record bytes of events `from..=to`, rebuilt with [`codec::seal`] from the
/// committed events; each rebuilt hash is checked against the stored one, so the bytes are
/// exactly the ones in the engine's log.
pub(crate) fn sealed_records(f: &FileHandle, from: u64, to: u64) -> Result<Vec<Record>, BoxError> {
    let events = f.events(from.saturating_sub(1).max(1))?;
    let mut prev = elfiee_model::EventHash::ZERO;
    let mut out = Vec::with_capacity((to + 1 - from) as usize);
    for e in events {
        if e.seq >= from && e.seq <= to {
            let mut copy = e.clone();
            let bytes = codec::seal(&prev, &mut copy);
            if copy.hash != e.hash {
                return Err(format!("re-sealing event {} gave a different hash", e.seq).into());
            }
            out.push((event_key(e.seq), bytes));
        }
        prev = e.hash;
    }
    if out.len() as u64 != to + 1 - from {
        return Err(format!("expected {} events, got {}", to + 1 - from, out.len()).into());
    }
    Ok(out)
}

pub(crate) async fn sequential_window(
    f: &FileHandle,
    block: &str,
    window: Duration,
    next: &mut u64,
) -> Result<EngineRun, BoxError> {
    let first_seq = f.last_seq() + 1;
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < window {
        f.submit(write_cmd(block, *next)).await?;
        *next += 1;
        n += 1;
    }
    engine_run("sequential", f, first_seq, n, t)
}

/// The run of `n` commands from `first_seq` that started at `t`; an error when the log does
/// not hold exactly one event per command.
fn engine_run(
    what: &str,
    f: &FileHandle,
    first_seq: u64,
    n: u64,
    t: Instant,
) -> Result<EngineRun, BoxError> {
    let secs = t.elapsed().as_secs_f64();
    let last_seq = f.last_seq();
    if last_seq + 1 - first_seq != n {
        return Err(format!(
            "{what}: {n} commands but {} events",
            last_seq + 1 - first_seq
        )
        .into());
    }
    Ok(EngineRun {
        rate: n as f64 / secs,
        first_seq,
        last_seq,
    })
}

pub(crate) async fn concurrent_window(
    f: &FileHandle,
    blocks: &[String],
    window: Duration,
) -> Result<EngineRun, BoxError> {
    static ROUND: AtomicU64 = AtomicU64::new(0);
    let round = ROUND.fetch_add(1, Ordering::Relaxed);
    let first_seq = f.last_seq() + 1;
    let t = Instant::now();
    let deadline = t + window;
    let mut joins = Vec::with_capacity(blocks.len());
    for (task, block) in blocks.iter().enumerate() {
        let f = f.clone();
        let block = block.clone();
        joins.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                f.submit(write_cmd(&block, round << 40 | (task as u64) << 24 | n))
                    .await?;
                n += 1;
            }
            Ok::<u64, EngineError>(n)
        }));
    }
    let mut n = 0;
    for j in joins {
        n += j.await??;
    }
    engine_run("concurrent", f, first_seq, n, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternate_gives_each_raw_run_the_records_its_engine_run_committed() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::new(EngineConfig {
            node_id: OWNER.into(),
            ..Default::default()
        });
        let (f, block) = rt
            .block_on(async {
                let f = engine.init(&dir.path().join("t.elf"), "Bench").await?;
                let block = create_block(&f, 0).await?;
                Ok::<_, EngineError>((f, block))
            })
            .unwrap();
        let mut next = 0u64;
        let mut committed = Vec::new();
        let mut fed = Vec::new();
        let runs = alternate(
            "test",
            2,
            &f,
            || {
                let run = rt.block_on(sequential_window(
                    &f,
                    &block,
                    Duration::from_millis(30),
                    &mut next,
                ))?;
                committed.push((run.first_seq, run.last_seq));
                Ok(run)
            },
            |r, records| {
                fed.push((r, records.to_vec()));
                Ok(r as f64 + 1.0)
            },
        )
        .unwrap();
        rt.block_on(f.close());
        assert_eq!(runs.raw, vec![1.0, 2.0]);
        assert_eq!(runs.eng.len(), 2);
        assert_eq!(fed.iter().map(|(r, _)| *r).collect::<Vec<_>>(), vec![0, 1]);
        for ((first, last), (_, records)) in committed.iter().zip(&fed) {
            let keys: Vec<_> = (*first..=*last).map(event_key).collect();
            assert_eq!(records.iter().map(|(k, _)| *k).collect::<Vec<_>>(), keys);
        }
        assert_eq!(runs.events, fed.iter().map(|(_, r)| r.len()).sum::<usize>());
        assert_eq!(runs.event_bytes_avg, avg_len(&fed[1].1));
    }
}
