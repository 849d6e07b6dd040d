//! The raw sled side of the commit, replay and open measurements: the same records written,
//! read and folded without the engine.

use crate::common::*;

/// The engine's sled settings (see `SledEventLog::open`).
pub(crate) fn sled_config(dir: &Path) -> sled::Config {
    sled::Config::new()
        .path(dir)
        .flush_every_ms(None)
        .mode(sled::Mode::HighThroughput)
}

pub(crate) fn open_raw(dir: &Path) -> Result<sled::Db, BoxError> {
    let mut tries = 0;
    loop {
        match sled_config(dir).open() {
            Ok(db) => return Ok(db),
            Err(e) if tries < 100 => {
                tries += 1;
                if tries == 1 {
                    info!("raw open of {} failed ({e}); retrying", dir.display());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// One stored event: its key and value bytes.
pub(crate) type Record = ([u8; 9], Vec<u8>);

pub(crate) type Records = [Record];

/// The engine's stored records, again and again until at least `min` has passed since the
/// iterator was made (the pass in progress is finished). Pass `p` stores seq `s` under the key
/// of seq `s + p·n`, so the log keeps growing; the value bytes never change.
pub(crate) struct Passes<'a> {
    pub(crate) records: &'a Records,
    pub(crate) pass: u64,
    pub(crate) i: usize,
    pub(crate) start: Instant,
    pub(crate) min: Duration,
    pub(crate) yielded: u64,
}

impl<'a> Passes<'a> {
    pub(crate) fn new(records: &'a Records, min: Duration) -> Passes<'a> {
        Passes {
            records,
            pass: 0,
            i: 0,
            start: Instant::now(),
            min,
            yielded: 0,
        }
    }
    pub(crate) fn rate(&self) -> f64 {
        self.yielded as f64 / self.start.elapsed().as_secs_f64()
    }
}

impl<'a> Iterator for Passes<'a> {
    type Item = ([u8; 9], &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.records.is_empty() {
            return None;
        }
        if self.i == self.records.len() {
            if self.start.elapsed() >= self.min {
                return None;
            }
            self.pass += 1;
            self.i = 0;
        }
        let (k, v) = &self.records[self.i];
        self.i += 1;
        self.yielded += 1;
        let seq = u64::from_be_bytes(k[1..9].try_into().unwrap_or_default());
        Some((
            event_key(seq + self.pass * self.records.len() as u64),
            v.as_slice(),
        ))
    }
}

pub(crate) fn sequential_raw(
    dir: &Path,
    records: &Records,
    min: Duration,
) -> Result<f64, BoxError> {
    let db = open_raw(dir)?;
    let tree = db.open_tree("events")?;
    let sync = SledSync::new(dir)?;
    let mut feed = Passes::new(records, min);
    for (k, v) in feed.by_ref() {
        tree.insert(k, v)?;
        db.flush()?;
        sync.sync()?;
    }
    Ok(feed.rate())
}

pub(crate) fn concurrent_raw(
    dir: &Path,
    records: &Records,
    batch: usize,
    min: Duration,
) -> Result<f64, BoxError> {
    let db = open_raw(dir)?;
    let tree = db.open_tree("events")?;
    let sync = SledSync::new(dir)?;
    let mut feed = Passes::new(records, min);
    loop {
        let mut b = sled::Batch::default();
        let mut n = 0;
        for (k, v) in feed.by_ref().take(batch.max(1)) {
            b.insert(&k, v);
            n += 1;
        }
        if n == 0 {
            break;
        }
        tree.apply_batch(b)?;
        db.flush()?;
        sync.sync()?;
    }
    Ok(feed.rate())
}

/// (events, seconds): sled open + iterate event keys + decode each record.
pub(crate) fn raw_replay_run(log_dir: &Path) -> Result<(u64, f64), BoxError> {
    raw_replay_variant(log_dir, false, false)
}

/// Copies every record of the engine's log in `log_dir` (sled keys and the groups in
/// `events.pack`) into a fresh sled database in `out` as plain `e‖seq` keys (what the engine
/// stored before groups existed): the raw floor of the replay reads the same records from
/// sled alone, written in batches of the size the engine's build used. Untimed.
pub(crate) fn raw_sled_copy(log_dir: &Path, out: &Path, batch_len: u64) -> Result<u64, BoxError> {
    let db = open_raw(out)?;
    let tree = db.open_tree("events")?;
    let mut batch = sled::Batch::default();
    let mut n = 0u64;
    for_each_record(log_dir, |seq, rec| {
        batch.insert(&event_key(seq), rec);
        n += 1;
        if n.is_multiple_of(batch_len.max(1)) {
            tree.apply_batch(std::mem::take(&mut batch))?;
        }
        Ok(())
    })?;
    tree.apply_batch(batch)?;
    db.flush()?;
    Ok(n)
}

/// Calls `f(seq, record)` for every stored record of the log in `log_dir`, in seq order: sled
/// `e` keys, and for a bulk command's `g` key its records, read from `events.pack` with one
/// positioned read (no blake3), as `engine/src/log.rs` stores them. Includes the sled open
/// and close.
pub(crate) fn for_each_record(
    log_dir: &Path,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), BoxError>,
) -> Result<(), BoxError> {
    use elfiee_engine::log::{group_key, run_key, split_group, split_run, GroupEntry};
    use std::os::unix::fs::FileExt;
    let db = open_raw(log_dir)?;
    let tree = db.open_tree("events")?;
    let mut groups = std::collections::VecDeque::new();
    for r in tree.range(group_key(0)..=group_key(u64::MAX)) {
        let (k, v) = r?;
        groups.push_back(GroupEntry::decode(&k, &v)?);
    }
    let pack = match groups.is_empty() {
        true => None,
        false => Some(std::fs::File::open(
            log_dir
                .parent()
                .ok_or("log dir has no parent")?
                .join("events.pack"),
        )?),
    };
    let mut buf = Vec::new();
    let mut groups_before = |seq: u64, f: &mut RecordSink<'_>| {
        while groups.front().is_some_and(|g: &GroupEntry| g.first < seq) {
            let g = groups.pop_front().expect("checked");
            buf.resize(g.len as usize, 0);
            pack.as_ref()
                .ok_or("no events.pack")?
                .read_exact_at(&mut buf, g.offset)?;
            for (seq, rec) in split_group(&g, &buf)? {
                f(seq, &rec)?;
            }
        }
        Ok::<(), BoxError>(())
    };
    // Runs (several commands' events in one sled value) are merged in by their first seq.
    let mut runs = tree.range(run_key(0)..=run_key(u64::MAX)).peekable();
    let mut runs_before = |seq: u64, f: &mut RecordSink<'_>| {
        while let Some(r) = runs.next_if(|r| {
            r.as_ref()
                .map_or(true, |(k, _)| k[1..9] < seq.to_be_bytes()[..])
        }) {
            let (k, v) = r?;
            for (seq, rec) in split_run(&k, &v)? {
                f(seq, &rec)?;
            }
        }
        Ok::<(), BoxError>(())
    };
    for r in tree.range(event_key(0)..=event_key(u64::MAX)) {
        let (k, v) = r?;
        let seq = u64::from_be_bytes(k[1..9].try_into()?);
        runs_before(seq, &mut f)?;
        groups_before(seq, &mut f)?;
        f(seq, &v)?;
    }
    runs_before(u64::MAX, &mut f)?;
    groups_before(u64::MAX, &mut f)?;
    drop(tree);
    drop(db);
    Ok(())
}

/// (events, seconds): [`for_each_record`] + decode each record; with `chain` the hash chain
/// is checked too (as the engine does), with `fold` each event is applied to a
/// [`elfiee_projections::State`] as well.
pub(crate) fn raw_replay_variant(
    log_dir: &Path,
    chain: bool,
    fold: bool,
) -> Result<(u64, f64), BoxError> {
    let folds = elfiee_capabilities::Registry::builtin().folds().clone();
    let t = Instant::now();
    let mut n = 0u64;
    let mut bytes = 0usize;
    let mut prev = elfiee_model::EventHash::ZERO;
    let mut state = elfiee_projections::State::default();
    for_each_record(log_dir, |seq, v| {
        let e = codec::open(seq, v, chain.then_some(&prev))?;
        prev = e.hash;
        if fold {
            folds.apply(&mut state, &e);
        }
        bytes += e.entity.len();
        n += 1;
        Ok(())
    })?;
    std::hint::black_box((bytes, &state));
    Ok((n, t.elapsed().as_secs_f64()))
}

/// The newest snapshot file of the `.elf` whose log is `log_dir`.
pub(crate) fn newest_snapshot_file(log_dir: &Path) -> Result<std::path::PathBuf, BoxError> {
    let elf = log_dir.parent().ok_or("log dir has no parent")?;
    let paths = elfiee_engine::layout::ElfPaths::existing(elf)?;
    elfiee_engine::stored_snapshots(&paths)
        .into_iter()
        .next()
        .map(|(_, f)| f)
        .ok_or_else(|| "no snapshot stored".into())
}

/// (ms, snapshot length): sled open of `log_dir` + read the newest snapshot file's bytes of the
/// document whose log is `doc_log` (`log_dir` may be a copy of it).
pub(crate) fn raw_open_run(log_dir: &Path, doc_log: &Path) -> Result<(f64, usize), BoxError> {
    let file = newest_snapshot_file(doc_log)?;
    let t = Instant::now();
    let db = open_raw(log_dir)?;
    let snap = std::fs::read(&file)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    drop(db);
    Ok((ms, snap.len()))
}

/// Seq of the stored snapshot, checked against the log tail (outside any timing).
/// Time to load a command index of 1,000,000 records (the open path's share for such a file).
pub(crate) fn command_index_load(base: &Path) -> Result<(f64, usize), BoxError> {
    let path = base.join("index-load.idx");
    let entries: Vec<_> = (0..1_000_000u64)
        .map(|i| (uuid::Uuid::new_v4(), i + 1, 1))
        .collect();
    elfiee_engine::cmd_index::append(&path, &entries)?;
    let t = Instant::now();
    let loaded = elfiee_engine::cmd_index::load(&path)?;
    let map: dashmap::DashMap<uuid::Uuid, (u64, u64)> = loaded
        .into_iter()
        .map(|(id, first, count)| (id, (first, count)))
        .collect();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let n = map.len();
    drop(map);
    std::fs::remove_file(&path)?;
    Ok((ms, n))
}

/// The last seq stored in the log `log_dir` (`<elf>/log`), as the engine reads it.
pub(crate) fn log_tail(log_dir: &Path) -> Result<u64, BoxError> {
    use elfiee_engine::log::{EventLog, SledEventLog};
    let elf = log_dir.parent().ok_or("log dir has no parent")?;
    Ok(retry_locked(|| SledEventLog::open(log_dir, elf))?.tail()?.0)
}

/// The seq of the newest snapshot of the `.elf` whose log is `log_dir` (logs a warning when
/// the log goes on past it).
pub(crate) fn snapshot_seq(log_dir: &Path) -> Result<u64, BoxError> {
    let bytes = std::fs::read(newest_snapshot_file(log_dir)?)?;
    let snap = elfiee_engine::replay::Snapshot::decode(bytes)?;
    let tail = log_tail(log_dir)?;
    if snap.seq != tail {
        info!(
            "warning: snapshot at seq {} but the log ends at {tail}; open will replay the tail",
            snap.seq
        );
    }
    Ok(snap.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_seq_and_log_tail_read_a_closed_document() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.elf");
        let engine = Engine::new(EngineConfig {
            node_id: OWNER.into(),
            ..Default::default()
        });
        let last = rt.block_on(async {
            let f = engine.init(&path, "Bench").await.unwrap();
            let block = create_block(&f, 0).await.unwrap();
            f.submit(write_cmd(&block, 1)).await.unwrap();
            let last = f.last_seq();
            f.close().await; // writes the final snapshot
            last
        });
        assert!(last > 1, "{last}");
        assert_eq!(log_tail(&path.join("log")).unwrap(), last);
        assert_eq!(snapshot_seq(&path.join("log")).unwrap(), last);
    }
}
