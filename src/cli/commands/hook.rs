//! `elfiee hook`: one Claude Code hook call (`elfiee_adapters::hooks`). The payload goes to
//! the document's owner in one round trip; with no owner that offers the service, this
//! process opens the document and records the call itself. Whatever goes wrong, Claude Code
//! goes on: only a grant denial blocks its call.
//!
//! The `elfiee` binary asks the owner before it sets anything else up ([`before_runtime`]:
//! no logging, no async runtime, no engine), so a call that the owner records costs the
//! process start and one round trip (issue 37, "Fast").

use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

use elfiee_adapters::hooks::{self, HookExit, HookInput, HookReply};
use elfiee_engine::remote::CallError;

use super::super::{Cli, CliError};
use crate::Engine;

/// Hook payloads are bounded (a `Write` of a large file carries its content twice).
const MAX_INPUT: u64 = 64 * 1024 * 1024;

/// How long a hook that records alone may take before it lets Claude Code go on.
const LOCAL_TIMEOUT: Duration = Duration::from_secs(8);

/// How long a hook waits before asking again an owner that holds the document but does not
/// answer yet (it is still opening it).
const OWNER_RETRY: Duration = Duration::from_millis(25);

/// The payload [`before_runtime`] read, when no owner took it: this process records it.
static PENDING: Mutex<Option<HookInput>> = Mutex::new(None);

/// What a hook does first, before the process sets anything else up: reads the payload and
/// hands it to the document's owner. When that settles the call (the owner recorded it, or
/// there is nothing to record), prints the answer and exits the process; returns when this
/// process must record the call itself, and [`run`] goes on with the payload read here.
pub(crate) fn before_runtime(cli: &Cli, editor: &str) {
    match read_and_ask(cli, editor) {
        Ok(input) => *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = Some(input),
        Err(exit) => finish(exit),
    }
}

/// Reads the payload and hands it to the owner: the payload when this process must record
/// it, or the answer that settled the call.
fn read_and_ask(cli: &Cli, editor: &str) -> Result<HookInput, HookExit> {
    let input = read_input()?;
    match ask(cli, editor, &input) {
        Asked::Done(exit) => Err(exit),
        Asked::RecordHere => Ok(input),
    }
}

pub(super) async fn run(cli: &Cli, editor: &str) -> Result<(), CliError> {
    finish(hook(cli, editor).await)
}

/// Prints what the hook answers and exits with its code.
fn finish(exit: HookExit) -> ! {
    use std::io::Write;
    if !exit.stdout.is_empty() {
        println!("{}", exit.stdout);
    }
    if !exit.stderr.is_empty() {
        eprintln!("{}", exit.stderr);
    }
    let _ = std::io::stdout().flush();
    std::process::exit(exit.code);
}

async fn hook(cli: &Cli, editor: &str) -> HookExit {
    let pending = PENDING.lock().unwrap_or_else(|p| p.into_inner()).take();
    // The owner was asked before the runtime started, unless `run` was called directly.
    let input = match pending.map_or_else(
        || tokio::task::block_in_place(|| read_and_ask(cli, editor)),
        Ok,
    ) {
        Ok(input) => input,
        Err(exit) => return exit,
    };
    let Some(elf) = cli.elf.clone() else {
        return no_elf(&input);
    };
    let deadline = tokio::time::Instant::now() + LOCAL_TIMEOUT;
    let reply = loop {
        match tokio::time::timeout_at(deadline, record_here(&elf, editor, &input)).await {
            Ok(Ok(reply)) => break reply,
            // Another process holds the document: an owner that is starting (Claude Code
            // starts its MCP server and makes its first tool call at once). Its socket
            // answers as soon as it has opened the document: ask it again.
            Ok(Err(elfiee_engine::EngineError::Locked(_)))
                if tokio::time::Instant::now() + OWNER_RETRY < deadline =>
            {
                tokio::time::sleep(OWNER_RETRY).await;
                match tokio::task::block_in_place(|| ask(cli, editor, &input)) {
                    Asked::Done(exit) => return exit,
                    Asked::RecordHere => continue,
                }
            }
            Ok(Err(e)) => {
                break HookReply::warn(format!(
                    "elfiee: this call was not recorded in {}: {e}",
                    elf.display()
                ))
            }
            Err(_) => {
                break HookReply::warn(format!(
                    "elfiee: recording this call in {} took too long; it was left out",
                    elf.display()
                ))
            }
        }
    };
    hooks::exit_for(&input, &reply)
}

/// The hook's payload from stdin; the answer that ends the call when it cannot be read.
fn read_input() -> Result<HookInput, HookExit> {
    let mut bytes = Vec::new();
    let read = std::io::stdin().take(MAX_INPUT + 1).read_to_end(&mut bytes);
    let input = match read {
        Ok(_) if bytes.len() as u64 > MAX_INPUT => Err(format!(
            "the hook's input is over {} MiB; this call is not recorded",
            MAX_INPUT >> 20
        )),
        Ok(_) => HookInput::parse(&bytes),
        Err(e) => Err(format!("cannot read the hook's input: {e}")),
    };
    input.map_err(|why| HookExit {
        stdout: String::new(),
        stderr: format!("elfiee hook: {why}"),
        code: 1,
    })
}

/// Whether asking the document's owner settled the call.
enum Asked {
    Done(HookExit),
    /// No owner offers the service, and the document is there: record it in this process.
    RecordHere,
}

/// Hands `input` to the owner of the document (blocking, at most the owner timeout).
fn ask(cli: &Cli, editor: &str, input: &HookInput) -> Asked {
    if !input.wanted() {
        return Asked::Done(hooks::exit_for(input, &HookReply::default()));
    }
    let Some(elf) = cli.elf.as_deref() else {
        return Asked::Done(no_elf(input));
    };
    let reply = match hooks::ask_owner(elf, editor, input) {
        Ok(reply) => reply,
        Err(CallError::NoOwner | CallError::NoService) if elf.join("log").is_dir() => {
            return Asked::RecordHere
        }
        Err(CallError::NoOwner | CallError::NoService) => HookReply::warn(format!(
            "elfiee: the document {} is gone; Claude Code's work here is not recorded",
            elf.display()
        )),
        Err(e) => HookReply::warn(format!(
            "elfiee: this call was not recorded in {}: {e}",
            elf.display()
        )),
    };
    Asked::Done(hooks::exit_for(input, &reply))
}

fn no_elf(input: &HookInput) -> HookExit {
    hooks::exit_for(
        input,
        &HookReply::warn("elfiee hook: no --elf given; this session is not recorded".into()),
    )
}

/// Records the call in this process (no owner offers the service).
async fn record_here(
    elf: &std::path::Path,
    editor: &str,
    input: &HookInput,
) -> Result<HookReply, elfiee_engine::EngineError> {
    let file = Engine::global().open(elf).await?;
    let reply = hooks::Recorder::new(&file).handle(editor, input).await;
    file.close().await;
    reply
}
