//! Property tests of the command pipeline.
//!
//! Engine level (few cases, each opens sled in a temp dir): random command sequences from several
//! editors, valid and invalid mixed, some as `submit_all` batches, some resubmitted, with the file
//! closed and reopened at random points. Properties:
//! (a) the live state equals the state replayed from the log alone, the state reopened from the
//!     final snapshot, and the state reopened from each earlier (mid-sequence) engine snapshot plus
//!     the tail — compared by digest;
//! (b) a rejected command leaves `last_seq` and the digest unchanged, and the engine decides
//!     exactly as the pure pipeline does on the same state; an accepted one advances the state by
//!     exactly its events; a resubmitted command returns its original events and writes nothing;
//! (c) `verify` reports ok.
//!
//! Pure level (many cases): `Registry::execute` + `apply` directly, with arbitrary capability ids,
//! editors, block ids and JSON payloads: deterministic for the same `Ctx`, never panics (not even
//! inside a handler), leaves the state alone, and its events survive the storage codec unchanged.

mod common;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use elfiee_capabilities::Registry;
use elfiee_engine::codec;
use elfiee_engine::{Engine, EngineConfig, EngineError, FileHandle};
use elfiee_model::{CapError, Command, Event, EventHash};
use elfiee_projections::{Folds, State};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Map, Value};

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

const BLOCKS: &[&str] = &["b0", "b1", "b2", "b3", "b4", "b5"];
const GRANTABLE: &[&str] = &[
    "markdown.write",
    "markdown.read",
    "code.write",
    "core.rename",
    "core.update_metadata",
    "core.link",
    "core.unlink",
    "core.delete",
    "core.create",
    "core.grant",
    "core.revoke",
    "editor.create",
    "editor.delete",
    "elf.init",
    "nope.cap",
];

/// One command, before it gets a fresh cmd_id.
#[derive(Debug, Clone)]
struct Spec {
    editor: String,
    cap: String,
    block: Option<String>,
    payload: Value,
    expected_seq: Option<u64>,
}

impl Spec {
    fn command(&self) -> Command {
        let mut c = Command::new(
            &self.editor,
            &self.cap,
            self.block.as_deref(),
            self.payload.clone(),
        );
        c.expected_seq = self.expected_seq;
        c
    }
}

#[derive(Debug, Clone)]
enum Step {
    One(Spec),
    Batch(Vec<Spec>),
    /// Resubmit an earlier command (same cmd_id).
    Resubmit(Index),
}

fn editor() -> impl Strategy<Value = String> {
    prop_oneof![
        14 => Just("alice".to_string()),
        4 => Just("bob".to_string()),
        3 => Just("carol".to_string()),
        2 => Just("dave".to_string()),
        1 => Just("mallory".to_string()),
    ]
}

fn grantee() -> impl Strategy<Value = String> {
    prop_oneof![4 => editor(), 1 => Just("*".to_string()), 1 => Just("erin".to_string())]
}

fn block() -> impl Strategy<Value = String> {
    prop::sample::select(BLOCKS).prop_map(str::to_owned)
}

/// Even pool blocks are markdown, odd ones code (mostly: creates pick the other type now and then).
fn block_of(ty: &'static str) -> impl Strategy<Value = String> {
    let own: Vec<&str> = BLOCKS
        .iter()
        .enumerate()
        .filter(|(i, _)| (i % 2 == 0) == (ty == "markdown"))
        .map(|(_, b)| *b)
        .collect();
    prop_oneof![4 => prop::sample::select(own).prop_map(str::to_owned), 1 => block()]
}

fn maybe_block() -> impl Strategy<Value = Option<String>> {
    prop_oneof![3 => block().prop_map(Some), 1 => Just(None), 1 => Just(Some("*".to_string()))]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9 #*_-]{0,24}",
        1 => ".{0,8}",
        1 => Just(String::new()),
        // Bodies of 256 bytes and more go to the content store: events carry references.
        1 => "[a-z ]{250,1300}",
    ]
}

/// Placeholder for the directory block the setup imports (its id is generated).
const DIR: &str = "@dir";

fn name() -> impl Strategy<Value = String> {
    prop_oneof![6 => "[A-Za-z][A-Za-z0-9 ]{0,12}", 1 => Just(String::new()), 1 => Just("a\u{7}b".to_string())]
}

fn relation() -> impl Strategy<Value = String> {
    prop_oneof![5 => Just("reference".to_string()), 5 => Just("implement".to_string()), 1 => Just("parent".to_string())]
}

/// Any JSON value, biased towards the field names and values the built-in payloads use.
fn arb_json() -> impl Strategy<Value = Value> {
    let word = prop::sample::select(
        &[
            "markdown",
            "code",
            "reference",
            "implement",
            "human",
            "agent",
            "*",
            "alice",
            "bob",
            "b0",
            "b1",
            "core.create",
            "markdown.write",
            "",
        ][..],
    );
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,10}".prop_map(Value::String),
        word.prop_map(|w| json!(w)),
    ];
    let key = prop_oneof![
        3 => prop::sample::select(&[
            "name", "block_type", "markdown", "text", "language", "to", "relation", "editor_id", "cap_id",
            "description", "custom", "contents", "block_id", "editor_type", "path", "files", "command",
        ][..]).prop_map(str::to_owned),
        1 => ".{0,6}",
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn spec_of(editor: String, cap: &str, block: Option<String>, payload: Value) -> Spec {
    Spec {
        editor,
        cap: cap.to_owned(),
        block,
        payload,
        expected_seq: None,
    }
}

/// A command from the built-in vocabulary: mostly well-formed, sometimes not.
fn spec() -> impl Strategy<Value = Spec> {
    let create = (editor(), prop::sample::select(BLOCKS), prop::bool::weighted(0.15), name(), any::<bool>()).prop_map(
        |(e, b, flip, n, with_contents)| {
            let even = BLOCKS.iter().position(|x| *x == b).unwrap_or(0) % 2 == 0;
            let ty = if even != flip { "markdown" } else { "code" };
            let mut p = json!({"name": if n.is_empty() { b.to_string() } else { n }, "block_type": ty, "block_id": b});
            if with_contents {
                p["contents"] = json!({"markdown": "seed", "nested": {"n": 1.5, "list": [1, -2, null]}});
            }
            spec_of(e, "core.create", None, p)
        },
    );
    let create_auto = (editor(), name()).prop_map(|(e, n)| {
        spec_of(
            e,
            "core.create",
            None,
            json!({"name": n, "block_type": "markdown"}),
        )
    });
    let md = (editor(), block_of("markdown"), text())
        .prop_map(|(e, b, t)| spec_of(e, "markdown.write", Some(b), json!({"markdown": t})));
    let code = (
        editor(),
        block_of("code"),
        text(),
        prop::option::of(prop::sample::select(&["rust", "python"][..])),
    )
        .prop_map(|(e, b, t, l)| {
            let mut p = json!({"text": t});
            if let Some(l) = l {
                p["language"] = json!(l);
            }
            spec_of(e, "code.write", Some(b), p)
        });
    let rename = (editor(), block(), name())
        .prop_map(|(e, b, n)| spec_of(e, "core.rename", Some(b), json!({"name": n})));
    let meta = (
        editor(),
        block(),
        prop::option::of(prop::option::of(text())),
        prop::collection::btree_map(
            "[a-c]",
            prop_oneof![
                Just(Value::Null),
                any::<i32>().prop_map(|n| json!(n)),
                text().prop_map(Value::String)
            ],
            0..3,
        ),
    )
        .prop_map(|(e, b, d, custom)| {
            let mut p = Map::new();
            if let Some(d) = d {
                p.insert(
                    "description".into(),
                    d.map(Value::String).unwrap_or(Value::Null),
                );
            }
            if !custom.is_empty() {
                p.insert("custom".into(), Value::Object(custom.into_iter().collect()));
            }
            spec_of(e, "core.update_metadata", Some(b), Value::Object(p))
        });
    let link = (editor(), block(), block(), relation()).prop_map(|(e, from, to, rel)| {
        spec_of(
            e,
            "core.link",
            Some(from),
            json!({"to": to, "relation": rel}),
        )
    });
    // Unlinks mostly name the links the setup made (or their reverse, which is not linked).
    let known_link = prop::sample::select(
        &[
            ("b0", "b1", "reference"),
            ("b2", "b3", "implement"),
            ("b1", "b0", "reference"),
        ][..],
    )
    .prop_map(|(f, t, r)| (f.to_string(), t.to_string(), r.to_string()));
    let unlink = (
        editor(),
        prop_oneof![2 => known_link, 1 => (block(), block(), relation())],
    )
        .prop_map(|(e, (from, to, rel))| {
            spec_of(
                e,
                "core.unlink",
                Some(from),
                json!({"to": to, "relation": rel}),
            )
        });
    let delete =
        (editor(), block()).prop_map(|(e, b)| spec_of(e, "core.delete", Some(b), json!({})));
    let grant = (
        editor(),
        maybe_block(),
        grantee(),
        prop::sample::select(GRANTABLE),
        any::<bool>(),
    )
        .prop_map(|(e, b, g, cap, revoke)| {
            let which = if revoke { "core.revoke" } else { "core.grant" };
            spec_of(e, which, b, json!({"editor_id": g, "cap_id": cap}))
        });
    let editor_create = (
        editor(),
        prop::sample::select(&["bob", "carol", "dave", "erin"][..]),
        any::<bool>(),
    )
        .prop_map(|(e, id, agent)| {
            let ty = if agent { "agent" } else { "human" };
            spec_of(
                e,
                "editor.create",
                None,
                json!({"name": id.to_uppercase(), "editor_id": id, "editor_type": ty}),
            )
        });
    let editor_delete = (editor(), grantee())
        .prop_map(|(e, id)| spec_of(e, "editor.delete", None, json!({"editor_id": id})));
    let unknown = (
        editor(),
        prop_oneof![
            "[a-z]{1,6}\\.[a-z]{1,6}",
            Just(String::new()),
            Just("core.create ".to_string())
        ],
        maybe_block(),
    )
        .prop_map(|(e, cap, b)| Spec {
            editor: e,
            cap,
            block: b,
            payload: json!({}),
            expected_seq: None,
        });
    let malformed = (
        editor(),
        prop::sample::select(GRANTABLE),
        prop::option::of(block()),
        arb_json(),
    )
        .prop_map(|(e, cap, b, p)| spec_of(e, cap, b, p));
    // Chunks of a streaming import / rescans of the setup's directory block.
    let sync = (
        editor(),
        prop::collection::btree_map(
            prop::sample::select(&["a.md", "src/x.rs", "src/y.rs", "docs/z.md", "../up"][..]),
            text(),
            0..4,
        ),
        prop::collection::vec(
            prop::sample::select(&["a.md", "src/x.rs", "gone.rs"][..]),
            0..2,
        ),
        any::<bool>(),
    )
        .prop_map(|(e, files, deleted, done)| {
            let files: Vec<Value> = files
                .into_iter()
                .map(|(p, t)| json!({"path": p, "content": t}))
                .collect();
            let mut deleted = deleted;
            deleted.dedup();
            spec_of(
                e,
                "directory.sync",
                Some(DIR.to_owned()),
                json!({"files": files, "deleted": deleted, "done": done}),
            )
        });
    let base = prop_oneof![
        2 => sync,
        5 => create,
        1 => create_auto,
        4 => md,
        2 => code,
        1 => rename,
        2 => meta,
        3 => link,
        1 => unlink,
        2 => delete,
        3 => grant,
        1 => editor_create,
        1 => editor_delete,
        1 => unknown,
        2 => malformed,
    ];
    // Optimistic concurrency, now and then: 0 conflicts with any touched block, MAX never does.
    (
        base,
        prop_oneof![18 => Just(None), 1 => Just(Some(0u64)), 1 => Just(Some(u64::MAX))],
    )
        .prop_map(|(mut s, exp)| {
            s.expected_seq = exp;
            s
        })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => spec().prop_map(Step::One),
        2 => prop::collection::vec(spec(), 2..4).prop_map(Step::Batch),
        1 => any::<Index>().prop_map(Step::Resubmit),
    ]
}

// ---------------------------------------------------------------------------------------------
// Engine-level properties
// ---------------------------------------------------------------------------------------------

/// Where every sequence starts: alice owns the file, bob may write markdown anywhere, carol may
/// create blocks, and four blocks exist (b0 markdown → b1 code, b2 markdown → b3 code).
fn setup() -> Vec<Command> {
    vec![
        Command::new(
            "alice",
            "editor.create",
            None,
            json!({"name": "Bob", "editor_id": "bob"}),
        ),
        Command::new(
            "alice",
            "editor.create",
            None,
            json!({"name": "Carol", "editor_id": "carol"}),
        ),
        Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": "zero", "block_type": "markdown", "block_id": "b0"}),
        ),
        Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": "one", "block_type": "code", "block_id": "b1"}),
        ),
        Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": "two", "block_type": "markdown", "block_id": "b2"}),
        ),
        Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": "three", "block_type": "code", "block_id": "b3"}),
        ),
        Command::new(
            "alice",
            "core.link",
            Some("b0"),
            json!({"to": "b1", "relation": "reference"}),
        ),
        Command::new(
            "alice",
            "core.link",
            Some("b2"),
            json!({"to": "b3", "relation": "implement"}),
        ),
        Command::new(
            "alice",
            "core.grant",
            None,
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        ),
        Command::new(
            "alice",
            "core.grant",
            None,
            json!({"editor_id": "carol", "cap_id": "core.create"}),
        ),
        // The first chunk of a streaming import (large enough to be stored as a group in
        // events.pack, see engine/src/log.rs); `directory.sync` steps add the rest.
        Command::new(
            "alice",
            "directory.import",
            None,
            json!({"root": "/proj", "pending": true, "files": import_files()}),
        ),
    ]
}

/// The setup import's files: two the generated syncs touch, and enough small ones that the
/// command has more than `GROUP_MIN_EVENTS` events.
fn import_files() -> Vec<Value> {
    let mut files = vec![
        json!({"path": "a.md", "content": "# a\n".repeat(300)}),
        json!({"path": "src/x.rs", "content": "fn x() {}"}),
    ];
    files.extend(
        (0..elfiee_engine::log::GROUP_MIN_EVENTS)
            .map(|i| json!({"path": format!("gen/f{i}.md"), "content": format!("f{i}")})),
    );
    files
}

/// The id of the setup's directory block.
fn dir_id(state: &State) -> String {
    state
        .blocks
        .values()
        .find(|b| b.block_type == "directory")
        .map(|b| b.block_id.clone())
        .unwrap_or_default()
}

impl Spec {
    fn with_dir(&self, dir: &str) -> Spec {
        let mut s = self.clone();
        if s.block.as_deref() == Some(DIR) {
            s.block = Some(dir.to_owned());
        }
        s
    }
}

impl Step {
    fn with_dir(&self, dir: &str) -> Step {
        match self {
            Step::One(s) => Step::One(s.with_dir(dir)),
            Step::Batch(v) => Step::Batch(v.iter().map(|s| s.with_dir(dir)).collect()),
            Step::Resubmit(i) => Step::Resubmit(*i),
        }
    }
}

fn config() -> EngineConfig {
    EngineConfig {
        node_id: "prop".into(),
        snapshot_every: 7,
        snapshot_at_close_after: 1,
        ..EngineConfig::default()
    }
}

/// Reads the newest stored snapshot of a closed file.
fn stored_snapshot(path: &std::path::Path) -> Option<Vec<u8>> {
    let paths = elfiee_engine::layout::ElfPaths::existing(path).unwrap();
    elfiee_engine::stored_snapshots(&paths)
        .first()
        .map(|(_, f)| std::fs::read(f).unwrap())
}

/// Makes `bytes` the only stored snapshot.
fn put_snapshot(path: &std::path::Path, bytes: &[u8]) {
    let dir = path.join("snapshots");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{:020}.snap", snapshot_seq(bytes))), bytes).unwrap();
}

fn snapshot_seq(bytes: &[u8]) -> u64 {
    elfiee_engine::replay::Snapshot::decode(bytes.to_vec())
        .expect("the engine's snapshot decodes")
        .seq
}

/// Folds one event with the built-in folds (those `Registry::builtin()` registers).
fn apply(state: &mut State, e: &Event) {
    static FOLDS: std::sync::OnceLock<Folds> = std::sync::OnceLock::new();
    FOLDS
        .get_or_init(|| Registry::builtin().folds().clone())
        .apply(state, e);
}

fn apply_all(state: &State, events: &[Event]) -> State {
    let mut s = state.clone();
    for e in events {
        apply(&mut s, e);
    }
    s
}

/// The pure pipeline's verdict for a batch, on the same state (as `submit_all` runs it).
fn predict_batch(registry: &Registry, cmds: &[Command], state: &State) -> Result<usize, CapError> {
    let ctx = registry.ctx(Utc::now(), "prop", [1; 16]);
    let mut scratch = state.clone();
    let mut n = 0;
    for c in cmds {
        let mut evs = registry.execute(c, &scratch, &ctx)?;
        for (k, e) in evs.iter_mut().enumerate() {
            e.seq = scratch.last_seq + 1 + k as u64;
        }
        for e in &evs {
            apply(&mut scratch, e);
        }
        n += evs.len();
    }
    Ok(n)
}

struct Tally {
    accepted: usize,
    rejected: usize,
}

/// Checks one submission against the state before it. `predicted` is the pure pipeline's verdict
/// (number of events, or the error the engine must return for a single command).
fn check_outcome(
    what: &str,
    before: &State,
    res: &Result<Vec<Event>, EngineError>,
    predicted: Result<usize, Option<CapError>>,
    f: &FileHandle,
    tally: &mut Tally,
) {
    match (res, predicted) {
        (Ok(evs), Ok(n)) => {
            assert_eq!(
                evs.len(),
                n,
                "{what}: event count differs from the pure pipeline"
            );
            for (k, e) in evs.iter().enumerate() {
                assert_eq!(
                    e.seq,
                    before.last_seq + 1 + k as u64,
                    "{what}: seqs are contiguous after the previous tail"
                );
                assert_eq!(e.cmd_id, evs[0].cmd_id, "{what}: one cmd_id per submission");
            }
            assert_eq!(
                f.last_seq(),
                before.last_seq + evs.len() as u64,
                "{what}: last_seq advanced by the events"
            );
            assert_eq!(
                apply_all(before, evs).digest(),
                f.state_digest(),
                "{what}: state = previous state + its events"
            );
            if !evs.is_empty() {
                tally.accepted += 1;
            }
        }
        (Err(err), Err(expected)) => {
            assert!(err.is_rejection(), "{what}: {err:?} should be a rejection");
            if let (EngineError::Rejected(got), Some(expected)) = (err, expected) {
                assert_eq!(
                    got, &expected,
                    "{what}: engine and pure pipeline disagree on the error"
                );
            }
            assert!(!err.to_string().trim().is_empty());
            assert_eq!(
                f.last_seq(),
                before.last_seq,
                "{what}: a rejected command wrote events"
            );
            assert_eq!(
                f.state_digest(),
                before.digest(),
                "{what}: a rejected command changed the state"
            );
            tally.rejected += 1;
        }
        (res, predicted) => panic!("{what}: engine said {res:?}, pure pipeline said {predicted:?}"),
    }
}

async fn run_engine_case(steps: &[Step], reopen_at: &[usize]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.elf");
    let engine = Engine::new(config());
    let registry = Registry::builtin();
    let mut f = engine.init(&path, "Alice").await.unwrap();
    for cmd in setup() {
        f.submit(cmd).await.unwrap();
    }
    assert!(
        path.join("events.pack").is_file(),
        "the setup's import is stored as a group, so every case replays across one"
    );
    let dir = dir_id(&f.state());
    let steps: Vec<Step> = steps.iter().map(|s| s.with_dir(&dir)).collect();
    let mut accepted: Vec<(Vec<Command>, Vec<Event>)> = Vec::new();
    let mut snapshots: Vec<Vec<u8>> = Vec::new();
    let mut tally = Tally {
        accepted: 0,
        rejected: 0,
    };

    for (i, step) in steps.iter().enumerate() {
        if reopen_at.contains(&i) {
            let digest = f.state_digest();
            f.close().await;
            snapshots.extend(stored_snapshot(&path));
            f = engine.open(&path).await.unwrap();
            assert_eq!(
                f.state_digest(),
                digest,
                "step {i}: reopen (snapshot + tail) equals the live state"
            );
        }
        let before = f.state();
        match step {
            Step::One(spec) => {
                let cmd = spec.command();
                let ctx = registry.ctx(Utc::now(), "prop", [2; 16]);
                let predicted = registry
                    .execute(&cmd, &before, &ctx)
                    .map(|e| e.len())
                    .map_err(Some);
                let res = f.submit(cmd.clone()).await;
                check_outcome(
                    &format!("step {i} {spec:?}"),
                    &before,
                    &res,
                    predicted,
                    &f,
                    &mut tally,
                );
                if let Ok(evs) = res {
                    if !evs.is_empty() {
                        accepted.push((vec![cmd], evs));
                    }
                }
            }
            Step::Batch(specs) => {
                let cmds: Vec<Command> = specs.iter().map(Spec::command).collect();
                let predicted = predict_batch(&registry, &cmds, &before).map_err(|_| None);
                let res = f.submit_all(cmds.clone()).await;
                check_outcome(
                    &format!("step {i} batch {specs:?}"),
                    &before,
                    &res,
                    predicted,
                    &f,
                    &mut tally,
                );
                if let Ok(evs) = &res {
                    assert!(
                        evs.iter().all(|e| e.cmd_id == cmds[0].cmd_id),
                        "a batch's events carry its first cmd_id"
                    );
                    if !evs.is_empty() {
                        accepted.push((cmds, evs.clone()));
                    }
                }
            }
            Step::Resubmit(idx) => {
                if accepted.is_empty() {
                    continue;
                }
                let (cmds, original) = accepted[idx.index(accepted.len())].clone();
                let res = if cmds.len() == 1 {
                    f.submit(cmds[0].clone()).await
                } else {
                    f.submit_all(cmds).await
                };
                assert_eq!(
                    res.as_ref().ok(),
                    Some(&original),
                    "step {i}: a resubmitted cmd_id returns its original events"
                );
                assert_eq!(
                    f.last_seq(),
                    before.last_seq,
                    "step {i}: and writes nothing"
                );
                assert_eq!(f.state_digest(), before.digest());
            }
        }
    }

    // (a) live == log-only replay == reopened (final snapshot) == each earlier snapshot + tail
    let live = f.state_digest();
    let last = f.last_seq();
    let events = f.events(1).unwrap();
    assert_eq!(events.len() as u64, last);
    // Bodies kept out of the state read back whole, matching their references.
    for b in f.state().blocks.values() {
        let full = f
            .resolve(b)
            .expect("every referenced body is in the content store");
        assert!(full.content_refs.is_empty());
        for (key, r) in &b.content_refs {
            let text = full.contents[key].as_str().expect("a body is text");
            assert_eq!(blake3::hash(text.as_bytes()).as_bytes(), &r.hash.0);
            assert_eq!(text.len() as u64, r.len);
        }
    }
    // Time travel: the state at a mid seq equals the fold of the events up to it.
    for at in [last / 3, last / 2, last.saturating_sub(1)] {
        let expected = apply_all(&State::default(), &events[..at as usize]);
        assert_eq!(
            f.state_at(at).await.unwrap().digest(),
            expected.digest(),
            "state_at({at})"
        );
    }
    f.close().await;

    let (report, _) = elfiee_engine::replay(&path, |_, _| {}).unwrap();
    assert_eq!(
        report.state_digest, live,
        "log-only replay equals the live state"
    );
    assert_eq!(report.events, last);

    let final_snapshot = stored_snapshot(&path).expect("close writes a snapshot");
    assert_eq!(
        snapshot_seq(&final_snapshot),
        last,
        "the snapshot at close is current"
    );
    let g = engine.open(&path).await.unwrap();
    assert_eq!(
        g.state_digest(),
        live,
        "reopen from the final snapshot equals the live state"
    );
    assert_eq!(g.events(1).unwrap(), events);
    g.close().await;

    // (c) verify
    let v = elfiee_engine::verify(&path, |_, _| {}).unwrap();
    assert!(v.ok, "verify: {:?}", v.problems);
    assert_eq!(v.events, last);

    let mid: Vec<&Vec<u8>> = snapshots
        .iter()
        .filter(|s| snapshot_seq(s) < last)
        .collect();
    if std::env::var_os("ELFIEE_PROP_STATS").is_some() {
        println!(
            "steps {}, accepted {}, rejected {}, events {last}, mid-sequence snapshots {}",
            steps.len(),
            tally.accepted,
            tally.rejected,
            mid.len()
        );
    }
    for snap in mid {
        put_snapshot(&path, snap);
        let seq = snapshot_seq(snap);
        let v = elfiee_engine::verify(&path, |_, _| {}).unwrap();
        assert!(v.ok, "verify with the snapshot at {seq}: {:?}", v.problems);
        assert_eq!(
            v.snapshot.as_deref(),
            Some(format!("valid at seq {seq}").as_str())
        );
        common::assert_reopens_to(
            &engine,
            &path,
            &live,
            &format!("snapshot at {seq} + tail up to {last} equals the live state"),
        )
        .await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn live_replayed_and_reopened_states_agree_and_rejections_change_nothing(
        steps in prop::collection::vec(step(), 4..44),
        reopen_at in prop::collection::vec(any::<Index>(), 0..3),
    ) {
        let reopen_at: Vec<usize> = reopen_at.iter().map(|i| i.index(steps.len())).collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_engine_case(&steps, &reopen_at));
    }
}

/// The generator must actually reach the interesting paths: run a fixed sample and count what
/// the engine accepted (all kinds of commands) and rejected.
#[test]
fn the_generator_produces_both_accepted_and_rejected_commands_of_every_kind() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let registry = Registry::builtin();
    let ctx = registry.ctx(
        DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
        "n",
        [3; 16],
    );
    let fresh = || {
        let mut state = State::default();
        for cmd in std::iter::once(Command::new(
            "alice",
            "elf.init",
            None,
            json!({"name": "Alice"}),
        ))
        .chain(setup())
        {
            let evs = registry.execute(&cmd, &state, &ctx).unwrap();
            commit(&mut state, evs);
        }
        state
    };
    let mut ok: BTreeMap<String, usize> = BTreeMap::new();
    let mut err: BTreeMap<String, usize> = BTreeMap::new();
    // Sequences as long as the engine-level property's.
    for _ in 0..100 {
        let mut state = fresh();
        for _ in 0..40 {
            let spec = spec().new_tree(&mut runner).unwrap().current();
            match registry.execute(&spec.command(), &state, &ctx) {
                Ok(evs) => {
                    *ok.entry(spec.cap.clone()).or_default() += 1;
                    commit(&mut state, evs);
                }
                Err(_) => *err.entry(spec.cap.clone()).or_default() += 1,
            }
        }
    }
    let (n_ok, n_err) = (ok.values().sum::<usize>(), err.values().sum::<usize>());
    println!("accepted {n_ok}, rejected {n_err}\nok {ok:?}\nerr {err:?}");
    assert!(
        n_ok * 5 >= n_ok + n_err,
        "at least a fifth of the generated commands should be accepted"
    );
    for cap in [
        "core.create",
        "markdown.write",
        "code.write",
        "core.rename",
        "core.update_metadata",
        "core.link",
        "core.unlink",
        "core.delete",
        "core.grant",
        "core.revoke",
        "editor.create",
        "editor.delete",
    ] {
        assert!(
            ok.get(cap).copied().unwrap_or(0) > 0,
            "{cap} is never accepted: ok {ok:?}"
        );
        assert!(
            err.get(cap).copied().unwrap_or(0) > 0,
            "{cap} is never rejected: err {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Pure properties
// ---------------------------------------------------------------------------------------------

fn commit(state: &mut State, events: Vec<Event>) {
    for mut e in events {
        e.seq = state.last_seq + 1;
        apply(state, &e);
    }
}

/// Anything at all: ids from the registry or made up, any editor, any block, any JSON.
fn wild() -> impl Strategy<Value = Spec> {
    let ids: Vec<String> = Registry::builtin().ids().to_vec();
    let cap = prop_oneof![
        4 => prop::sample::select(ids),
        1 => ".{0,12}",
        1 => Just("core.create\u{0}".to_string()),
    ];
    let editor = prop_oneof![4 => editor(), 1 => Just("*".to_string()), 1 => ".{0,8}"];
    let block =
        prop::option::of(prop_oneof![4 => block(), 1 => Just("*".to_string()), 1 => ".{0,8}"]);
    let expected = prop::option::of(any::<u64>());
    (editor, cap, block, arb_json(), expected).prop_map(
        |(editor, cap, block, payload, expected_seq)| Spec {
            editor,
            cap,
            block,
            payload,
            expected_seq,
        },
    )
}

fn check_pure(
    registry: &Registry,
    state: &mut State,
    cmd: &Command,
    n: u32,
) -> Result<(), TestCaseError> {
    let t = DateTime::from_timestamp_millis(1_700_000_000_000 + n as i64).unwrap();
    let ctx = registry.ctx(t, "node-p", [n as u8; 16]);
    let before = state.digest();
    let r1 = registry.execute(cmd, state, &ctx);
    let r2 = registry.execute(cmd, &state.clone(), &ctx.clone());
    prop_assert_eq!(&r1, &r2, "same (cmd, state, ctx) must give the same result");
    prop_assert!(
        !matches!(r1, Err(CapError::HandlerPanic { .. })),
        "handler panicked: {:?}",
        r1
    );
    prop_assert_eq!(
        state.digest(),
        before.clone(),
        "execute must not change the state"
    );
    match r1 {
        Err(e) => {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        Ok(events) => {
            // Through the storage codec: sealed and reopened events are identical, and applying
            // either gives the same state.
            let mut prev = EventHash::ZERO;
            let mut decoded = Vec::new();
            let mut sealed = Vec::new();
            for (k, mut e) in events.into_iter().enumerate() {
                prop_assert_eq!(e.cmd_id, cmd.cmd_id);
                let prefix = format!("{}/", cmd.editor_id);
                prop_assert!(
                    e.attribute.starts_with(&prefix),
                    "attribute {:?} names the editor",
                    e.attribute
                );
                e.seq = state.last_seq + 1 + k as u64;
                let bytes = codec::seal(&prev, &mut e);
                let back = codec::open(e.seq, &bytes, Some(&prev))
                    .map_err(|r| TestCaseError::fail(format!("codec: {r}")))?;
                prop_assert_eq!(&back, &e, "an event survives seal/open unchanged");
                prev = e.hash;
                decoded.push(back);
                sealed.push(e);
            }
            let via_codec = apply_all(state, &decoded);
            for e in &sealed {
                apply(state, e);
            }
            prop_assert_eq!(
                via_codec.digest(),
                state.digest(),
                "live and decoded events give the same state"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn execute_is_deterministic_total_and_pure_on_any_input(
        prefix in prop::collection::vec(spec(), 0..24),
        probes in prop::collection::vec(prop_oneof![1 => spec(), 2 => wild()], 1..24),
    ) {
        let registry = Registry::builtin();
        let mut state = State::default();
        let init = Command::new("alice", "elf.init", None, json!({"name": "Alice"}));
        check_pure(&registry, &mut state, &init, 0)?;
        for cmd in setup() {
            check_pure(&registry, &mut state, &cmd, 1)?;
        }
        for (i, s) in prefix.iter().chain(probes.iter()).enumerate() {
            check_pure(&registry, &mut state, &s.command(), i as u32 + 2)?;
        }
    }
}
