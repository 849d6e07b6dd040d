//! `elfiee hook`: one Claude Code hook call (`elfiee_adapters::hooks`). The payload goes to
//! the document's owner in one round trip; with no owner that offers the service, this
//! process opens the document and records the call itself. Whatever goes wrong, Claude Code
//! goes on: only a grant denial blocks its call.

use std::io::Read;
use std::time::Duration;

use elfiee_adapters::hooks::{self, HookExit, HookInput, HookReply};
use elfiee_engine::remote::CallError;

use super::super::{Cli, CliError};
use crate::Engine;

/// Hook payloads are bounded (a `Write` of a large file carries its content twice).
const MAX_INPUT: u64 = 64 * 1024 * 1024;

/// How long a hook that records alone may take before it lets Claude Code go on.
const LOCAL_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) async fn run(cli: &Cli, editor: &str) -> Result<(), CliError> {
    let exit = hook(cli, editor).await;
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
    let input = match input {
        Ok(i) => i,
        Err(why) => {
            return HookExit {
                stdout: String::new(),
                stderr: format!("elfiee hook: {why}"),
                code: 1,
            }
        }
    };
    if !input.wanted() {
        return hooks::exit_for(&input, &HookReply::default());
    }
    let Some(elf) = cli.elf.clone() else {
        return hooks::exit_for(
            &input,
            &HookReply::warn("elfiee hook: no --elf given; this session is not recorded".into()),
        );
    };
    let reply = match tokio::task::block_in_place(|| hooks::ask_owner(&elf, editor, &input)) {
        Ok(reply) => reply,
        Err(CallError::NoOwner | CallError::NoService) => {
            if !elf.join("log").is_dir() {
                HookReply::warn(format!(
                    "elfiee: the document {} is gone; Claude Code's work here is not recorded",
                    elf.display()
                ))
            } else {
                match tokio::time::timeout(LOCAL_TIMEOUT, record_here(&elf, editor, &input)).await {
                    Ok(Ok(reply)) => reply,
                    Ok(Err(e)) => HookReply::warn(format!(
                        "elfiee: this call was not recorded in {}: {e}",
                        elf.display()
                    )),
                    Err(_) => HookReply::warn(format!(
                        "elfiee: recording this call in {} took too long; it was left out",
                        elf.display()
                    )),
                }
            }
        }
        Err(e) => HookReply::warn(format!(
            "elfiee: this call was not recorded in {}: {e}",
            elf.display()
        )),
    };
    hooks::exit_for(&input, &reply)
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
