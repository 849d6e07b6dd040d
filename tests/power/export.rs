//! The `dir export` scenario: a project folder beside the document, its files rewritten in the
//! document (`elfiee code write`) and exported (`elfiee dir export`) again and again until the
//! cut. After it every project file holds one whole version (the first, or one the document
//! held), never a mix; a file whose export was acknowledged holds that version or a later one;
//! and the next export finds nothing changed behind its back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{elfiee, first_lines, must, run, wait_or_kill};

/// Files of the project.
pub const FILES: usize = 3;

/// The project folder and what was written to each file, in order.
pub struct Project {
    pub root: PathBuf,
    pub dir_block: String,
    /// `(relative path, block id)`.
    pub files: Vec<(String, String)>,
    /// Per file, every version the document was asked to hold, oldest first (the first is
    /// what the folder held at import).
    pub versions: HashMap<String, Vec<String>>,
    /// Per file, the index in `versions` its last acknowledged export wrote.
    pub exported: HashMap<String, usize>,
}

/// What a cut may find in a project file.
#[derive(Debug, Default)]
pub struct ProjectCheck {
    /// Files holding no version at all (torn, mixed, or gone).
    pub torn: Vec<String>,
    /// Files older than their last acknowledged export.
    pub export_lost: Vec<String>,
    /// Temporary files an interrupted export left behind.
    pub litter: Vec<String>,
}

pub fn content(marker: &str) -> String {
    // Several sectors long, so a torn write shows.
    format!("{marker}\n").repeat(300)
}

impl Project {
    /// Makes the folder on the mount and imports it (the caller syncs the disk first: the
    /// project existed long before).
    pub fn create(root: &Path) -> Project {
        std::fs::create_dir_all(root).unwrap();
        let mut versions = HashMap::new();
        for i in 0..FILES {
            let rel = format!("f{i}.txt");
            let first = content(&format!("<original f{i}>"));
            std::fs::write(root.join(&rel), &first).unwrap();
            versions.insert(rel, vec![first]);
        }
        Project {
            root: root.to_owned(),
            dir_block: String::new(),
            files: Vec::new(),
            versions,
            exported: HashMap::new(),
        }
    }

    /// `dir import` of the folder, once the disk holds it.
    pub fn import(&mut self, elf: &Path) {
        let out = must(
            elf,
            &[
                "--json",
                "dir",
                "import",
                self.root.to_str().unwrap(),
                "--name",
                "proj",
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        self.dir_block = v["block_id"].as_str().unwrap().to_owned();
        let list: serde_json::Value =
            serde_json::from_str(&must(elf, &["--json", "block", "list"])).unwrap();
        for i in 0..FILES {
            let rel = format!("f{i}.txt");
            let id = list
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["name"] == rel.as_str())
                .unwrap_or_else(|| panic!("no block for {rel} in {list}"))["block_id"]
                .as_str()
                .unwrap()
                .to_owned();
            self.files.push((rel, id));
        }
        for (rel, _) in &self.files {
            self.exported.insert(rel.clone(), 0);
        }
    }

    /// After the cut, with the document checked: every file one whole version, none older
    /// than its acknowledged export; then an export without `--force` must refuse nothing.
    pub fn check(&self, elf: &Path) -> (ProjectCheck, Vec<String>) {
        let mut c = ProjectCheck::default();
        for (rel, _) in &self.files {
            let versions = &self.versions[rel];
            let disk = std::fs::read_to_string(self.root.join(rel)).unwrap_or_default();
            match versions.iter().rposition(|v| *v == disk) {
                None => c.torn.push(format!(
                    "{rel}: {} bytes, {:?}…",
                    disk.len(),
                    first_lines(&disk)
                )),
                Some(at) if at < self.exported[rel] => c.export_lost.push(format!(
                    "{rel}: holds version {at}, its acknowledged export wrote version {}",
                    self.exported[rel]
                )),
                Some(_) => {}
            }
        }
        for e in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.contains("elfiee-tmp") {
                // Counted once: cleared as a person would.
                let _ = std::fs::remove_file(e.path());
                c.litter.push(name);
            }
        }
        let _ = std::fs::File::open(&self.root).and_then(|d| d.sync_all());
        let (ok, out, err) = run(elf, &["--json", "dir", "export", &self.dir_block]);
        let mut refused = Vec::new();
        if !ok {
            refused.push(format!("export failed: {}", first_lines(&err)));
        } else {
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            for r in v["refused"].as_array().into_iter().flatten() {
                refused.push(r.to_string());
            }
        }
        (c, refused)
    }

    /// Brings folder and document together again after a check found them apart.
    pub fn mend(&mut self, elf: &Path) {
        must(elf, &["dir", "export", &self.dir_block, "--force"]);
        for (rel, _) in &self.files {
            let disk = std::fs::read_to_string(self.root.join(rel)).unwrap_or_default();
            let v = self.versions.get_mut(rel).unwrap();
            if v.last() != Some(&disk) {
                v.push(disk);
            }
            self.exported.insert(rel.clone(), v.len() - 1);
        }
    }
}

/// What one exporter did in a round.
pub struct ExportRun {
    pub acked: Vec<String>,
    /// `(file, content)` of every write asked for, in order.
    pub asked: Vec<(String, String)>,
    /// Per file, the content its last acknowledged export wrote.
    pub exported: HashMap<String, String>,
}

/// Rewrites the files one after the other, exporting after each write, until the cut.
pub fn exporter(
    elf: &Path,
    files: &[(String, String)],
    dir_block: &str,
    round: u32,
    stop: &AtomicBool,
) -> ExportRun {
    let mut r = ExportRun {
        acked: Vec::new(),
        asked: Vec::new(),
        exported: HashMap::new(),
    };
    let mut held: HashMap<String, String> = HashMap::new();
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let (rel, id) = &files[n % files.len()];
        let marker = format!("<r{round}e{n}>");
        let text = content(&marker);
        r.asked.push((rel.clone(), text.clone()));
        let child = elfiee(elf)
            .args(["code", "write", id, "--text", &text])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn a write");
        if wait_or_kill(child, stop).is_err() {
            break;
        }
        r.acked.push(marker);
        held.insert(rel.clone(), text);
        let child = elfiee(elf)
            .args(["dir", "export", dir_block])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn an export");
        if wait_or_kill(child, stop).is_err() {
            break;
        }
        for (f, t) in &held {
            r.exported.insert(f.clone(), t.clone());
        }
    }
    r
}
