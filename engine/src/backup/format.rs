//! The backup file (see docs/EVENTS.md, "Backup files"): one portable, versioned file that
//! only ever grows.
//!
//! ```text
//! file   = header frame*
//! header = "ELFIEEBK" ‖ backup format (u32 BE, 1) ‖ document format (u32 BE)
//! frame  = tag (u8) ‖ len (u64 BE) ‖ payload[len] ‖ crc32(tag ‖ len ‖ payload) (u32 BE)
//!   'E'  events:  first_seq (u64) ‖ count (u32) ‖ (len (u32) ‖ hash ‖ body)*   as the log stores them
//!   'C'  bodies:  count (u32) ‖ (blake3 (32) ‖ len (u64))* ‖ the bodies, one after the other
//!   'S'  side records: count (u32) ‖ (klen (u32) ‖ key ‖ vlen (u32) ‖ value)*  written with the events
//!   'K'  a point: seq (u64) ‖ hash of seq (32) ‖ written at (i64 ms)           everything before it is whole
//! ```
//!
//! Each run of `elfiee backup` appends the frames of what is new, makes them durable, and ends
//! with a `K` frame. Whatever a run that was cut off left after the last `K` is skipped by
//! readers and cut off by the next run; [`outline`] tells it from damage.

use std::collections::HashMap;
use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use elfiee_model::{ContentRef, EventHash};

/// The first eight bytes of every backup file.
pub const MAGIC: &[u8; 8] = b"ELFIEEBK";

/// A body and its blake3.
pub type Body = ([u8; 32], Vec<u8>);

pub use crate::log::SideRecord;
/// The version of the backup file's own layout.
pub const BACKUP_FORMAT: u32 = 1;
/// Bytes of the header: magic, backup format, document format.
pub const HEADER_LEN: u64 = 16;
/// tag ‖ len
const FRAME_HEAD: u64 = 9;
const FRAME_CRC: u64 = 4;

/// The tag of a frame of events, as the log stores them.
pub const EVENTS: u8 = b'E';
/// The tag of a frame of bodies from the content store.
pub const CONTENT: u8 = b'C';
/// The tag of a frame of side records.
pub const SIDE: u8 = b'S';
/// The tag of a point: everything before it is whole.
pub const POINT: u8 = b'K';

/// A frame is at most this long (a body of the content store can be large; 1 TiB guards
/// against a damaged length making a reader allocate the world).
const MAX_FRAME: u64 = 1 << 40;

/// A consistent point of a backup: the events up to `seq`, whose last hash is `hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// The last event the point covers.
    pub seq: u64,
    /// That event's hash (the head of the hash chain at `seq`).
    pub hash: EventHash,
    /// When the point was written, in ms since the Unix epoch.
    pub at_ms: i64,
    /// Where the file ends after this point's frame.
    pub end: u64,
}

/// The header of a new backup of a document in format `doc_format`.
pub fn header(doc_format: u32) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&BACKUP_FORMAT.to_be_bytes());
    h[12..16].copy_from_slice(&doc_format.to_be_bytes());
    h
}

/// Checks a header; `Ok(document format)`.
pub fn check_header(h: &[u8], path: &Path) -> Result<u32, String> {
    if h.len() < HEADER_LEN as usize || &h[..8] != MAGIC {
        return Err(format!(
            "{} is not an elfiee backup (it does not start with {})",
            path.display(),
            String::from_utf8_lossy(MAGIC)
        ));
    }
    let version = u32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
    if version > BACKUP_FORMAT {
        return Err(format!(
            "{} is a backup in backup format {version}; this build of elfiee reads backup formats up to {BACKUP_FORMAT} — use a newer elfiee",
            path.display()
        ));
    }
    let doc = u32::from_be_bytes(h[12..16].try_into().unwrap_or_default());
    if doc > elfiee_model::FORMAT_VERSION {
        return Err(format!(
            "{} holds a document in format version {doc}; this build of elfiee reads format versions up to {} — use a newer elfiee",
            path.display(),
            elfiee_model::FORMAT_VERSION
        ));
    }
    Ok(doc)
}

/// Writes a frame whose payload is `parts` one after the other, in vectored writes (nothing
/// is copied on the way).
pub fn write_frame(w: &mut impl Write, tag: u8, parts: &[&[u8]]) -> std::io::Result<u64> {
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let head = frame_head(tag, len);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head);
    for p in parts {
        crc.update(p);
    }
    let crc = crc.finalize().to_be_bytes();
    let mut slices = Vec::with_capacity(parts.len() + 2);
    slices.push(IoSlice::new(&head));
    slices.extend(parts.iter().map(|p| IoSlice::new(p)));
    slices.push(IoSlice::new(&crc));
    write_all_vectored(w, &mut slices)?;
    Ok(len + FRAME_HEAD + FRAME_CRC)
}

fn frame_head(tag: u8, len: u64) -> [u8; FRAME_HEAD as usize] {
    let mut head = [0u8; FRAME_HEAD as usize];
    head[0] = tag;
    head[1..].copy_from_slice(&len.to_be_bytes());
    head
}

/// The bytes of an `E` frame of records of these lengths.
pub fn events_frame_len(records: impl Iterator<Item = u64>) -> u64 {
    FRAME_HEAD + 12 + records.map(|l| 4 + l).sum::<u64>() + FRAME_CRC
}

/// The bytes of a `C` frame of bodies of these lengths.
pub fn bodies_frame_len(bodies: impl IntoIterator<Item = u64>) -> u64 {
    FRAME_HEAD + 4 + bodies.into_iter().map(|l| 40 + l).sum::<u64>() + FRAME_CRC
}

/// [`Write::write_all`] for vectored writes (the std one is unstable).
fn write_all_vectored(w: &mut impl Write, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !slices.is_empty() {
        match w.write_vectored(slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The start of a `C` frame's payload: `count ‖ (blake3 ‖ len)*` of `bodies`.
fn body_table(bodies: &[ContentRef]) -> Vec<u8> {
    let mut t = Vec::with_capacity(4 + bodies.len() * 40);
    t.extend_from_slice(&(bodies.len() as u32).to_be_bytes());
    for r in bodies {
        t.extend_from_slice(&r.hash.0);
        t.extend_from_slice(&r.len.to_be_bytes());
    }
    t
}

/// Writes one `C` frame holding `bodies` whose bytes are `bytes`, in order (already read and
/// checked).
pub fn write_read_bodies<'b>(
    w: &mut impl Write,
    bodies: &[ContentRef],
    bytes: impl IntoIterator<Item = &'b [u8]>,
) -> std::io::Result<u64> {
    let table = body_table(bodies);
    let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + bodies.len());
    parts.push(&table);
    for b in bytes {
        parts.push(b);
    }
    if parts.len() != 1 + bodies.len() {
        return Err(std::io::Error::other("a body of the frame is missing"));
    }
    write_frame(w, CONTENT, &parts)
}

/// The bodies of a `C` frame: `(blake3, bytes)`.
pub fn decode_bodies(p: &[u8]) -> Result<Vec<Body>, String> {
    let mut r = Cursor(p);
    let count = r.u32()? as usize;
    let mut table = Vec::with_capacity(count.min(p.len() / 40));
    for _ in 0..count {
        let hash: [u8; 32] = r.take(32)?.try_into().unwrap_or_default();
        table.push((hash, r.u64()?));
    }
    let mut out = Vec::with_capacity(table.len());
    for (hash, len) in table {
        let len = usize::try_from(len).map_err(|_| "a body too large".to_string())?;
        out.push((hash, r.take(len)?.to_vec()));
    }
    r.end()?;
    Ok(out)
}

/// The payload of a `K` frame: the point `(seq, hash)`, written at `at_ms`.
pub fn point_payload(seq: u64, hash: &EventHash, at_ms: i64) -> Vec<u8> {
    let mut p = Vec::with_capacity(POINT_LEN as usize);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&hash.0);
    p.extend_from_slice(&at_ms.to_be_bytes());
    p
}

/// The bytes of a point's payload, and of its whole frame.
const POINT_LEN: u64 = 48;
const POINT_FRAME: u64 = FRAME_HEAD + POINT_LEN + FRAME_CRC;

/// The point a frame of bytes `frame` (head, payload, crc) holds, if its crc checks out.
fn whole_point(frame: &[u8], end: u64) -> Option<Point> {
    let (body, crc) = frame.split_at_checked(frame.len().checked_sub(FRAME_CRC as usize)?)?;
    if crc32fast::hash(body).to_be_bytes() != crc {
        return None;
    }
    decode_point(body.get(FRAME_HEAD as usize..)?, end)
}

fn decode_point(p: &[u8], end: u64) -> Option<Point> {
    (p.len() == POINT_LEN as usize).then(|| Point {
        seq: u64::from_be_bytes(p[..8].try_into().unwrap_or_default()),
        hash: EventHash(p[8..40].try_into().unwrap_or_default()),
        at_ms: i64::from_be_bytes(p[40..48].try_into().unwrap_or_default()),
        end,
    })
}

/// Writes an `E` frame of `records` (their first is the frame's first seq) without copying
/// them into one payload first.
pub fn write_events<R: AsRef<[u8]>>(
    w: &mut impl Write,
    records: &[(u64, R)],
) -> std::io::Result<u64> {
    let Some(&(first, _)) = records.first() else {
        return Ok(0);
    };
    let lens: Vec<[u8; 4]> = records
        .iter()
        .map(|(_, r)| (r.as_ref().len() as u32).to_be_bytes())
        .collect();
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&first.to_be_bytes());
    head[8..].copy_from_slice(&(records.len() as u32).to_be_bytes());
    let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + records.len() * 2);
    parts.push(&head);
    for ((_, r), l) in records.iter().zip(&lens) {
        parts.push(l);
        parts.push(r.as_ref());
    }
    write_frame(w, EVENTS, &parts)
}

/// The records of an `E` frame: `(seq, hash ‖ body)`.
pub fn decode_events(p: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let mut r = Cursor(p);
    let first = r.u64()?;
    let count = r.u32()?;
    let mut out = Vec::with_capacity((count as usize).min(p.len() / 4));
    for i in 0..count as u64 {
        let len = r.u32()? as usize;
        out.push((first + i, r.take(len)?.to_vec()));
    }
    r.end()?;
    Ok(out)
}

/// The payload of an `S` frame.
pub fn side_payload(records: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for (k, v) in records {
        p.extend_from_slice(&(k.len() as u32).to_be_bytes());
        p.extend_from_slice(k);
        p.extend_from_slice(&(v.len() as u32).to_be_bytes());
        p.extend_from_slice(v);
    }
    p
}

/// The records of an `S` frame's payload; `Err` names what is malformed.
pub fn decode_side(p: &[u8]) -> Result<Vec<SideRecord>, String> {
    let mut r = Cursor(p);
    let count = r.u32()?;
    let mut out = Vec::new();
    for _ in 0..count {
        let kl = r.u32()? as usize;
        let k = r.take(kl)?.to_vec();
        let vl = r.u32()? as usize;
        out.push((k, r.take(vl)?.to_vec()));
    }
    r.end()?;
    Ok(out)
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "a frame ends {} bytes early",
                n.saturating_sub(self.0.len())
            ));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn end(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("{} bytes too many in a frame", self.0.len()))
        }
    }
}

/// What a quick walk over a backup file finds (frame heads and body tables only), up to its
/// newest whole point: the point, and where its frames and bodies are.
#[derive(Debug, Default)]
pub struct Outline {
    /// The document format the header names.
    pub doc_format: u32,
    /// The newest whole point (`None`: the file has none yet).
    pub last: Option<Point>,
    /// Each `E` frame: `(first seq, count, offset of the frame)`.
    pub events: Vec<(u64, u32, u64)>,
    /// Each body: blake3 → `(offset of its bytes, len)`.
    pub bodies: HashMap<[u8; 32], (u64, u64)>,
    /// Each `S` frame: `(offset of its payload, len)`.
    pub sides: Vec<(u64, u64)>,
    /// Where the walk met a frame that is damaged (see [`outline`]): the newer points after it
    /// cannot be read.
    pub damaged_at: Option<u64>,
    /// Bytes after the newest whole point that hold no whole point and are not damage: what a
    /// run stopped before its point was durable left (0 when the file ends at the point).
    pub unfinished: u64,
}

/// Walks the frames of `file` by their lengths (reading only the heads, the table of each
/// `C` frame and the points), up to the last whole point; what comes after it is left out.
///
/// Where the walk stops short of the end (a frame cut short, a hole, a tag or length that is
/// wrong), the bytes from there on are either what a run stopped by a crash or a power cut
/// left, or damage. A run makes its frames durable before it writes its point, and that point
/// is the last thing it writes, so a stopped run leaves no whole point, and at most a point cut
/// short or torn at a sector boundary (its tail zero). The stop is therefore damage
/// ([`Outline::damaged_at`]) when a whole point newer than the last one lies after it, or when
/// it is a point frame whose bytes are all there, not torn, that does not check out (issue 39,
/// F8); otherwise the rest is [`Outline::unfinished`].
pub fn outline(file: &File, path: &Path) -> Result<Outline, String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut head = [0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut head, 0)
        .map_err(|_| format!("{} is too short to be an elfiee backup", path.display()))?;
    let mut out = Outline {
        doc_format: check_header(&head, path)?,
        ..Outline::default()
    };
    // What the frames since the last point hold; kept once a point closes them.
    let mut pending = Outline::default();
    let read = |buf: &mut [u8], at: u64| file.read_exact_at(buf, at).map_err(|e| e.to_string());
    let mut at = HEADER_LEN;
    let mut fh = [0u8; FRAME_HEAD as usize];
    // Where the walk stopped before the end of the file.
    let mut stop = None;
    while at + FRAME_HEAD + FRAME_CRC <= len {
        read(&mut fh, at)?;
        let flen = u64::from_be_bytes(fh[1..].try_into().unwrap_or_default());
        let (payload, end) = (at + FRAME_HEAD, at + FRAME_HEAD + flen + FRAME_CRC);
        if end > len || flen > MAX_FRAME {
            stop = Some(at);
            break;
        }
        match fh[0] {
            EVENTS if flen >= 12 => {
                let mut h = [0u8; 12];
                read(&mut h, payload)?;
                let first = u64::from_be_bytes(h[..8].try_into().unwrap_or_default());
                let count = u32::from_be_bytes(h[8..].try_into().unwrap_or_default());
                pending.events.push((first, count, at));
            }
            CONTENT if flen >= 4 => {
                let mut n = [0u8; 4];
                read(&mut n, payload)?;
                let n = u32::from_be_bytes(n) as u64;
                if 4 + n * 40 > flen {
                    stop = Some(at);
                    break;
                }
                let mut table = vec![0u8; (n * 40) as usize];
                read(&mut table, payload + 4)?;
                let mut body_at = payload + 4 + n * 40;
                for row in table.chunks_exact(40) {
                    let blen = u64::from_be_bytes(row[32..].try_into().unwrap_or_default());
                    pending
                        .bodies
                        .insert(row[..32].try_into().unwrap_or_default(), (body_at, blen));
                    body_at += blen;
                }
            }
            SIDE => pending.sides.push((payload, flen)),
            EVENTS | CONTENT => {}
            POINT => {
                let mut whole = vec![0u8; (FRAME_HEAD + flen + FRAME_CRC) as usize];
                read(&mut whole, at)?;
                let Some(p) = whole_point(&whole, end) else {
                    stop = Some(at);
                    break;
                };
                out.events.append(&mut pending.events);
                out.bodies.extend(pending.bodies.drain());
                out.sides.append(&mut pending.sides);
                out.last = Some(p);
            }
            _ => {
                stop = Some(at);
                break;
            }
        }
        at = end;
    }
    let whole_end = out.last.map_or(HEADER_LEN, |p| p.end);
    if let Some(at) = stop {
        let after = out.last.map_or(0, |p| p.seq);
        if newer_point(file, at, len, after).map_err(|e| e.to_string())?
            || whole_point_damaged(file, at, len).map_err(|e| e.to_string())?
        {
            out.damaged_at = Some(at);
            return Ok(out);
        }
    }
    out.unfinished = len.saturating_sub(whole_end);
    Ok(out)
}

/// Whether a whole point frame (its crc checks out) of a seq above `after` lies in
/// `file[from..len]`, found by its head wherever it starts.
fn newer_point(file: &File, from: u64, len: u64, after: u64) -> std::io::Result<bool> {
    let head = frame_head(POINT, POINT_LEN);
    let finder = memchr::memmem::Finder::new(&head);
    const CHUNK: u64 = 1 << 20;
    let mut buf = Vec::new();
    let mut at = from;
    while at + POINT_FRAME <= len {
        // Chunks overlap by a frame less one byte, so a frame across two is found in one.
        let n = CHUNK.min(len - at);
        buf.resize(n as usize, 0);
        file.read_exact_at(&mut buf, at)?;
        for i in finder.find_iter(&buf) {
            let Some(frame) = buf.get(i..i + POINT_FRAME as usize) else {
                break;
            };
            if whole_point(frame, 0).is_some_and(|p| p.seq > after) {
                return Ok(true);
            }
        }
        if at + n == len {
            break;
        }
        at += n - (POINT_FRAME - 1);
    }
    Ok(false)
}

/// Whether the frame at `at` is a point whose bytes are all in the file and that does not check
/// out, not torn: a write stopped part way leaves a point's tail from a sector boundary on
/// zero (or the file shorter), so a point with a wrong byte and no such tail was damaged after
/// it was written.
fn whole_point_damaged(file: &File, at: u64, len: u64) -> std::io::Result<bool> {
    const SECTOR: u64 = 512;
    if at + POINT_FRAME > len {
        return Ok(false);
    }
    // The frame and whatever follows it (up to 1 MiB): where its last non-zero byte is.
    let mut rest = vec![0u8; (len - at).min(1 << 20) as usize];
    file.read_exact_at(&mut rest, at)?;
    if rest[..FRAME_HEAD as usize] != frame_head(POINT, POINT_LEN) {
        return Ok(false);
    }
    let nonzero_end = if at + rest.len() as u64 == len {
        at + rest
            .iter()
            .rposition(|b| *b != 0)
            .map_or(0, |i| i as u64 + 1)
    } else {
        len
    };
    let torn = nonzero_end.div_ceil(SECTOR) * SECTOR < at + POINT_FRAME;
    Ok(!torn)
}

/// One frame read in full and checked.
pub enum Frame {
    /// `E`: events as `(seq, stored bytes)`, in seq order.
    Events(Vec<(u64, Vec<u8>)>),
    /// `C`: bodies with their blake3.
    Content(Vec<Body>),
    /// `S`: side records.
    Side(Vec<SideRecord>),
    /// `K`: a point.
    Point(Point),
}

/// Reads the frames of a backup in order, each checked against its crc.
pub struct Frames<R> {
    r: R,
    at: u64,
    len: u64,
}

impl Frames<std::io::BufReader<File>> {
    /// Opens `path` and checks its header; `(frames, document format)`.
    pub fn open(path: &Path) -> Result<(Self, u32), String> {
        let mut f = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let len = f.metadata().map_err(|e| e.to_string())?.len();
        let mut head = [0u8; HEADER_LEN as usize];
        f.read_exact(&mut head)
            .map_err(|_| format!("{} is too short to be an elfiee backup", path.display()))?;
        let doc = check_header(&head, path)?;
        Ok((
            Frames {
                r: std::io::BufReader::with_capacity(1 << 20, f),
                at: HEADER_LEN,
                len,
            },
            doc,
        ))
    }
}

impl<R: Read> Frames<R> {
    /// Frames read from `r`, positioned at `offset`, in a file of `len` bytes.
    pub fn at(r: R, offset: u64, len: u64) -> Frames<R> {
        Frames { r, at: offset, len }
    }

    /// Where the next frame starts.
    pub fn offset(&self) -> u64 {
        self.at
    }

    /// The next frame; `Ok(None)` at the end of the file (or of what was whole: a frame cut
    /// short at the end is a run that was stopped, not damage); `Err` for a damaged frame.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, String> {
        if self.at + FRAME_HEAD + FRAME_CRC > self.len {
            return Ok(None);
        }
        let mut fh = [0u8; FRAME_HEAD as usize];
        self.r.read_exact(&mut fh).map_err(|e| e.to_string())?;
        let flen = u64::from_be_bytes(fh[1..].try_into().unwrap_or_default());
        let at = self.at;
        let end = at + FRAME_HEAD + flen + FRAME_CRC;
        if flen > MAX_FRAME || end > self.len {
            if matches!(fh[0], EVENTS | CONTENT | SIDE | POINT) && flen <= MAX_FRAME {
                return Ok(None);
            }
            return Err(format!(
                "the frame at byte {at} is damaged (its length is wrong)"
            ));
        }
        let mut payload = vec![0u8; flen as usize];
        self.r.read_exact(&mut payload).map_err(|e| e.to_string())?;
        let mut crc = [0u8; 4];
        self.r.read_exact(&mut crc).map_err(|e| e.to_string())?;
        let mut h = crc32fast::Hasher::new();
        h.update(&fh);
        h.update(&payload);
        if h.finalize().to_be_bytes() != crc {
            return Err(format!(
                "the frame at byte {at} is damaged (checksum mismatch)"
            ));
        }
        self.at = end;
        let bad = |why: String| format!("the frame at byte {at}: {why}");
        Ok(Some(match fh[0] {
            EVENTS => Frame::Events(decode_events(&payload).map_err(bad)?),
            SIDE => Frame::Side(decode_side(&payload).map_err(bad)?),
            CONTENT => Frame::Content(decode_bodies(&payload).map_err(bad)?),
            POINT => Frame::Point(
                decode_point(&payload, end)
                    .ok_or_else(|| bad("a point of the wrong size".into()))?,
            ),
            t => return Err(bad(format!("unknown frame kind {t:#04x}"))),
        }))
    }
}
