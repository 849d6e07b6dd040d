//! A deterministic generator of realistic source trees, for benchmarks (`elfiee-bench`'s
//! `project` phase) and tests of folder import/sync.
//!
//! [`generate`] writes exactly `spec.files` text files whose sizes add up to about
//! `spec.total_bytes` (× `spec.size_factor`): nested folders (`src/<module>/…`, `tests/`,
//! `examples/`, `docs/`, `web/src/…`, `scripts/`, `config/`, config files at the root), kinds by
//! extension (mostly `.rs`, then `.ts`, `.py`, `.md`, `.json`, `.toml`, `.yaml`, `.txt`), text
//! that reads like code or prose (identifiers, keywords, comments; no two files alike), and
//! sizes skewed like real code (log-normal: many files of a few hundred bytes to a few KB, a
//! long tail up to ~300 KB, never above [`BASE_CAP`] × `size_factor` nor [`HARD_CAP`]).
//!
//! Beside the text files, and reported apart from them: a `.gitignore` (ignoring `build/` and
//! `*.log`), a `build/` folder and some `x.log` files (which an importer that honours the
//! `.gitignore` must leave out), and a few binary files with NUL bytes (which an importer skips).
//!
//! Everything is a pure function of the [`Spec`]: the same spec writes the same bytes (a
//! hand-written splitmix64 drives every choice; no dependency). [`modify`] rewrites a
//! deterministic subset of the text files, for rescan measurements.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

mod pick;
mod text;

use pick::{Kind, Rng, WORDS};
use text::*;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// Every choice (layout, sizes, content) follows from it.
    pub seed: u64,
    /// Number of text files (exactly).
    pub files: usize,
    /// Total bytes of the text files at `size_factor` 1 (the result is within a few bytes of it
    /// unless the sizes cannot reach it: each file holds between [`MIN_FILE`] and [`BASE_CAP`]).
    pub total_bytes: u64,
    /// Multiplies every text file's size (same paths, kinds and file count): 10 gives the
    /// "ten times larger" tree. 0 is taken as 1. Files stay ≤ [`HARD_CAP`].
    pub size_factor: u64,
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GenReport {
    /// Number of text files (= `spec.files`), i.e. `paths.len()`.
    pub files: usize,
    /// Total bytes of those text files.
    pub text_bytes: u64,
    /// Largest text file, in bytes.
    pub largest_file: u64,
    /// Files the `.gitignore` ignores (under `build/`, and `*.log`); text, not counted above.
    pub ignored_files: usize,
    /// Binary files (NUL bytes in their first KB); not counted above.
    pub binary_files: usize,
    /// Relative paths (`/`-separated) of the text files, sorted.
    pub paths: Vec<String>,
    /// Relative paths of the ignored files, sorted.
    pub ignored_paths: Vec<String>,
    /// Relative paths of the binary files, sorted.
    pub binary_paths: Vec<String>,
    /// Other files written and not counted anywhere above: `.gitignore` (a text file that an
    /// importer may well import).
    pub meta_paths: Vec<String>,
}

/// Largest text file at `size_factor` 1 (300 KiB), under the importer's default 1 MiB limit.
pub const BASE_CAP: u64 = 300 * 1024;
/// No text file is ever larger than this (4 MiB), whatever the `size_factor`.
pub const HARD_CAP: u64 = 4 * 1024 * 1024;
/// Smallest text file at `size_factor` 1.
pub const MIN_FILE: u64 = 120;

/// Writes the tree described by `spec` under `root` (created if missing; existing files with
/// the same paths are overwritten, others left alone).
pub fn generate(root: &Path, spec: &Spec) -> io::Result<GenReport> {
    let factor = spec.size_factor.max(1);
    let plan = plan(spec);
    std::fs::create_dir_all(root)?;
    for d in folders(&plan) {
        std::fs::create_dir_all(root.join(d))?;
    }
    let sizes: Vec<u64> = plan
        .iter()
        .map(|p| (p.size * factor).min(HARD_CAP))
        .collect();
    // Content depends only on (seed, index, size): threads change nothing but the speed.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let result: io::Result<()> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (plan, sizes) = (&plan, &sizes);
                s.spawn(move || -> io::Result<()> {
                    for i in (t..plan.len()).step_by(threads) {
                        let p = &plan[i];
                        let mut rng = Rng::new(mix(p.seed, 0xC0DE));
                        let text = render(p.kind, &mut rng, sizes[i] as usize);
                        std::fs::write(root.join(&p.path), text)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| io::Error::other("generator thread panicked"))??;
        }
        Ok(())
    });
    result?;
    let extras = write_extras(root, spec, &plan)?;
    let mut paths: Vec<String> = plan.iter().map(|p| p.path.clone()).collect();
    paths.sort();
    Ok(GenReport {
        files: plan.len(),
        text_bytes: sizes.iter().sum(),
        largest_file: sizes.iter().copied().max().unwrap_or(0),
        ignored_files: extras.ignored.len(),
        binary_files: extras.binary.len(),
        paths,
        ignored_paths: extras.ignored,
        binary_paths: extras.binary,
        meta_paths: vec![".gitignore".to_owned()],
    })
}

/// How many text files [`modify`] rewrites.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// This fraction of the files, rounded (at least one when positive).
    Fraction(f64),
    /// This many files (at most all of them).
    Count(usize),
}

impl From<usize> for Amount {
    fn from(n: usize) -> Amount {
        Amount::Count(n)
    }
}

impl From<f64> for Amount {
    fn from(f: f64) -> Amount {
        Amount::Fraction(f)
    }
}

/// Rewrites a deterministic subset (from `seed`) of the text files of `report` under `root`:
/// each gets a few generated lines inserted at a line boundary (so its content changes and it
/// grows). Returns the rewritten paths, sorted.
pub fn modify(
    root: &Path,
    report: &GenReport,
    amount: impl Into<Amount>,
    seed: u64,
) -> io::Result<Vec<String>> {
    let n = report.paths.len();
    let count = match amount.into() {
        Amount::Count(c) => c.min(n),
        Amount::Fraction(f) if f > 0.0 => ((n as f64 * f).round() as usize).clamp(1, n),
        Amount::Fraction(_) => 0,
    };
    let mut rng = Rng::new(mix(seed, 0x0D1F));
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..count {
        let j = i + rng.below((n - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut changed: Vec<String> = idx[..count]
        .iter()
        .map(|&i| report.paths[i].clone())
        .collect();
    changed.sort();
    for (k, rel) in changed.iter().enumerate() {
        let path = root.join(rel);
        let old = std::fs::read_to_string(&path)?;
        let kind = Kind::of(rel);
        let mut rng = Rng::new(mix(seed, k as u64 + 1));
        let mut chunk = String::new();
        match kind.comment() {
            Some(c) => {
                let _ = writeln!(chunk, "{c}changed: {}", sentence(&mut rng, 6, 12));
            }
            None if kind == Kind::Json => {}
            None => {
                let _ = writeln!(chunk, "Changed: {}\n", sentence(&mut rng, 6, 12));
            }
        }
        unit(kind, &mut rng, &mut chunk, k, false);
        let at = if kind == Kind::Json {
            // After the opening `{` line, where a `"key": …,` entry stays valid JSON.
            old.find('\n').map(|i| i + 1).unwrap_or(old.len())
        } else {
            let breaks: Vec<usize> = old.match_indices('\n').map(|(i, _)| i + 1).collect();
            if breaks.is_empty() {
                old.len()
            } else {
                breaks[rng.below(breaks.len() as u64) as usize]
            }
        };
        let mut new = String::with_capacity(old.len() + chunk.len() + 1);
        new.push_str(&old[..at]);
        if !new.is_empty() && !new.ends_with('\n') {
            new.push('\n');
        }
        new.push_str(&chunk);
        new.push_str(&old[at..]);
        std::fs::write(&path, new)?;
    }
    Ok(changed)
}

// ------------------------------------------------------------------------------------------
// randomness

fn mix(a: u64, b: u64) -> u64 {
    Rng::new(a ^ b.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}

// ------------------------------------------------------------------------------------------
// layout and sizes

/// (kind, weight in percent).
const KINDS: &[(Kind, u64)] = &[
    (Kind::Rust, 52),
    (Kind::TypeScript, 10),
    (Kind::Python, 9),
    (Kind::Markdown, 12),
    (Kind::Json, 7),
    (Kind::Toml, 4),
    (Kind::Yaml, 3),
    (Kind::Text, 3),
];

const ROOT_FILES: &[&str] = &[
    "README.md",
    "Cargo.toml",
    "package.json",
    "config.yaml",
    "tsconfig.json",
    "rustfmt.toml",
    "CHANGELOG.md",
    "pyproject.toml",
    "LICENSE.txt",
];

/// Folder names importers skip or `.gitignore` ignores: never generated for text files.
const RESERVED_DIRS: &[&str] = &["target", "build", "node_modules", "dist", "vendor"];

/// One text file to write.
#[derive(Debug, Clone)]
struct Planned {
    path: String,
    kind: Kind,
    /// Size at `size_factor` 1.
    size: u64,
    seed: u64,
}

/// A top-level area of the tree (`src`, `docs`, …) whose sub-folders grow as files land in it.
struct Area {
    max_depth: usize,
    /// Folders so far (relative to the tree root), the area's own root first; with depth.
    folders: Vec<(String, usize)>,
}

impl Area {
    fn new(root: &'static str, max_depth: usize) -> Area {
        Area {
            max_depth,
            folders: vec![(root.to_owned(), 0)],
        }
    }

    /// A folder for the next file: now and then a new sub-folder (so folders hold about a
    /// dozen files), else an existing one.
    fn folder(&mut self, rng: &mut Rng) -> String {
        if self.max_depth > 0 && rng.chance(1.0 / 11.0) {
            let parents: Vec<usize> = (0..self.folders.len())
                .filter(|&i| self.folders[i].1 < self.max_depth)
                .collect();
            // Shallow parents are likelier, so most files sit two to four levels down.
            let mut at = 0;
            for _ in 0..8 {
                let c = *rng.pick(&parents);
                if rng.chance(0.5f64.powi(self.folders[c].1 as i32)) {
                    at = c;
                    break;
                }
            }
            let (parent, depth) = self.folders[at].clone();
            let mut name = rng.pick(WORDS).to_string();
            while RESERVED_DIRS.contains(&name.as_str()) {
                name = rng.pick(WORDS).to_string();
            }
            if rng.chance(0.3) {
                name = format!("{name}_{}", rng.pick(WORDS));
            }
            let mut dir = format!("{parent}/{name}");
            let mut n = 2;
            while self.folders.iter().any(|(f, _)| *f == dir) {
                dir = format!("{parent}/{name}{n}");
                n += 1;
            }
            self.folders.push((dir.clone(), depth + 1));
            return dir;
        }
        // Favour the newer folders a little, so sizes of folders vary.
        let n = self.folders.len();
        let i = if rng.chance(0.4) {
            n - 1 - rng.below(n.min(3) as u64) as usize
        } else {
            rng.below(n as u64) as usize
        };
        self.folders[i].0.clone()
    }
}

/// The folders that hold planned files, sorted, each once.
fn folders(plan: &[Planned]) -> Vec<&str> {
    let mut dirs: Vec<&str> = plan
        .iter()
        .filter_map(|p| p.path.rsplit_once('/').map(|(d, _)| d))
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    dirs
}

fn plan(spec: &Spec) -> Vec<Planned> {
    let mut rng = Rng::new(mix(spec.seed, 0x01A0));
    let mut areas = [
        Area::new("src", 4),
        Area::new("tests", 1),
        Area::new("examples", 1),
        Area::new("benches", 1),
        Area::new("docs", 2),
        Area::new("config", 1),
        Area::new("deploy", 1),
        Area::new("scripts", 1),
        Area::new("tools", 2),
        Area::new("web/src", 3),
        Area::new("tests/fixtures", 1),
    ];
    let mut taken = std::collections::HashSet::new();
    let mut out: Vec<Planned> = Vec::with_capacity(spec.files);
    let n_root = ROOT_FILES
        .len()
        .min((spec.files / 20).max(1))
        .min(spec.files);
    for name in &ROOT_FILES[..n_root] {
        taken.insert(name.to_string());
        out.push(Planned {
            path: name.to_string(),
            kind: Kind::of(name),
            size: 0,
            seed: 0,
        });
    }
    while out.len() < spec.files {
        let kind = rng.weighted(KINDS).unwrap_or(Kind::Rust);
        // (area index, weight)
        let choices: &[(usize, u64)] = match kind {
            Kind::Rust => &[(0, 70), (1, 14), (2, 10), (3, 6)],
            Kind::Markdown => &[(4, 75), (0, 15), (2, 10)],
            Kind::Toml => &[(5, 60), (2, 40)],
            Kind::Json => &[(5, 30), (9, 40), (10, 30)],
            Kind::Python => &[(7, 50), (8, 50)],
            Kind::TypeScript => &[(9, 100)],
            Kind::Yaml => &[(5, 50), (6, 50)],
            Kind::Text => &[(4, 40), (10, 60)],
        };
        let area = rng.weighted(choices).unwrap_or(0);
        let dir = areas[area].folder(&mut rng);
        let stem = file_stem(kind, &dir, &mut rng);
        let mut path = format!("{dir}/{stem}.{}", kind.ext());
        let mut n = 2;
        while taken.contains(&path) {
            path = format!("{dir}/{stem}_{n}.{}", kind.ext());
            n += 1;
        }
        taken.insert(path.clone());
        out.push(Planned {
            path,
            kind,
            size: 0,
            seed: 0,
        });
    }
    // Sizes: log-normal weights (σ 1.35), scaled so that the clamped sizes add up to the total.
    let mut w = Vec::with_capacity(out.len());
    let mut caps = Vec::with_capacity(out.len());
    for (i, p) in out.iter_mut().enumerate() {
        p.seed = mix(spec.seed, i as u64 + 1);
        w.push((1.35 * rng.normal()).exp() * p.kind.size_weight());
        // Each file's own ceiling, so that the tail is not a wall of identical sizes.
        caps.push((BASE_CAP as f64 * (0.7 + 0.3 * rng.unit())) as u64);
    }
    let size_at = |k: f64, i: usize| ((k * w[i]).round() as u64).clamp(MIN_FILE, caps[i]);
    let sum_at = |k: f64| (0..w.len()).map(|i| size_at(k, i)).sum::<u64>();
    let target = spec.total_bytes;
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while sum_at(hi) < target && hi < 1e15 {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if sum_at(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut sizes: Vec<u64> = (0..w.len()).map(|i| size_at(hi, i)).collect();
    // Settle the last bytes of difference on files that are not at a bound.
    let mut diff = target as i128 - sizes.iter().sum::<u64>() as i128;
    let mut i = 0;
    let mut idle = 0;
    while diff != 0 && !sizes.is_empty() && idle < sizes.len() {
        let s = &mut sizes[i % w.len()];
        if diff > 0 && *s < caps[i % w.len()] {
            *s += 1;
            diff -= 1;
            idle = 0;
        } else if diff < 0 && *s > MIN_FILE {
            *s -= 1;
            diff += 1;
            idle = 0;
        } else {
            idle += 1;
        }
        i += 1;
    }
    for (p, s) in out.iter_mut().zip(sizes) {
        p.size = s;
    }
    out
}

fn file_stem(kind: Kind, dir: &str, rng: &mut Rng) -> String {
    let w1 = *rng.pick(WORDS);
    let w2 = *rng.pick(WORDS);
    match kind {
        Kind::Rust if dir.starts_with("src/") && rng.chance(0.08) => "mod".into(),
        Kind::Rust if rng.chance(0.5) => w1.into(),
        Kind::Rust => format!("{w1}_{w2}"),
        Kind::Markdown if dir.starts_with("docs") => format!("{w1}-{w2}"),
        Kind::Markdown => (*rng.pick(&["README", "NOTES", "DESIGN"])).into(),
        Kind::TypeScript if rng.chance(0.1) => "index".into(),
        Kind::TypeScript => format!("{w1}{}", camel(w2)),
        Kind::Python | Kind::Text => format!("{w1}_{w2}"),
        Kind::Json | Kind::Toml | Kind::Yaml if rng.chance(0.6) => w1.into(),
        Kind::Json | Kind::Toml | Kind::Yaml => format!("{w1}_{w2}"),
    }
}

// ------------------------------------------------------------------------------------------
// extras: .gitignore, ignored files, binary files

struct Extras {
    ignored: Vec<String>,
    binary: Vec<String>,
}

fn write_extras(root: &Path, spec: &Spec, plan: &[Planned]) -> io::Result<Extras> {
    std::fs::write(
        root.join(".gitignore"),
        "# Build output and logs (generated by project_gen)\nbuild/\n*.log\n",
    )?;
    let mut rng = Rng::new(mix(spec.seed, 0xE7_7A5));
    let mut ignored = vec![
        "build/output.txt".to_owned(),
        "build/app.js".to_owned(),
        "build/gen/bindings.rs".to_owned(),
        "build/gen/schema.json".to_owned(),
        "build/cache/index.md".to_owned(),
        "x.log".to_owned(),
    ];
    // `x.log` in a few folders that hold text files, so `*.log` must match at any depth.
    let dirs = folders(plan);
    for _ in 0..3.min(dirs.len()) {
        let d = *rng.pick(&dirs);
        let p = format!("{d}/x.log");
        if !ignored.contains(&p) {
            ignored.push(p);
        }
    }
    for rel in &ignored {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let size = rng.between(300, 6000);
        let text = if rel.ends_with(".log") {
            let mut s = String::new();
            let mut t = 0u64;
            while s.len() < size {
                t += rng.below(5000);
                let _ = writeln!(
                    s,
                    "2024-05-{:02}T{:02}:{:02}:{:02}.{:03}Z {} {}: {}",
                    1 + t / 86_400_000 % 28,
                    t / 3_600_000 % 24,
                    t / 60_000 % 60,
                    t / 1000 % 60,
                    t % 1000,
                    rng.pick(&["INFO", "DEBUG", "WARN", "ERROR"]),
                    rng.pick(WORDS),
                    sentence(&mut rng, 4, 10)
                );
            }
            s
        } else {
            render(Kind::of(rel), &mut rng, size)
        };
        std::fs::write(path, text)?;
    }
    let binary = vec![
        "assets/logo.png".to_owned(),
        "assets/icons/favicon.ico".to_owned(),
        "docs/images/architecture.png".to_owned(),
        "tests/fixtures/sample.bin".to_owned(),
    ];
    for rel in &binary {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let len = rng.between(2_000, 40_000);
        let mut bytes = Vec::with_capacity(len);
        if rel.ends_with(".png") {
            bytes.extend_from_slice(
                b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\x01\0\0\0\x01\0\x08\x06\0\0\0",
            );
        } else {
            bytes.extend_from_slice(&[0, 0, 1, 0, 1, 0, 16, 16, 0, 0]);
        }
        while bytes.len() < len {
            // Mostly noise, with runs of zeros as in real images.
            if rng.chance(0.05) {
                bytes.extend(std::iter::repeat_n(0u8, rng.between(4, 64)));
            } else {
                bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
            }
        }
        bytes.truncate(len);
        std::fs::write(path, bytes)?;
    }
    ignored.sort();
    let mut binary = binary;
    binary.sort();
    Ok(Extras { ignored, binary })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Every file under `root` (relative path, bytes), sorted by path.
    fn walk(root: &Path) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![PathBuf::from(root)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                if e.file_type().unwrap().is_dir() {
                    stack.push(p);
                } else {
                    let rel = p
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/");
                    out.push((rel, std::fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    fn fnv(h: &mut u64, bytes: &[u8]) {
        for b in bytes {
            *h ^= *b as u64;
            *h = h.wrapping_mul(0x100_0000_01B3);
        }
    }

    fn tree_hash(root: &Path) -> u64 {
        let mut h = 0xCBF2_9CE4_8422_2325u64;
        for (p, b) in walk(root) {
            fnv(&mut h, p.as_bytes());
            fnv(&mut h, &(b.len() as u64).to_le_bytes());
            fnv(&mut h, &b);
        }
        h
    }

    fn spec(seed: u64, files: usize, total: u64) -> Spec {
        Spec {
            seed,
            files,
            total_bytes: total,
            size_factor: 1,
        }
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let s = spec(7, 300, 2_000_000);
        let ra = generate(a.path(), &s).unwrap();
        let rb = generate(b.path(), &s).unwrap();
        assert_eq!(ra, rb);
        assert_eq!(tree_hash(a.path()), tree_hash(b.path()));
        generate(c.path(), &Spec { seed: 8, ..s }).unwrap();
        assert_ne!(tree_hash(a.path()), tree_hash(c.path()));
    }

    #[test]
    fn counts_sizes_and_kinds_follow_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(42, 1000, 10_000_000);
        let r = generate(dir.path(), &s).unwrap();
        assert_eq!(r.files, 1000);
        assert_eq!(r.paths.len(), 1000);
        assert!(r.paths.windows(2).all(|w| w[0] < w[1]), "sorted, unique");
        let off = (r.text_bytes as f64 - 10_000_000.0).abs() / 10_000_000.0;
        assert!(off < 0.01, "total {} is {off} off", r.text_bytes);
        let mut sizes = Vec::new();
        let mut contents = std::collections::HashSet::new();
        for p in &r.paths {
            let b = std::fs::read(dir.path().join(p)).unwrap();
            assert!(!b.contains(&0), "{p} has a NUL");
            let text = String::from_utf8(b).expect("UTF-8");
            assert!(text.ends_with('\n'), "{p} ends with a newline");
            assert!(contents.insert(text.clone()), "{p} duplicates another file");
            sizes.push(text.len() as u64);
        }
        assert_eq!(sizes.iter().sum::<u64>(), r.text_bytes);
        assert_eq!(sizes.iter().copied().max(), Some(r.largest_file));
        sizes.sort();
        assert!(*sizes.last().unwrap() <= BASE_CAP);
        assert!(*sizes.last().unwrap() > 100_000, "a long tail");
        let median = sizes[sizes.len() / 2];
        let mean = r.text_bytes / 1000;
        assert!(median < mean, "skewed: median {median} mean {mean}");
        assert!(
            sizes.iter().filter(|&&s| s < 1024).count() > 50,
            "many small files"
        );
        let count = |ext: &str| r.paths.iter().filter(|p| p.ends_with(ext)).count();
        let rs = count(".rs");
        for ext in [".md", ".toml", ".json", ".py", ".ts", ".yaml", ".txt"] {
            assert!(count(ext) > 0, "some {ext}");
            assert!(count(ext) < rs, ".rs outnumbers {ext}");
        }
        assert!(
            r.paths.iter().any(|p| p.matches('/').count() >= 3),
            "nested"
        );
        for top in ["src/", "docs/", "tests/", "examples/"] {
            assert!(r.paths.iter().any(|p| p.starts_with(top)), "{top}");
        }
        assert!(
            r.paths.iter().any(|p| !p.contains('/')),
            "config at the root"
        );
        for p in &r.paths {
            let dirs: Vec<&str> = p.split('/').collect();
            let dirs = &dirs[..dirs.len() - 1];
            assert!(
                !dirs
                    .iter()
                    .any(|d| RESERVED_DIRS.contains(d) || d.starts_with('.')),
                "{p} is in a folder importers skip"
            );
            assert!(!p.ends_with(".log"), "{p}");
        }
        // JSON stays valid JSON after exact sizing.
        for p in r.paths.iter().filter(|p| p.ends_with(".json")).take(20) {
            let t = std::fs::read_to_string(dir.path().join(p)).unwrap();
            if t.len() > 64 {
                serde_json::from_str::<serde_json::Value>(&t)
                    .unwrap_or_else(|e| panic!("{p}: {e}\n{t}"));
            }
        }
    }

    #[test]
    fn size_factor_multiplies_every_file() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let s = spec(3, 200, 3_000_000);
        let small = generate(a.path(), &s).unwrap();
        let big = generate(
            b.path(),
            &Spec {
                size_factor: 10,
                ..s
            },
        )
        .unwrap();
        assert_eq!(small.paths, big.paths);
        assert_eq!(big.text_bytes, 10 * small.text_bytes);
        assert!(big.largest_file <= 10 * BASE_CAP);
        for p in &small.paths {
            let x = std::fs::metadata(a.path().join(p)).unwrap().len();
            let y = std::fs::metadata(b.path().join(p)).unwrap().len();
            assert_eq!(y, 10 * x, "{p}");
        }
    }

    #[test]
    fn gitignore_ignored_and_binary_files_exist_apart() {
        let dir = tempfile::tempdir().unwrap();
        let r = generate(dir.path(), &spec(1, 100, 500_000)).unwrap();
        let gi = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
        assert!(gi.lines().any(|l| l == "build/") && gi.lines().any(|l| l == "*.log"));
        assert_eq!(r.ignored_files, r.ignored_paths.len());
        assert_eq!(r.binary_files, r.binary_paths.len());
        assert!(
            r.ignored_paths
                .iter()
                .filter(|p| p.starts_with("build/"))
                .count()
                >= 3
        );
        assert!(
            r.ignored_paths
                .iter()
                .filter(|p| p.ends_with(".log"))
                .count()
                >= 2
        );
        assert!(r
            .ignored_paths
            .iter()
            .any(|p| p.ends_with(".log") && p.contains('/')));
        assert!(r.binary_paths.contains(&"assets/logo.png".to_owned()));
        for p in &r.ignored_paths {
            assert!(!r.paths.contains(p));
            let t = std::fs::read_to_string(dir.path().join(p)).unwrap();
            assert!(!t.is_empty() && !t.contains('\0'));
        }
        for p in &r.binary_paths {
            assert!(!r.paths.contains(p));
            let b = std::fs::read(dir.path().join(p)).unwrap();
            assert!(b[..b.len().min(1024)].contains(&0), "{p} has a NUL early");
        }
        let all = walk(dir.path());
        assert_eq!(
            all.len(),
            r.files + r.ignored_files + r.binary_files + r.meta_paths.len()
        );
        let text: u64 = all
            .iter()
            .filter(|(p, _)| r.paths.contains(p))
            .map(|(_, b)| b.len() as u64)
            .sum();
        assert_eq!(text, r.text_bytes);
    }

    #[test]
    fn modify_rewrites_a_deterministic_subset() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let s = spec(5, 400, 2_000_000);
        let r = generate(a.path(), &s).unwrap();
        generate(b.path(), &s).unwrap();
        let before = walk(a.path());
        let ca = modify(a.path(), &r, 0.01, 9).unwrap();
        let cb = modify(b.path(), &r, Amount::Count(4), 9).unwrap();
        assert_eq!(ca.len(), 4);
        assert_eq!(ca, cb);
        assert_eq!(tree_hash(a.path()), tree_hash(b.path()));
        let after = walk(a.path());
        for ((p, x), (q, y)) in before.iter().zip(&after) {
            assert_eq!(p, q);
            if ca.contains(p) {
                assert_ne!(x.len(), y.len(), "{p} changes length");
                assert!(!y.contains(&0));
            } else {
                assert_eq!(x, y, "{p} untouched");
            }
        }
        for p in ca.iter().filter(|p| p.ends_with(".json")) {
            let t = std::fs::read_to_string(a.path().join(p)).unwrap();
            serde_json::from_str::<serde_json::Value>(&t).unwrap();
        }
        let other = modify(a.path(), &r, 4usize, 10).unwrap();
        assert_ne!(other, ca, "another seed, another subset");
        assert_eq!(modify(a.path(), &r, 0.0, 1).unwrap().len(), 0);
    }
}
