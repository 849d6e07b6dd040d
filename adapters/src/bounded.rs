//! Project files read with a bound (issue 39: every input bounded before it is read).
//!
//! What the importer and the exporter read from a project folder is not the document's: a
//! FIFO or a device put where a file was (`/dev/zero`), or a file another program keeps
//! appending to, must cost neither a hang nor unbounded memory. A file is opened without
//! blocking (opening a FIFO for reading waits for a writer otherwise), refused unless it is a
//! regular file, and read up to a limit: a file that holds more than that when read (it grew
//! since its size was looked at) is refused at the limit without being read further.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens the regular file at `path` for reading without blocking on a FIFO; any other kind of
/// file is refused (`InvalidInput`).
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(f)
}

/// The bytes of the regular file at `path`, refused (`FileTooLarge`) when it holds more than
/// `limit` bytes as it is read; never more than `limit + 1` bytes are read.
pub fn read_file(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let f = open_regular(path)?;
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("holds more than {limit} bytes (it grew while it was read)"),
        ));
    }
    Ok(bytes)
}

/// The blake3 of the regular file at `path`, read in pieces (any size, bounded memory).
pub fn hash_file(path: &Path) -> std::io::Result<blake3::Hash> {
    let mut f = open_regular(path)?;
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking_and_a_file_past_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a path we own, a mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for p in [fifo.as_path(), Path::new("/dev/zero")] {
            let e = read_file(p, 1024).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{p:?}: {e}");
            assert!(hash_file(p).is_err(), "{p:?}");
        }
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        let e = read_file(&big, 1024).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge, "{e}");
        assert_eq!(read_file(&big, 2048).unwrap().len(), 2048);
        assert_eq!(
            hash_file(&big).unwrap(),
            blake3::hash(&std::fs::read(&big).unwrap())
        );
    }
}
