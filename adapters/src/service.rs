//! The operations a host (CLI, Tauri, MCP server) calls: each submits a command and, where an
//! effect does the work, waits for the effect's recorded outcome.

use std::path::Path;
use std::time::Duration;

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{CapError, Command, Event, EXTERNAL_ROOT_PATH};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::effects::wait_for_outcome;
use crate::import::{import_folder, sync_folder, ImportLimits, SyncProgress, SyncReport};
use crate::payload::{str_field, str_list};

/// How long an agent enable/disable may take before the caller stops waiting.
const AGENT_EFFECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Result of an import: what the sync into the new (or resumed) directory block did.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportReport {
    pub block_id: String,
    pub root: String,
    /// Files the block holds now.
    pub files: usize,
    /// An interrupted import of the same folder was resumed.
    pub resumed: bool,
    pub sync: SyncReport,
    pub skipped: Vec<elfiee_model::SkippedFile>,
}

/// Imports a folder as a directory block, streamed in chunks (see [`crate::import`]).
pub async fn import_directory(
    file: &FileHandle,
    editor: &str,
    folder: &Path,
    name: Option<&str>,
    limits: &ImportLimits,
    progress: impl FnMut(SyncProgress),
) -> Result<ImportReport, EngineError> {
    let (mut sync, resumed) = import_folder(file, editor, folder, name, limits, progress).await?;
    let skipped = std::mem::take(&mut sync.skipped);
    Ok(ImportReport {
        block_id: sync.block_id.clone(),
        root: sync.root.clone(),
        files: sync.added + sync.changed + sync.unchanged,
        resumed,
        sync,
        skipped,
    })
}

/// Rescans a directory block's folder: events only for changed, added and deleted files.
pub async fn sync_directory(
    file: &FileHandle,
    editor: &str,
    dir_id: &str,
    limits: &ImportLimits,
    progress: impl FnMut(SyncProgress),
) -> Result<SyncReport, EngineError> {
    sync_folder(file, editor, dir_id, limits, progress).await
}

/// Result of agent create / enable / disable (seed 001 `AgentEnableResult`, plus ids).
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentResult {
    pub agent_block_id: String,
    pub editor_id: String,
    pub status: String,
    pub needs_restart: bool,
    pub message: String,
    pub warnings: Vec<String>,
}

fn agent_result(file: &FileHandle, agent_id: &str, outcome: Option<&Event>) -> AgentResult {
    let (editor_id, status) = file.with_state(|s| match s.block(agent_id) {
        Some(b) => (
            str_field(&b.contents, "editor_id"),
            str_field(&b.contents, "status"),
        ),
        None => Default::default(),
    });
    let created;
    let v = match outcome {
        Some(e) => &e.value,
        None => {
            created = json!({
                "needs_restart": false,
                "message": "LLM-only agent created",
                "warnings": [],
            });
            &created
        }
    };
    AgentResult {
        agent_block_id: agent_id.to_owned(),
        editor_id,
        status,
        needs_restart: v
            .get("needs_restart")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        message: str_field(v, "message"),
        warnings: str_list(v, "warnings"),
    }
}

/// `agent.create`; with a target directory, first checks that Claude Code was initialized in
/// the project (`<root>/.claude/` exists), then waits for the enable effect.
pub async fn create_agent(
    file: &FileHandle,
    editor: &str,
    target: Option<&str>,
    name: Option<&str>,
) -> Result<AgentResult, EngineError> {
    if let Some(target) = target {
        let root = file.with_state(|s| {
            s.block(target)
                .and_then(|b| b.metadata.custom.get(EXTERNAL_ROOT_PATH))
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        if let Some(root) = root {
            if !Path::new(&root).join(".claude").is_dir() {
                return Err(EngineError::rejected(format!(
                    "Claude not initialized in target project: {root}. Run 'claude' first."
                )));
            }
        }
    }
    let mut payload = json!({});
    if let Some(t) = target {
        payload["target_project_id"] = json!(t);
    }
    if let Some(n) = name {
        payload["name"] = json!(n);
    }
    let events = file
        .submit(Command::new(editor, "agent.create", None, payload))
        .await?;
    let agent_id = events
        .iter()
        .find(|e| e.cap_id() == "core.create")
        .map(|e| e.entity.clone())
        .unwrap_or_default();
    let outcome = match events.iter().find(|e| e.cap_id() == "agent.enable") {
        Some(trigger) => wait_for_outcome(file, "claude", trigger, AGENT_EFFECT_TIMEOUT).await?,
        None => Vec::new(),
    };
    Ok(agent_result(file, &agent_id, outcome.first()))
}

/// `agent.enable` or `agent.disable`, waiting for the integration effect's outcome.
pub async fn set_agent_enabled(
    file: &FileHandle,
    editor: &str,
    agent_id: &str,
    enable: bool,
) -> Result<AgentResult, EngineError> {
    let cap = if enable {
        "agent.enable"
    } else {
        "agent.disable"
    };
    let events = file
        .submit(Command::new(editor, cap, Some(agent_id), json!({})))
        .await?;
    let outcome = wait_for_outcome(file, "claude", &events[0], AGENT_EFFECT_TIMEOUT).await?;
    Ok(agent_result(file, agent_id, outcome.first()))
}

/// Every agent block with its status and project.
pub fn list_agents(file: &FileHandle) -> Vec<Value> {
    file.with_state(|s| {
        s.blocks
            .values()
            .filter(|b| b.block_type == "agent")
            .map(|b| {
                json!({
                    "agent_block_id": b.block_id,
                    "name": b.name,
                    "editor_id": b.contents.get("editor_id"),
                    "status": b.contents.get("status"),
                    "target_project_id": b.contents.get("target_project_id"),
                    "last_effect": b.metadata.custom.get("last_effect"),
                })
            })
            .collect()
    })
}

/// `terminal.execute`, waiting for `terminal.output` (the command's timeout plus a margin).
pub async fn run_terminal(
    file: &FileHandle,
    editor: &str,
    terminal_id: &str,
    command: &str,
    timeout_secs: Option<u64>,
) -> Result<Value, EngineError> {
    let mut payload = json!({"command": command});
    if let Some(t) = timeout_secs {
        payload["timeout_secs"] = json!(t);
    }
    let events = file
        .submit(Command::new(
            editor,
            "terminal.execute",
            Some(terminal_id),
            payload,
        ))
        .await?;
    let secs = events[0]
        .value
        .get("timeout_secs")
        .and_then(Value::as_u64)
        .unwrap_or(120);
    let out =
        wait_for_outcome(file, "terminal", &events[0], Duration::from_secs(secs + 30)).await?;
    Ok(out.first().map(|e| e.value.clone()).unwrap_or_default())
}

/// Whether a run in a terminal exports its linked directory's changes first (seed 002
/// §2.2B). Kept per terminal in `metadata.custom.export_before_run`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportBeforeRun {
    /// Ask the user (the default).
    Ask,
    /// Export first, without asking.
    Always,
    /// Run as is, without asking.
    Never,
}

/// The terminal's linked directory and what it holds that its folder does not, when a run
/// there would leave changes unexported (a host shows its "export & run / run / cancel"
/// dialog when this is `Some` and [`export_rule`] is `Ask`).
pub fn pending_export(
    file: &FileHandle,
    terminal_id: &str,
) -> Option<(String, elfiee_capabilities::builtin::DirectoryStatus)> {
    file.with_state(|s| {
        let dir_id = s
            .block(terminal_id)?
            .contents
            .get("linked_directory_id")?
            .as_str()?
            .to_owned();
        let dir = s.block(&dir_id)?;
        let st = elfiee_capabilities::builtin::directory_status(s, dir);
        st.is_dirty().then_some((dir_id, st))
    })
}

/// The remembered rule of a terminal ([`ExportBeforeRun::Ask`] when none).
pub fn export_rule(file: &FileHandle, terminal_id: &str) -> ExportBeforeRun {
    file.with_state(|s| {
        s.block(terminal_id)
            .and_then(|b| b.metadata.custom.get("export_before_run").cloned())
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or(ExportBeforeRun::Ask)
    })
}

/// Remembers `rule` for the terminal (`core.update_metadata`).
pub async fn set_export_rule(
    file: &FileHandle,
    editor: &str,
    terminal_id: &str,
    rule: ExportBeforeRun,
) -> Result<(), EngineError> {
    file.submit(Command::new(
        editor,
        "core.update_metadata",
        Some(terminal_id),
        json!({"custom": {"export_before_run": rule}}),
    ))
    .await
    .map(|_| ())
}

/// `directory.export`, waiting for its outcome (`written`, `removed`, `refused`,
/// `unchanged`).
pub async fn export_directory(
    file: &FileHandle,
    editor: &str,
    dir_id: &str,
) -> Result<Value, EngineError> {
    export_directory_with(file, editor, dir_id, false).await
}

/// [`export_directory`]; with `force`, files changed on disk since the document last saw
/// them are overwritten (or removed) instead of reported.
pub async fn export_directory_with(
    file: &FileHandle,
    editor: &str,
    dir_id: &str,
    force: bool,
) -> Result<Value, EngineError> {
    let events = file
        .submit(Command::new(
            editor,
            "directory.export",
            Some(dir_id),
            json!({ "force": force }),
        ))
        .await?;
    let out = wait_for_outcome(file, "export", &events[0], Duration::from_secs(120)).await?;
    Ok(out.first().map(|e| e.value.clone()).unwrap_or_default())
}

/// [`export_directory`] of the files at `paths` only: their new, changed and removed files;
/// the directory's other changes stay pending.
pub async fn export_directory_paths(
    file: &FileHandle,
    editor: &str,
    dir_id: &str,
    paths: &[String],
) -> Result<Value, EngineError> {
    let events = file
        .submit(Command::new(
            editor,
            "directory.export",
            Some(dir_id),
            json!({ "paths": paths }),
        ))
        .await?;
    let out = wait_for_outcome(file, "export", &events[0], Duration::from_secs(120)).await?;
    Ok(out.first().map(|e| e.value.clone()).unwrap_or_default())
}

/// Who made each change a directory holds that its folder does not have yet (`dir status`'s
/// new, modified and removed files): the editor of the newest event that changed that file —
/// its block's text (`core.create`, a `….write`, `core.restore`) or its place in the
/// directory (`directory.add`, `.move`, `.remove`). Path → editor id.
pub fn pending_changes_by(
    file: &FileHandle,
    dir_id: &str,
) -> Result<std::collections::BTreeMap<String, String>, EngineError> {
    use std::collections::{BTreeMap, BTreeSet};
    let (blocks, paths): (BTreeMap<String, String>, BTreeSet<String>) = file.with_state(|s| {
        let Some(dir) = s.block(dir_id) else {
            return Default::default();
        };
        let st = elfiee_capabilities::builtin::directory_status(s, dir);
        let changed: BTreeSet<String> = st.new.iter().chain(&st.modified).cloned().collect();
        let blocks = elfiee_capabilities::builtin::directory_list::<elfiee_model::DirectoryEntry>(
            dir, "entries",
        )
        .into_iter()
        .filter(|e| changed.contains(&e.path))
        .map(|e| (e.block_id, e.path))
        .collect();
        let paths = changed.into_iter().chain(st.removed).collect();
        (blocks, paths)
    });
    let mut out = BTreeMap::new();
    if paths.is_empty() {
        return Ok(out);
    }
    for e in file.events(1)? {
        let cap = e.cap_id();
        if let Some(p) = blocks.get(&e.entity) {
            if matches!(cap, "core.create" | "core.restore") || cap.ends_with(".write") {
                out.insert(p.clone(), e.editor_id().to_owned());
            }
        }
        if e.entity == dir_id {
            let keys: &[&str] = match cap {
                "directory.add" | "directory.remove" => &["path"],
                "directory.move" => &["from", "to"],
                _ => &[],
            };
            for k in keys {
                if let Some(p) = e.value.get(*k).and_then(Value::as_str) {
                    if paths.contains(p) {
                        out.insert(p.to_owned(), e.editor_id().to_owned());
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `agent.configure` (partial). With `api_key_env`, the variable must exist in this process's
/// environment (seed 000: "Environment variable '…' not found"); its value is never stored.
pub async fn configure_agent(
    file: &FileHandle,
    editor: &str,
    agent_id: &str,
    config: Value,
) -> Result<Value, EngineError> {
    if let Some(var) = config.get("api_key_env").and_then(Value::as_str) {
        if std::env::var_os(var).is_none() {
            return Err(EngineError::rejected(format!(
                "Environment variable '{var}' not found; export it before configuring the agent"
            )));
        }
    }
    file.submit(Command::new(
        editor,
        "agent.configure",
        Some(agent_id),
        config,
    ))
    .await?;
    Ok(file.with_state(|s| {
        s.block(agent_id)
            .and_then(|b| b.contents.get("config").cloned())
            .unwrap_or_default()
    }))
}

/// Where a proposal stands.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalStatus {
    /// Waiting for a human: approve runs its commands, reject records the decision.
    Pending,
    /// The model call failed (`error` says why); nothing to decide.
    Failed,
    Approved,
    Rejected,
}

/// An LLM agent's proposal as the state keeps it (`extensions.proposals`): what was asked,
/// what the model answered, the commands it proposes, and the decision.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Proposal {
    pub proposal_id: String,
    pub agent_block_id: String,
    pub status: ProposalStatus,
    #[serde(default)]
    pub prompt: String,
    #[serde(default)]
    pub proposed_commands: Vec<crate::llm::ProposedCommand>,
    /// Problems found while reading the model's `<command>` blocks.
    #[serde(default)]
    pub parse_errors: Vec<String>,
    /// Why the model call failed (status `failed`).
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// The model's whole answer.
    #[serde(default)]
    pub raw_response: Option<String>,
    /// Blocks whose contents went into the model's context.
    #[serde(default)]
    pub context_blocks: Vec<String>,
    /// Seq of the `agent.invoke` that asked, and of the proposal itself.
    #[serde(default)]
    pub trigger_seq: u64,
    #[serde(default)]
    pub created_seq: u64,
    /// Who decided, when, and their feedback (approved / rejected).
    #[serde(default)]
    pub decided_by: Option<String>,
    #[serde(default)]
    pub decided_seq: Option<u64>,
    #[serde(default)]
    pub feedback: Option<String>,
}

/// [`list_proposals`], typed.
pub fn proposals(file: &FileHandle, agent_id: Option<&str>) -> Vec<Proposal> {
    list_proposals(file, agent_id)
        .into_iter()
        .filter_map(|p| serde_json::from_value(p).ok())
        .collect()
}

/// Proposals of one agent (all of them if `agent_id` is `None`), oldest first.
pub fn list_proposals(file: &FileHandle, agent_id: Option<&str>) -> Vec<Value> {
    file.with_state(|s| {
        let mut out: Vec<Value> = s
            .extensions
            .get("proposals")
            .and_then(Value::as_object)
            .map(|m| {
                m.values()
                    .filter(|p| {
                        agent_id.is_none_or(|a| {
                            p.get("agent_block_id").and_then(Value::as_str) == Some(a)
                        })
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by_key(|p| p.get("created_seq").and_then(Value::as_u64).unwrap_or(0));
        out
    })
}

/// Decides a pending proposal. Approving runs every proposed command as the agent's editor,
/// each through CBAC, in one atomic batch with the decision: all commit or none does, and the
/// error names the failing proposed command. Rejecting records the decision (and feedback).
pub async fn decide_proposal(
    file: &FileHandle,
    editor: &str,
    proposal_id: &str,
    approved: bool,
    feedback: Option<&str>,
) -> Result<Vec<Event>, EngineError> {
    let (agent_id, agent_editor, commands) = file.with_state(|s| {
        let p = elfiee_capabilities::builtin::proposal(s, proposal_id).ok_or_else(|| {
            EngineError::rejected(format!(
                "proposal '{proposal_id}' not found; list them with `elfiee agent proposals`"
            ))
        })?;
        let agent_id = p
            .get("agent_block_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let agent_editor = s
            .block(&agent_id)
            .and_then(|b| b.contents.get("editor_id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let commands = p
            .get("proposed_commands")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok::<_, EngineError>((agent_id, agent_editor, commands))
    })?;
    let decision = Command::new(
        editor,
        "agent.approve",
        Some(&agent_id),
        json!({"proposal_id": proposal_id, "approved": approved, "feedback": feedback}),
    );
    if !approved {
        return file.submit(decision).await;
    }
    let mut batch = vec![decision];
    let mut created: Vec<(String, String)> = Vec::new();
    for c in &commands {
        let cap = c.get("cap_id").and_then(Value::as_str).unwrap_or_default();
        let block = c
            .get("block_id")
            .and_then(Value::as_str)
            .filter(|b| !b.is_empty() && *b != "*");
        let mut payload = c.get("payload").cloned().unwrap_or(json!({}));
        if cap == "core.create" {
            // Give the new block a known id, so it can be placed in the directory below.
            if payload.get("block_id").and_then(Value::as_str).is_none() && payload.is_object() {
                payload["block_id"] = json!(uuid::Uuid::new_v4().to_string());
            }
            if let (Some(name), Some(id)) = (
                payload.get("name").and_then(Value::as_str),
                payload.get("block_id").and_then(Value::as_str),
            ) {
                created.push((name.to_owned(), id.to_owned()));
            }
        }
        batch.push(Command::new(&agent_editor, cap, block, payload));
    }
    // Every block the proposal creates is linked from the agent (`implement`), as the agent
    // loop's and the MCP tools' are (seed 002 §2.1B), unless the proposal links it itself.
    for (_, id) in &created {
        let linked = commands.iter().any(|c| {
            c.get("cap_id").and_then(Value::as_str) == Some("core.link")
                && c.get("block_id").and_then(Value::as_str) == Some(agent_id.as_str())
                && c.get("payload")
                    .and_then(|p| p.get("to"))
                    .and_then(Value::as_str)
                    == Some(id.as_str())
        });
        let deleted = commands.iter().any(|c| {
            c.get("cap_id").and_then(Value::as_str) == Some("core.delete")
                && c.get("block_id").and_then(Value::as_str) == Some(id.as_str())
        });
        if !linked && !deleted {
            batch.push(Command::new(
                &agent_editor,
                "core.link",
                Some(&agent_id),
                json!({"to": id, "relation": "implement"}),
            ));
        }
    }
    // A created block whose name is a path (`src/pdf.rs`) joins the agent's directory at that
    // path, placed by the approver in the same batch (seed 002 §3: "b1 gains the new file").
    for (path, dir, id) in placements(file, &agent_id, &commands, &created) {
        batch.push(Command::new(
            editor,
            "directory.add",
            Some(&dir),
            json!({"path": path, "block_id": id}),
        ));
    }
    file.submit_all(batch).await.map_err(|e| match e {
        // Batch positions count the decision first; name the proposed command instead.
        EngineError::Rejected(CapError::Rejected(msg)) if msg.starts_with("command ") => {
            let renumbered = renumber(&msg, commands.len());
            EngineError::rejected(format!(
                "approval of '{proposal_id}' failed, nothing was committed: {renumbered}"
            ))
        }
        other => other,
    })
}

/// `(path, directory, block)` for each created block named like a file path (a valid relative
/// path with a `/` or an extension) that the agent's directory (the one it references, else its
/// target project) does not hold yet, unless the proposal places it itself.
fn placements(
    file: &FileHandle,
    agent_id: &str,
    commands: &[Value],
    created: &[(String, String)],
) -> Vec<(String, String, String)> {
    let placed: Vec<&str> = commands
        .iter()
        .filter(|c| c.get("cap_id").and_then(Value::as_str) == Some("directory.add"))
        .filter_map(|c| c.get("payload")?.get("block_id")?.as_str())
        .collect();
    file.with_state(|s| {
        let Some(dir) = agent_referenced(s, agent_id, "directory") else {
            return Vec::new();
        };
        created
            .iter()
            .filter(|(name, id)| {
                elfiee_capabilities::builtin::check_relative_path(name).is_ok()
                    && (name.contains('/') || name.contains('.'))
                    && !placed.contains(&id.as_str())
                    && elfiee_capabilities::builtin::directory_entry(dir, name).is_none()
            })
            .map(|(name, id)| (name.clone(), dir.block_id.clone(), id.clone()))
            .collect()
    })
}

/// The block of `block_type` an agent works on: the first one it references, else (for a
/// directory) its target project.
pub fn agent_referenced<'a>(
    s: &'a elfiee_projections::State,
    agent_id: &str,
    block_type: &str,
) -> Option<&'a elfiee_model::Block> {
    s.children_of(agent_id)
        .filter(|(rel, _)| *rel == elfiee_model::Relation::Reference)
        .filter_map(|(_, id)| s.block(id))
        .find(|b| b.block_type == block_type)
        .or_else(|| {
            s.block(agent_id)
                .and_then(|a| a.contents.get("target_project_id"))
                .and_then(Value::as_str)
                .and_then(|d| s.block(d))
                .filter(|b| b.block_type == block_type)
        })
}

/// "command K of N (...)" → "proposed command K-1 of N-1 (...)".
fn renumber(msg: &str, proposed: usize) -> String {
    let rest = msg.trim_start_matches("command ");
    let k: usize = rest
        .split_whitespace()
        .next()
        .and_then(|k| k.parse().ok())
        .unwrap_or(1);
    let tail = rest
        .split_once(") failed")
        .map(|(a, b)| format!("{a}) failed{b}"))
        .unwrap_or_else(|| rest.to_owned());
    let tail = tail
        .split_once(" (")
        .map(|(_, t)| format!("({t}"))
        .unwrap_or(tail);
    if k <= 1 {
        format!("the decision itself failed {tail}")
    } else {
        format!("proposed command {} of {proposed} {tail}", k - 1)
    }
}

/// `agent.invoke`, then waits for the LLM effect's proposal (pending, or failed with the
/// error). `on_delta` receives the answer's text while the model writes it.
pub async fn invoke_agent(
    file: &FileHandle,
    editor: &str,
    agent_id: &str,
    prompt: &str,
    context_block_ids: &[String],
    mut on_delta: impl FnMut(&str) + Send,
) -> Result<Value, EngineError> {
    let mut deltas = crate::invoke::live_deltas();
    let events = file
        .submit(Command::new(
            editor,
            "agent.invoke",
            Some(agent_id),
            json!({"prompt": prompt, "context_block_ids": context_block_ids}),
        ))
        .await?;
    let trigger = events[0].clone();
    let proposal_id = str_field(&trigger.value, "proposal_id");
    let wait = wait_for_outcome(file, "llm", &trigger, Duration::from_secs(900));
    tokio::pin!(wait);
    let outcome = loop {
        tokio::select! {
            out = &mut wait => break out?,
            d = deltas.recv() => {
                if let Ok(d) = d {
                    if d.proposal_id == proposal_id {
                        on_delta(&d.text);
                    }
                }
            }
        }
    };
    // The effect sends every delta before it records the outcome, but `select!` may take
    // the outcome first: what is still in the channel is the answer's tail.
    loop {
        match deltas.try_recv() {
            Ok(d) if d.proposal_id == proposal_id => on_delta(&d.text),
            Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    Ok(outcome.first().map(|e| e.value.clone()).unwrap_or_default())
}
