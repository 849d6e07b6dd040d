use std::collections::BTreeMap;

use elfiee_model::{CapError, Command, Ctx, Event, EventDraft, TerminalContents};
use elfiee_projections::{update_block, Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::directory_import::new_block;
use super::spec::Builtin;
use super::support::on_block;
use super::support::record;
use crate::payload::{check_name, parse};
use crate::{Handled, Target};

/// Payload of `terminal.create`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalCreatePayload {
    pub name: String,
    #[serde(default)]
    pub shell: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Directory block whose folder is the working directory.
    #[serde(default)]
    pub linked_directory_id: Option<String>,
}

const CREATE: &str = "terminal.create";
const EXECUTE: &str = "terminal.execute";

pub(crate) const CAPABILITIES: &[Builtin] = &[
    Builtin::new(CREATE, Target::File, handle_create),
    Builtin::new(EXECUTE, Target::Block(Some("terminal")), handle_execute),
    // The terminal effect's record of one run (stdout, stderr, exit code, truncation and
    // timeout flags).
    Builtin::new("terminal.output", Target::Block(Some("terminal")), record)
        .authorized_by(|_| EXECUTE)
        .fold(fold_output),
];

/// `terminal.create`: a terminal block. Commands run in the linked directory's folder, else in
/// a folder inside the `.elf`.
fn handle_create(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let p: TerminalCreatePayload = parse(CREATE, &cmd.payload)?;
    check_name(CREATE, "name", &p.name)?;
    if let Some(dir) = &p.linked_directory_id {
        match state.block(dir) {
            Some(b) if b.block_type == "directory" => {}
            Some(b) => {
                return Err(CapError::rejected(format!(
                    "'{dir}' is a {} block; link a directory block",
                    b.block_type
                )))
            }
            None => return Err(CapError::BlockNotFound(dir.clone())),
        }
    }
    let shell = p.shell.unwrap_or_else(|| "sh".into());
    if shell.trim().is_empty() {
        return Err(CapError::payload(CREATE, "'shell' must not be empty"));
    }
    let contents = TerminalContents {
        shell,
        env: p.env,
        linked_directory_id: p.linked_directory_id,
    };
    let id = ctx.new_id(0).to_string();
    let block = new_block(
        &id,
        &p.name,
        "terminal",
        serde_json::to_value(&contents).unwrap_or_default(),
        &cmd.editor_id,
        ctx,
        BTreeMap::new(),
    );
    Ok(vec![EventDraft::new(
        &id,
        "core.create",
        serde_json::to_value(&block).unwrap_or_default(),
    )])
}

/// Payload of `terminal.execute`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalExecutePayload {
    pub command: String,
    /// Seconds before the command is killed (1–3600; default 120).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Default timeout of `terminal.execute`, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;

/// `terminal.execute`: asks the terminal effect to run a command. The effect records the
/// result as `terminal.output`.
fn handle_execute(cmd: &Command, _state: &State, _ctx: &Ctx) -> Handled {
    let p: TerminalExecutePayload = parse(EXECUTE, &cmd.payload)?;
    if p.command.trim().is_empty() {
        return Err(CapError::payload(EXECUTE, "'command' must not be empty"));
    }
    let timeout = p.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if !(1..=3600).contains(&timeout) {
        return Err(CapError::payload(
            EXECUTE,
            format!("'timeout_secs' must be 1-3600 (got {timeout})"),
        ));
    }
    on_block(
        cmd,
        EXECUTE,
        json!({"command": p.command, "timeout_secs": timeout}),
    )
}

/// An effect record: the whole value is kept under one key of the block.
fn fold_output(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        if let Value::Object(obj) = &mut b.contents {
            obj.insert("last_output".into(), v.clone());
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn terminal_create_execute_and_output() {
        let mut k = Kit::new();
        let ev = k.ok("terminal.create", None, json!({"name": "sh"}));
        let t = ev[0].entity.clone();
        assert_eq!(k.state.blocks[&t].contents["shell"], "sh");
        let ev = k.ok("terminal.execute", Some(&t), json!({"command": "echo hi"}));
        assert_eq!(ev[0].value["timeout_secs"], 120);
        k.err("terminal.execute", Some(&t), json!({"command": " "}));
        k.err(
            "terminal.execute",
            Some(&t),
            json!({"command": "x", "timeout_secs": 0}),
        );
        k.ok(
            "terminal.output",
            Some(&t),
            json!({"trigger_seq": 5, "stdout": "hi\n", "exit_code": 0}),
        );
        assert_eq!(k.state.blocks[&t].contents["last_output"]["stdout"], "hi\n");
        k.err("terminal.output", Some(&t), json!({"stdout": "no trigger"}));
        k.err(
            "terminal.create",
            None,
            json!({"name": "x", "linked_directory_id": t}),
        );
    }

    #[test]
    fn output_is_authorized_by_execute() {
        let mut k = Kit::new();
        let t = k.ok("terminal.create", None, json!({"name": "sh"}))[0]
            .entity
            .clone();
        k.err_by(
            "bob",
            "terminal.output",
            Some(&t),
            json!({"trigger_seq": 1}),
        );
        k.grant("bob", "terminal.execute", Some(&t));
        k.ok_by(
            "bob",
            "terminal.output",
            Some(&t),
            json!({"trigger_seq": 1}),
        );
    }
}
