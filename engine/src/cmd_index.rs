//! The command index: `cmd_id → (first_seq, count)` for every committed command, used for
//! idempotency (a resubmitted `cmd_id` returns its original events) and by effects to tell
//! whether their outcome is recorded.
//!
//! The index is derived data (every event carries its `cmd_id`). It lives in memory and is
//! persisted in `<elf>/commands.idx`, an append-only file of fixed 28-byte records
//! (`cmd_id` 16 bytes, `first_seq` u64 BE, `count` u32 BE) after an 8-byte magic. Records are
//! appended and synced by the snapshot thread *before* the snapshot that covers them is
//! stored, so at open the file covers at least every command up to the snapshot; the tail
//! after the snapshot is indexed while it is replayed. A file that covers less (deleted, from
//! an older version) is completed from the log. A sled insert per command cost as much as the
//! event itself on the commit path (see docs/PERFORMANCE.md); an append here costs ~28 bytes.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::Path;

use uuid::Uuid;

/// `(cmd_id, first_seq, count)`.
pub type Entry = (Uuid, u64, u64);

const MAGIC: &[u8; 8] = b"ELFCIDX1";
const RECORD: usize = 28;

fn encode(entries: &[Entry], out: &mut Vec<u8>) {
    out.reserve(entries.len() * RECORD);
    for (id, first, count) in entries {
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&(*count as u32).to_be_bytes());
    }
}

/// Appends `entries` and syncs the file (creating it with its magic when needed).
pub fn append(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    let mut buf = Vec::new();
    let len = f.metadata()?.len();
    let new = len == 0;
    if new {
        buf.extend_from_slice(MAGIC);
    }
    encode(entries, &mut buf);
    if let Err(e) = f.write_all(&buf).and_then(|()| f.sync_data()) {
        // A torn append (a full disk) is taken back out: the entries are appended again with
        // the next snapshot, and records after a torn one would be read misaligned.
        let _ = f.set_len(len);
        return Err(e);
    }
    if new {
        sync_parent(path)?;
    }
    Ok(())
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    path.parent().map_or(Ok(()), crate::layout::sync_dir)
}

/// Reads the stored entries. A missing file is empty; a torn last record (a crash during an
/// append) is cut off so later appends stay aligned; a file that is not an index is an error
/// (the caller rebuilds it from the log).
pub fn load(path: &Path) -> std::io::Result<Vec<Entry>> {
    let mut bytes = Vec::new();
    match std::fs::File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a command index", path.display()),
        ));
    }
    let body = &bytes[MAGIC.len()..];
    let whole = body.len() / RECORD * RECORD;
    if whole != body.len() {
        tracing::warn!(path = %path.display(), "cutting off a torn command index record");
        OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len((MAGIC.len() + whole) as u64)?;
    }
    let entries: Vec<Entry> = body[..whole]
        .chunks_exact(RECORD)
        .map(|r| {
            let id = Uuid::from_bytes(r[..16].try_into().unwrap_or_default());
            let first = u64::from_be_bytes(r[16..24].try_into().unwrap_or_default());
            let count = u32::from_be_bytes(r[24..28].try_into().unwrap_or_default());
            (id, first, count as u64)
        })
        .collect();
    // Records are appended in seq order, each covering at least one event: any other shape
    // is damage, and the caller rebuilds the index from the log.
    let mut after = 0u64;
    for (i, (_, first, count)) in entries.iter().enumerate() {
        let last = first.checked_add(*count).and_then(|end| end.checked_sub(1));
        match last {
            Some(last) if *count > 0 && *first > after => after = last,
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{} is damaged: record {i} says seq {first} and {count} events",
                        path.display()
                    ),
                ))
            }
        }
    }
    Ok(entries)
}

/// Replaces the file with `entries` (used when it had to be rebuilt).
pub fn rewrite(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    let tmp = path.with_extension("idx.tmp");
    let mut buf = MAGIC.to_vec();
    encode(entries, &mut buf);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    sync_parent(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_append_and_a_torn_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("commands.idx");
        assert!(
            load(&path).unwrap().is_empty(),
            "missing file = empty index"
        );
        let a: Vec<Entry> = (1..=3).map(|i| (Uuid::new_v4(), i * 10, i)).collect();
        append(&path, &a[..2]).unwrap();
        append(&path, &a[2..]).unwrap();
        assert_eq!(load(&path).unwrap(), a);
        // A crash in the middle of an append leaves part of a record.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[1, 2, 3, 4, 5]).unwrap();
        drop(f);
        assert_eq!(load(&path).unwrap(), a, "the torn record is ignored");
        let b = (Uuid::new_v4(), 99, 1);
        append(&path, &[b]).unwrap();
        let mut want = a.clone();
        want.push(b);
        assert_eq!(load(&path).unwrap(), want, "later appends stay aligned");
    }

    #[test]
    fn a_foreign_file_is_an_error_and_rewrite_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("commands.idx");
        std::fs::write(&path, b"not an index at all").unwrap();
        assert!(load(&path).is_err());
        let a = vec![(Uuid::new_v4(), 1, 2)];
        rewrite(&path, &a).unwrap();
        assert_eq!(load(&path).unwrap(), a);
    }
}
