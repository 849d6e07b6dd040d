//! What every command of the CLI shares: the open [`Session`] (file, editor, effects) and
//! small helpers (reading text arguments, event lines, payloads).

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::{Command, Engine, Event, FileHandle};
use serde_json::{json, Value};

use super::{resolve, Cli, CliError, Cmd, SyncCmd, TextSource};

/// An open file, its running effects, and who we act as.
pub(super) struct Session {
    pub(super) file: FileHandle,
    pub(super) editor: String,
    /// While another process owns the file its effects run there; they start here if this
    /// process takes the file over.
    pub(super) effects: elfiee_adapters::EffectsHandle,
}

impl Session {
    pub(super) async fn open(cli: &Cli) -> Result<Session, CliError> {
        let file = Engine::global().open(elf_path(cli)?).await?;
        // Events of kinds this program has no fold for are kept in the log but missing from
        // the state it shows: say so once, on stderr (stdout stays the command's output).
        let unknown = file.unknown_kinds();
        if !unknown.is_empty() {
            eprintln!("warning: {}", unknown_kinds_message(&unknown));
        }
        // A device that joined a synced document has no owner until the document arrives.
        let ownerless = matches!(cli.cmd, Cmd::Serve(_) | Cmd::Sync(SyncCmd::Status { .. }));
        let editor = match &cli.as_editor {
            Some(who) => file.with_state(|s| resolve::editor(s, who))?,
            None if ownerless && file.owner().is_none() => String::new(),
            None => file.owner().ok_or_else(|| {
                // A device that joined a synced document and has not received it yet.
                let joined = matches!(elfiee_sync::node::recorded_config(&file), Ok(Some(_)));
                if joined {
                    CliError::failed(
                        "not_synced_yet",
                        "this document has not arrived from the broker yet; run `elfiee serve --sync URL` on it (and have the owner run `elfiee sync add-node` with this device's node id to write to it)",
                    )
                } else {
                    CliError::failed(
                        "not_initialized",
                        "this .elf has no owner; it was never initialized",
                    )
                }
            })?,
        };
        // Effects catch up from their checkpoints (e.g. after a crash) and serve this command.
        let effects = elfiee_adapters::attach(&file, super::effects_config()).await?;
        Ok(Session {
            file,
            editor,
            effects,
        })
    }

    /// Lets pending effects finish, then closes the file.
    pub(super) async fn close(self) {
        if let Err(e) = self
            .effects
            .settle(&self.file, std::time::Duration::from_secs(600))
            .await
        {
            eprintln!("warning: {e}");
        }
        self.file.close().await;
        self.effects.join().await;
        // The process ends right after: freeing a large document's state block by block
        // would only cost time (the file is closed and flushed).
        std::mem::forget(self.file);
    }

    pub(super) async fn submit(
        &self,
        cap: &str,
        block: Option<&str>,
        payload: Value,
    ) -> Result<Vec<Event>, CliError> {
        let block = block.filter(|b| *b != "*");
        Ok(self
            .file
            .submit(Command::new(&self.editor, cap, block, payload))
            .await?)
    }

    pub(super) fn block_id(&self, input: &str) -> Result<String, CliError> {
        self.file.with_state(|s| resolve::block(s, input))
    }

    pub(super) fn editor_id(&self, input: &str) -> Result<String, CliError> {
        self.file.with_state(|s| resolve::editor(s, input))
    }
}

pub(super) fn read_text(src: &TextSource) -> Result<String, CliError> {
    if let Some(t) = &src.text {
        return Ok(t.clone());
    }
    match src.file.as_deref() {
        Some(p) if p != Path::new("-") => {
            let f = std::fs::File::open(p)
                .map_err(|e| CliError::failed("io", format!("cannot read {}: {e}", p.display())))?;
            read_bounded(f, &p.display().to_string(), "a smaller file")
        }
        _ => read_bounded(std::io::stdin(), "stdin", "less on stdin, or use --file"),
    }
}

/// Reads `from` (named `what`) as UTF-8 text of at most [`MAX_PAYLOAD_BYTES`] bytes — what
/// one command can carry — refusing at the limit without reading further, so `/dev/zero`
/// or an endless pipe costs bounded memory (issue 39, F4). `instead` says what to give.
///
/// [`MAX_PAYLOAD_BYTES`]: crate::capabilities::MAX_PAYLOAD_BYTES
pub(super) fn read_bounded(from: impl Read, what: &str, instead: &str) -> Result<String, CliError> {
    let limit = crate::capabilities::MAX_PAYLOAD_BYTES;
    let mut bytes = Vec::new();
    from.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::failed("io", format!("cannot read {what}: {e}")))?;
    if bytes.len() > limit {
        return Err(CliError::usage(format!(
            "{what} holds more than {} MiB, the most one command can carry; give {instead}",
            limit >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|e| CliError::usage(format!("{what} is not UTF-8 text: {e}")))
}

pub(super) fn mentions(e: &Event, block: &str) -> bool {
    e.entity == block
        || e.value.get("to").and_then(Value::as_str) == Some(block)
        || e.value.get("block_id").and_then(Value::as_str) == Some(block)
}

pub(super) fn event_line(e: &Event) -> String {
    let mut v = e.value.to_string();
    if v.len() > 100 {
        let cut = (0..=100)
            .rev()
            .find(|i| v.is_char_boundary(*i))
            .unwrap_or(0);
        v.truncate(cut);
        v.push('…');
    }
    format!(
        "{:>6}  {}  {:<36} {:<40} {v}",
        e.seq,
        e.created_at.format("%Y-%m-%d %H:%M:%S%.3f"),
        e.attribute,
        e.entity
    )
}

pub(super) fn elf_path(cli: &Cli) -> Result<PathBuf, CliError> {
    cli.elf
        .clone()
        .ok_or_else(|| CliError::usage("no .elf given: pass --elf PATH or set ELFIEE_ELF"))
}

/// The payload of `exec`: JSON given inline, `@FILE`, `-` (stdin), or `{}` when absent.
pub(super) fn exec_payload(arg: Option<&str>) -> Result<Value, CliError> {
    let (text, source) = match arg {
        None => return Ok(json!({})),
        Some("-") => (
            read_bounded(
                std::io::stdin(),
                "the payload on stdin",
                "a smaller payload",
            )?,
            "the payload read from stdin".to_owned(),
        ),
        Some(a) if a.starts_with('@') => {
            let path = &a[1..];
            let f = std::fs::File::open(path).map_err(|e| {
                CliError::usage(format!("cannot read the payload file {path}: {e}"))
            })?;
            let what = format!("the payload file {path}");
            (read_bounded(f, &what, "a smaller payload")?, what)
        }
        Some(a) => (a.to_owned(), "--payload".to_owned()),
    };
    serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "{source} is not valid JSON: {e} (pass an object such as '{{\"markdown\": \"# Hi\"}}', \
             @FILE or - for stdin)"
        ))
    })
}

/// One line naming the event kinds no fold of this program knows.
pub(super) fn unknown_kinds_message(kinds: &std::collections::BTreeMap<String, u64>) -> String {
    format!(
        "unknown kinds: {} — written by a program that registered them; their meaning is \
         missing from this state",
        crate::engine::describe_kinds(kinds)
    )
}
