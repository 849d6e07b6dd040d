//! A Tauri v2 desktop host for Elfiee: the front-end (in `dist/`) opens a `.elf`, submits
//! commands, lists blocks, lists an agent session's steps and undoes / redoes them
//! (checkpoints), and receives every committed event and live LLM text through Tauri events.
//! Everything here is the public embedding API of the `elfiee` crate; see `docs/EMBEDDING.md`.
//!
//! Run it with `cargo run` in this directory (Linux needs WebKitGTK: `libwebkit2gtk-4.1-dev`).

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use elfiee::adapters::agent_loop::AgentSession;
use elfiee::adapters::checkpoint::{self, History, Selection, StepInfo, UndoReport};
use elfiee::adapters::{invoke::LiveDelta, service, EffectsConfig, EffectsHandle};
use elfiee::{Block, Command, Engine, EngineError, Event, FileHandle};
use serde::Serialize;
use tauri::{AppHandle, Emitter, Manager, State};
use tokio::sync::broadcast::error::RecvError;

/// Tauri event carrying one committed event: `{ path, event }`.
const EVENT: &str = "elfiee://event";
/// Tauri event carrying model text while an LLM effect streams (not an event; see EMBEDDING.md).
const DELTA: &str = "elfiee://delta";

/// One open document: its handle and the effects attached to it.
struct OpenFile {
    file: FileHandle,
    effects: EffectsHandle,
}

/// The documents this window has open, by the path the front-end used.
#[derive(Default)]
struct OpenFiles(Mutex<HashMap<String, OpenFile>>);

impl OpenFiles {
    fn get(&self, path: &str) -> Result<FileHandle, HostError> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .map(|o| o.file.clone())
            .ok_or_else(|| HostError::NotOpen(path.to_owned()))
    }
}

/// What a command returns to the front-end on failure (serialized as `{kind, message}`).
#[derive(Debug, Serialize)]
#[serde(tag = "kind", content = "message")]
enum HostError {
    /// The engine refused or failed; the message says what to do.
    Engine(String),
    /// The front-end used a path it has not opened.
    NotOpen(String),
}

impl From<EngineError> for HostError {
    fn from(e: EngineError) -> Self {
        HostError::Engine(e.to_string())
    }
}

/// Committed event forwarded to the front-end.
#[derive(Clone, Serialize)]
struct Forwarded {
    path: String,
    event: Event,
}

/// Answer to `open_elf`.
#[derive(Serialize)]
struct Opened {
    path: String,
    owner: Option<String>,
    last_seq: u64,
}

/// Opens `path` (or creates it with `owner_name` as its owner when given), attaches the
/// effects, and starts forwarding its committed events as `elfiee://event`.
#[tauri::command]
async fn open_elf(
    app: AppHandle,
    files: State<'_, OpenFiles>,
    path: String,
    owner_name: Option<String>,
) -> Result<Opened, HostError> {
    if let Ok(file) = files.get(&path) {
        return Ok(Opened {
            path,
            owner: file.owner(),
            last_seq: file.last_seq(),
        });
    }
    let file = match owner_name {
        Some(name) => Engine::global().init(&path, &name).await?,
        None => Engine::global().open(&path).await?,
    };
    let effects = elfiee::adapters::attach(&file, EffectsConfig::default()).await?;
    // Claude Code's hooks in a project of this document record through this process while it
    // owns the document; their steps appear in the "Agent steps" panel as they are recorded.
    elfiee::adapters::hooks::provide(&file);
    // From the current seq on; the front-end reads the earlier state with `list_blocks`.
    let mut events = file.subscribe();
    let (forward_path, forward_app) = (path.clone(), app.clone());
    tauri::async_runtime::spawn(async move {
        // A slow window never loses events: the subscription catches up from the log.
        while let Some(event) = events.recv().await {
            let msg = Forwarded {
                path: forward_path.clone(),
                event,
            };
            if forward_app.emit(EVENT, &msg).is_err() {
                break;
            }
        }
    });
    let opened = Opened {
        path: path.clone(),
        owner: file.owner(),
        last_seq: file.last_seq(),
    };
    files
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(path, OpenFile { file, effects });
    Ok(opened)
}

/// Submits one command as `editor`; answers with the committed (durable) events.
#[tauri::command]
async fn submit(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
    cap_id: String,
    block_id: Option<String>,
    payload: serde_json::Value,
) -> Result<Vec<Event>, HostError> {
    let file = files.get(&path)?;
    let cmd = Command::new(&editor, &cap_id, block_id.as_deref(), payload);
    Ok(file.submit(cmd).await?)
}

/// The blocks `editor` may read, in id order (each checked through CBAC).
#[tauri::command]
async fn list_blocks(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
) -> Result<Vec<Block>, HostError> {
    let file = files.get(&path)?;
    let ids: Vec<String> = file.with_state(|s| s.blocks.keys().collect());
    Ok(ids
        .iter()
        .filter_map(|id| file.read_block(&editor, id).ok())
        .collect())
}

/// One block with its whole contents, if `editor` may read it (`<type>.read` through CBAC).
#[tauri::command]
async fn read_block(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
    block_id: String,
) -> Result<Block, HostError> {
    Ok(files.get(&path)?.read_block(&editor, &block_id)?)
}

/// The blocks that link to `block_id` (seed 002 Ph2.1, the parents query): `[{from, name,
/// relation}]`, from the reverse relation index (no scan).
#[tauri::command]
async fn block_parents(
    files: State<'_, OpenFiles>,
    path: String,
    block_id: String,
) -> Result<Vec<serde_json::Value>, HostError> {
    Ok(files.get(&path)?.with_state(|s| {
        s.parents_of(&block_id)
            .map(|(rel, from)| {
                serde_json::json!({
                    "from": from,
                    "name": s.block(from).map(|b| b.name.clone()),
                    "relation": rel.as_str(),
                })
            })
            .collect()
    }))
}

/// Every agent block with its status (`service::list_agents`).
#[tauri::command]
async fn list_agents(
    files: State<'_, OpenFiles>,
    path: String,
) -> Result<Vec<serde_json::Value>, HostError> {
    Ok(service::list_agents(&files.get(&path)?))
}

/// `agent.configure` (partial: provider, model, base_url, api_key_env, ...); answers with the
/// agent's whole configuration. An `api_key_env` must name a variable set in this process.
#[tauri::command]
async fn agent_configure(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
    agent: String,
    config: serde_json::Value,
) -> Result<serde_json::Value, HostError> {
    let file = files.get(&path)?;
    Ok(service::configure_agent(&file, &editor, &agent, config).await?)
}

/// The document's relation graph (reference / implement) as a self-contained SVG, laid out in
/// Rust (`elfiee::graph`, the same picture as `elfiee graph --format svg`).
#[tauri::command]
async fn graph_svg(files: State<'_, OpenFiles>, path: String) -> Result<String, HostError> {
    let file = files.get(&path)?;
    // The layout runs after the state is let go (20-50 ms on 1,000 blocks).
    Ok(file.with_state(elfiee::graph::Graph::document).to_svg())
}

/// Creates an agent (`agent.create`): with `target` (a directory block whose project has
/// `.claude/`), it also integrates Claude Code and waits for that effect.
#[tauri::command]
async fn agent_create(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
    target: Option<String>,
    name: Option<String>,
) -> Result<service::AgentResult, HostError> {
    let file = files.get(&path)?;
    Ok(service::create_agent(&file, &editor, target.as_deref(), name.as_deref()).await?)
}

/// `agent.enable` / `agent.disable`, waiting for the Claude Code integration effect.
#[tauri::command]
async fn agent_set_enabled(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
    agent: String,
    enable: bool,
) -> Result<service::AgentResult, HostError> {
    let file = files.get(&path)?;
    Ok(service::set_agent_enabled(&file, &editor, &agent, enable).await?)
}

/// Asks an LLM agent for a proposal; its text streams as `elfiee://delta` meanwhile. Returns
/// the proposal (pending, or failed with the error).
#[tauri::command]
async fn agent_invoke(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
    agent: String,
    prompt: String,
    context_block_ids: Vec<String>,
) -> Result<serde_json::Value, HostError> {
    let file = files.get(&path)?;
    Ok(service::invoke_agent(&file, &editor, &agent, &prompt, &context_block_ids, |_| {}).await?)
}

/// The proposals of one agent (all when `agent` is absent), oldest first.
#[tauri::command]
async fn agent_proposals(
    files: State<'_, OpenFiles>,
    path: String,
    agent: Option<String>,
) -> Result<Vec<service::Proposal>, HostError> {
    let file = files.get(&path)?;
    Ok(service::proposals(&file, agent.as_deref()))
}

/// Approves (its commands run as the agent, all or nothing) or rejects a pending proposal.
#[tauri::command]
async fn agent_decide(
    files: State<'_, OpenFiles>,
    path: String,
    editor: String,
    proposal_id: String,
    approved: bool,
    feedback: Option<String>,
) -> Result<Vec<Event>, HostError> {
    let file = files.get(&path)?;
    Ok(
        service::decide_proposal(&file, &editor, &proposal_id, approved, feedback.as_deref())
            .await?,
    )
}

/// One agent session as `agent_sessions` lists it.
#[derive(Serialize)]
struct SessionInfo {
    session_id: String,
    title: Option<String>,
}

/// The editor an undo or redo acts as: the one given, else the file's owner (as the CLI).
fn editor_or_owner(file: &FileHandle, editor: Option<String>) -> Result<String, HostError> {
    editor.or_else(|| file.owner()).ok_or_else(|| {
        HostError::Engine("this document has no owner; say which editor acts".to_owned())
    })
}

/// The sessions of one agent block (its loop's, and `mcp-<uuid>` ones of its MCP servers),
/// oldest first, with their titles.
#[tauri::command]
async fn agent_sessions(
    files: State<'_, OpenFiles>,
    path: String,
    agent_block_id: String,
) -> Result<Vec<SessionInfo>, HostError> {
    let file = files.get(&path)?;
    Ok(AgentSession::list(&file, &agent_block_id)?
        .into_iter()
        .map(|(session_id, title)| SessionInfo { session_id, title })
        .collect())
}

/// The steps (checkpoints) of one agent session, oldest first: status (`done` / `undone`),
/// the document's seq range, the files created, modified and deleted, the tools called.
#[tauri::command]
async fn agent_steps(
    files: State<'_, OpenFiles>,
    path: String,
    session_id: String,
) -> Result<Vec<StepInfo>, HostError> {
    let file = files.get(&path)?;
    Ok(History::load(&file, &session_id)?.infos(&file))
}

/// Undoes steps of an agent session in the document and on disk: the newest `steps` (default
/// 1), or every step after `to`. A block or file changed since by someone else refuses the
/// undo, naming it, unless `force`. `editor` defaults to the file's owner.
#[tauri::command]
async fn agent_undo(
    files: State<'_, OpenFiles>,
    path: String,
    session_id: String,
    steps: Option<u64>,
    to: Option<u64>,
    force: bool,
    editor: Option<String>,
) -> Result<UndoReport, HostError> {
    let file = files.get(&path)?;
    let editor = editor_or_owner(&file, editor)?;
    let selection = match to {
        Some(step) => Selection::To(step),
        None => Selection::Last(steps.unwrap_or(1)),
    };
    Ok(checkpoint::undo(&file, &editor, &session_id, selection, force).await?)
}

/// Redoes the session's newest undo (refused when a step was taken since, or when something
/// it would overwrite changed, unless `force`). `editor` defaults to the file's owner.
#[tauri::command]
async fn agent_redo(
    files: State<'_, OpenFiles>,
    path: String,
    session_id: String,
    force: bool,
    editor: Option<String>,
) -> Result<UndoReport, HostError> {
    let file = files.get(&path)?;
    let editor = editor_or_owner(&file, editor)?;
    Ok(checkpoint::redo(&file, &editor, &session_id, force).await?)
}

/// Lets running effects finish (up to 30 s), then closes the document.
#[tauri::command]
async fn close_elf(files: State<'_, OpenFiles>, path: String) -> Result<(), HostError> {
    let open = files
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&path)
        .ok_or_else(|| HostError::NotOpen(path.clone()))?;
    open.effects
        .settle(&open.file, Duration::from_secs(30))
        .await?;
    open.file.close().await;
    open.effects.join().await;
    Ok(())
}

fn main() {
    tauri::Builder::default()
        .manage(OpenFiles::default())
        .setup(|app| {
            // Live LLM text for every open document, as `elfiee://delta`.
            let handle = app.handle().clone();
            let mut deltas = elfiee::adapters::invoke::live_deltas();
            tauri::async_runtime::spawn(async move {
                loop {
                    match deltas.recv().await {
                        Ok(delta) => {
                            let _ = handle.emit::<LiveDelta>(DELTA, delta);
                        }
                        // A slow window may miss deltas; the proposal event carries the whole text.
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => break,
                    }
                }
            });
            Ok(())
        })
        .on_window_event(|window, event| {
            if let tauri::WindowEvent::CloseRequested { .. } = event {
                let files = window.state::<OpenFiles>();
                let open: Vec<OpenFile> = files
                    .0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .drain()
                    .map(|(_, o)| o)
                    .collect();
                tauri::async_runtime::block_on(async move {
                    for o in open {
                        let _ = o.effects.settle(&o.file, Duration::from_secs(5)).await;
                        o.file.close().await;
                        o.effects.join().await;
                    }
                });
            }
        })
        .invoke_handler(tauri::generate_handler![
            open_elf,
            submit,
            list_blocks,
            read_block,
            block_parents,
            close_elf,
            list_agents,
            agent_configure,
            graph_svg,
            agent_create,
            agent_set_enabled,
            agent_invoke,
            agent_proposals,
            agent_decide,
            agent_sessions,
            agent_steps,
            agent_undo,
            agent_redo
        ])
        .run(tauri::generate_context!())
        .expect("error while running the Elfiee Tauri host");
}
