//! The rmcp [`ServerHandler`]: tools from [`super::tools`], the block resources, and change
//! notifications driven by the file's committed events.

#![allow(deprecated)] // resources/subscribe is legacy-only in rmcp, but pre-2026 clients use it

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elfiee_engine::FileHandle;
use elfiee_model::{CapError, Event};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::stdio::OVERSIZED_METHOD;
use super::tools::{self, ToolError};

/// URI of the block list resource.
pub const BLOCKS_URI: &str = "elfiee://blocks";
/// Prefix of one block's resource URI: `elfiee://block/{id}`.
pub const BLOCK_URI_PREFIX: &str = "elfiee://block/";

/// What a batch of committed events changed.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// Blocks created, deleted, written, renamed or linked.
    pub blocks: BTreeSet<String>,
}

/// The MCP server for one `.elf`, acting as one editor. Cheap to clone.
#[derive(Clone)]
pub struct ElfieeServer {
    inner: Arc<Inner>,
}

struct Inner {
    file: FileHandle,
    editor: String,
    changes: broadcast::Sender<Arc<Change>>,
    /// Set by `notifications/initialized` (classic lifecycle): notifications may be sent.
    initialized: AtomicBool,
    /// URIs the client subscribed to with `resources/subscribe` (classic lifecycle).
    subscribed: Mutex<BTreeSet<String>>,
    /// This server's checkpoint session (`mcp-<uuid>`): each tool call that may change
    /// something is a step, so the client can list and undo its own edits.
    session_id: String,
    /// The step recorder, made on the first writing call of an agent's server; calls are
    /// checkpointed one at a time.
    steps: tokio::sync::Mutex<Option<(crate::checkpoint::StepRecorder, u64)>>,
}

impl ElfieeServer {
    pub fn new(file: FileHandle, editor: String) -> ElfieeServer {
        let (changes, _) = broadcast::channel(64);
        ElfieeServer {
            inner: Arc::new(Inner {
                file,
                editor,
                changes,
                initialized: AtomicBool::new(false),
                subscribed: Mutex::new(BTreeSet::new()),
                session_id: format!("mcp-{}", uuid::Uuid::new_v4()),
                steps: tokio::sync::Mutex::new(None),
            }),
        }
    }

    pub fn editor(&self) -> &str {
        &self.inner.editor
    }

    /// The checkpoint session of this server (see `elfiee_steps` / `elfiee_undo`).
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    /// Writes what the agent's project directory holds that its folder does not (Claude
    /// Code's own shell and editor see the folder, not the document): the export the agent
    /// loop does before each shell step, done after each change. A refusal (a file changed
    /// on disk) is logged; the export's outcome is in the log.
    async fn export_project(&self, agent: &str) {
        let file = &self.inner.file;
        let dirty = file.with_state(|s| {
            let dir = crate::service::agent_referenced(s, agent, "directory")?;
            elfiee_capabilities::builtin::directory_status(s, dir)
                .is_dirty()
                .then(|| dir.block_id.clone())
        });
        if let Some(dir) = dirty {
            match crate::service::export_directory(file, &self.inner.editor, &dir).await {
                Ok(out) if out["refused"].as_array().is_some_and(|r| !r.is_empty()) => {
                    tracing::warn!(refused = %out["refused"], "export left files changed on disk alone")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "export after a change failed"),
            }
        }
    }

    /// Runs a tool; a call that may change something is checkpointed as one step of this
    /// server's session when its editor is an agent's (Claude Code's edits, seed 004 §3).
    pub async fn run_tool(&self, name: &str, args: Value) -> Result<Value, tools::ToolError> {
        let (file, editor) = (&self.inner.file, self.inner.editor.as_str());
        // With hooks installed, the step tools act on the calling Claude Code session.
        let hooked = tools::CHECKPOINT_TOOLS
            .contains(&name)
            .then(|| super::proposals::agent_of(file, editor))
            .flatten()
            .filter(|a| crate::hooks::installed(file, a))
            .and_then(|a| crate::hooks::claude_session(file, &a));
        let session = Some(hooked.as_deref().unwrap_or(self.inner.session_id.as_str()));
        let writes = tools::catalogue()
            .iter()
            .any(|t| t.name == name && !t.read_only)
            && !tools::CHECKPOINT_TOOLS.contains(&name);
        // With hooks installed, Claude Code's calls are steps of its own session, recorded by
        // the hooks (the call's `PreToolUse` and `PostToolUse` bracket it).
        let agent = writes
            .then(|| super::proposals::agent_of(file, editor))
            .flatten()
            .filter(|a| !crate::hooks::installed(file, a));
        let Some(agent) = agent else {
            return tools::call_in_session(file, editor, session, name, args).await;
        };
        let mut guard = self.inner.steps.lock().await;
        if guard.is_none() {
            let last = crate::checkpoint::History::load(file, &self.inner.session_id)
                .map(|h| h.next_step() - 1)
                .unwrap_or(0);
            *guard = Some((crate::checkpoint::StepRecorder::new(file, &agent), last));
        }
        let (recorder, last) = guard.as_mut().expect("made above");
        let start = recorder.begin();
        let result = tools::call_in_session(file, editor, session, name, args).await;
        if result.is_ok() {
            self.export_project(&agent).await;
        }
        match start.and_then(|s| recorder.end(s, *last + 1)) {
            Ok(mut entry) => {
                entry["session_id"] = json!(self.inner.session_id);
                entry["tools"] = json!([name]);
                let cmd = elfiee_model::Command::new(editor, "agent.session", Some(&agent), entry);
                match file.submit(cmd).await {
                    Ok(_) => {
                        recorder.committed();
                        *last += 1;
                    }
                    Err(e) => tracing::warn!(error = %e, "checkpoint not recorded"),
                }
            }
            Err(e) => tracing::warn!(error = %e, "checkpoint failed; this call is not a step"),
        }
        result
    }

    /// Reads the file's committed events until it closes and publishes, per batch of events that
    /// arrive together, which blocks they changed.
    pub async fn watch_file(self) {
        let mut events = self.inner.file.subscribe();
        while let Some(first) = events.recv().await {
            let mut change = Change::default();
            self.classify(&first, &mut change);
            // Coalesce a burst (an import commits many events) into one notification.
            for _ in 0..10_000 {
                match tokio::time::timeout(Duration::from_millis(25), events.recv()).await {
                    Ok(Some(e)) => self.classify(&e, &mut change),
                    Ok(None) | Err(_) => break,
                }
            }
            if !change.blocks.is_empty() {
                tracing::debug!(blocks = change.blocks.len(), "blocks changed");
                let _ = self.inner.changes.send(Arc::new(change));
            }
        }
    }

    fn classify(&self, e: &Event, change: &mut Change) {
        let is_block = e.cap_id() == "core.delete"
            || self
                .inner
                .file
                .with_state(|s| s.blocks.contains_key(&e.entity));
        if !is_block || matches!(e.cap_id(), "core.grant" | "core.revoke") {
            return;
        }
        change.blocks.insert(e.entity.clone());
        if let Some(to) = e.value.get("to").and_then(Value::as_str) {
            change.blocks.insert(to.to_owned()); // its parents changed
        }
    }

    /// Classic lifecycle: sends `notifications/resources/list_changed` (and `updated` for
    /// subscribed resources) to `peer` for every change, once the client said `initialized`.
    pub async fn notify_classic(self, peer: Peer<RoleServer>) {
        let mut rx = self.inner.changes.subscribe();
        loop {
            let change = match rx.recv().await {
                Ok(c) => Some(c),
                Err(broadcast::error::RecvError::Lagged(_)) => None, // say everything changed
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if peer.peer_info().is_none() || !self.inner.initialized.load(Ordering::Acquire) {
                continue; // 2026-07-28 sessions get notifications through subscriptions/listen
            }
            if let Err(e) = peer.notify_resource_list_changed().await {
                tracing::debug!(error = %e, "cannot send resources/list_changed; client gone");
                return;
            }
            let subscribed: Vec<String> = self
                .inner
                .subscribed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .collect();
            for uri in subscribed
                .into_iter()
                .filter(|u| affected(u, change.as_deref()))
            {
                let _ = peer
                    .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(
                        uri,
                    ))
                    .await;
            }
        }
    }

    fn tool_error(&self, tool: &str, e: ToolError) -> CallToolResult {
        tracing::info!(tool, editor = %self.inner.editor, kind = %e.kind, "tool call failed: {}", e.message);
        let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
            "{tool} failed: {}",
            e.message
        ))]);
        r.structured_content = Some(e.to_json());
        r
    }

    fn read_block_resource(&self, uri: &str, id: &str) -> Result<ReadResourceResult, McpError> {
        let file = &self.inner.file;
        let block = file
            .read_block(&self.inner.editor, id)
            .map_err(|e| match e {
                elfiee_engine::EngineError::Rejected(CapError::BlockNotFound(_)) => {
                    McpError::resource_not_found(
                        format!("no block '{id}'; read {BLOCKS_URI} for the list of blocks"),
                        Some(json!({"uri": uri})),
                    )
                }
                other => McpError::invalid_request(
                    tools::engine_error(other).message,
                    Some(json!({"uri": uri})),
                ),
            })?;
        let text = |k: &str| {
            block
                .contents
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let contents = match (block.block_type.as_str(), text("markdown"), text("text")) {
            ("markdown", Some(md), _) => {
                ResourceContents::text(md, uri).with_mime_type("text/markdown")
            }
            ("code", _, Some(src)) => ResourceContents::text(src, uri).with_mime_type("text/plain"),
            _ => {
                let v = tools::block_get(file, &self.inner.editor, id)
                    .map_err(|e| McpError::invalid_request(e.message, None))?;
                ResourceContents::text(pretty(&v), uri).with_mime_type("application/json")
            }
        };
        Ok(ReadResourceResult::new(vec![contents]))
    }
}

/// Whether a change touches resource `uri` (`None`: unknown, assume it does).
fn affected(uri: &str, change: Option<&Change>) -> bool {
    match (change, uri.strip_prefix(BLOCK_URI_PREFIX)) {
        (None, _) => true,
        (Some(_), None) => uri == BLOCKS_URI,
        (Some(c), Some(id)) => c.blocks.contains(id),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn to_tool(spec: tools::ToolSpec) -> Tool {
    let schema = match spec.input_schema {
        Value::Object(m) => m,
        _ => Default::default(),
    };
    Tool::new(spec.name, spec.description, Arc::new(schema))
        .with_title(spec.title)
        .with_annotations(
            ToolAnnotations::new()
                .read_only(spec.read_only)
                .destructive(spec.destructive)
                .open_world(false),
        )
}

/// Methods this server implements, with the shape of their params (for malformed requests).
const STANDARD_METHODS: &[(&str, &str)] = &[
    ("initialize", "{protocolVersion: string, capabilities: object, clientInfo: {name, version}}"),
    ("ping", "no params"),
    ("server/discover", "{_meta: {io.modelcontextprotocol/protocolVersion, io.modelcontextprotocol/clientCapabilities}}"),
    ("tools/list", "{cursor?: string}"),
    ("tools/call", "{name: string, arguments?: object}"),
    ("resources/list", "{cursor?: string}"),
    ("resources/templates/list", "{cursor?: string}"),
    ("resources/read", "{uri: string}"),
    ("resources/subscribe", "{uri: string}"),
    ("resources/unsubscribe", "{uri: string}"),
    ("subscriptions/listen", "{notifications: {resourcesListChanged?: bool, resourceSubscriptions?: [string]}}"),
];

const INSTRUCTIONS: &str = "Elfiee: a block-based, event-sourced document (.elf). Every tool runs as this \
server's editor and is checked against its grants; a refused call says which `elfiee grant` would allow it. \
Start with elfiee_block_list, read with elfiee_block_get, create with elfiee_block_create and write with \
elfiee_markdown_write / elfiee_code_write. Resources: elfiee://blocks and elfiee://block/{id}.";

impl ServerHandler for ElfieeServer {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .build();
        ServerConfig::new(caps)
            .with_server_info(
                Implementation::new("elfiee", env!("CARGO_PKG_VERSION")).with_title("Elfiee"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {
        tracing::info!(editor = %self.inner.editor, "MCP client initialized");
        self.inner.initialized.store(true, Ordering::Release);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            tools::catalogue().into_iter().map(to_tool).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::catalogue()
            .into_iter()
            .find(|t| t.name == name)
            .map(to_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        if !tools::is_known(name) {
            let names: Vec<&str> = tools::catalogue().iter().map(|t| t.name).collect();
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool '{name}'; call tools/list — the tools are: {}",
                    names.join(", ")
                ),
                Some(json!({"tool": name})),
            ));
        }
        let args = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let result = match self.run_tool(name, args).await {
            Ok(v) => {
                tracing::info!(tool = name, editor = %self.inner.editor, "tool call done");
                let mut r = CallToolResult::structured(v.clone());
                r.content = vec![ContentBlock::text(pretty(&v))];
                r
            }
            Err(e) => self.tool_error(name, e),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let mut out = vec![Resource::new(BLOCKS_URI, "blocks")
            .with_title("All blocks")
            .with_description("Every block of the document: id, name, type, owner, relations")
            .with_mime_type("application/json")];
        let editor = &self.inner.editor;
        self.inner.file.with_state(|s| {
            for b in s.blocks.values() {
                let mime = match b.block_type.as_str() {
                    "markdown" => "text/markdown",
                    "code" => "text/plain",
                    _ => "application/json",
                };
                let readable = elfiee_capabilities::cbac::authorize(
                    s,
                    editor,
                    &format!("{}.read", b.block_type),
                    Some(b),
                )
                .is_ok();
                if readable {
                    out.push(
                        Resource::new(format!("{BLOCK_URI_PREFIX}{}", b.block_id), b.name.clone())
                            .with_description(format!("{} block", b.block_type))
                            .with_mime_type(mime),
                    );
                }
            }
        });
        Ok(ListResourcesResult::with_all_items(out))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            vec![ResourceTemplate::new(
                format!("{BLOCK_URI_PREFIX}{{id}}"),
                "block",
            )
            .with_title("One block")
            .with_description(
                "A block's content: markdown text, code text, or the block as JSON for other types",
            )],
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri.as_str();
        if uri == BLOCKS_URI {
            let v = tools::block_list(&self.inner.file, &self.inner.editor);
            return Ok(ReadResourceResult::new(vec![
                ResourceContents::text(pretty(&v), uri).with_mime_type("application/json")
            ])
            .into());
        }
        match uri.strip_prefix(BLOCK_URI_PREFIX) {
            Some(id) if !id.is_empty() => Ok(self.read_block_resource(uri, id)?.into()),
            _ => Err(McpError::resource_not_found(
                format!("unknown resource '{uri}'; the resources are {BLOCKS_URI} and {BLOCK_URI_PREFIX}{{id}}"),
                Some(json!({"uri": uri})),
            )),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if request.uri != BLOCKS_URI && !request.uri.starts_with(BLOCK_URI_PREFIX) {
            return Err(McpError::invalid_params(
                format!(
                    "cannot subscribe to '{}'; use {BLOCKS_URI} or {BLOCK_URI_PREFIX}{{id}}",
                    request.uri
                ),
                None,
            ));
        }
        self.inner
            .subscribed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner
            .subscribed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|u| *u == BLOCKS_URI || u.starts_with(BLOCK_URI_PREFIX))
            .cloned()
            .collect();
        let mut f = SubscriptionFilter::builder().resources_list_changed();
        if !uris.is_empty() {
            f = f.resource_subscriptions(uris);
        }
        Some(f.build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut rx = self.inner.changes.subscribe();
        let sink = context.sink().clone();
        let accepted = context.accepted().clone();
        loop {
            let change = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                c = rx.recv() => match c {
                    Ok(c) => Some(c),
                    Err(broadcast::error::RecvError::Lagged(_)) => None,
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            };
            if accepted.resources_list_changed == Some(true)
                && sink.notify_resource_list_changed().await.is_err()
            {
                return Ok(());
            }
            for uri in accepted
                .resource_subscriptions
                .iter()
                .flatten()
                .filter(|u| affected(u, change.as_deref()))
            {
                if sink.notify_resource_updated(uri.clone()).await.is_err() {
                    return Ok(());
                }
            }
        }
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        if request.method == OVERSIZED_METHOD {
            let p = request.params.unwrap_or_default();
            let (bytes, limit) = (
                p["bytes"].as_u64().unwrap_or(0),
                p["limit"].as_u64().unwrap_or(0),
            );
            return Err(McpError::invalid_request(
                format!(
                    "message of {bytes} bytes is larger than this server's limit of {limit} bytes and was not read; \
                     nothing was changed — send large content in several smaller writes or blocks"
                ),
                Some(json!({"bytes": bytes, "limit": limit})),
            ));
        }
        // rmcp hands over a standard method here when its params did not parse.
        if let Some(shape) = STANDARD_METHODS
            .iter()
            .find(|(m, _)| *m == request.method)
            .map(|(_, p)| p)
        {
            return Err(McpError::invalid_params(
                format!(
                    "malformed params for '{}': expected {shape}",
                    request.method
                ),
                Some(json!({"method": request.method})),
            ));
        }
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "method '{}' is not supported by the elfiee MCP server",
                request.method
            ),
            None,
        ))
    }
}

/// Serves MCP over stdin/stdout as `editor` until the client disconnects.
pub async fn serve_stdio(
    file: FileHandle,
    editor: String,
) -> Result<(), elfiee_engine::EngineError> {
    if file.with_state(|s| s.editor(&editor).is_none()) {
        return Err(elfiee_engine::EngineError::Rejected(
            CapError::UnknownEditor(editor),
        ));
    }
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (pump_in, rmcp_in) = tokio::io::duplex(1 << 20);
    let pump = tokio::spawn(super::stdio::pump(
        stdin,
        pump_in,
        super::stdio::MAX_MESSAGE_BYTES,
    ));
    // The pump already bounds lines; rmcp's own limit only has to let them through.
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(rmcp_in, stdout)
        .with_max_line_length(super::stdio::MAX_MESSAGE_BYTES + 4096);

    // Claude Code's hooks hand their payloads to this process while it owns the document.
    crate::hooks::provide(&file);
    let server = ElfieeServer::new(file.clone(), editor.clone());
    let watcher = tokio::spawn(server.clone().watch_file());
    tracing::info!(editor = %editor, elf = %file.path().display(), "MCP server listening on stdio");
    let outcome = match rmcp::ServiceExt::serve(server.clone(), transport).await {
        Ok(running) => {
            let notifier = tokio::spawn(server.clone().notify_classic(running.peer().clone()));
            let reason = running.waiting().await;
            tracing::info!(?reason, "MCP session ended");
            notifier.abort();
            Ok(())
        }
        // The client went away before (or while) initializing: nothing to serve.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(elfiee_engine::EngineError::Effect(format!(
            "MCP session could not start: {e}; the first message must be `initialize` or `server/discover`"
        ))),
    };
    watcher.abort();
    pump.abort();
    outcome
}
