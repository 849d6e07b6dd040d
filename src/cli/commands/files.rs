//! `elfiee dir …` and `elfiee terminal …`: folders in and out of the document, commands in
//! terminals, and the progress bars of long imports.

use elfiee_adapters::import::{ImportLimits, SyncProgress, MAX_FILE_BYTES_LIMIT};
use elfiee_adapters::service;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::cli::output::Out;
use crate::cli::session::{read_text, Session};
use crate::cli::{CliError, DirCmd, TerminalCmd, TextSource};

pub(super) async fn dir(s: &Session, cmd: &DirCmd, out: &Out) -> Result<(), CliError> {
    match cmd {
        DirCmd::Import {
            path,
            name,
            max_file_bytes,
        } => {
            let limits = import_limits(*max_file_bytes)?;
            let bar = sync_bar("import");
            let report = service::import_directory(
                &s.file,
                &s.editor,
                path,
                name.as_deref(),
                &limits,
                |p| show_sync_progress(&bar, p),
            )
            .await?;
            bar.finish_and_clear();
            let v = serde_json::to_value(&report).unwrap_or_default();
            out.print(&v, || {
                let mut t = format!(
                    "{} {} files from {} as {} ({} bytes of text, {} commands)",
                    if report.resumed {
                        "resumed: holds"
                    } else {
                        "imported"
                    },
                    report.files,
                    report.root,
                    report.block_id,
                    report.sync.bytes,
                    report.sync.chunks,
                );
                for sk in &report.skipped {
                    t.push_str(&format!("\nskipped {}: {}", sk.path, sk.reason));
                }
                t
            });
        }
        DirCmd::Sync { id, max_file_bytes } => {
            let id = s.block_id(id)?;
            let limits = import_limits(*max_file_bytes)?;
            let bar = sync_bar("sync");
            let r = service::sync_directory(&s.file, &s.editor, &id, &limits, |p| {
                show_sync_progress(&bar, p)
            })
            .await?;
            bar.finish_and_clear();
            let v = serde_json::to_value(&r).unwrap_or_default();
            out.print(&v, || {
                format!(
                    "{}: {} changed, {} added, {} deleted, {} unchanged",
                    r.root, r.changed, r.added, r.deleted, r.unchanged
                )
            });
        }
        DirCmd::Export {
            id,
            dry_run: true,
            force,
        } => {
            let id = s.block_id(id)?;
            let plan = elfiee_adapters::export::plan_export(&s.file, &id, *force)?;
            let v = serde_json::to_value(&plan).unwrap_or_default();
            out.print(&v, || {
                let mut t = format!(
                    "would write {} and remove {} files under {} ({} unchanged); nothing written",
                    plan.write.len(),
                    plan.remove.len(),
                    plan.root.display(),
                    plan.unchanged
                );
                push_lines(&mut t, "write  ", &plan.write);
                push_lines(&mut t, "remove ", &plan.remove);
                for r in &plan.refused {
                    t.push_str(&format!("\nrefuse {}: {}", r.path, r.reason));
                }
                t
            });
        }
        DirCmd::Status { id } => {
            let id = s.block_id(id)?;
            let st = s.file.with_state(|st| {
                st.block(&id)
                    .filter(|b| b.block_type == "directory")
                    .map(|dir| crate::capabilities::builtin::directory_status(st, dir))
            });
            let st = st.ok_or_else(|| {
                CliError::failed(
                    "not_a_directory",
                    format!("'{id}' is not a directory block"),
                )
            })?;
            let v = serde_json::to_value(&st).unwrap_or_default();
            out.print(&v, || {
                if !st.is_dirty() {
                    return format!("nothing to export ({} files as on disk)", st.clean);
                }
                let mut t = format!(
                    "{} new, {} modified, {} removed, {} as on disk; `elfiee dir export` writes them",
                    st.new.len(),
                    st.modified.len(),
                    st.removed.len(),
                    st.clean
                );
                push_lines(&mut t, "new       ", &st.new);
                push_lines(&mut t, "modified  ", &st.modified);
                push_lines(&mut t, "removed   ", &st.removed);
                t
            });
        }
        DirCmd::Add {
            id,
            path,
            text,
            file,
            block,
        } => {
            let id = s.block_id(id)?;
            let mut payload = json!({ "path": path });
            if let Some(b) = block {
                payload["block_id"] = json!(s.block_id(b)?);
            } else if text.is_some() || file.is_some() {
                payload["content"] = json!(read_text(&TextSource {
                    text: text.clone(),
                    file: file.clone(),
                })?);
            }
            let ev = s.submit("directory.add", Some(&id), payload).await?;
            let block_id = ev
                .iter()
                .find(|e| e.cap_id() == "directory.add")
                .and_then(|e| e.value.get("block_id").cloned())
                .unwrap_or_default();
            out.print(
                &json!({"directory": id, "path": path, "block_id": block_id}),
                || {
                    format!(
                        "added {path} (block {}) to {id}",
                        block_id.as_str().unwrap_or("")
                    )
                },
            );
        }
        DirCmd::Mv { id, from, to } => {
            let id = s.block_id(id)?;
            s.submit("directory.move", Some(&id), json!({"from": from, "to": to}))
                .await?;
            out.print(&json!({"directory": id, "from": from, "to": to}), || {
                format!("moved {from} to {to} in {id}")
            });
        }
        DirCmd::Rm {
            id,
            path,
            keep_block,
        } => {
            let id = s.block_id(id)?;
            s.submit(
                "directory.remove",
                Some(&id),
                json!({"path": path, "keep_block": keep_block}),
            )
            .await?;
            out.print(&json!({"directory": id, "removed": path}), || {
                format!("removed {path} from {id}")
            });
        }
        DirCmd::Export { id, force, .. } => {
            let id = s.block_id(id)?;
            let v = service::export_directory_with(&s.file, &s.editor, &id, *force).await?;
            out.print(&v, || {
                let written = v["written"].as_array().map(Vec::len).unwrap_or(0);
                let removed = v["removed"].as_array().map(Vec::len).unwrap_or(0);
                let mut t = format!(
                    "wrote {written} and removed {removed} files under {} ({} unchanged)",
                    v["root"].as_str().unwrap_or(""),
                    v["unchanged"]
                );
                for r in v["refused"].as_array().into_iter().flatten() {
                    t.push_str(&format!(
                        "\nrefused {}: {}",
                        r["path"].as_str().unwrap_or(""),
                        r["reason"].as_str().unwrap_or("")
                    ));
                }
                t
            });
        }
    }
    Ok(())
}

pub(super) async fn terminal(s: &Session, cmd: &TerminalCmd, out: &Out) -> Result<(), CliError> {
    match cmd {
        TerminalCmd::Create { name, dir, shell } => {
            let mut payload = json!({"name": name});
            if let Some(d) = dir {
                payload["linked_directory_id"] = json!(s.block_id(d)?);
            }
            if let Some(sh) = shell {
                payload["shell"] = json!(sh);
            }
            let ev = s.submit("terminal.create", None, payload).await?;
            let id = &ev[0].entity;
            out.print(&json!({"block_id": id}), || {
                format!("created terminal {id}")
            });
        }
        TerminalCmd::Run {
            id,
            timeout,
            command,
            export,
            no_export,
            remember,
        } => {
            let id = s.block_id(id)?;
            let line = command.join(" ");
            let exported = export_before_run(s, &id, *export, *no_export, *remember).await?;
            let mut v = service::run_terminal(&s.file, &s.editor, &id, &line, *timeout).await?;
            if let Some(x) = exported {
                v["export"] = x;
            }
            if let Some(err) = v.get("error").and_then(Value::as_str) {
                return Err(CliError::failed("terminal", err.to_owned()));
            }
            out.print(&v, || {
                let mut t = v["stdout"].as_str().unwrap_or("").to_owned();
                let stderr = v["stderr"].as_str().unwrap_or("");
                if !stderr.is_empty() {
                    eprint!("{stderr}");
                }
                if v["timed_out"] == true {
                    t.push_str("\n[timed out]");
                }
                if v["exit_code"] != 0 {
                    eprintln!("[exit code {}]", v["exit_code"]);
                }
                t.trim_end_matches('\n').to_owned()
            });
        }
    }
    Ok(())
}

/// Seed 002 §2.2B: before a run in a terminal whose linked directory holds changes not
/// exported yet, export them or not — by flag, by the terminal's remembered rule, by asking on
/// a terminal, else refuse (a script must say). Returns the export's outcome when it ran.
pub(super) async fn export_before_run(
    s: &Session,
    terminal: &str,
    export: bool,
    no_export: bool,
    remember: bool,
) -> Result<Option<Value>, CliError> {
    use service::ExportBeforeRun as Rule;
    let flag = match (export, no_export) {
        (true, _) => Some(Rule::Always),
        (_, true) => Some(Rule::Never),
        _ => None,
    };
    if remember {
        let rule = flag.ok_or_else(|| {
            CliError::usage("--remember keeps --export or --no-export; pass one of them")
        })?;
        service::set_export_rule(&s.file, &s.editor, terminal, rule).await?;
    }
    let Some((dir, status)) = service::pending_export(&s.file, terminal) else {
        return Ok(None);
    };
    let choice = match flag.unwrap_or_else(|| service::export_rule(&s.file, terminal)) {
        Rule::Ask => ask_export(&dir, &status)?,
        rule => rule,
    };
    if choice != Rule::Always {
        return Ok(None);
    }
    let out = service::export_directory(&s.file, &s.editor, &dir).await?;
    for r in out["refused"].as_array().into_iter().flatten() {
        eprintln!(
            "warning: not exported {}: {}",
            r["path"].as_str().unwrap_or(""),
            r["reason"].as_str().unwrap_or("")
        );
    }
    Ok(Some(out))
}

/// Asks "export & run / run / cancel" on a terminal; without one, refuses with what to pass.
pub(super) fn ask_export(
    dir: &str,
    st: &crate::capabilities::builtin::DirectoryStatus,
) -> Result<elfiee_adapters::service::ExportBeforeRun, CliError> {
    use elfiee_adapters::service::ExportBeforeRun as Rule;
    use std::io::{BufRead, IsTerminal, Write};
    let what = format!(
        "directory {dir} has {} new, {} modified and {} removed files not exported yet",
        st.new.len(),
        st.modified.len(),
        st.removed.len()
    );
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::usage(format!(
            "{what}; pass --export (write them first) or --no-export (run as is), with --remember to keep the choice for this terminal"
        )));
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{what}.\n[e]xport & run, [r]un, [c]ancel? ");
    let _ = err.flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    match answer.trim().to_ascii_lowercase().as_str() {
        "e" | "export" | "y" | "yes" => Ok(Rule::Always),
        "r" | "run" => Ok(Rule::Never),
        _ => Err(CliError::failed("cancelled", "cancelled; nothing was run")),
    }
}

pub(super) fn import_limits(max_file_bytes: Option<u64>) -> Result<ImportLimits, CliError> {
    let mut limits = ImportLimits::default();
    if let Some(m) = max_file_bytes {
        if m == 0 || m > MAX_FILE_BYTES_LIMIT {
            return Err(CliError::usage(format!(
                "--max-file-bytes must be between 1 and {MAX_FILE_BYTES_LIMIT}"
            )));
        }
        limits.max_file_bytes = m;
    }
    Ok(limits)
}

/// A bar over the bytes of the files a sync or an import reads.
pub(super) fn sync_bar(label: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(label);
    bar
}

pub(super) fn show_sync_progress(bar: &ProgressBar, p: SyncProgress) {
    bar.set_length(p.bytes_total);
    bar.set_position(p.bytes_done);
}

pub(super) fn progress(label: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} events ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(label);
    bar
}

/// A count of events done, for work whose total is not known ahead.
pub(super) fn counter(label: &'static str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}: {pos} events ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(label);
    bar
}

/// One line `\n{label}{path}` per path, appended to a command's text output.
fn push_lines(t: &mut String, label: &str, paths: &[String]) {
    for p in paths {
        t.push_str(&format!("\n{label}{p}"));
    }
}
