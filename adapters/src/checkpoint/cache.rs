//! The cache a [`super::FolderTracker`] keeps of its last manifest inside the `.elf`
//! (`cache/checkpoint-<dir>.bin`), so that the first checkpoint of a new process trusts what
//! it already hashed.
//!
//! Saving the whole manifest of a 10,000-file folder (~2 MB) after every checkpoint cost a
//! hook's step several milliseconds (issue 37, "Fast"). So a save after rescans that changed
//! a few files writes only those, as a **journal** beside the manifest
//! (`checkpoint-<dir>.journal`): the files changed since the manifest was written (a state,
//! or `None` for a file gone) and the time of the last scan. A load applies the journal when
//! it names the manifest it extends (that manifest's scan time); any other journal is left
//! out. The manifest is written again (and the journal dropped) after a walk, or when the
//! journal has grown past [`JOURNAL_MAX`] files.
//!
//! A cache is only ever a cache: one that cannot be read costs a walk that reads every file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::scan::{FileChange, FileState, Manifest};

/// Files a journal may hold before the manifest is written whole again.
const JOURNAL_MAX: usize = 1024;

#[derive(Serialize, Deserialize)]
struct Journal {
    /// The scan time of the manifest this journal extends.
    base: i128,
    /// The scan time of the manifest the two make.
    scanned_at_ns: i128,
    files: BTreeMap<String, Option<FileState>>,
}

#[derive(Default)]
struct Saved {
    /// The scan time of the manifest on disk (`None`: none this process can extend).
    base: Option<i128>,
    /// Files of the tracker's manifest that differ from the one on disk.
    pending: BTreeMap<String, Option<FileState>>,
    /// The tracker's manifest was replaced whole since: the next save writes it whole.
    replaced: bool,
}

/// The cache files of one folder, and what this process has not written yet.
pub(super) struct Cache {
    file: PathBuf,
    journal: PathBuf,
    saved: Mutex<Saved>,
}

impl Cache {
    /// The cache at `file` (`….bin`) and the manifest it holds (empty when there is none).
    pub(super) fn load(file: PathBuf) -> (Cache, Manifest) {
        let journal = file.with_extension("journal");
        let mut saved = Saved::default();
        let mut m = std::fs::read(&file)
            .ok()
            .and_then(|b| rmp_serde::from_slice::<Manifest>(&b).ok())
            .unwrap_or_default();
        if m.scanned_at_ns != 0 {
            saved.base = Some(m.scanned_at_ns);
            let j = std::fs::read(&journal)
                .ok()
                .and_then(|b| rmp_serde::from_slice::<Journal>(&b).ok())
                .filter(|j| j.base == m.scanned_at_ns && j.scanned_at_ns >= j.base);
            if let Some(j) = j {
                for (path, state) in &j.files {
                    match state {
                        Some(s) => m.files.insert(path.clone(), s.clone()),
                        None => m.files.remove(path),
                    };
                }
                m.scanned_at_ns = j.scanned_at_ns;
                saved.pending = j.files;
            }
        }
        let cache = Cache {
            file,
            journal,
            saved: Mutex::new(saved),
        };
        (cache, m)
    }

    fn saved(&mut self) -> &mut Saved {
        self.saved.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    /// The tracker's manifest `m` was changed in place: `changes` are its files that changed
    /// (files whose times alone moved may be left out: a load that finds their times moved
    /// reads them again).
    pub(super) fn changed(&mut self, m: &Manifest, changes: &[FileChange]) {
        let saved = self.saved();
        for c in changes {
            saved
                .pending
                .insert(c.path.clone(), m.files.get(&c.path).cloned());
        }
    }

    /// The tracker's manifest was replaced whole.
    pub(super) fn replaced(&mut self) {
        self.saved().replaced = true;
    }

    /// Saves `m`, the tracker's manifest: the journal of what changed since the manifest on
    /// disk, or the whole manifest.
    pub(super) fn save(&self, m: &Manifest) {
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(base), false) = (saved.base, saved.replaced) {
            if saved.pending.len() <= JOURNAL_MAX && m.scanned_at_ns >= base {
                let j = Journal {
                    base,
                    scanned_at_ns: m.scanned_at_ns,
                    files: std::mem::take(&mut saved.pending),
                };
                let ok = write(
                    &self.journal,
                    &rmp_serde::to_vec_named(&j).unwrap_or_default(),
                );
                saved.pending = j.files;
                match ok {
                    Ok(()) => return,
                    Err(e) => tracing::debug!(error = %e, "checkpoint journal not saved"),
                }
            }
        }
        match write(&self.file, &rmp_serde::to_vec_named(m).unwrap_or_default()) {
            Ok(()) => {
                // The manifest on disk is `m`: what a journal said is in it.
                let _ = std::fs::remove_file(&self.journal);
                *saved = Saved {
                    base: Some(m.scanned_at_ns),
                    ..Saved::default()
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint cache not saved; the next scan reads every file")
            }
        }
    }
}

/// Writes `bytes` to `path` through a temporary file renamed over it.
fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
    let tmp = path.with_extension(format!("{}tmp", ext.map_or(String::new(), |e| e + ".")));
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::scan::Version;

    fn state(hash: &str) -> FileState {
        FileState {
            hash: hash.into(),
            len: 1,
            mode: 0o644,
            mtime_ns: 1,
            ctime_ns: 1,
            ino: 1,
        }
    }

    fn change(path: &str) -> FileChange {
        let v = Version {
            hash: "h".into(),
            len: 1,
            mode: 0o644,
        };
        FileChange {
            path: path.into(),
            before: Some(v.clone()),
            after: Some(v),
        }
    }

    #[test]
    fn a_journal_extends_the_manifest_it_names() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("cache/checkpoint-x.bin");
        let (mut c, empty) = Cache::load(file.clone());
        assert_eq!(empty, Manifest::default());
        let mut m = Manifest {
            files: [("a".to_owned(), state("1")), ("b".to_owned(), state("2"))].into(),
            scanned_at_ns: 10,
        };
        // No manifest on disk yet: written whole.
        c.save(&m);
        assert!(file.is_file() && !file.with_extension("journal").exists());
        // Changed in place: a journal.
        m.files.insert("a".into(), state("1b"));
        m.files.remove("b");
        m.files.insert("c".into(), state("3"));
        m.scanned_at_ns = 20;
        c.changed(&m, &[change("a"), change("b"), change("c")]);
        c.save(&m);
        assert!(file.with_extension("journal").is_file());
        let (mut c2, loaded) = Cache::load(file.clone());
        assert_eq!(loaded, m);
        // A second process goes on from there; then a walk writes the manifest whole.
        m.files.insert("d".into(), state("4"));
        m.scanned_at_ns = 30;
        c2.changed(&m, &[change("d")]);
        c2.save(&m);
        assert_eq!(Cache::load(file.clone()).1, m);
        m.scanned_at_ns = 40;
        c2.replaced();
        c2.save(&m);
        assert!(!file.with_extension("journal").exists());
        assert_eq!(Cache::load(file.clone()).1, m);
        // A journal of another manifest is left out.
        let stale = Journal {
            base: 5,
            scanned_at_ns: 50,
            files: [("z".to_owned(), Some(state("9")))].into(),
        };
        std::fs::write(
            file.with_extension("journal"),
            rmp_serde::to_vec_named(&stale).unwrap(),
        )
        .unwrap();
        assert_eq!(Cache::load(file).1, m);
    }
}
