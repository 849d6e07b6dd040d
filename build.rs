//! Names the commit the `elfiee` binary is built from, for `elfiee --version`
//! (`ELFIEE_BUILD_COMMIT` in the crate's environment; see `src/cli/mod.rs`).
//!
//! Where the commit comes from, first that answers:
//! 1. `ELFIEE_BUILD_COMMIT` in the build's environment (a packager that builds from a tarball);
//! 2. `.cargo_vcs_info.json`, which `cargo package` writes into a published crate (so
//!    `cargo install elfiee` names the commit the crate was packaged from);
//! 3. `git rev-parse --short=12 HEAD`, when this crate's folder is the top of a git checkout;
//! 4. `unknown`.
//!
//! Only the `cli` feature needs it: an embedder's build of the library runs no git.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ELFIEE_BUILD_COMMIT");
    if std::env::var_os("CARGO_FEATURE_CLI").is_none() {
        return;
    }
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let commit = from_env()
        .or_else(|| from_vcs_info(&dir))
        .or_else(|| from_git(&dir))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=ELFIEE_BUILD_COMMIT={commit}");
}

fn from_env() -> Option<String> {
    let commit = std::env::var("ELFIEE_BUILD_COMMIT").ok()?;
    let commit = commit.trim();
    (!commit.is_empty()).then(|| commit.to_owned())
}

/// `{"git": {"sha1": "…"}, "path_in_vcs": ""}`, written by `cargo package`; read without a
/// JSON parser (a build dependency for one field is not worth its build time).
fn from_vcs_info(dir: &Path) -> Option<String> {
    let path = dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&path).ok()?;
    println!("cargo:rerun-if-changed={}", path.display());
    let after = &text[text.find("\"sha1\"")? + "\"sha1\"".len()..];
    let start = after.find('"')? + 1;
    let sha: String = after[start..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    (sha.len() >= 12).then(|| sha[..12].to_owned())
}

/// The checkout's HEAD, and the files that move when it does: `HEAD` itself (a checkout of
/// another branch), the ref it points to (a commit) and `packed-refs` (where `git gc` moves
/// refs). Only when this folder is the checkout's top: a crate unpacked inside some other
/// repository (cargo's own `target/package/` during `cargo package`) has no commit of its own.
fn from_git(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    // Only if present: a missing file reruns this script on every build, and a folder is
    // scanned whole (the git folder holds every object).
    let packed = dir.join(git(&["rev-parse", "--git-path", "packed-refs"])?);
    if packed.exists() {
        watched.push(packed.display().to_string());
    }
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let loose = dir.join(git(&["rev-parse", "--git-path", &reference])?);
        // A ref kept only in `packed-refs` comes back as a loose file with the next commit:
        // watch the folder it will appear in (`refs/heads`, small).
        match (loose.exists(), loose.parent()) {
            (true, _) => watched.push(loose.display().to_string()),
            (false, Some(folder)) if folder.exists() => watched.push(folder.display().to_string()),
            _ => {}
        }
    }
    for path in watched {
        println!("cargo:rerun-if-changed={}", dir.join(path).display());
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
