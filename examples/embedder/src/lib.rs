//! What the backend of a desktop app (a Tauri app, say) does with the Elfiee engine, written
//! without the window so that it builds against the engine core alone
//! (`elfiee = { default-features = false }`: no agents, MCP, sync, graph or CLI).
//!
//! Each method of [`Host`] is what one `#[tauri::command]` would wrap: open or create a
//! document, submit a command, list and read blocks, and forward the committed events to the
//! page (a Tauri app would `emit` each one; here they go to any `FnMut(Forwarded)`).
//! `examples/tauri-host` is the same host in a real webview, with every layer on.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use elfiee::{Block, Command, Engine, EngineError, Event, FileHandle};
use serde::Serialize;

/// What a command answers on failure (a Tauri command serializes it as `{kind, message}`).
#[derive(Debug, Serialize, PartialEq)]
#[serde(tag = "kind", content = "message")]
pub enum HostError {
    /// The engine refused or failed; the message says what to do.
    Engine(String),
    /// The page used a path it has not opened.
    NotOpen(String),
}

impl From<EngineError> for HostError {
    fn from(e: EngineError) -> Self {
        HostError::Engine(e.to_string())
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Engine(m) => write!(f, "{m}"),
            HostError::NotOpen(p) => write!(f, "{p} is not open: open it first"),
        }
    }
}

/// A committed event as the page receives it.
#[derive(Clone, Debug, Serialize)]
pub struct Forwarded {
    pub path: String,
    pub event: Event,
}

/// The documents a window has open, by the path the page used.
#[derive(Default)]
pub struct Host {
    files: Mutex<HashMap<String, FileHandle>>,
}

impl Host {
    /// The open document at `path` (keyed by `path.display()`, as the page named it).
    fn get(&self, path: &Path) -> Result<FileHandle, HostError> {
        let key = path.display().to_string();
        let file = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        file.ok_or(HostError::NotOpen(key))
    }

    /// Opens `path`, or creates it with `owner` as its owner; from then on each committed event
    /// goes to `forward` (from a task of its own, as a Tauri app emits them to the page).
    pub async fn open(
        &self,
        path: &Path,
        owner: Option<&str>,
        mut forward: impl FnMut(Forwarded) + Send + 'static,
    ) -> Result<u64, HostError> {
        if let Ok(file) = self.get(path) {
            return Ok(file.last_seq());
        }
        let key = path.display().to_string();
        let file = match owner {
            Some(name) => Engine::global().init(path, name).await?,
            None => Engine::global().open(path).await?,
        };
        let mut events = file.subscribe();
        let forward_path = key.clone();
        tokio::spawn(async move {
            // A slow page never loses events: the subscription catches up from the log.
            while let Some(event) = events.recv().await {
                forward(Forwarded {
                    path: forward_path.clone(),
                    event,
                });
            }
        });
        let last = file.last_seq();
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, file);
        Ok(last)
    }

    /// Submits one command as `editor`; answers with the committed (durable) events.
    pub async fn submit(
        &self,
        path: &Path,
        editor: &str,
        cap_id: &str,
        block_id: Option<&str>,
        payload: serde_json::Value,
    ) -> Result<Vec<Event>, HostError> {
        let file = self.get(path)?;
        Ok(file
            .submit(Command::new(editor, cap_id, block_id, payload))
            .await?)
    }

    /// The blocks `editor` may read, in id order (each checked through CBAC).
    pub fn list_blocks(&self, path: &Path, editor: &str) -> Result<Vec<Block>, HostError> {
        let file = self.get(path)?;
        let ids: Vec<String> = file.with_state(|s| s.blocks.keys().collect());
        Ok(ids
            .iter()
            .filter_map(|id| file.read_block(editor, id).ok())
            .collect())
    }

    /// Closes every open document (the window closes).
    pub async fn close_all(&self) {
        let files: Vec<FileHandle> = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, f)| f)
            .collect();
        for file in files {
            file.close().await;
        }
    }
}
