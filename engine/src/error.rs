use std::path::{Path, PathBuf};

use elfiee_model::CapError;
use thiserror::Error;

/// Everything that can go wrong between a caller and the log. `Rejected` is the pure
/// pipeline's verdict (nothing was written); the others are about the file itself.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum EngineError {
    /// The pure pipeline refused the command (unknown capability, no grant, bad payload,
    /// conflict, the handler's own reason); nothing was written.
    #[error(transparent)]
    Rejected(#[from] CapError),
    // (`ELFIEE` is `crate::layout::MARKER`; a test holds them equal, so the error needs no
    // arrow to the layout that returns it.)
    /// The path is not an `.elf` document: its folder has no `ELFIEE` marker.
    #[error("{path} is not an .elf document (no ELFIEE inside); create one with `elfiee init {path}`", path = .0.display())]
    NotAnElf(PathBuf),
    #[error("{} was written in format version {found}; this build of elfiee reads format versions up to {supported} — open it with a newer elfiee (nothing was changed)", path.display())]
    /// The document was written by a newer elfiee in a format this build cannot read; it
    /// was left as it was.
    NewerFormat {
        /// The document.
        path: PathBuf,
        /// The format version its marker names.
        found: u32,
        /// The newest format version this build reads ([`elfiee_model::FORMAT_VERSION`]).
        supported: u32,
    },
    /// Creating a document (or a restore or salvage target) where something already is.
    #[error("{} already exists; choose another path or open it instead", .0.display())]
    AlreadyExists(PathBuf),
    /// Another process holds the document's log: reading the log directly (the CLI's replay
    /// and verify) cannot, and an open that reached no owner within
    /// `EngineConfig::handover_wait` gives up with this.
    #[error("{} is open in another process; close that process or talk to it instead", .0.display())]
    Locked(PathBuf),
    #[error("payload is {size} bytes; the limit is {limit} bytes — store large content in several blocks")]
    /// The command's payload is over the engine's limit (`EngineConfig::max_payload_bytes`);
    /// refused before any handler ran.
    PayloadTooLarge {
        /// The payload's size in bytes (as JSON).
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    #[error("event {seq} is corrupt: {reason}; nothing was changed — run `elfiee verify` for a full report")]
    /// A stored event failed its checks (hash chain, encoding) while being read.
    Corrupt {
        /// The event's seq.
        seq: u64,
        /// What was wrong with it.
        reason: String,
    },
    /// The log or the disk under it failed (sled, a full or failing disk); the message says
    /// what to do.
    #[error("storage error: {0}{advice}", advice = storage_advice(.0))]
    Storage(String),
    /// An effect (I/O done after a commit, outside the pure pipeline) failed.
    #[error("{0}")]
    Effect(String),
    /// The file was closed through another clone of this handle (or is closing).
    #[error("the file was closed; open it again with `Engine::open`")]
    Closed,
    #[error("I/O error on {path}: {message}")]
    /// A file of the document (or one it reads or writes) could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
}

impl EngineError {
    /// `true` when the command itself was refused (exit code 1 in the CLI) rather than the file
    /// being unusable.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            EngineError::Rejected(_) | EngineError::PayloadTooLarge { .. }
        )
    }

    /// Whether this is a full or failing disk ([`write_error`]), not damage to the document.
    pub(crate) fn blames_the_disk(&self) -> bool {
        matches!(self, EngineError::Storage(msg) if msg.contains(DISK))
    }

    /// A request refused with `msg` (which says what to do instead).
    pub fn rejected(msg: impl Into<String>) -> EngineError {
        EngineError::Rejected(CapError::rejected(msg))
    }

    pub(crate) fn io(path: impl Into<PathBuf>, e: impl std::fmt::Display) -> EngineError {
        EngineError::Io {
            path: path.into(),
            message: e.to_string(),
        }
    }
}

/// How a storage error that blames the disk (full or failing) begins ([`write_error`]).
const DISK: &str = "the disk holding";

/// What a storage error ends with: what to do, unless its message says it already.
fn storage_advice(msg: &str) -> &'static str {
    if msg.contains("reopen") || msg.contains("elfiee salvage") {
        ""
    } else {
        "; check the disk, then reopen the file"
    }
}

/// A write to the document at `doc` failed with `e`. When the disk is the cause (full:
/// `ENOSPC`, `EDQUOT`; failing: `EIO`), an error that says so and what to do; the commit path
/// acknowledges nothing it could not write, so it can say that nothing acknowledged was lost.
/// Otherwise `other(e)`.
pub(crate) fn write_error(
    doc: &Path,
    e: std::io::Error,
    other: impl FnOnce(std::io::Error) -> EngineError,
) -> EngineError {
    use std::io::ErrorKind::{QuotaExceeded, StorageFull};
    let code = os_code(&e);
    let (what, fix) = if matches!(e.kind(), StorageFull | QuotaExceeded) {
        ("is full", "free some space")
    } else if code == Some(5) {
        ("failed a write", "check the disk")
    } else {
        return other(e);
    };
    EngineError::Storage(format!(
        "{DISK} {} {what} ({}): {fix}, then reopen the document; no acknowledged change was lost",
        doc.display(),
        code.map_or(e.to_string(), |c| std::io::Error::from_raw_os_error(c)
            .to_string())
    ))
}

/// [`write_error`] for an error of sled's (`other(e)` when the disk is not the cause).
pub(crate) fn sled_write_error(
    doc: &Path,
    e: sled::Error,
    other: impl FnOnce(sled::Error) -> EngineError,
) -> EngineError {
    match e {
        sled::Error::Io(io) => write_error(doc, io, |io| other(sled::Error::Io(io))),
        e => other(e),
    }
}

/// The OS error code of `e`, also when `e` is sled's copy of the error that stopped it
/// (`io::Error::new(kind, format!("{e:?}"))`: the code survives only in the text).
fn os_code(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        let text = e.to_string();
        let rest = text.strip_prefix("Os { code: ")?;
        rest.split(',').next()?.parse().ok()
    })
}

impl From<sled::Error> for EngineError {
    fn from(e: sled::Error) -> Self {
        EngineError::Storage(sled_text(&e))
    }
}

/// What a sled error says, in words a user can read (sled's own text for damage is
/// "Read corrupted data at file offset None backtrace ()").
pub(crate) fn sled_text(e: &sled::Error) -> String {
    match e {
        sled::Error::Corruption { at: Some(at), .. } => {
            format!("sled found damaged data in its file (at {at:?})")
        }
        sled::Error::Corruption { at: None, .. } => "sled found damaged data in its file".into(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sled_damage_is_named_in_plain_words() {
        let damaged = sled::Error::Corruption { at: None, bt: () };
        let msg = EngineError::from(damaged).to_string();
        assert!(
            msg.starts_with("storage error: sled found damaged data in its file"),
            "{msg}"
        );
        assert!(!msg.contains("backtrace"), "{msg}");
    }

    #[test]
    fn a_full_or_failing_disk_is_named_with_what_to_do() {
        let doc = Path::new("/data/notes.elf");
        let other = |e: std::io::Error| EngineError::io("elsewhere", e);
        let full = write_error(doc, std::io::Error::from_raw_os_error(28), other);
        let msg = full.to_string();
        assert!(
            msg.starts_with("storage error: the disk holding /data/notes.elf is full (")
                && msg.ends_with(
                    "): free some space, then reopen the document; no acknowledged change was lost"
                ),
            "{msg}"
        );
        // sled's copy of the error that stopped it: the kind and the code only in the text.
        let copied = |code| {
            let os = std::io::Error::from_raw_os_error(code);
            sled::Error::Io(std::io::Error::new(os.kind(), format!("{os:?}")))
        };
        assert_eq!(
            sled_write_error(doc, copied(28), EngineError::from).to_string(),
            msg
        );
        let eio = sled_write_error(doc, copied(5), EngineError::from).to_string();
        assert!(eio.contains("/data/notes.elf failed a write ("), "{eio}");
        assert!(eio.contains("): check the disk, then reopen"), "{eio}");
        assert!(!eio.contains("Os {"), "{eio}");
        let denied = write_error(doc, std::io::Error::from_raw_os_error(13), other);
        assert!(matches!(denied, EngineError::Io { .. }), "{denied}");
    }

    #[test]
    fn the_not_an_elf_message_names_the_marker() {
        let e = super::EngineError::NotAnElf("x.elf".into());
        assert!(e
            .to_string()
            .contains(&format!("no {} inside", crate::layout::MARKER)));
    }
}
