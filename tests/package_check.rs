//! Every crate packages as `cargo publish` would and builds from its packaged sources alone,
//! examples/embedder against the packaged `elfiee` (scripts/package-check; issue 38).
//!
//! The check compiles every crate again from its `.crate` file, with its own target folder (a
//! cargo inside this test cannot share the one the test runner holds): 10 to 30 minutes on a
//! shared 2-core machine (docs/PERFORMANCE.md, "The shipped binary"). So it is ignored unless
//! asked for: `cargo test --test package_check -- --ignored`, or run `scripts/package-check`.

use std::process::Command;

#[test]
#[ignore = "builds every crate again from its package (10-30 min): cargo test --test package_check -- --ignored, or scripts/package-check"]
fn every_crate_packages_and_builds_from_its_packaged_sources() {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("package-check");
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/package-check"
    ))
    .env("CARGO_TARGET_DIR", &target)
    .output()
    .expect("run scripts/package-check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(60).collect();
    assert!(
        out.status.success(),
        "scripts/package-check failed:\n{stdout}\n…\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    assert!(
        stdout.contains("every crate packaged and built from its packaged sources"),
        "{stdout}"
    );
    // The embedder was verified from its packaged manifest, which names `elfiee` by version.
    let manifest =
        std::fs::read_to_string(target.join("package/elfiee-embedder-0.1.0/Cargo.toml")).unwrap();
    assert!(manifest.contains("[dependencies.elfiee]"), "{manifest}");
    assert!(!manifest.contains("path ="), "{manifest}");
}
