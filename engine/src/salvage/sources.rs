//! Where salvage finds what the damaged document's own store cannot give: the bodies of its
//! content pack as salvage reads them itself, and the backup.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use elfiee_model::{ContentRef, EventHash};

use crate::backup::format;
use crate::log::SideRecord;

/// The bodies of the damaged document's content pack as salvage finds them itself, whatever
/// the store made of them: the store drops a body whose index record is damaged (the index
/// has no checksum), and cuts its pack at the first damaged record when it rebuilds the
/// index, losing the whole bodies after it. Read from the damaged document, not the copy the
/// store mends.
pub(super) struct PackBodies {
    pub(super) dir: PathBuf,
    /// Where each body may be: the records met walking the pack from its start (until one is
    /// damaged), then the damaged document's index records; `None` until first needed.
    pub(super) places: Option<HashMap<[u8; 32], (u64, u64)>>,
}

/// A record's head in the pack: `len (u64 LE) ‖ blake3`.
pub(super) const PACK_HEAD: usize = 40;

impl PackBodies {
    pub(super) fn new(root: &Path) -> PackBodies {
        PackBodies {
            dir: root.join("content"),
            places: None,
        }
    }

    /// Body `r`, checked against its hash: where the walk or the index places it, else
    /// wherever its hash stands in the pack before its bytes.
    pub(super) fn get(&mut self, r: &ContentRef) -> Result<Vec<u8>, String> {
        let file = File::open(self.dir.join("pack")).map_err(|e| e.to_string())?;
        let size = file.metadata().map_err(|e| e.to_string())?.len();
        let places = self
            .places
            .get_or_insert_with(|| places(&file, size, &self.dir.join("index")));
        let read = |at: u64| {
            let mut body = vec![0u8; r.len as usize];
            let whole = file.read_exact_at(&mut body, at).is_ok()
                && blake3::hash(&body).as_bytes() == &r.hash.0;
            whole.then_some(body)
        };
        if let Some(body) = places
            .get(&r.hash.0)
            .filter(|&&(_, len)| len == r.len)
            .and_then(|&(at, _)| read(at))
        {
            return Ok(body);
        }
        search(&file, size, r)?
            .and_then(read)
            .ok_or_else(|| "not there".into())
    }
}

/// Where [`PackBodies`] looks for bodies.
pub(super) fn places(pack: &File, size: u64, index: &Path) -> HashMap<[u8; 32], (u64, u64)> {
    let mut out = HashMap::new();
    let mut at = 0u64;
    let mut head = [0u8; PACK_HEAD];
    while at + PACK_HEAD as u64 <= size && pack.read_exact_at(&mut head, at).is_ok() {
        let len = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
        let body = at + PACK_HEAD as u64;
        if len > size - body {
            break;
        }
        let mut bytes = vec![0u8; len as usize];
        if pack.read_exact_at(&mut bytes, body).is_err()
            || blake3::hash(&bytes).as_bytes()[..] != head[8..]
        {
            break;
        }
        out.insert(head[8..].try_into().unwrap_or_default(), (body, len));
        at = body + len;
    }
    for rec in std::fs::read(index).unwrap_or_default().chunks_exact(48) {
        let key: [u8; 32] = rec[..32].try_into().unwrap_or_default();
        let off = u64::from_le_bytes(rec[32..40].try_into().unwrap_or_default());
        let len = u64::from_le_bytes(rec[40..].try_into().unwrap_or_default());
        out.entry(key).or_insert((off, len));
    }
    out
}

/// The offset of the bytes after the first head `r.len ‖ r.hash` in the pack.
pub(super) fn search(file: &File, size: u64, r: &ContentRef) -> Result<Option<u64>, String> {
    let mut want = [0u8; PACK_HEAD];
    want[..8].copy_from_slice(&r.len.to_le_bytes());
    want[8..].copy_from_slice(&r.hash.0);
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at + PACK_HEAD as u64 <= size {
        let n = buf.len().min((size - at) as usize);
        file.read_exact_at(&mut buf[..n], at)
            .map_err(|e| e.to_string())?;
        // Every head that starts in `0..=n - PACK_HEAD` is whole in this window; the next
        // one starts where the first that is not begins.
        if let Some(i) = buf[..n].windows(PACK_HEAD).position(|w| w == want) {
            return Ok(Some(at + (i + PACK_HEAD) as u64));
        }
        at += (n - PACK_HEAD + 1) as u64;
    }
    Ok(None)
}

/// A backup as salvage reads it: where its event frames and bodies are, up to its newest
/// whole point.
pub(super) struct Saved {
    pub(super) path: PathBuf,
    pub(super) file: File,
    pub(super) point: format::Point,
    /// `(first seq, count, frame offset)` of each `E` frame.
    pub(super) event_frames: Vec<(u64, u32, u64)>,
    /// blake3 → (offset, len) of each body.
    pub(super) bodies: HashMap<[u8; 32], (u64, u64)>,
    pub(super) side: Vec<SideRecord>,
}

impl Saved {
    pub(super) fn open(path: &Path) -> Result<Saved, String> {
        let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let outline = format::outline(&file, path)?;
        let point = outline
            .last
            .ok_or_else(|| format!("{} holds no whole backup", path.display()))?;
        let mut side = Vec::new();
        for &(at, len) in &outline.sides {
            let mut p = vec![0u8; len as usize];
            file.read_exact_at(&mut p, at).map_err(|e| e.to_string())?;
            if let Ok(records) = format::decode_side(&p) {
                side.extend(records);
            }
        }
        Ok(Saved {
            path: path.to_owned(),
            file,
            point,
            event_frames: outline.events,
            bodies: outline.bodies,
            side,
        })
    }

    /// The records of the `E` frame at `offset`, checked against its crc.
    pub(super) fn events_at(&self, offset: u64) -> Result<Vec<(u64, Vec<u8>)>, String> {
        let mut f = &self.file;
        f.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
        let mut frames = format::Frames::at(f, offset, self.point.end);
        match frames.next_frame()? {
            Some(format::Frame::Events(records)) => Ok(records),
            _ => Err(format!("no events at byte {offset}")),
        }
    }

    /// The hash of event `seq` as the backup holds it (`ZERO` for 0).
    pub(super) fn hash_at(&self, seq: u64) -> Result<EventHash, String> {
        if seq == 0 {
            return Ok(EventHash::ZERO);
        }
        let frame = self
            .event_frames
            .iter()
            .find(|(first, n, _)| (*first..*first + *n as u64).contains(&seq))
            .ok_or_else(|| format!("it does not hold event {seq}"))?;
        let records = self.events_at(frame.2)?;
        let (_, bytes) = records
            .iter()
            .find(|(s, _)| *s == seq)
            .ok_or_else(|| format!("it does not hold event {seq}"))?;
        let hash = bytes.get(..32).ok_or("a record too short")?;
        Ok(EventHash(hash.try_into().unwrap_or_default()))
    }

    /// A body, checked against its hash.
    pub(super) fn body(&self, r: &ContentRef) -> Result<Vec<u8>, String> {
        let (off, len) = *self.bodies.get(&r.hash.0).ok_or("not there")?;
        let mut buf = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut buf, off)
            .map_err(|e| e.to_string())?;
        if blake3::hash(&buf).as_bytes() != &r.hash.0 {
            return Err("damaged".into());
        }
        Ok(buf)
    }
}
