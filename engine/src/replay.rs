//! Rebuilding state: from a snapshot plus the tail (how files open), or from the log alone
//! (`replay`), and checking a log end to end (`verify`). None of this runs effects or touches
//! anything outside the `.elf`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use elfiee_model::{EventHash, FORMAT_VERSION};
use elfiee_projections::{Folds, Image, State};
use serde::{Deserialize, Serialize};

use crate::cmd_index;
use crate::error::EngineError;
use crate::layout::ElfPaths;
use crate::log::{read_events, EventLog, SledEventLog};

/// How many snapshot files are kept (older ones are deleted after a new one is stored).
pub const KEEP_SNAPSHOTS: usize = 3;

/// The stored snapshot files, newest first: `(seq, path)`.
pub fn stored_snapshots(paths: &ElfPaths) -> Vec<(u64, std::path::PathBuf)> {
    let mut found: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(paths.snapshots_dir())
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let seq = name.strip_suffix(".snap")?.parse().ok()?;
            Some((seq, e.path()))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found
}

/// Stores a snapshot file durably (temp file, fsync, rename, fsync of the folder), then
/// deletes all but the newest [`KEEP_SNAPSHOTS`].
pub(crate) fn write_snapshot(paths: &ElfPaths, seq: u64, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = paths.snapshots_dir();
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".{seq:020}.tmp"));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_data()))
        .and_then(|()| std::fs::rename(&tmp, dir.join(format!("{seq:020}.snap"))));
    if let Err(e) = written {
        // Half a snapshot (a full disk) would only hold on to the space.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::File::open(&dir)?.sync_all()?;
    for (_, old) in stored_snapshots(paths).into_iter().skip(KEEP_SNAPSHOTS) {
        let _ = std::fs::remove_file(old);
    }
    Ok(())
}

/// The bytes of the newest snapshot file, if any.
pub(crate) fn newest_snapshot(paths: &ElfPaths) -> Option<Vec<u8>> {
    stored_snapshots(paths)
        .into_iter()
        .find_map(|(_, p)| std::fs::read(p).ok())
}

/// A stored projection: valid only if `format_version`, `seq` and `hash` match the log.
pub struct Snapshot {
    /// The snapshot format it was written in.
    pub format_version: u32,
    /// The last event folded into `state`.
    pub seq: u64,
    /// That event's hash: the snapshot is used only if the log has the same event there.
    pub hash: EventHash,
    /// [`Folds::fingerprint`] of the folds that made the state (empty: the built-in folds,
    /// before snapshots recorded it).
    pub folds: String,
    /// The state after event `seq`.
    pub state: State,
}

/// A snapshot file of the current format starts with this; older files are one MessagePack
/// value (read as before, decoded whole).
const SNAP_MAGIC: &[u8; 8] = b"ELFSNAP3";
/// CRC-32 of everything before it, little endian. A snapshot is a cache of the log (the hash
/// chain is what proves the log; `verify` compares the snapshot with a replay), so the check
/// only has to catch damage, and it runs on every open: a CRC reads 4.6 MB in about a
/// millisecond where blake3 took 7-15 ms beside sled's own open.
const SNAP_TRAILER: usize = 4;

/// The stored snapshot's header.
#[derive(Serialize, Deserialize)]
struct SnapHeader {
    format_version: u32,
    seq: u64,
    hash: EventHash,
    #[serde(default)]
    folds: String,
}

/// The pre-issue-11 layout: the whole state as one value.
#[derive(Deserialize)]
struct LegacySnapshot {
    format_version: u32,
    seq: u64,
    hash: EventHash,
    state: State,
}

/// Encodes a snapshot file: `ELFSNAP3 ‖ header length u32 LE ‖ header (MessagePack) ‖ the
/// state's image ([`State::encode_image`]) ‖ CRC-32 of everything before (u32 LE)`. Blocks the state
/// still holds encoded (read from the previous snapshot and never touched) are copied.
pub(crate) fn encode_snapshot(seq: u64, hash: EventHash, folds: &str, state: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(SNAP_MAGIC);
    let header = SnapHeader {
        format_version: FORMAT_VERSION,
        seq,
        hash,
        folds: folds.to_owned(),
    };
    // Plain data into a Vec: cannot fail.
    let header = rmp_serde::to_vec_named(&header).unwrap_or_default();
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    state.encode_image(&mut out);
    let sum = crc32fast::hash(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

impl Snapshot {
    /// The bytes of a snapshot file (the current layout, with its checksum).
    pub fn encode(&self) -> Vec<u8> {
        encode_snapshot(self.seq, self.hash, &self.folds, &self.state)
    }

    /// Decodes the bytes of a stored snapshot file (either layout), checking its checksum.
    pub fn decode(bytes: Vec<u8>) -> Result<Snapshot, String> {
        if !bytes.starts_with(SNAP_MAGIC) {
            return decode_legacy(&bytes[..]);
        }
        let body = bytes.len().saturating_sub(SNAP_TRAILER);
        if body < SNAP_MAGIC.len()
            || crc32fast::hash(&bytes[..body]).to_le_bytes()[..] != bytes[body..]
        {
            return Err("its checksum does not match (damaged or truncated)".into());
        }
        decode_image(Arc::new(bytes))
    }
}

fn decode_legacy(r: impl std::io::Read) -> Result<Snapshot, String> {
    let s: LegacySnapshot = rmp_serde::from_read(r).map_err(|e| format!("does not decode: {e}"))?;
    Ok(Snapshot {
        format_version: s.format_version,
        seq: s.seq,
        hash: s.hash,
        folds: String::new(),
        state: s.state,
    })
}

/// A checked snapshot's header and state; the blocks stay in `image` until read.
fn decode_image(image: Arc<dyn Image>) -> Result<Snapshot, String> {
    let body = image.len().saturating_sub(SNAP_TRAILER as u64);
    let mut word = [0u8; 4];
    if !image.read_at(8, &mut word) {
        return Err("it is truncated".into());
    }
    let header_len = u32::from_le_bytes(word) as u64;
    let start = 12 + header_len;
    if start > body {
        return Err("its header is truncated".into());
    }
    let mut header = vec![0u8; header_len as usize];
    if !image.read_at(12, &mut header) {
        return Err("its header is truncated".into());
    }
    let header: SnapHeader =
        rmp_serde::from_slice(&header).map_err(|_| "its header does not decode")?;
    let (state, len) =
        State::from_image(image.clone(), start).map_err(|e| format!("does not decode: {e}"))?;
    if start + len != body {
        return Err(format!(
            "does not decode: {} bytes after the state",
            body as i64 - (start + len) as i64
        ));
    }
    Ok(Snapshot {
        format_version: header.format_version,
        seq: header.seq,
        hash: header.hash,
        folds: header.folds,
        state,
    })
}

/// Why a stored snapshot was not used.
fn check_snapshot(
    log: &dyn EventLog,
    bytes: &[u8],
    tail: u64,
    folds: &Folds,
) -> Result<Snapshot, String> {
    check_against_log(log, Snapshot::decode(bytes.to_vec())?, tail, folds)
}

/// A stored snapshot file, read where a lookup needs it. Snapshot files are written once
/// (temp file, rename) and never changed, only deleted (which leaves an open handle reading
/// the same bytes), so it is as immutable as memory.
struct SnapshotFile {
    file: std::fs::File,
    len: u64,
}

impl Image for SnapshotFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> bool {
        use std::os::unix::fs::FileExt;
        offset
            .checked_add(buf.len() as u64)
            .is_some_and(|end| end <= self.len)
            && self.file.read_exact_at(buf, offset).is_ok()
    }
}

/// A snapshot file, checked against its checksum (read in a stream: nothing of it is kept), then
/// kept open: its blocks are read and decoded only when something asks for them, so opening
/// a document costs what the open touches, not what the document holds.
pub(crate) fn decode_snapshot_file(file: &Path) -> Result<Snapshot, String> {
    use std::io::{Read, Seek};
    let mut f = std::fs::File::open(file).map_err(|e| format!("unreadable: {e}"))?;
    let mut magic = [0u8; 8];
    let len = f.metadata().map_err(|e| format!("unreadable: {e}"))?.len();
    if len < 8 || f.read_exact(&mut magic).is_err() || &magic != SNAP_MAGIC {
        f.rewind().map_err(|e| format!("unreadable: {e}"))?;
        return decode_legacy(std::io::BufReader::with_capacity(256 * 1024, f));
    }
    let body = len.saturating_sub(SNAP_TRAILER as u64);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&magic);
    let mut rest = (&mut f).take(body.saturating_sub(8));
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match rest.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => crc.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("unreadable: {e}")),
        }
    }
    drop(buf);
    let mut stored = [0u8; SNAP_TRAILER];
    if f.read_exact(&mut stored).is_err() || crc.finalize().to_le_bytes() != stored {
        return Err("its checksum does not match (damaged or truncated)".into());
    }
    decode_image(Arc::new(SnapshotFile { file: f, len }))
}

/// The newest snapshot file and its decoding (done while sled opens the log).
pub(crate) type Predecoded = Option<(std::path::PathBuf, Result<Snapshot, String>)>;

pub(crate) fn decode_newest(paths: &ElfPaths) -> Predecoded {
    let (_, file) = stored_snapshots(paths).into_iter().next()?;
    let t = Instant::now();
    let snap = decode_snapshot_file(&file);
    tracing::debug!(
        us = t.elapsed().as_micros() as u64,
        ok = snap.is_ok(),
        "newest snapshot checked and opened"
    );
    Some((file, snap))
}

/// Why a decoded snapshot does not fit the log, if it does not.
fn check_against_log(
    log: &dyn EventLog,
    snap: Snapshot,
    tail: u64,
    folds: &Folds,
) -> Result<Snapshot, String> {
    if !same_folds(&snap, folds) {
        return Err(format!(
            "{OTHER_FOLDS} ({}; this program's are {})",
            snap.folds,
            folds.fingerprint()
        ));
    }
    if snap.format_version != FORMAT_VERSION {
        return Err(format!(
            "format version {} (this build reads {FORMAT_VERSION})",
            snap.format_version
        ));
    }
    if snap.seq > tail || snap.state.last_seq != snap.seq {
        return Err(format!(
            "seq {} does not match the log (last event {tail})",
            snap.seq
        ));
    }
    let rec = log
        .records(snap.seq, snap.seq)
        .next()
        .transpose()
        .map_err(|e| format!("{LOG_UNREADABLE}: {e}"))?;
    match rec {
        Some((_, bytes)) if bytes.get(..32) == Some(&snap.hash.0[..]) => Ok(snap),
        _ => Err(format!("hash at seq {} does not match the log", snap.seq)),
    }
}

/// `kind (n events), …` for a message about kinds no fold is registered for.
pub fn describe_kinds(kinds: &std::collections::BTreeMap<String, u64>) -> String {
    kinds
        .iter()
        .map(|(k, n)| format!("{k} ({n} event{})", if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Start of the reason a snapshot made by other folds is not used.
const OTHER_FOLDS: &str = "it was made by other folds";
/// Why a snapshot could not be checked when the log cannot be read at its seq: every other
/// way to open (an older snapshot, the log alone) reads that event too and fails with the
/// error the user sees, so this is no news of its own.
const LOG_UNREADABLE: &str = "the log cannot be read at its seq";

/// The fingerprint of the folds that made a snapshot that does not say: the built-in folds
/// of the time (the 35 built-in kinds before `core.restore`, all at version 1), which were
/// all there was. Kept as a constant since the built-in folds moved beside their
/// capabilities; `unrecorded_folds_are_the_builtin_kinds_before_core_restore` checks it.
pub(crate) const UNRECORDED_FOLDS: &str = "507377cdf707157a";

/// Whether `snap` was folded by `folds` (a snapshot that does not say was made by the
/// built-in ones: they were all there was).
fn same_folds(snap: &Snapshot, folds: &Folds) -> bool {
    let made_by = if snap.folds.is_empty() {
        UNRECORDED_FOLDS
    } else {
        snap.folds.as_str()
    };
    made_by == folds.fingerprint()
}

/// What opening a file yields: the state, the last hash, every command's index entry, and the
/// entries `commands.idx` still lacks (the tail's; the next snapshot appends them).
pub(crate) struct Opened {
    pub state: State,
    pub hash: EventHash,
    /// Seq of the snapshot the state was loaded from (0: replayed from the start).
    pub snapshot_seq: u64,
    pub commands: Vec<cmd_index::Entry>,
    pub unsaved: Vec<cmd_index::Entry>,
}

/// Groups consecutive events of one command into index entries.
fn push_entry(entries: &mut Vec<cmd_index::Entry>, e: &elfiee_model::Event) {
    match entries.last_mut() {
        Some((c, _, n)) if *c == e.cmd_id => *n += 1,
        _ => entries.push((e.cmd_id, e.seq, 1)),
    }
}

/// State as a file opens: the newest valid snapshot plus the tail. An invalid snapshot is
/// ignored (logged) and the log is replayed in full. The command index comes from
/// `index_file`, completed from the log where it covers less than the snapshot, plus the tail.
pub(crate) fn load_state(
    log: &dyn EventLog,
    paths: &ElfPaths,
    mut predecoded: Predecoded,
    folds: &Folds,
) -> Result<Opened, EngineError> {
    let (tail, _) = log.tail()?;
    check_head(log, tail, paths.read_head())?;
    let index_file = &paths.commands_index_file();
    let mut state = State::default();
    let mut prev = EventHash::ZERO;
    // The newest snapshot that matches the log; an older one when the newest is damaged.
    for (i, (_, file)) in stored_snapshots(paths).into_iter().enumerate() {
        let decoded = match predecoded.take() {
            Some((f, snap)) if f == file => snap,
            _ => decode_snapshot_file(&file),
        };
        match decoded.and_then(|snap| check_against_log(log, snap, tail, folds)) {
            Ok(snap) => {
                tracing::debug!(seq = snap.seq, "opening from snapshot");
                prev = snap.hash;
                state = snap.state;
                break;
            }
            Err(why)
                if i == 0 && why.starts_with("seq ") && why.contains("does not match the log") =>
            {
                // A snapshot of events the log no longer has: the log lost its tail.
                return Err(EngineError::Corrupt {
                    seq: tail + 1,
                    reason: format!("the snapshot is ahead of the log ({why}); events were lost"),
                });
            }
            Err(why) if why.starts_with(OTHER_FOLDS) => {
                tracing::info!(%why, file = %file.display(), "replaying instead of the snapshot")
            }
            Err(why) if why.starts_with(LOG_UNREADABLE) => {
                tracing::debug!(%why, file = %file.display(), "ignoring snapshot")
            }
            Err(why) => tracing::warn!(%why, file = %file.display(), "ignoring snapshot"),
        }
    }
    let snapshot_seq = state.last_seq;
    let (mut commands, readable) = match cmd_index::load(index_file) {
        Ok(entries) => (entries, true),
        Err(e) => {
            tracing::warn!(error = %e, "rebuilding the command index from the log");
            (Vec::new(), false)
        }
    };
    // Entries are appended only for durable events, in seq order.
    commands.retain(|(_, first, count)| first + count - 1 <= tail);
    let covered = commands
        .iter()
        .map(|(_, first, count)| first + count - 1)
        .max()
        .unwrap_or(0);
    if covered < snapshot_seq || !readable {
        // Deleted, damaged, or written by a version that kept the index in sled.
        let mut missing = Vec::new();
        for e in read_events(log, covered + 1, snapshot_seq, None) {
            push_entry(&mut missing, &e?);
        }
        tracing::info!(
            from = covered + 1,
            to = snapshot_seq,
            commands = missing.len(),
            "completed the command index from the log"
        );
        let saved = if readable {
            cmd_index::append(index_file, &missing)
        } else {
            cmd_index::rewrite(index_file, &missing)
        };
        saved.map_err(|e| EngineError::io(index_file, e))?;
        commands.extend(missing);
    }
    // The tail: what the last runs wrote after the snapshot.
    let mut unsaved = Vec::new();
    for e in read_events(log, state.last_seq + 1, u64::MAX, Some(prev)) {
        let e = e?;
        prev = e.hash;
        push_entry(&mut unsaved, &e);
        folds.apply(&mut state, &e);
    }
    // The file can already hold some of them (appended for a snapshot that was not stored).
    let saved: std::collections::HashSet<uuid::Uuid> = commands
        .iter()
        .filter(|(_, first, _)| *first > snapshot_seq)
        .map(|(id, _, _)| *id)
        .collect();
    unsaved.retain(|(id, _, _)| !saved.contains(id));
    commands.extend(unsaved.iter().copied());
    Ok(Opened {
        state,
        hash: prev,
        snapshot_seq,
        commands,
        unsaved,
    })
}

/// The state as of `seq`: the newest valid snapshot at or before it plus the events after it,
/// up to `seq`.
pub(crate) fn state_at(
    log: &dyn EventLog,
    paths: &ElfPaths,
    seq: u64,
    folds: &Folds,
) -> Result<State, EngineError> {
    let (tail, _) = log.tail()?;
    let mut state = State::default();
    let mut prev = EventHash::ZERO;
    for (snap_seq, file) in stored_snapshots(paths) {
        if snap_seq > seq {
            continue;
        }
        if let Ok(snap) =
            decode_snapshot_file(&file).and_then(|s| check_against_log(log, s, tail, folds))
        {
            prev = snap.hash;
            state = snap.state;
            break;
        }
    }
    for e in read_events(log, state.last_seq + 1, seq, Some(prev)) {
        folds.apply(&mut state, &e?);
    }
    Ok(state)
}

/// Fails if the log ends before the seq recorded in `HEAD`, or disagrees with its hash.
fn check_head(
    log: &dyn EventLog,
    tail: u64,
    head: Option<(u64, EventHash)>,
) -> Result<(), EngineError> {
    let Some((seq, hash)) = head else {
        return Ok(());
    };
    if tail < seq {
        return Err(EngineError::Corrupt {
            seq: tail + 1,
            reason: format!("the log ends at seq {tail} but seq {seq} was committed (recorded in HEAD): the log lost events"),
        });
    }
    if crate::log::stored_hash(log, seq) != hash {
        return Err(EngineError::Corrupt {
            seq,
            reason: "its hash differs from the one recorded in HEAD".into(),
        });
    }
    Ok(())
}

/// Result of [`replay`].
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Events replayed (the whole log, hash chain checked).
    pub events: u64,
    /// Blocks in the rebuilt state.
    pub blocks: usize,
    /// The rebuilt state's digest ([`State::digest`]): equal to the live state's.
    pub state_digest: String,
    /// How long the replay took, in milliseconds.
    pub elapsed_ms: u64,
    /// Event kinds the folds do not know, with their event counts (their meaning is missing
    /// from the state; see [`State::unknown_kinds`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[cfg_attr(
        feature = "ts",
        ts(optional, as = "Option<std::collections::BTreeMap<String, u64>>")
    )]
    pub unknown_kinds: std::collections::BTreeMap<String, u64>,
}

/// Rebuilds the state from the log alone (no snapshot) with the built-in folds, checking the
/// hash chain. `progress` is called with (events done, events total) now and then.
pub fn replay(
    path: &Path,
    progress: impl FnMut(u64, u64),
) -> Result<(ReplayReport, State), EngineError> {
    replay_with(
        path,
        elfiee_capabilities::Registry::builtin().folds(),
        progress,
    )
}

/// [`replay`] with the given folds (an embedder's registry: `Registry::folds`).
pub fn replay_with(
    path: &Path,
    folds: &Folds,
    progress: impl FnMut(u64, u64),
) -> Result<(ReplayReport, State), EngineError> {
    let paths = ElfPaths::existing(path)?;
    let log = SledEventLog::open(&paths.log_dir(), &paths.root)?;
    check_head(&log, log.tail()?.0, paths.read_head())?;
    replay_log(&log, folds, progress)
}

/// [`replay`] over an open log (used by the owner process for other processes).
pub fn replay_log(
    log: &dyn EventLog,
    folds: &Folds,
    mut progress: impl FnMut(u64, u64),
) -> Result<(ReplayReport, State), EngineError> {
    let start = Instant::now();
    let (total, _) = log.tail()?;
    let mut state = State::default();
    let mut n = 0;
    for e in read_events(log, 1, u64::MAX, Some(EventHash::ZERO)) {
        folds.apply(&mut state, &e?);
        n += 1;
        if n % 65_536 == 0 {
            progress(n, total);
        }
    }
    progress(n, total);
    let report = ReplayReport {
        events: n,
        blocks: state.blocks.len(),
        state_digest: state.digest(),
        elapsed_ms: start.elapsed().as_millis() as u64,
        unknown_kinds: state.unknown_kinds.clone(),
    };
    Ok((report, state))
}

/// Result of [`verify`]: `ok` is false when the chain is broken, the command index disagrees
/// with the events, or the stored snapshot does not match the log.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifyReport {
    /// `problems` is empty.
    pub ok: bool,
    /// Events checked.
    pub events: u64,
    /// Commands found in the log (this device's), each checked against the command index.
    pub commands: u64,
    /// What became of the newest snapshot: `valid at seq N`, `invalid: …` or `not compared:
    /// …`; `None` when there is none.
    pub snapshot: Option<String>,
    /// Each problem found, in words (a broken chain, an index entry that disagrees, a body
    /// that does not match its hash, a snapshot that differs).
    pub problems: Vec<String>,
    /// Event kinds the folds do not know, with their event counts: not a problem (the log is
    /// whole), but their meaning is missing from the state this program shows.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[cfg_attr(
        feature = "ts",
        ts(optional, as = "Option<std::collections::BTreeMap<String, u64>>")
    )]
    pub unknown_kinds: std::collections::BTreeMap<String, u64>,
}

/// Checks the whole log: hash chain, seq continuity, every command's events contiguous and
/// matching its index entry, and the snapshot against the replayed state (built-in folds).
pub fn verify(path: &Path, progress: impl FnMut(u64, u64)) -> Result<VerifyReport, EngineError> {
    verify_with(
        path,
        elfiee_capabilities::Registry::builtin().folds(),
        progress,
    )
}

/// [`verify`] with the given folds (an embedder's registry: `Registry::folds`).
pub fn verify_with(
    path: &Path,
    folds: &Folds,
    progress: impl FnMut(u64, u64),
) -> Result<VerifyReport, EngineError> {
    let paths = ElfPaths::existing(path)?;
    let log = SledEventLog::open(&paths.log_dir(), &paths.root)?;
    let (stored, index_problem) = match cmd_index::load(&paths.commands_index_file()) {
        Ok(entries) => (entries, None),
        Err(e) => (Vec::new(), Some(format!("command index: {e}"))),
    };
    let index: std::collections::HashMap<uuid::Uuid, (u64, u64)> = stored
        .into_iter()
        .map(|(id, first, count)| (id, (first, count)))
        .collect();
    let content = crate::content::ContentStore::new(&paths.root);
    let mut report = verify_log(
        &log,
        &VerifyInputs {
            index: &|id| index.get(&id).copied(),
            complete: false,
            snapshot: newest_snapshot(&paths),
            content: Some(&content),
            folds,
            foreign: crate::file::foreign::foreign_seqs(&log, 1, u64::MAX)?,
        },
        progress,
    )?;
    if let Some(p) = index_problem {
        report.problems.push(p);
        report.ok = false;
    }
    if let Err(e) = check_head(&log, report.events, paths.read_head()) {
        report.problems.push(e.to_string());
        report.ok = false;
    }
    Ok(report)
}

/// What [`verify_log`] checks the log against.
pub struct VerifyInputs<'a> {
    /// Looks a command up in the command index.
    pub index: &'a dyn Fn(uuid::Uuid) -> Option<(u64, u64)>,
    /// The index holds every command (an open file's index in memory) rather than those up to
    /// the snapshot (the stored `commands.idx`).
    pub complete: bool,
    /// The newest stored snapshot, checked against the replayed state.
    pub snapshot: Option<Vec<u8>>,
    /// The content store: every body an event refers to must be there, whole.
    pub content: Option<&'a crate::content::ContentStore>,
    /// The folds the replayed state is made with.
    pub folds: &'a Folds,
    /// The seqs of events that came from another device (their commands were decided there
    /// and are not in this file's command index).
    pub foreign: std::collections::HashSet<u64>,
}

/// [`verify`] over an open log (used by the owner process for other processes).
pub fn verify_log(
    log: &dyn EventLog,
    inputs: &VerifyInputs<'_>,
    mut progress: impl FnMut(u64, u64),
) -> Result<VerifyReport, EngineError> {
    let (index, complete) = (inputs.index, inputs.complete);
    let mut problems = Vec::new();
    let total = match log.tail() {
        Ok((t, _)) => t,
        Err(e) => {
            problems.push(format!("the last record is unreadable: {e}"));
            0
        }
    };
    let mut state = State::default();
    let mut n = 0u64;
    let mut commands = 0u64;
    let mut snapshot_state: Option<(u64, Snapshot)> = None;
    let snap_bytes = inputs.snapshot.as_ref();
    let mut snapshot_status = None;
    if let Some(bytes) = &snap_bytes {
        match check_snapshot(log, bytes, total, inputs.folds) {
            Ok(s) => snapshot_state = Some((s.seq, s)),
            // Not damage: the program that wrote it knew other kinds. The log is the record.
            Err(why) if why.starts_with(OTHER_FOLDS) => {
                snapshot_status = Some(format!("not compared: {why}"));
            }
            Err(why) => {
                problems.push(format!("snapshot: {why}"));
                snapshot_status = Some(format!("invalid: {why}"));
            }
        }
    }
    let mut current: Option<(uuid::Uuid, u64, u64)> = None; // (cmd, first, count)
                                                            // The stored index covers every command up to the snapshot; the commands after it are
                                                            // indexed when the file opens (see `crate::cmd_index`).
    let indexed_through = if complete {
        u64::MAX
    } else {
        snapshot_state.as_ref().map_or(0, |(seq, _)| *seq)
    };
    let check_cmd = |cmd: (uuid::Uuid, u64, u64), problems: &mut Vec<String>| match index(cmd.0) {
        Some((first, count)) => {
            if (first, count) != (cmd.1, cmd.2) {
                problems.push(format!(
                    "command {}: index says events {first}..+{count}, log has {}..+{}",
                    cmd.0, cmd.1, cmd.2
                ));
            }
        }
        None if cmd.1 > indexed_through => {}
        None => problems.push(format!("command {}: no index entry", cmd.0)),
    };
    let mut last_foreign_cmd = None;
    for e in read_events(log, 1, u64::MAX, Some(EventHash::ZERO)) {
        let e = match e {
            Ok(e) => e,
            Err(err) => {
                problems.push(err.to_string());
                break;
            }
        };
        // Another device's events: their commands are that device's, not in this index.
        let foreign = inputs.foreign.contains(&e.seq);
        match &mut current {
            Some((c, _, count)) if *c == e.cmd_id && !foreign => *count += 1,
            _ => {
                if let Some(done) = current.take() {
                    check_cmd(done, &mut problems);
                }
                if foreign {
                    if last_foreign_cmd != Some(e.cmd_id) {
                        commands += 1;
                    }
                    last_foreign_cmd = Some(e.cmd_id);
                } else {
                    commands += 1;
                    current = Some((e.cmd_id, e.seq, 1));
                }
            }
        }
        if let Some(store) = inputs.content {
            for r in elfiee_projections::content::event_refs(&e.value) {
                if let Err(why) = store.check(&r) {
                    problems.push(format!("event {}: {why}", e.seq));
                }
            }
        }
        inputs.folds.apply(&mut state, &e);
        n += 1;
        if let Some((seq, snap)) = &snapshot_state {
            if *seq == e.seq {
                if snap.state.digest() == state.digest() {
                    snapshot_status = Some(format!("valid at seq {seq}"));
                } else {
                    problems.push(format!(
                        "snapshot at seq {seq} does not equal the replayed state"
                    ));
                    snapshot_status = Some(format!("invalid: state at seq {seq} differs"));
                }
            }
        }
        if n.is_multiple_of(65_536) {
            progress(n, total);
        }
    }
    if let Some(done) = current.take() {
        check_cmd(done, &mut problems);
    }
    progress(n, total);
    Ok(VerifyReport {
        ok: problems.is_empty(),
        events: n,
        commands,
        snapshot: snapshot_status,
        problems,
        unknown_kinds: state.unknown_kinds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unrecorded_folds_are_the_builtin_kinds_before_core_restore() {
        // The kinds `Folds::builtin()` registered before snapshots recorded their folds.
        const THEN: &[&str] = &[
            "agent.approve",
            "agent.configure",
            "agent.create",
            "agent.disable",
            "agent.effect_outcome",
            "agent.effect_plan",
            "agent.enable",
            "agent.invoke",
            "agent.proposal",
            "agent.session",
            "code.read",
            "code.write",
            "core.create",
            "core.delete",
            "core.grant",
            "core.link",
            "core.rename",
            "core.revoke",
            "core.unlink",
            "core.update_metadata",
            "directory.add",
            "directory.export",
            "directory.export_outcome",
            "directory.import",
            "directory.move",
            "directory.remove",
            "directory.sync",
            "editor.create",
            "editor.delete",
            "elf.init",
            "markdown.read",
            "markdown.write",
            "terminal.create",
            "terminal.execute",
            "terminal.output",
        ];
        let mut then = Folds::default();
        for kind in THEN {
            then.register_noop(*kind);
        }
        assert_eq!(then.fingerprint(), UNRECORDED_FOLDS);
        // Today's built-in folds are those and `core.restore`: a snapshot that names no folds
        // is not used with them (as before), it is replayed.
        let builtin = elfiee_capabilities::Registry::builtin();
        assert_ne!(builtin.folds().fingerprint(), UNRECORDED_FOLDS);
    }
}
