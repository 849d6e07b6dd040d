//! The terminal effect: runs `terminal.execute` commands as `<shell> -c <command>` in the
//! terminal's working directory, with its environment and a timeout, and records
//! `terminal.output` (stdout, stderr, exit code). Output beyond the limit is cut with a note,
//! never dropped silently; a timed-out command is killed with its whole process group and its
//! partial output is kept.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use elfiee_engine::EngineError;
use elfiee_model::{Event, TerminalContents, EXTERNAL_ROOT_PATH};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::effects::{BoxFuture, Effect, EffectCx, FailedOutcome};
use crate::payload::str_field;

/// The terminal effect; `output_limit`: bytes of stdout / stderr kept per run (the rest is
/// cut with a note).
pub struct TerminalEffect {
    pub output_limit: usize,
}

/// Working directory of a terminal: its linked directory's folder, else `<elf>/terminals/<id>`.
pub fn working_dir(
    cx: &EffectCx,
    terminal: &TerminalContents,
    block_id: &str,
) -> Result<PathBuf, String> {
    if let Some(dir) = &terminal.linked_directory_id {
        let root = cx.file.with_state(|s| {
            s.block(dir)
                .and_then(|b| b.metadata.custom.get(EXTERNAL_ROOT_PATH))
                .and_then(Value::as_str)
                .map(PathBuf::from)
        });
        return root.ok_or_else(|| {
            format!("linked directory {dir} is gone or has no {EXTERNAL_ROOT_PATH}")
        });
    }
    let dir = cx.file.path().join("terminals").join(block_id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

impl Effect for TerminalEffect {
    fn name(&self) -> &'static str {
        "terminal"
    }
    fn wants(&self, e: &Event) -> bool {
        e.cap_id() == "terminal.execute"
    }
    // The default order key (the terminal block): runs of one terminal stay in order, runs
    // of different terminals overlap.
    fn failed_outcome(&self, e: &Event, why: &str) -> FailedOutcome {
        FailedOutcome {
            cap_id: "terminal.output",
            block_id: e.entity.clone(),
            payload: json!({"error": why, "trigger_seq": e.seq, "command": e.value.get("command")}),
        }
    }
    fn run<'a>(&'a self, cx: &'a EffectCx, e: &'a Event) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let command = str_field(&e.value, "command");
            let timeout = Duration::from_secs(
                e.value
                    .get("timeout_secs")
                    .and_then(Value::as_u64)
                    .unwrap_or(120),
            );
            let terminal = cx.file.with_state(|s| {
                s.block(&e.entity)
                    .map(|b| serde_json::from_value::<TerminalContents>(b.contents.clone()))
            });
            let mut out = match terminal {
                Some(Ok(t)) => match working_dir(cx, &t, &e.entity) {
                    Ok(cwd) if !cwd.is_dir() => {
                        json!({"error": format!("the working folder {} does not exist", cwd.display()), "cwd": cwd})
                    }
                    Ok(cwd) => run_command(&t, &cwd, &command, timeout, self.output_limit).await,
                    Err(err) => json!({"error": err}),
                },
                Some(Err(err)) => json!({"error": format!("terminal block is malformed: {err}")}),
                None => json!({"error": format!("terminal block {} no longer exists", e.entity)}),
            };
            out["trigger_seq"] = json!(e.seq);
            out["command"] = json!(command);
            cx.record(e, "outcome", "terminal.output", &e.entity, out)
                .await?;
            Ok(())
        })
    }
}

async fn run_command(
    t: &TerminalContents,
    cwd: &std::path::Path,
    command: &str,
    timeout: Duration,
    limit: usize,
) -> Value {
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new(&t.shell);
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .envs(&t.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(err) => {
            return json!({"error": format!("cannot start '{}' in {}: {err}", t.shell, cwd.display()), "cwd": cwd})
        }
    };
    let pid = child.id();
    let stdout = tokio::spawn(read_capped(child.stdout.take(), limit));
    let stderr = tokio::spawn(read_capped(child.stderr.take(), limit));
    let (status, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(s) => (s.ok(), false),
        Err(_) => {
            kill_group(pid);
            let _ = child.kill().await;
            (child.wait().await.ok(), true)
        }
    };
    // The shell may have left background children holding the pipes open. Give them a moment,
    // then kill the whole group so the readers reach end-of-file; nothing read is dropped.
    let readers = async {
        (
            stdout.await.unwrap_or_default(),
            stderr.await.unwrap_or_default(),
        )
    };
    tokio::pin!(readers);
    let mut held_open = false;
    let ((so, so_total), (se, se_total)) =
        match tokio::time::timeout(Duration::from_secs(2), &mut readers).await {
            Ok(r) => r,
            Err(_) => {
                held_open = true;
                kill_group(pid);
                readers.await
            }
        };
    let note = |kept: &[u8], total: usize| {
        // Cut at a character boundary: a truncated multi-byte character is dropped whole.
        let kept = if total > kept.len() {
            match std::str::from_utf8(kept) {
                Ok(_) => kept,
                Err(e) if e.error_len().is_none() => &kept[..e.valid_up_to()],
                Err(_) => kept,
            }
        } else {
            kept
        };
        let mut s = String::from_utf8_lossy(kept).into_owned();
        if total > kept.len() {
            s.push_str(&format!(
                "\n[elfiee: output truncated: kept {} of {total} bytes]",
                kept.len()
            ));
        }
        s
    };
    json!({
        "cwd": cwd,
        "stdout": note(&so, so_total),
        "stderr": note(&se, se_total),
        "exit_code": status.and_then(|s| s.code()),
        "timed_out": timed_out,
        "truncated": so_total > so.len() || se_total > se.len(),
        "note": held_open.then_some("[elfiee: background processes still held the output open; they were killed]"),
        "duration_ms": started.elapsed().as_millis() as u64,
    })
}

#[cfg(unix)]
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid {
        // SAFETY: plain syscall; a negative pid addresses the process group we created.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
}

#[cfg(not(unix))]
fn kill_group(_pid: Option<u32>) {}

/// Reads everything, keeps the first `limit` bytes, returns them and the total length.
async fn read_capped(r: Option<impl AsyncRead + Unpin>, limit: usize) -> (Vec<u8>, usize) {
    let Some(mut r) = r else {
        return (Vec::new(), 0);
    };
    let mut kept = Vec::new();
    let mut total = 0;
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n;
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, total)
}
