//! `docs/ARCHITECTURE.md` stays a map a newcomer reads in ten minutes, and stays true to the tree:
//! at most 400 lines, every path it names exists, every decision record is in the index.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 400;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The spans between backticks on one line.
fn backticked(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// The targets of Markdown links `[text](target)` on one line, without `#anchors`.
fn links(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &line[i + 2..];
            let end = rest.find(')')?;
            let target = rest[..end].split('#').next()?;
            (!target.is_empty() && !target.contains("://")).then_some(target)
        })
        .collect()
}

/// A backticked span that names a file or folder of the repository: no spaces or
/// placeholders, and a `/` or a source file's extension. Paths inside a `.elf` are written
/// `<elf>/…` and a user's paths start with `.` or `~`, so neither is taken for one.
fn is_path(span: &str) -> bool {
    const EXT: &[&str] = &[".rs", ".md", ".py", ".toml", ".ts", ".html", ".sh"];
    let plain = !span.is_empty()
        && !span.starts_with(['.', '/', '~', '-'])
        && !span.contains(|c: char| c.is_whitespace() || "<>*…$:()\"'=|#&".contains(c));
    plain && (span.contains('/') || EXT.iter().any(|e| span.ends_with(e)))
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one brace group).
fn expand(span: &str) -> Vec<String> {
    match (span.find('{'), span.find('}')) {
        (Some(open), Some(close)) if open < close => span[open + 1..close]
            .split(',')
            .map(|part| format!("{}{}{}", &span[..open], part.trim(), &span[close + 1..]))
            .collect(),
        _ => vec![span.to_owned()],
    }
}

fn exists_under(bases: &[String], path: &str) -> bool {
    bases.iter().any(|b| root().join(b).join(path).exists())
}

#[test]
fn the_architecture_document_fits_in_ten_minutes() {
    let doc = read("docs/ARCHITECTURE.md");
    let lines = doc.lines().count();
    assert!(
        lines <= MAX_LINES,
        "docs/ARCHITECTURE.md has {lines} lines (at most {MAX_LINES}): move history into \
         docs/decisions/ and keep the map short"
    );
    assert!(
        doc.contains("(decisions/README.md)"),
        "docs/ARCHITECTURE.md must link the decision index"
    );
}

/// A path is found at the repository's root, under `docs/`, under the folder (and its `src/`)
/// the current `###` heading names, or under a folder named earlier in the same paragraph
/// (`adapters/src/checkpoint/` (`scan.rs`, `watch.rs`)).
#[test]
fn every_path_the_architecture_document_names_exists() {
    let doc = read("docs/ARCHITECTURE.md");
    let mut missing = Vec::new();
    let mut checked = 0;
    let mut heading_dirs: Vec<String> = Vec::new();
    let mut paragraph_dirs: Vec<String> = Vec::new();
    let mut fenced = false;
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.trim().is_empty() {
            paragraph_dirs.clear();
            continue;
        }
        if line.starts_with('#') {
            paragraph_dirs.clear();
            heading_dirs = backticked(line)
                .into_iter()
                .filter(|s| s.ends_with('/'))
                .flat_map(|d| [d.to_owned(), format!("{d}src/")])
                .collect();
            continue;
        }
        for target in links(line) {
            checked += 1;
            if !root().join("docs").join(target).exists() {
                missing.push(format!("line {}: link ({target})", n + 1));
            }
        }
        for span in backticked(line).into_iter().filter(|s| is_path(s)) {
            for path in expand(span) {
                checked += 1;
                let mut bases = vec![String::new(), "docs/".to_owned()];
                bases.extend(heading_dirs.iter().cloned());
                bases.extend(paragraph_dirs.iter().cloned());
                if !exists_under(&bases, &path) {
                    missing.push(format!("line {}: `{path}`", n + 1));
                }
                if path.ends_with('/') {
                    let here = bases
                        .iter()
                        .find(|b| root().join(b).join(&path).is_dir())
                        .cloned()
                        .unwrap_or_default();
                    paragraph_dirs.push(format!("{here}{path}"));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found: is the parser still right?"
    );
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist (renamed or moved? fix the map):\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_decision_record_is_in_the_index_and_every_link_resolves() {
    let dir = root().join("docs/decisions");
    let index = read("docs/decisions/README.md");
    let listed: BTreeSet<String> = index.lines().flat_map(links).map(str::to_owned).collect();
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name == "README.md" {
            continue;
        }
        let numbered = name.len() > 5
            && name[..4].bytes().all(|b| b.is_ascii_digit())
            && &name[4..5] == "-"
            && name.ends_with(".md");
        assert!(
            numbered,
            "docs/decisions/{name}: name decision records NNNN-short-title.md"
        );
        assert!(
            listed.contains(&name),
            "docs/decisions/{name} is not listed in docs/decisions/README.md: add its row"
        );
        files.insert(name);
    }
    let numbers: BTreeSet<&str> = files.iter().map(|f| &f[..4]).collect();
    assert_eq!(
        numbers.len(),
        files.len(),
        "two decision records share a number"
    );
    for name in files.iter().map(String::as_str).chain(["README.md"]) {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        for target in text.lines().flat_map(links) {
            assert!(
                Path::new(&dir).join(target).exists(),
                "docs/decisions/{name} links to {target}, which does not exist"
            );
        }
    }
}

/// Lines joined by single spaces, comment markers dropped, so a phrase wrapped over lines (in a
/// doc comment or a Markdown paragraph) reads as one.
fn flatten(text: &str) -> String {
    text.lines()
        .map(|l| {
            let l = l.trim_start();
            ["//!", "///", "//"]
                .iter()
                .find_map(|m| l.strip_prefix(m))
                .unwrap_or(l)
                .trim()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The phrases other files quote from this document: `ARCHITECTURE.md, "Actor tree"`,
/// `ARCHITECTURE "Invariants"`.
fn quoted_sections(text: &str) -> Vec<String> {
    let flat = flatten(text);
    let mut out = Vec::new();
    for (i, _) in flat.match_indices("ARCHITECTURE") {
        let rest = &flat[i + "ARCHITECTURE".len()..];
        let rest = rest.strip_prefix(".md").unwrap_or(rest);
        let rest = rest.strip_prefix(',').unwrap_or(rest);
        if let Some(quoted) = rest.strip_prefix(" \"") {
            if let Some(end) = quoted.find('"') {
                out.push(quoted[..end].to_owned());
            }
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            sources(&path, out);
        } else if [".rs", ".md", ".py", ".sh", ".toml"]
            .iter()
            .any(|e| name.ends_with(e))
        {
            out.push(path);
        }
    }
}

/// Code comments and other documents that send a reader to a part of this one
/// (`docs/ARCHITECTURE.md, "Hand-over between processes"`) find it there; a part that moved to
/// a decision record is pointed to by its file instead.
#[test]
fn every_section_other_files_quote_is_in_the_architecture_document() {
    let doc = flatten(&read("docs/ARCHITECTURE.md"));
    let mut files = Vec::new();
    sources(&root(), &mut files);
    let mut dangling = Vec::new();
    let mut found = 0;
    for file in files
        .iter()
        .filter(|f| !f.ends_with("tests/architecture_doc.rs"))
    {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for section in quoted_sections(&text) {
            found += 1;
            if !doc.contains(&section) {
                let rel = file.strip_prefix(root()).unwrap_or(file);
                dangling.push(format!("{}: \"{section}\"", rel.display()));
            }
        }
    }
    assert!(
        found >= 5,
        "only {found} quoted sections found: is the reader still right?"
    );
    assert!(
        dangling.is_empty(),
        "these point to parts of docs/ARCHITECTURE.md that are not there (moved to \
         docs/decisions/? point to the record):\n{}",
        dangling.join("\n")
    );
}

#[test]
fn the_path_reader_finds_paths_and_only_paths() {
    assert!(is_path("engine/src/log.rs"));
    assert!(is_path("adapters/src/checkpoint/"));
    assert!(is_path("scan.rs"));
    assert!(!is_path("<elf>/owner.sock"));
    assert!(!is_path(".mcp.json"));
    assert!(!is_path("Owned::submit"));
    assert!(!is_path("agent.enable"));
    assert_eq!(
        expand("sync/src/{merge,replica}.rs"),
        ["sync/src/merge.rs", "sync/src/replica.rs"]
    );
    assert_eq!(
        links("see [x](decisions/README.md#a) and [y](https://e.org)"),
        ["decisions/README.md"]
    );
    assert_eq!(
        quoted_sections("a (docs/ARCHITECTURE.md, \"Actor\n//! tree\") b ARCHITECTURE \"X\" c"),
        ["Actor tree", "X"]
    );
    assert!(quoted_sections("read(\"docs/ARCHITECTURE.md\")").is_empty());
}
