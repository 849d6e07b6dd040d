//! What an installed `elfiee` says about itself: `--version` names the version and the commit
//! it was built from (build.rs), and `elfiee man` is a man page of every command, generated
//! from the same definition as `--help`.

use std::path::Path;
use std::process::Command;

mod common;

fn elfiee() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfiee"));
    cmd.env_remove("ELFIEE_ELF");
    cmd
}

/// The subcommands `elfiee ARGS --help` lists, `help` left out.
fn subcommands(args: &[&str]) -> Vec<String> {
    let out = common::output_ok(elfiee().args(args).arg("--help"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect()
}

/// roff writes `-` as `\-`; the names as a reader sees them.
fn unescape(roff: &str) -> String {
    roff.replace("\\-", "-")
}

#[test]
fn version_names_the_version_and_the_commit_of_the_checkout() {
    let out = common::output_ok(elfiee().arg("--version"));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.starts_with(&format!("elfiee {version} (commit ")),
        "{text}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    let head = match head {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        _ => {
            eprintln!(
                "skipped the commit check: {} is not a git checkout (or git is missing); \
                 the version said {text:?}",
                env!("CARGO_MANIFEST_DIR")
            );
            return;
        }
    };
    assert_eq!(head.len(), 12, "{head}");
    assert_eq!(
        text,
        format!("elfiee {version} (commit {head})"),
        "the binary was built from another commit than the checkout's HEAD (build.rs reruns \
         when .git/HEAD or its ref moves)"
    );
}

#[test]
fn man_page_names_every_subcommand() {
    let out = common::output_ok(elfiee().arg("man"));
    let page = unescape(&String::from_utf8_lossy(&out.stdout));
    assert!(
        page.contains(".TH elfiee 1"),
        "{}",
        &page[..page.len().min(300)]
    );
    let top = subcommands(&[]);
    assert!(top.len() >= 10, "{top:?}");
    for cmd in &top {
        assert!(
            page.contains(&format!("elfiee-{cmd}(1)")),
            "the man page does not name `elfiee {cmd}`"
        );
    }
    // Not a document command: works with a bad ELFIEE_ELF too.
    common::output_ok(elfiee().arg("man").env("ELFIEE_ELF", "/nonexistent/x.elf"));
}

#[test]
fn man_dir_writes_a_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::output_ok(elfiee().args(["--json", "man", "--dir"]).arg(dir.path()));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pages = report["pages"].as_array().unwrap();
    let page = |name: &str| -> String {
        let path = dir.path().join(format!("{name}.1"));
        assert!(
            pages
                .iter()
                .any(|p| p.as_str() == Some(&path.display().to_string())),
            "{name}.1 is not in the report: {pages:?}"
        );
        unescape(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}.1: {e}")))
    };
    assert!(page("elfiee").contains(".TH elfiee 1"));
    let mut expected = 1;
    for cmd in subcommands(&[]) {
        let nested = subcommands(&[&cmd]);
        let own = page(&format!("elfiee-{cmd}"));
        assert!(
            own.contains(&format!(".TH elfiee-{cmd} 1")),
            "elfiee-{cmd}.1"
        );
        expected += 1 + nested.len();
        for sub in nested {
            assert!(
                own.contains(&format!("elfiee-{cmd}-{sub}(1)")),
                "elfiee-{cmd}.1 does not name `elfiee {cmd} {sub}`"
            );
            let nested_page = page(&format!("elfiee-{cmd}-{sub}"));
            assert!(nested_page.contains(&format!(".TH elfiee-{cmd}-{sub} 1")));
        }
    }
    assert_eq!(pages.len(), expected, "{pages:?}");
}

#[test]
fn man_dir_that_is_not_a_folder_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-folder");
    let out = elfiee()
        .args(["man", "--dir"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a folder"), "{err}");
    assert!(!Path::new(&missing).exists());
}
