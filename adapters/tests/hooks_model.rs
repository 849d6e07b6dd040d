//! Claude Code's hooks against a model (issue 37, "What must be shown"): random hook
//! sequences over a small project, fed to the [`Recorder`] in process; after every operation
//! the steps and the document are what the model says, and at the end the undo of every step
//! gives the starting tree with the user's own changes kept.
//!
//! **What is generated.** A project of four text files in two folders (`src/`, `docs/`; CRLF,
//! tabs, an empty text among the contents), a document that imported it, an agent that
//! references the directory, and a sequence of operations in one or two Claude Code sessions
//! (a session starts with `SessionStart` and its first `UserPromptSubmit`):
//! - a tool call: `PreToolUse`, the agent's disk changes (files created, modified, deleted;
//!   none at all for a call that changes nothing), `PostToolUse`; the `PreToolUse` or the
//!   `PostToolUse` sometimes delivered twice in a row (a repeated delivery). `Write` for one new
//!   file, `Edit` for one existing file, `Bash` otherwise;
//! - two parallel calls (of the same or of both sessions): either both `PreToolUse` first, both
//!   calls' changes, the two `PostToolUse` in either order; or staggered (`Pre A`, A's changes,
//!   `Pre B`, `Post A`, B's changes, `Post B`), with A's `PostToolUse` sometimes repeated
//!   while B is still running;
//! - a call whose `PostToolUse` never comes (`PreToolUse`, changes), closed later by its
//!   session's `Stop`;
//! - the user's own changes on disk, with no hook around them;
//! - a session's `Stop`; a new `UserPromptSubmit`.
//!
//! At the end every session gets its `Stop` and the first one a last prompt (so the disk has
//! settled into the document), then every session's steps are undone.
//!
//! **The model** (the step boundaries of `adapters/src/hooks/mod.rs` and `recorder.rs`): the
//! recorder keeps one *baseline* of the folder, the tree at its last record; the document is
//! always the baseline (checked after every operation: the directory block's entries, and each
//! entry block's text, are exactly the baseline's text files). A call is *open* from its
//! first `PreToolUse` to its first `PostToolUse` (or its session's `Stop`).
//! - `PreToolUse`, `SessionStart`, `UserPromptSubmit` with no call open: what changed since
//!   the baseline is the user's — it enters the document as the agent block's owner's, in no
//!   step — and the baseline becomes the disk. With a call open they record nothing: while a
//!   call runs, any change of the folder may be its own.
//! - `PostToolUse`: everything changed since the baseline is one step of the call's session
//!   (tools: the call's tool) — but a file that a call still open names (`Write`, `Edit`) and
//!   the finishing call does not: that change stays out of the step, out of the document and
//!   out of the baseline, for the naming call's own step. Nothing changed, no step. So of two
//!   overlapping calls the first to finish takes what both did so far, but the other's named
//!   file (an undo of the first would otherwise revert the other's work).
//! - `Stop`: the session's calls still open are closed as one step (their tools, in order),
//!   if anything changed; a call of another session stays open.
//! - A repeated delivery records nothing: a `PreToolUse` of a call already open or whose
//!   `PostToolUse` came, a `PostToolUse` that came before (calls are told apart by
//!   `tool_use_id`).
//!
//! So every disk change made inside a call lands in exactly one step (the next record after
//! it), none twice, none lost; a change the user made while no call was open is in no step.
//! The recorded steps must equal the model's, file for file (path, hash before, hash after),
//! with the same tools; every event the agent's editor committed (but the session's own
//! entries) lies inside a step's document range, and every event of the owner's lies outside.
//!
//! **Undo.** Each session's steps are undone at once (`Selection::Last(n)`, as the agent
//! block's owner), the session with the newest step first. The model's rule, per file the
//! session's steps changed:
//! - *conflict*: the disk no longer holds what the session's **last** step that changed the
//!   file left there — the user (or the other session, or its undo) changed it after that
//!   step. The undo without `force` must then be refused, naming every such file and changing
//!   nothing; it is run again with `force`. Without such a file it must go through unforced.
//! - *result*: every file the steps changed goes back to what it held before the session's
//!   **first** step that changed it (no file, for one they made); every other file stays as
//!   it is. So the user's own changes are kept: a file the agent never changed stays as the
//!   user left it; a file the user changed before the agent first changed it goes back to the
//!   user's version. A change of the user's that the undo does not keep is either one the
//!   agent's own later step was made on (a user's edit between two steps that changed the
//!   file: the later step took it in, the undo of both goes back to before the first) or a
//!   conflict that had to be forced.
//!
//! After each undo the disk is the model's, the document's directory follows the disk (its
//! entries and texts are the folder's files, `dir status` clean), and the log verifies and
//! replays. With one session and no change of the user's that is the starting tree.
//!
//! The undo of a session is checked only where the checkpoint's revert is known to get it
//! right: see [`KNOWN_GAPS`]; the ignored property checks every undo.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use elfiee_adapters::checkpoint::{self, History, Selection};
use elfiee_adapters::hooks::{HookInput, HookReply, Recorder};
use elfiee_capabilities::builtin::{directory_entries, directory_status};
use elfiee_engine::{Engine, EngineConfig, FileHandle};
use elfiee_projections::content::body_keys;
use proptest::prelude::*;
use serde_json::{json, Value};

const PATHS: [&str; 6] = [
    "src/a.rs",
    "src/b.rs",
    "src/new.rs",
    "docs/c.md",
    "docs/d.txt",
    "docs/new.md",
];

const TEXTS: [&str; 5] = [
    "",
    "one\n",
    "two\n",
    "x = 1\r\n\ty = 2",
    "# Title\n\nsome words\n",
];

/// The starting tree: (path, text) indexes.
const START: [(usize, usize); 4] = [(0, 1), (1, 3), (3, 4), (4, 2)];

const SESSIONS: [&str; 2] = ["5e55-one", "5e55-two"];

/// A folder's text files: path → text.
type Tree = BTreeMap<String, String>;
/// What changed between two trees: path → (before, after).
type Diff = BTreeMap<String, (Option<String>, Option<String>)>;

fn diff(a: &Tree, b: &Tree) -> Diff {
    let paths: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    paths
        .into_iter()
        .filter(|p| a.get(*p) != b.get(*p))
        .map(|p| ((*p).clone(), (a.get(p).cloned(), b.get(p).cloned())))
        .collect()
}

fn hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

// ---------------------------------------------------------------------------------------
// The generated operations.

#[derive(Debug, Clone)]
enum Edit {
    Write(usize, usize),
    Delete(usize),
}

#[derive(Debug, Clone)]
enum Par {
    /// Both `PreToolUse`, both calls' changes, both `PostToolUse` (B's first when true).
    Together { b_first: bool },
    /// `Pre A`, A's changes, `Pre B`, `Post A` (twice when true), B's changes, `Post B`.
    Staggered { repeat_post_a: bool },
}

#[derive(Debug, Clone)]
enum Op {
    Call {
        s: usize,
        edits: Vec<Edit>,
        repeat_pre: bool,
        repeat_post: bool,
    },
    Parallel {
        sa: usize,
        sb: usize,
        a: Vec<Edit>,
        b: Vec<Edit>,
        how: Par,
    },
    /// `PreToolUse` and the changes; the `PostToolUse` never comes.
    Lost {
        s: usize,
        edits: Vec<Edit>,
    },
    User(Vec<Edit>),
    Stop(usize),
    Prompt(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (0..PATHS.len(), 0..TEXTS.len()).prop_map(|(p, t)| Edit::Write(p, t)),
        1 => (0..PATHS.len()).prop_map(Edit::Delete),
    ]
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), 0..3)
}

fn session() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(0usize), 1 => Just(1usize)]
}

fn op() -> impl Strategy<Value = Op> {
    let par = prop_oneof![
        any::<bool>().prop_map(|b_first| Par::Together { b_first }),
        any::<bool>().prop_map(|repeat_post_a| Par::Staggered { repeat_post_a }),
    ];
    prop_oneof![
        5 => (session(), edits(), prop::bool::weighted(0.2), prop::bool::weighted(0.2)).prop_map(
            |(s, edits, repeat_pre, repeat_post)| Op::Call { s, edits, repeat_pre, repeat_post }
        ),
        2 => (session(), session(), edits(), edits(), par)
            .prop_map(|(sa, sb, a, b, how)| Op::Parallel { sa, sb, a, b, how }),
        1 => (session(), edits()).prop_map(|(s, edits)| Op::Lost { s, edits }),
        2 => proptest::collection::vec(edit(), 1..3).prop_map(Op::User),
        1 => session().prop_map(Op::Stop),
        1 => session().prop_map(Op::Prompt),
    ]
}

// ---------------------------------------------------------------------------------------
// The model.

/// One expected step: its files and tools.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    files: Diff,
    tools: Vec<String>,
}

#[derive(Debug, Default)]
struct Model {
    disk: Tree,
    /// The tree at the recorder's last record: what the document holds.
    base: Tree,
    /// Open calls: (session, key, tool, the file it names).
    open: Vec<(usize, String, String, Option<String>)>,
    finished: BTreeSet<String>,
    steps: [Vec<Step>; 2],
    /// Every change of the folder the document took in, oldest first, and whose it was.
    records: Vec<(Actor, Diff)>,
    /// Whether the user changed the disk at all.
    user_edited: bool,
}

/// Who changed the folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Actor {
    /// The user, between calls (the owner's `directory.sync`).
    User,
    /// A step of this session.
    Step(usize),
    /// The undo of this session's steps.
    Undo(usize),
}

impl Model {
    /// A hook that records the user's changes when no call is open.
    fn between(&mut self) {
        if self.open.is_empty() {
            let d = diff(&self.base, &self.disk);
            if !d.is_empty() {
                self.records.push((Actor::User, d));
            }
            self.base = self.disk.clone();
        }
    }

    /// A step of session `s` closing calls that name `mine`: what changed since the base,
    /// but a file that a call still open names (and none of `mine`), which stays for that
    /// call's step (and out of the document until then).
    fn step(&mut self, s: usize, tools: Vec<String>, mine: &[Option<String>]) {
        let theirs: BTreeSet<&String> = self
            .open
            .iter()
            .filter_map(|c| c.3.as_ref())
            .filter(|p| !mine.iter().flatten().any(|m| m == *p))
            .collect();
        let mut files = diff(&self.base, &self.disk);
        files.retain(|p, _| !theirs.contains(p));
        if files.is_empty() {
            return;
        }
        self.steps[s].push(Step {
            files: files.clone(),
            tools,
        });
        for (p, (_, after)) in &files {
            match after {
                Some(t) => self.base.insert(p.clone(), t.clone()),
                None => self.base.remove(p),
            };
        }
        self.records.push((Actor::Step(s), files));
    }

    /// The sessions with steps, the one with the newest step first.
    fn newest_first(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (a, _) in self.records.iter().rev() {
            if let Actor::Step(s) = a {
                if !out.contains(s) {
                    out.push(*s);
                }
            }
        }
        out
    }

    /// Why the undo of session `s`'s steps on the disk `disk` is beyond what the checkpoint's
    /// revert gets right yet (see [`KNOWN_GAPS`]), if it is.
    fn known_gap(&self, s: usize, disk: &Tree) -> Option<String> {
        let mine: Vec<usize> = (0..self.records.len())
            .filter(|i| self.records[*i].0 == Actor::Step(s))
            .collect();
        let first = *mine.first()?;
        let made_or_removed = |d: &Diff| {
            d.iter()
                .filter(|(_, (b, a))| b.is_none() != a.is_none())
                .map(|(p, _)| p.clone())
                .collect::<Vec<_>>()
        };
        let touches = |i: usize, p: &String| self.records[i].1.contains_key(p);
        for (i, (who, d)) in self.records.iter().enumerate().skip(first + 1) {
            let paths = made_or_removed(d);
            match who {
                Actor::Step(o) | Actor::Undo(o) if *o != s && !paths.is_empty() => {
                    return Some(format!(
                        "(a) {who:?} made or removed {paths:?} after the session's first step"
                    ));
                }
                Actor::User => {
                    if let Some(p) = paths.iter().find(|p| {
                        mine.iter().any(|m| *m < i && touches(*m, p))
                            && mine.iter().any(|m| *m > i && touches(*m, p))
                    }) {
                        return Some(format!(
                            "(c) the user made or removed {p} between two steps that changed it"
                        ));
                    }
                }
                _ => {}
            }
        }
        let mut net: BTreeMap<&String, (&Option<String>, &Option<String>)> = BTreeMap::new();
        for m in &mine {
            for (p, (b, a)) in &self.records[*m].1 {
                net.entry(p).and_modify(|e| e.1 = a).or_insert((b, a));
            }
        }
        net.into_iter()
            .find(|(p, (b, a))| b == a && disk.get(*p) != a.as_ref())
            .map(|(p, _)| {
                format!("(b) the steps changed {p} and changed it back, and it was changed since")
            })
    }

    fn pre(&mut self, s: usize, key: &str, tool: &str, target: Option<String>) {
        if self.finished.contains(key) || self.open.iter().any(|c| c.1 == key) {
            return;
        }
        self.between();
        self.open.push((s, key.to_owned(), tool.to_owned(), target));
    }

    fn post(&mut self, s: usize, key: &str, tool: &str) {
        if !self.finished.insert(key.to_owned()) {
            return;
        }
        let at = self.open.iter().position(|c| c.0 == s && c.1 == key);
        let mine = at.map(|i| self.open.remove(i).3);
        self.step(
            s,
            vec![tool.to_owned()],
            &mine.into_iter().collect::<Vec<_>>(),
        );
    }

    fn stop(&mut self, s: usize) {
        let (mine, rest): (Vec<_>, Vec<_>) = self.open.drain(..).partition(|c| c.0 == s);
        self.open = rest;
        if mine.is_empty() {
            return;
        }
        let targets: Vec<Option<String>> = mine.iter().map(|c| c.3.clone()).collect();
        self.step(s, mine.into_iter().map(|c| c.2).collect(), &targets);
    }
}

/// Where the undo of agent steps (`adapters/src/checkpoint/revert.rs`) does not meet the
/// model yet, found by this property; the first property skips the undo of a session that
/// meets one (`Model::known_gap`), the ignored one does not (run it with `--ignored` when
/// changing the revert; what it finds is kept in `hooks_model.proptest-regressions`):
///
/// (a) the other session (a step, or the undo of its steps) made or removed a file after this
///     session's first step: the undo is refused as a conflict on the agent block (the other
///     session's `implement` link changed it), or, after the other session's undo, a file
///     this session made is removed from the disk but its entry stays in the directory.
/// (b) the steps changed a file and changed it back (made and removed it), and someone changed
///     it since: refused as the model says, but forced the file stays as that someone left it,
///     where the model takes it back to before the steps.
/// (c) the user made or removed a file between two of the session's steps that changed it:
///     refused as a conflict on the file's earlier block, where the model sees none (the
///     later step took the user's change in, as it does an edit of the user's, which the
///     revert does not call a conflict either).
///
/// (Fixed since this property first ran: the directory was reverted as one block, so any
/// file the user made or removed was a conflict, and between two steps their file was
/// deleted or their removal left an entry without a block; a file changed and changed back
/// by the steps went back in the document only; a block holding a step's text again after
/// someone else's change was a conflict.)
pub const KNOWN_GAPS: () = ();

/// The model's undo of all of `steps` on `disk`: the expected tree and the conflicting files.
fn undo_expected(steps: &[Step], disk: &Tree) -> (Tree, Vec<String>) {
    let mut net: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    for st in steps {
        for (p, (before, after)) in &st.files {
            net.entry(p.clone())
                .and_modify(|e| e.1 = after.clone())
                .or_insert((before.clone(), after.clone()));
        }
    }
    let mut out = disk.clone();
    let mut conflicts = Vec::new();
    for (p, (before, after)) in net {
        if disk.get(&p) != after.as_ref() {
            conflicts.push(p.clone());
        }
        match before {
            Some(t) => out.insert(p, t),
            None => out.remove(&p),
        };
    }
    (out, conflicts)
}

// ---------------------------------------------------------------------------------------
// The harness: a real document, recorder and folder.

/// The text files under `root`.
fn disk(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

/// The directory block's entries with their blocks' texts.
fn document(file: &FileHandle, dir: &str) -> Tree {
    let block = file.block(dir).expect("the directory block");
    directory_entries(&block)
        .into_iter()
        .map(|(path, id)| {
            let text = match file.block(&id) {
                None => format!("<an entry whose block {id} is not there>"),
                Some(b) => match body_keys(&b.block_type).first() {
                    Some(key) => b.contents[*key].as_str().unwrap_or_default().to_owned(),
                    None => format!("<an entry on a {} block>", b.block_type),
                },
            };
            (path, text)
        })
        .collect()
}

/// A step as the test compares it: its files (path → hash before, hash after) and tools.
type Seen = (Diff, Vec<String>);

/// The steps recorded for session `s`.
fn recorded(file: &FileHandle, s: usize) -> Vec<Seen> {
    let Ok(h) = History::load(file, SESSIONS[s]) else {
        return Vec::new();
    };
    let tools: BTreeMap<u64, Vec<String>> = h
        .infos(file)
        .into_iter()
        .map(|i| (i.step, i.tools))
        .collect();
    h.steps
        .iter()
        .map(|(n, c)| {
            let files = c
                .files
                .iter()
                .map(|f| {
                    let v = |x: &Option<checkpoint::Version>| x.as_ref().map(|v| v.hash.clone());
                    (f.path.clone(), (v(&f.before), v(&f.after)))
                })
                .collect();
            (files, tools.get(n).cloned().unwrap_or_default())
        })
        .collect()
}

/// The model's steps as the recorder states them (texts by their hashes).
fn expected(steps: &[Step]) -> Vec<Seen> {
    steps
        .iter()
        .map(|st| {
            let files = st
                .files
                .iter()
                .map(|(p, (b, a))| (p.clone(), (b.as_deref().map(hash), a.as_deref().map(hash))))
                .collect();
            (files, st.tools.clone())
        })
        .collect()
}

struct Run {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    _engine: Engine,
    file: FileHandle,
    rec: Recorder,
    editor: String,
    dir: String,
    /// The log's last seq once the setup was done.
    setup_seq: u64,
    model: Model,
    started: [bool; 2],
    calls: u64,
    prompts: u64,
}

impl Run {
    async fn new() -> Run {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("proj");
        let mut model = Model::default();
        for (p, t) in START {
            let path = root.join(PATHS[p]);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, TEXTS[t]).unwrap();
            model.disk.insert(PATHS[p].to_owned(), TEXTS[t].to_owned());
        }
        model.base = model.disk.clone();
        let engine = Engine::new(EngineConfig::default());
        let file = engine
            .init(&tmp.path().join("h.elf"), "Alice")
            .await
            .unwrap();
        let dir = support::import_folder(&file, &root).await;
        let (agent, editor) = support::create_agent(&file, "alice", "claude").await;
        support::reference(&file, &agent, &dir).await;
        let setup_seq = file.last_seq();
        let rec = Recorder::new(&file);
        Run {
            _tmp: tmp,
            root,
            _engine: engine,
            file,
            rec,
            editor,
            dir,
            setup_seq,
            model,
            started: [false; 2],
            calls: 0,
            prompts: 0,
        }
    }

    async fn hook(&self, s: usize, event: &str, call: Option<(&str, &str, &Value)>) {
        let input = HookInput {
            session_id: SESSIONS[s].to_owned(),
            hook_event_name: event.to_owned(),
            tool_name: call.map(|c| c.1.to_owned()),
            tool_input: call.map(|c| c.2.clone()),
            tool_use_id: call.map(|c| c.0.to_owned()),
            cwd: Some(self.root.display().to_string()),
            transcript_path: None,
            prompt: (event == "UserPromptSubmit").then(|| format!("prompt {}", self.prompts)),
            ..HookInput::default()
        };
        let reply = self
            .rec
            .handle(&self.editor, &input)
            .await
            .unwrap_or_else(|e| panic!("{event} of {s}: {e}"));
        assert_eq!(reply, HookReply::default(), "{event}: {input:?}");
    }

    /// The session's first hooks (once).
    async fn start(&mut self, s: usize) {
        if self.started[s] {
            return;
        }
        self.started[s] = true;
        self.hook(s, "SessionStart", None).await;
        self.prompt(s).await;
    }

    async fn prompt(&mut self, s: usize) {
        self.prompts += 1;
        self.hook(s, "UserPromptSubmit", None).await;
        self.model.between();
    }

    fn apply(&mut self, edits: &[Edit]) {
        for e in edits {
            match e {
                Edit::Write(p, t) => {
                    let path = self.root.join(PATHS[*p]);
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(&path, TEXTS[*t]).unwrap();
                    self.model
                        .disk
                        .insert(PATHS[*p].to_owned(), TEXTS[*t].to_owned());
                }
                Edit::Delete(p) => {
                    let _ = std::fs::remove_file(self.root.join(PATHS[*p]));
                    self.model.disk.remove(PATHS[*p]);
                }
            }
        }
    }

    /// A new call: its id, tool and input (as Claude Code would pick the tool for `edits`).
    fn call(&mut self, edits: &[Edit]) -> (String, String, Value) {
        self.calls += 1;
        let id = format!("toolu_{:03}", self.calls);
        let (tool, input) = match edits {
            [Edit::Write(p, t)] => {
                let path = self.root.join(PATHS[*p]).display().to_string();
                if self.model.disk.contains_key(PATHS[*p]) {
                    (
                        "Edit",
                        json!({"file_path": path, "old_string": "x", "new_string": TEXTS[*t]}),
                    )
                } else {
                    ("Write", json!({"file_path": path, "content": TEXTS[*t]}))
                }
            }
            _ => ("Bash", json!({"command": format!("{edits:?}")})),
        };
        (id, tool.to_owned(), input)
    }

    async fn pre(&mut self, s: usize, c: &(String, String, Value)) {
        self.start(s).await;
        self.hook(s, "PreToolUse", Some((&c.0, &c.1, &c.2))).await;
        let root = self.root.display().to_string();
        let target = c.2["file_path"]
            .as_str()
            .and_then(|p| p.strip_prefix(&root))
            .map(|p| p.trim_start_matches('/').to_owned());
        self.model.pre(s, &c.0, &c.1, target);
    }

    async fn post(&mut self, s: usize, c: &(String, String, Value)) {
        self.hook(s, "PostToolUse", Some((&c.0, &c.1, &c.2))).await;
        self.model.post(s, &c.0, &c.1);
    }

    async fn stop(&mut self, s: usize) {
        if !self.started[s] {
            return;
        }
        self.hook(s, "Stop", None).await;
        self.model.stop(s);
    }

    async fn run(&mut self, op: &Op) {
        match op {
            Op::Call {
                s,
                edits,
                repeat_pre,
                repeat_post,
            } => {
                let c = self.call(edits);
                self.pre(*s, &c).await;
                if *repeat_pre {
                    self.pre(*s, &c).await;
                }
                self.apply(edits);
                self.post(*s, &c).await;
                if *repeat_post {
                    self.post(*s, &c).await;
                }
            }
            Op::Parallel { sa, sb, a, b, how } => {
                let ca = self.call(a);
                let cb = self.call(b);
                match how {
                    Par::Together { b_first } => {
                        self.pre(*sa, &ca).await;
                        self.pre(*sb, &cb).await;
                        self.apply(a);
                        self.apply(b);
                        if *b_first {
                            self.post(*sb, &cb).await;
                            self.post(*sa, &ca).await;
                        } else {
                            self.post(*sa, &ca).await;
                            self.post(*sb, &cb).await;
                        }
                    }
                    Par::Staggered { repeat_post_a } => {
                        self.pre(*sa, &ca).await;
                        self.apply(a);
                        self.pre(*sb, &cb).await;
                        self.post(*sa, &ca).await;
                        self.apply(b);
                        if *repeat_post_a {
                            self.post(*sa, &ca).await;
                        }
                        self.post(*sb, &cb).await;
                    }
                }
            }
            Op::Lost { s, edits } => {
                let c = self.call(edits);
                self.pre(*s, &c).await;
                self.apply(edits);
            }
            Op::User(edits) => {
                self.model.user_edited = true;
                self.apply(edits);
            }
            Op::Stop(s) => self.stop(*s).await,
            Op::Prompt(s) => {
                if self.started[*s] {
                    self.prompt(*s).await;
                } else {
                    self.start(*s).await;
                }
            }
        }
    }

    /// Disk, document and steps as the model says.
    fn check(&self, after: &str) -> Result<(), TestCaseError> {
        prop_assert_eq!(&disk(&self.root), &self.model.disk, "the harness's disk");
        prop_assert_eq!(
            &document(&self.file, &self.dir),
            &self.model.base,
            "the document after {}",
            after
        );
        for s in 0..2 {
            prop_assert_eq!(
                recorded(&self.file, s),
                expected(&self.model.steps[s]),
                "the steps of session {} after {}",
                s,
                after
            );
        }
        Ok(())
    }

    /// Every event of the agent's editor (but its session entries) lies inside a step's
    /// document range; every event of the owner's outside them.
    fn check_attribution(&self) -> Result<(), TestCaseError> {
        let mut ranges = Vec::new();
        for s in SESSIONS {
            if let Ok(h) = History::load(&self.file, s) {
                ranges.extend(h.steps.values().map(|c| (c.doc_from, c.doc_to)));
            }
        }
        for e in self.file.events(self.setup_seq + 1).unwrap() {
            if e.cap_id() == "agent.session" {
                continue;
            }
            let inside = ranges.iter().any(|(a, b)| e.seq > *a && e.seq <= *b);
            match e.editor_id() {
                "alice" => prop_assert!(!inside, "the owner's {} is in a step", e.attribute),
                ed if ed == self.editor => {
                    prop_assert!(inside, "the agent's {} is in no step", e.attribute)
                }
                other => prop_assert!(false, "an event of {}", other),
            }
        }
        Ok(())
    }

    async fn check_log(&self) -> Result<(), TestCaseError> {
        let v = self.file.verify().await.unwrap();
        prop_assert!(v.ok, "verify: {:?}", v);
        let (_, replayed) = self.file.replay().await.unwrap();
        prop_assert_eq!(
            replayed.digest(),
            self.file.state_digest(),
            "replay == live"
        );
        Ok(())
    }

    fn check_follows_disk(&self, after: &str) -> Result<(), TestCaseError> {
        let now = disk(&self.root);
        prop_assert_eq!(
            &document(&self.file, &self.dir),
            &now,
            "the document follows the disk after {}",
            after
        );
        let st = self
            .file
            .with_state(|s| directory_status(s, s.block(&self.dir).unwrap()));
        prop_assert!(!st.is_dirty(), "dir status after {}: {:?}", after, st);
        Ok(())
    }
}

async fn run_ops(ops: Vec<Op>, strict: bool) -> Result<(), TestCaseError> {
    let mut r = Run::new().await;
    let start = r.model.disk.clone();
    r.start(0).await;
    r.check("the session's start")?;
    for (i, op) in ops.iter().enumerate() {
        r.run(op).await;
        r.check(&format!("op {i} {op:?}"))?;
    }
    // The end of the sessions: their Stops, then a prompt (the disk settles into the document).
    for s in 0..2 {
        r.stop(s).await;
    }
    r.prompt(0).await;
    prop_assert!(r.model.open.is_empty());
    r.check("the end")?;
    prop_assert_eq!(&r.model.base, &r.model.disk);
    r.check_follows_disk("the end")?;
    r.check_attribution()?;
    r.check_log().await?;

    // Undo every session's steps, the session with the newest step first.
    let mut skipped = false;
    for s in r.model.newest_first() {
        let before = disk(&r.root);
        if !strict && r.model.known_gap(s, &before).is_some() {
            skipped = true;
            continue;
        }
        let steps = r.model.steps[s].clone();
        let doc_before = document(&r.file, &r.dir);
        let (want, conflicts) = undo_expected(&steps, &before);
        let n = steps.len() as u64;
        let sid = SESSIONS[s];
        let first = checkpoint::undo(&r.file, "alice", sid, Selection::Last(n), false).await;
        if conflicts.is_empty() {
            let rep = first.map_err(|e| {
                TestCaseError::fail(format!(
                    "undo of {sid} refused, the model sees no conflict: {e}"
                ))
            })?;
            prop_assert_eq!(rep.forced, Vec::<String>::new());
        } else {
            let e = match first {
                Ok(rep) => {
                    return Err(TestCaseError::fail(format!(
                        "undo of {sid} went through ({rep:?}); the model expects conflicts on {conflicts:?}"
                    )))
                }
                Err(e) => e.to_string(),
            };
            for c in &conflicts {
                prop_assert!(e.contains(c.as_str()), "the refusal names {}: {}", c, e);
            }
            prop_assert_eq!(&disk(&r.root), &before, "a refused undo changes no file");
            prop_assert_eq!(
                &document(&r.file, &r.dir),
                &doc_before,
                "a refused undo changes no block"
            );
            checkpoint::undo(&r.file, "alice", sid, Selection::Last(n), true)
                .await
                .map_err(|e| TestCaseError::fail(format!("forced undo of {sid}: {e}")))?;
        }
        let after = disk(&r.root);
        prop_assert_eq!(&after, &want, "the tree after the undo of {}", sid);
        // The undo rewrote the block of every file the steps changed, its text changed or not.
        let touched: Diff = steps
            .iter()
            .flat_map(|st| st.files.keys())
            .map(|p| (p.clone(), (before.get(p).cloned(), after.get(p).cloned())))
            .collect();
        r.model.records.push((Actor::Undo(s), touched));
        r.check_follows_disk(&format!("the undo of {sid}"))?;
        r.check_log().await?;
    }
    if !skipped && r.model.steps[1].is_empty() && !r.model.user_edited {
        prop_assert_eq!(
            &disk(&r.root),
            &start,
            "one session, no change of the user's: the starting tree"
        );
    }
    r.file.close().await;
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn random_hook_sequences_follow_the_disk_and_undo_to_the_starting_tree(
        ops in proptest::collection::vec(op(), 1..10)
    ) {
        runtime().block_on(run_ops(ops, false))?;
    }

    /// The same with every undo checked, the [`KNOWN_GAPS`] too.
    #[test]
    #[ignore = "the checkpoint's revert does not handle KNOWN_GAPS yet"]
    fn random_hook_sequences_undo_to_the_starting_tree_known_gaps_included(
        ops in proptest::collection::vec(op(), 1..10)
    ) {
        runtime().block_on(run_ops(ops, true))?;
    }
}

/// Steps of session 0: each one's files and tools.
fn steps_of(r: &Run) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    recorded(&r.file, 0)
        .into_iter()
        .map(|(f, t)| (f.into_keys().collect(), t))
        .unzip()
}

/// A repeated delivery the property found recorded wrongly before `AgentTrack::repeated`: a
/// `PreToolUse` delivered twice left a second open call behind, which held the folder until
/// the session's `Stop`, so the user's next change became the agent's next step.
#[test]
fn a_repeated_pre_tool_use_opens_no_second_call() {
    let call = |text, repeat_pre| Op::Call {
        s: 0,
        edits: vec![Edit::Write(0, text)],
        repeat_pre,
        repeat_post: false,
    };
    runtime().block_on(async {
        let mut r = Run::new().await;
        r.start(0).await;
        r.run(&call(2, true)).await;
        r.run(&Op::User(vec![Edit::Write(2, 1)])).await;
        r.run(&call(1, false)).await;
        let (files, tools) = steps_of(&r);
        assert_eq!(
            files,
            [["src/a.rs"], ["src/a.rs"]],
            "the user's src/new.rs is in no step"
        );
        assert_eq!(tools, [["Edit"], ["Edit"]]);
        r.check("the calls").unwrap();
        r.check_attribution().unwrap();
        r.file.close().await;
    });
}

/// The other one: a `PostToolUse` delivered again while another call ran made a step of
/// that call's changes under the first call's name (and the other call's own `PostToolUse`
/// then found nothing).
#[test]
fn a_repeated_post_tool_use_records_nothing() {
    runtime().block_on(async {
        let mut r = Run::new().await;
        r.start(0).await;
        r.run(&Op::Parallel {
            sa: 0,
            sb: 0,
            a: vec![Edit::Write(1, 1)],
            b: vec![Edit::Write(3, 2), Edit::Delete(4)],
            how: Par::Staggered {
                repeat_post_a: true,
            },
        })
        .await;
        let (files, tools) = steps_of(&r);
        assert_eq!(files, [vec!["src/b.rs"], vec!["docs/c.md", "docs/d.txt"]]);
        assert_eq!(tools, [["Edit"], ["Bash"]], "the second step is B's");
        r.check("the calls").unwrap();
        r.check_attribution().unwrap();
        r.file.close().await;
    });
}
