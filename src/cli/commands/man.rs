//! `elfiee man`: the man page, generated from the same clap definition as `--help` and the
//! completions, so it cannot drift from the command line.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde_json::json;

use crate::cli::output::{CliError, Out};

/// Without `dir`, prints the top page (`elfiee(1)`: every option and subcommand); with it,
/// writes one page per command into `dir` (`elfiee.1`, `elfiee-block.1`,
/// `elfiee-block-create.1`, …, as `man -l` or a `man1/` folder wants them) and says which.
pub(super) fn man_pages(dir: Option<&Path>, out: &Out) -> Result<(), CliError> {
    let name = crate::cli::program_name();
    let mut cmd = crate::cli::Cli::command()
        .name(name.clone())
        .bin_name(name)
        .disable_help_subcommand(true);
    cmd.build();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .map_err(|e| CliError::failed("io", format!("cannot render the man page: {e}")))?;
        out.print_text(String::from_utf8_lossy(&page).trim_end());
        return Ok(());
    };
    if !dir.is_dir() {
        return Err(CliError::usage(format!(
            "--dir {} is not a folder; create it first (e.g. mkdir -p {0})",
            dir.display()
        )));
    }
    let mut written = Vec::new();
    write_pages(cmd, dir, &mut written).map_err(|e| {
        CliError::failed(
            "io",
            format!("cannot write man pages into {}: {e}", dir.display()),
        )
    })?;
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    out.print(
        &json!({"dir": dir.display().to_string(), "pages": names}),
        || names.join("\n"),
    );
    Ok(())
}

/// A page for `cmd` and, depth first, for each of its visible subcommands.
fn write_pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    written.push(clap_mangen::Man::new(cmd.clone()).generate_to(dir)?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, written)?;
    }
    Ok(())
}
