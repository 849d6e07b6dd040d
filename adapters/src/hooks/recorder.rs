//! The recorder: turns Claude Code's hook calls into the document's record of the session
//! (see the module docs of [`crate::hooks`] for what is recorded and why).
//!
//! One recorder per open document, in the process that owns it (the `elfiee mcp-server`
//! Claude Code runs, `elfiee serve`); hooks reach it through the owner socket. A hook that
//! finds no recorder makes a one-shot one in its own process ([`crate::hooks::handle_locally`]).
//!
//! **Step boundaries.** Each agent's project folder has one baseline: the manifest at the last
//! record. A `PreToolUse` with no other call of that agent open first records what changed
//! since the baseline as the user's (the disk moved on between calls: the document follows);
//! a `PostToolUse` records everything that changed since the baseline as that call's step. So
//! nothing is recorded twice or lost. Two calls running at once (two sessions in one project,
//! or one session's calls side by side): a file that a call still open names (the `file_path`
//! of its Write, Edit or MultiEdit) is left for that call's step (the tracker gives its change
//! back, and the document takes it in with that step), unless the finishing call names it
//! too; other changes go to the first call to finish (a `Bash` names no file). Document ranges of steps
//! never overlap: a step starts at its call's `PreToolUse` or at the agent's previous record,
//! whichever is later. A hook delivered again (the same `tool_use_id`) records nothing: a
//! second `PreToolUse` would leave an open call that holds the folder, a second `PostToolUse`
//! would take another call's changes.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use elfiee_engine::{EngineError, FileHandle};
use elfiee_model::{Command, Event, ImportedFile, SkippedFile, EXTERNAL_ROOT_PATH};
use serde_json::{json, Value};

use super::govern::{self, AgentRef, Verdict};
use super::lookup::Lookup;
use super::transcript;
use super::{HookInput, HookReply};
use crate::checkpoint::{FileChange, FolderTracker};

/// Files larger than this are recorded in the step (by hash) but not as text in the
/// directory block (as the importer's default limit).
const MAX_TEXT_BYTES: u64 = 1024 * 1024;

/// Calls left open longer than this (a `PostToolUse` that never came) stop holding the
/// folder: changes after them are judged as between calls again.
const STALE_CALL_SECS: u64 = 600;

struct OpenCall {
    session: String,
    key: String,
    tool: String,
    seq: u64,
    at: Instant,
    /// The file the tool names (Write, Edit, MultiEdit), absolute: while the call is open,
    /// a change to it is this call's, not another session's step's.
    target: Option<PathBuf>,
}

struct AgentTrack {
    agent: AgentRef,
    /// The agent block's owner: the person who works with the agent (their prompts, their
    /// changes between calls).
    owner: String,
    dir: Option<String>,
    tracker: Option<FolderTracker>,
    /// Seq of the agent's last record (steps start after it).
    last_doc_to: u64,
    open: Vec<OpenCall>,
    /// The latest calls whose `PostToolUse` came (session, `tool_use_id`), newest last: a hook
    /// delivered again for one of them records nothing. (A call a `Stop` closed is not among
    /// them: its `PostToolUse` may still come, from a call that ran on past a sub-agent's end.)
    closed: std::collections::VecDeque<(String, String)>,
}

/// How many closed calls an agent's track remembers (for repeated deliveries).
const CLOSED_CALLS: usize = 256;

impl AgentTrack {
    /// Whether this `PreToolUse` or `PostToolUse` repeats one already handled: its call is
    /// closed, or (a `PreToolUse`) already open. Only calls Claude Code named (`tool_use_id`)
    /// count: two calls without one may well have the same tool and input.
    fn repeated(&self, input: &HookInput, pre: bool) -> bool {
        let Some(id) = &input.tool_use_id else {
            return false;
        };
        let session = &input.session_id;
        self.closed.iter().any(|(s, k)| s == session && k == id)
            || (pre
                && self
                    .open
                    .iter()
                    .any(|c| c.session == *session && c.key == *id))
    }

    fn close(&mut self, session: &str, key: String) {
        if self.closed.len() == CLOSED_CALLS {
            self.closed.pop_front();
        }
        self.closed.push_back((session.to_owned(), key));
    }
}

#[derive(Default)]
struct SessionTrack {
    next_step: u64,
    /// Where reading the session's transcript goes on.
    offset: u64,
    /// The same for each sub-agent's transcript, by agent id.
    sub_offsets: HashMap<String, u64>,
    titled: bool,
}

#[derive(Default)]
struct Tracks {
    agents: HashMap<String, AgentTrack>,
    sessions: HashMap<String, SessionTrack>,
}

/// Records Claude Code sessions of the agents of one document.
pub struct Recorder {
    file: FileHandle,
    tracks: tokio::sync::Mutex<Tracks>,
    /// Where the agent and directory blocks are (not read from every block at each call).
    lookup: Lookup,
}

/// What the session's records say so far: next step, transcript offset, whether titled.
fn load_session(file: &FileHandle, session_id: &str) -> Result<SessionTrack, EngineError> {
    let mut t = SessionTrack {
        next_step: 1,
        ..SessionTrack::default()
    };
    for e in file.events(1)? {
        if e.cap_id() != "agent.session"
            || e.value.get("session_id").and_then(Value::as_str) != Some(session_id)
        {
            continue;
        }
        match e.value.get("entry").and_then(Value::as_str) {
            Some("step") => {
                let n = e.value.get("step").and_then(Value::as_u64).unwrap_or(0);
                t.next_step = t.next_step.max(n + 1);
            }
            Some("title") => t.titled = true,
            _ => {}
        }
        if let Some(o) = e.value.get("transcript_offset").and_then(Value::as_u64) {
            match e.value.get("subagent").and_then(Value::as_str) {
                Some(sub) => {
                    let at = t.sub_offsets.entry(sub.to_owned()).or_default();
                    *at = (*at).max(o);
                }
                None => t.offset = t.offset.max(o),
            }
        }
    }
    Ok(t)
}

/// The key that pairs a call's `PostToolUse` with its `PreToolUse`.
fn call_key(input: &HookInput) -> String {
    match &input.tool_use_id {
        Some(id) => id.clone(),
        None => format!(
            "{}:{}",
            input.tool_name.as_deref().unwrap_or(""),
            blake3::hash(
                input
                    .tool_input
                    .as_ref()
                    .map(Value::to_string)
                    .unwrap_or_default()
                    .as_bytes()
            )
            .to_hex()
        ),
    }
}

/// Whether a change to `path` is one to the file `target` a call names: the file itself, or
/// the temporary file an atomic write of it goes through. Claude Code writes
/// `<file>.tmp.<pid>.<random>` beside the file and renames it over it (checked against
/// 2.1.332): a step taken in between sees the temporary file, not the named one.
fn names(target: &Path, path: &Path) -> bool {
    if path == target {
        return true;
    }
    let (Some(name), Some(file)) = (target.file_name(), path.file_name()) else {
        return false;
    };
    path.parent() == target.parent()
        && file.to_str().zip(name.to_str()).is_some_and(|(f, n)| {
            f.strip_prefix(n)
                .is_some_and(|rest| rest.starts_with(".tmp."))
        })
}

/// Whether a tool's calls are steps: Claude Code's writing tools, `Bash`, and MCP tools —
/// except the `elfiee` server's tools that only read or that manage steps themselves.
fn is_step_tool(tool: &str) -> bool {
    if let Some(name) = tool.strip_prefix("mcp__elfiee__") {
        use crate::mcp::tools::{catalogue, CHECKPOINT_TOOLS};
        return catalogue().iter().any(|t| t.name == name && !t.read_only)
            && !CHECKPOINT_TOOLS.contains(&name);
    }
    govern::records_steps(tool)
}

impl Recorder {
    /// A recorder for `file`.
    pub fn new(file: &FileHandle) -> Recorder {
        Recorder {
            file: file.clone(),
            tracks: tokio::sync::Mutex::new(Tracks::default()),
            lookup: Lookup::default(),
        }
    }

    /// Handles one hook call of the agent whose editor is `editor`.
    pub async fn handle(&self, editor: &str, input: &HookInput) -> Result<HookReply, EngineError> {
        let Some((agent, owner, enabled)) = self.lookup.agent(&self.file, editor) else {
            return Ok(HookReply::warn(format!(
                "elfiee: no agent with editor '{editor}' in {}; this session is not recorded (run `elfiee agent enable` again)",
                self.file.path().display()
            )));
        };
        if !enabled {
            return Ok(HookReply::default());
        }
        let mut guard = self.tracks.lock().await;
        let tracks = &mut *guard;
        if !tracks.agents.contains_key(&agent.block_id) {
            let project = crate::checkpoint::project_of(&self.file, &agent.block_id);
            let tracker = project
                .as_ref()
                .filter(|(_, root)| root.is_dir())
                .map(|(d, root)| FolderTracker::open(&self.file, d, root));
            tracks.agents.insert(
                agent.block_id.clone(),
                AgentTrack {
                    agent: agent.clone(),
                    owner,
                    dir: project.map(|(d, _)| d),
                    tracker,
                    // A call whose `PreToolUse` this recorder did not see starts here.
                    last_doc_to: self.file.last_seq(),
                    open: Vec::new(),
                    closed: Default::default(),
                },
            );
        }
        if !tracks.sessions.contains_key(&input.session_id) {
            let t = load_session(&self.file, &input.session_id)?;
            tracks.sessions.insert(input.session_id.clone(), t);
        }
        let track = tracks
            .agents
            .get_mut(&agent.block_id)
            .expect("inserted above");
        let session = tracks
            .sessions
            .get_mut(&input.session_id)
            .expect("inserted above");
        let mut s = Sess {
            file: &self.file,
            lookup: &self.lookup,
            input,
            track,
            session,
            warnings: Vec::new(),
        };
        let mut reply = HookReply::default();
        match input.hook_event_name.as_str() {
            "SessionStart" => {
                s.baseline().await?;
            }
            "UserPromptSubmit" => {
                s.transcript().await?;
                s.prompt().await?;
                s.baseline().await?;
            }
            "PreToolUse" => reply = s.pre_tool().await?,
            "PostToolUse" | "PostToolUseFailure" => s.post_tool().await?,
            "Stop" | "SubagentStop" | "SessionEnd" => s.stop().await?,
            _ => {}
        }
        if reply.deny.is_none() && !s.warnings.is_empty() {
            reply.warn = Some(s.warnings.join("\n"));
        }
        Ok(reply)
    }
}

/// One hook call's view of its agent and session.
struct Sess<'a> {
    file: &'a FileHandle,
    lookup: &'a Lookup,
    input: &'a HookInput,
    track: &'a mut AgentTrack,
    session: &'a mut SessionTrack,
    /// What the user should hear about this call (the document could not follow, …).
    warnings: Vec<String>,
}

impl Sess<'_> {
    fn agent_editor(&self) -> &str {
        &self.track.agent.editor_id
    }

    async fn record(&self, editor: &str, entry: Value) -> Result<Vec<Event>, EngineError> {
        self.file.submit(self.entry_cmd(editor, entry)).await
    }

    /// The `agent.session` command that records `entry` of this session as `editor`.
    fn entry_cmd(&self, editor: &str, mut entry: Value) -> Command {
        entry["session_id"] = json!(self.input.session_id);
        entry["source"] = json!("claude-code");
        Command::new(
            editor,
            "agent.session",
            Some(&self.track.agent.block_id),
            entry,
        )
    }

    /// The user's prompt (by the agent block's owner), and the session's title from the first.
    async fn prompt(&mut self) -> Result<(), EngineError> {
        let Some(prompt) = self.input.prompt.as_deref() else {
            return Ok(());
        };
        let owner = self.track.owner.clone();
        let mut cmds = Vec::new();
        let entry = |mut v: Value| {
            v["session_id"] = json!(self.input.session_id);
            v["source"] = json!("claude-code");
            Command::new(&owner, "agent.session", Some(&self.track.agent.block_id), v)
        };
        if !self.session.titled {
            let first = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let title = transcript::cut(first.trim(), 80);
            cmds.push(entry(json!({"entry": "title", "title": title})));
        }
        let mut message = serde_json::Map::new();
        message.insert("type".into(), json!("text"));
        let text = if prompt.len() > transcript::PREVIEW_BYTES {
            let r = self.file.put_bytes(prompt.as_bytes())?;
            message.insert(
                "text_ref".into(),
                json!({"hash": r.hash.to_hex(), "len": r.len}),
            );
            transcript::cut(prompt, transcript::PREVIEW_BYTES)
        } else {
            prompt
        };
        message.insert("text".into(), json!(text));
        cmds.push(entry(json!({
            "entry": "message",
            "message": {"role": "user", "content": [message]},
        })));
        self.file.submit_all(cmds).await?;
        self.session.titled = true;
        Ok(())
    }

    /// Records the session's transcript's new lines (one batch).
    async fn transcript(&mut self) -> Result<(), EngineError> {
        let (cmds, to) = self.transcript_cmds();
        if let Some(to) = to {
            self.file.submit_all(cmds).await?;
            self.session.offset = to;
        }
        Ok(())
    }

    /// The commands that record the session's transcript's new lines, and the offset after
    /// them (`None`: nothing new), for the caller to commit with its own.
    fn transcript_cmds(&self) -> (Vec<Command>, Option<u64>) {
        let Some(path) = self.input.transcript_path.as_deref() else {
            return (Vec::new(), None);
        };
        match self.new_transcript_lines(path, self.session.offset, None) {
            Some((cmds, to)) => (cmds, Some(to)),
            None => (Vec::new(), None),
        }
    }

    /// Records a finished sub-agent's own transcript (`SubagentStop`), its entries marked
    /// with the sub-agent's id.
    async fn subagent_transcript(&mut self) -> Result<(), EngineError> {
        let (Some(path), Some(id)) = (
            self.input.agent_transcript_path.clone(),
            self.input.agent_id.clone(),
        ) else {
            return Ok(());
        };
        let from = self.session.sub_offsets.get(&id).copied().unwrap_or(0);
        if let Some((cmds, to)) = self.new_transcript_lines(&path, from, Some(&id)) {
            self.file.submit_all(cmds).await?;
            self.session.sub_offsets.insert(id, to);
        }
        Ok(())
    }

    /// The commands that record the lines of the transcript at `path` after byte `from`, and
    /// the offset after them (`None`: nothing new, or not readable yet — Claude Code writes it
    /// after the first prompt).
    fn new_transcript_lines(
        &self,
        path: &str,
        from: u64,
        subagent: Option<&str>,
    ) -> Option<(Vec<Command>, u64)> {
        let (lines, offset) = match transcript::read_new_lines(Path::new(path), from) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, path, "transcript not readable yet");
                return None;
            }
        };
        if offset == from {
            return None;
        }
        let mut entries: Vec<Value> = lines
            .iter()
            .filter_map(|l| transcript::entry_of(self.file, l))
            .collect();
        // The offset rides on the last entry (or on an empty message when no line was worth
        // keeping), so a new process resumes where this one stopped.
        match entries.last_mut() {
            Some(last) => last["transcript_offset"] = json!(offset),
            None => entries.push(json!({
                "entry": "message",
                "source": "claude-code",
                "transcript_offset": offset,
                "message": {"role": "assistant", "content": []},
            })),
        }
        let cmds: Vec<Command> = entries
            .into_iter()
            .map(|mut v| {
                v["session_id"] = json!(self.input.session_id);
                if let Some(sub) = subagent {
                    v["subagent"] = json!(sub);
                }
                Command::new(
                    self.agent_editor(),
                    "agent.session",
                    Some(&self.track.agent.block_id),
                    v,
                )
            })
            .collect();
        Some((cmds, offset))
    }

    fn root(&self) -> Option<PathBuf> {
        self.track.tracker.as_ref().map(|t| t.root().to_path_buf())
    }

    /// Drops calls whose `PostToolUse` never came.
    fn drop_stale(&mut self) {
        self.track
            .open
            .retain(|c| c.at.elapsed().as_secs() < STALE_CALL_SECS);
    }

    /// Between calls: what changed on disk since the last record is the user's; the
    /// document follows (a `directory.sync` by the agent block's owner).
    async fn baseline(&mut self) -> Result<(), EngineError> {
        self.drop_stale();
        if !self.track.open.is_empty() {
            return Ok(());
        }
        let Some(tracker) = self.track.tracker.as_mut() else {
            return Ok(());
        };
        let first = !tracker.has_baseline();
        let (changes, stats) = tracker.scan_changes()?;
        if !first && !changes.is_empty() {
            let owner = self.track.owner.clone();
            if let Err(e) = self.sync(&owner, &changes).await {
                self.warnings.push(format!(
                    "elfiee: the project's changes between Claude Code's calls did not enter the document: {e}"
                ));
            }
        }
        self.track.last_doc_to = self.file.last_seq();
        // The cache changes with a first scan, a change, or a file read again (its times
        // moved); else the one saved last still holds (and a cache is only ever a cache).
        if first || !changes.is_empty() || stats.hashed > 0 {
            if let Some(t) = &self.track.tracker {
                t.save();
            }
        }
        Ok(())
    }

    async fn pre_tool(&mut self) -> Result<HookReply, EngineError> {
        let tool = self.input.tool_name.clone().unwrap_or_default();
        if let Some(name) = tool.strip_prefix("mcp__elfiee__") {
            if crate::mcp::tools::CHECKPOINT_TOOLS.contains(&name) {
                super::note_step_tool_call(&self.track.agent.block_id, &self.input.session_id);
            }
        }
        if !is_step_tool(&tool) {
            return Ok(HookReply::default());
        }
        let cwd = self
            .input
            .cwd
            .as_deref()
            .map(PathBuf::from)
            .or_else(|| self.root())
            .unwrap_or_default();
        let empty = Value::Null;
        let tool_input = self.input.tool_input.as_ref().unwrap_or(&empty);
        let target = govern::target_path(&tool, tool_input, &cwd);
        if let Some(path) = &target {
            let verdict = self.lookup.judge(self.file, &self.track.agent, path);
            if let Verdict::Deny(reason) = verdict {
                return Ok(HookReply::deny(reason));
            }
        }
        if self.track.repeated(self.input, true) {
            // Delivered again: the call is open (or done) already.
            return Ok(HookReply::default());
        }
        self.baseline().await?;
        self.track.open.push(OpenCall {
            session: self.input.session_id.clone(),
            key: call_key(self.input),
            tool,
            seq: self.file.last_seq(),
            at: Instant::now(),
            target,
        });
        Ok(HookReply::default())
    }

    async fn post_tool(&mut self) -> Result<(), EngineError> {
        let tool = self.input.tool_name.clone().unwrap_or_default();
        if !is_step_tool(&tool) {
            return Ok(());
        }
        if self.track.repeated(self.input, false) {
            // Delivered again: its step is recorded; what changed since is another's.
            return self.transcript().await;
        }
        let key = call_key(self.input);
        let closed = self
            .track
            .open
            .iter()
            .position(|c| c.key == key && c.session == self.input.session_id)
            .map(|i| self.track.open.remove(i));
        let started = closed.as_ref().map(|c| c.seq);
        let mine: Vec<PathBuf> = closed.and_then(|c| c.target).into_iter().collect();
        if self.input.tool_use_id.is_some() {
            self.track.close(&self.input.session_id, key);
        }
        // The transcript's new lines commit with the step's record (one commit fewer per
        // call: issue 37, "Fast"); the step's range ends before them (they are no change).
        let (lines, to) = self.transcript_cmds();
        self.step(vec![tool], &mine, started, lines).await?;
        if let Some(to) = to {
            self.session.offset = to;
        }
        Ok(())
    }

    /// The end of a turn (or of a sub-agent, or of the session): the transcript so far, and
    /// the calls of this session that never got their `PostToolUse` as one step.
    async fn stop(&mut self) -> Result<(), EngineError> {
        self.transcript().await?;
        if self.input.hook_event_name == "SubagentStop" {
            self.subagent_transcript().await?;
        }
        let session = self.input.session_id.clone();
        let mut tools = Vec::new();
        let mut started = None::<u64>;
        let mut mine = Vec::new();
        self.track.open.retain(|c| {
            if c.session == session {
                tools.push(c.tool.clone());
                mine.extend(c.target.clone());
                started = Some(started.map_or(c.seq, |s| s.min(c.seq)));
                false
            } else {
                true
            }
        });
        if !tools.is_empty() {
            self.step(tools, &mine, started, Vec::new()).await?;
        }
        if self.input.hook_event_name == "Stop" {
            let editor = self.agent_editor().to_owned();
            self.record(
                &editor,
                json!({"entry": "stop", "stop_reason": {"kind": "end_turn"}}),
            )
            .await?;
        }
        Ok(())
    }

    /// Records a step: what changed on disk since the baseline enters the directory block as
    /// the agent's, then the step's record, committed with `before` (records that go before
    /// it, such as the transcript's lines). Nothing changed anywhere: no step, and `before`
    /// alone is committed.
    async fn step(
        &mut self,
        tools: Vec<String>,
        targets: &[PathBuf],
        started: Option<u64>,
        mut before: Vec<Command>,
    ) -> Result<(), EngineError> {
        let doc_from = started
            .unwrap_or(self.track.last_doc_to)
            .max(self.track.last_doc_to);
        // Files that a call still open names (its Write, its Edit), unless a call this step
        // closes names them too: a change to one is that call's, left for its own step (two
        // sessions at once in one project, or one session's calls side by side).
        let theirs: BTreeSet<PathBuf> = self
            .track
            .open
            .iter()
            .filter_map(|c| c.target.clone())
            .filter(|p| !targets.contains(p))
            .collect();
        let changes = match self.track.tracker.as_mut() {
            Some(t) if t.has_baseline() => {
                let (all, _) = t.scan_changes()?;
                // Targets are resolved through symlinks (`govern::normalize`): so is the root.
                let root = std::fs::canonicalize(t.root()).unwrap_or_else(|_| t.root().into());
                let (given, mine): (Vec<_>, Vec<_>) = all.into_iter().partition(|c| {
                    let path = root.join(&c.path);
                    theirs.iter().any(|t| names(t, &path))
                });
                t.give_back(&given);
                mine
            }
            Some(t) => {
                // No baseline yet (a one-shot recorder on a project never scanned): this scan
                // becomes it; the call's changes cannot be told apart from the project.
                tracing::warn!(
                    "no checkpoint of the project yet; this call's files are not a step"
                );
                t.scan_changes()?;
                Vec::new()
            }
            None => Vec::new(),
        };
        let (mut outside, mut synced) = (Vec::new(), true);
        if !changes.is_empty() {
            if let Some(dir_id) = self.track.dir.clone() {
                outside = self.file.with_state(|s| {
                    s.block(&dir_id)
                        .map(|dir| govern::outside_grants(s, &self.track.agent, dir, &changes))
                        .unwrap_or_default()
                });
            }
            let editor = self.agent_editor().to_owned();
            match self.sync(&editor, &changes).await {
                Ok(created) => self.link(&created).await,
                Err(e) => {
                    self.warnings.push(format!(
                        "elfiee: this step's files did not enter the document's directory block: {e}"
                    ));
                    synced = false;
                }
            }
        }
        let doc_to = self.file.last_seq();
        let doc_changed = doc_to > doc_from
            && self
                .file
                .events(doc_from + 1)?
                .iter()
                .any(|e| e.cap_id() != "agent.session");
        if changes.is_empty() && !doc_changed {
            if !before.is_empty() {
                self.file.submit_all(before).await?;
            }
            self.track.last_doc_to = self.track.last_doc_to.max(doc_to);
            return Ok(());
        }
        let n = self.session.next_step;
        let mut entry = json!({
            "entry": "step",
            "step": n,
            "doc_from": doc_from,
            "doc_to": doc_to,
            "directory": self.track.dir,
            "root": self.root().map(|r| r.display().to_string()),
            "files": changes,
            "tools": tools,
        });
        if let Some(id) = &self.input.tool_use_id {
            entry["tool_use_id"] = json!(id);
        }
        if !outside.is_empty() {
            entry["outside_grants"] = json!(outside);
        }
        if !synced {
            entry["document_synced"] = json!(false);
        }
        before.push(self.entry_cmd(self.agent_editor(), entry));
        self.file.submit_all(before).await?;
        self.session.next_step = n + 1;
        self.track.last_doc_to = doc_to;
        if let Some(t) = &self.track.tracker {
            t.save();
        }
        Ok(())
    }

    /// Brings the directory block up to date with `changes` as `editor` (one
    /// `directory.sync`); returns the blocks it created.
    async fn sync(&self, editor: &str, changes: &[FileChange]) -> Result<Vec<String>, EngineError> {
        let Some(dir_id) = &self.track.dir else {
            return Ok(Vec::new());
        };
        let root = self
            .file
            .with_state(|s| {
                s.block(dir_id)?
                    .metadata
                    .custom
                    .get(EXTERNAL_ROOT_PATH)?
                    .as_str()
                    .map(PathBuf::from)
            })
            .unwrap_or_default();
        let (mut files, mut deleted, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
        for c in changes {
            let Some(after) = &c.after else {
                deleted.push(c.path.clone());
                continue;
            };
            let skip = |reason: &str| SkippedFile {
                path: c.path.clone(),
                reason: reason.to_owned(),
            };
            if after.len > MAX_TEXT_BYTES {
                skipped.push(skip("larger than 1 MiB"));
                continue;
            }
            // The bytes the scan kept (exactly the step's `after`), else the disk's.
            let bytes = crate::checkpoint::stored_bytes(self.file, after)
                .or_else(|| crate::bounded::read_file(&root.join(&c.path), MAX_TEXT_BYTES).ok());
            let Some(bytes) = bytes else {
                skipped.push(skip("unreadable"));
                continue;
            };
            if bytes[..bytes.len().min(8192)].contains(&0) {
                skipped.push(skip("binary"));
                continue;
            }
            match String::from_utf8(bytes) {
                Ok(content) => files.push(ImportedFile {
                    path: c.path.clone(),
                    content,
                }),
                Err(_) => skipped.push(skip("binary (not UTF-8)")),
            }
        }
        // A file the directory does not track and that is no text stays out of it (as the
        // importer leaves it out); only tracked paths can be deleted.
        let events = self
            .file
            .submit(Command::new(
                editor,
                "directory.sync",
                Some(dir_id),
                json!({"files": files, "deleted": deleted, "skipped": skipped}),
            ))
            .await?;
        Ok(events
            .iter()
            .filter(|e| e.cap_id() == "core.create")
            .map(|e| e.entity.clone())
            .collect())
    }

    /// `implement` links from the agent to the blocks its step made (as the loop's).
    async fn link(&self, created: &[String]) {
        if created.is_empty() {
            return;
        }
        let cmds = created
            .iter()
            .map(|id| {
                Command::new(
                    self.agent_editor(),
                    "core.link",
                    Some(&self.track.agent.block_id),
                    json!({"to": id, "relation": "implement"}),
                )
            })
            .collect();
        if let Err(e) = self.file.submit_all(cmds).await {
            tracing::warn!(error = %e, "the agent's new files were not linked from it");
        }
    }
}
