//! Capability-based access control, table-driven, through the real engine (`FileHandle::submit`
//! and `FileHandle::read_block`).
//!
//! Every row starts from a fresh file: `alice` owns it (and so holds every capability on `*`),
//! `bob` and `carol` are plain editors with no grants, and alice owns two markdown blocks `doc`
//! and `other`. A row runs its setup commands (each must succeed), then one action, and checks
//! the exact outcome. A refused action must leave the log and the state untouched.

mod common;

use elfiee_engine::{Engine, EngineConfig, EngineError, FileHandle};
use elfiee_model::{CapError, Command};
use serde_json::{json, Value};

#[derive(Clone)]
enum Step {
    /// `editor` runs `cap` on `block` (None = `*`).
    Run(&'static str, &'static str, Option<&'static str>, Value),
    /// `editor` reads `block` through `read_block`.
    Read(&'static str, &'static str),
}

use Step::{Read, Run};

#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Ok,
    Unauthorized(&'static str, &'static str, &'static str),
    UnknownEditor(&'static str),
}

struct Row {
    name: &'static str,
    setup: Vec<Step>,
    action: Step,
    expect: Expect,
}

fn row(name: &'static str, setup: Vec<Step>, action: Step, expect: Expect) -> Row {
    Row {
        name,
        setup,
        action,
        expect,
    }
}

fn grant(by: &'static str, block: Option<&'static str>, editor: &str, cap: &str) -> Step {
    Run(
        by,
        "core.grant",
        block,
        json!({"editor_id": editor, "cap_id": cap}),
    )
}

fn revoke(by: &'static str, block: Option<&'static str>, editor: &str, cap: &str) -> Step {
    Run(
        by,
        "core.revoke",
        block,
        json!({"editor_id": editor, "cap_id": cap}),
    )
}

fn write(by: &'static str, block: &'static str) -> Step {
    Run(
        by,
        "markdown.write",
        Some(block),
        json!({"markdown": format!("written by {by}")}),
    )
}

fn create(by: &'static str, id: &str) -> Step {
    Run(
        by,
        "core.create",
        None,
        json!({"name": id, "block_type": "markdown", "block_id": id}),
    )
}

/// bob gets `core.create` on `*` and creates (so owns) block `bobs`.
fn bob_owns_bobs() -> Vec<Step> {
    vec![
        grant("alice", None, "bob", "core.create"),
        create("bob", "bobs"),
    ]
}

async fn fixture(engine: &Engine, dir: &tempfile::TempDir) -> FileHandle {
    let f = engine
        .init(dir.path().join("m.elf"), "Alice")
        .await
        .unwrap();
    for (id, name) in [("bob", "Bob"), ("carol", "Carol")] {
        common::alice(
            &f,
            "editor.create",
            None,
            json!({"name": name, "editor_id": id}),
        )
        .await;
    }
    for id in ["doc", "other"] {
        common::alice(
            &f,
            "core.create",
            None,
            json!({"name": id, "block_type": "markdown", "block_id": id}),
        )
        .await;
    }
    f
}

async fn run_step(f: &FileHandle, step: &Step) -> Result<(), EngineError> {
    match step {
        Run(editor, cap, block, payload) => f
            .submit(Command::new(*editor, *cap, *block, payload.clone()))
            .await
            .map(|_| ()),
        Read(editor, block) => f.read_block(editor, block).map(|_| ()),
    }
}

fn outcome(r: &Result<(), EngineError>) -> Result<Expect, String> {
    match r {
        Ok(()) => Ok(Expect::Ok),
        Err(EngineError::Rejected(CapError::Unauthorized { editor, cap, block })) => {
            // Leak is fine in a test: lets the table hold &'static str.
            Ok(Expect::Unauthorized(leak(editor), leak(cap), leak(block)))
        }
        Err(EngineError::Rejected(CapError::UnknownEditor(e))) => {
            Ok(Expect::UnknownEditor(leak(e)))
        }
        Err(other) => Err(format!("unexpected error {other:?} ({other})")),
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

async fn run_matrix(rows: Vec<Row>) {
    let engine = Engine::new(EngineConfig {
        node_id: "cbac".into(),
        ..EngineConfig::default()
    });
    let mut failures = Vec::new();
    for r in &rows {
        let dir = tempfile::tempdir().unwrap();
        let f = fixture(&engine, &dir).await;
        for (i, s) in r.setup.iter().enumerate() {
            if let Err(e) = run_step(&f, s).await {
                failures.push(format!("[{}] setup step {} failed: {e}", r.name, i + 1));
            }
        }
        let (seq, digest) = (f.last_seq(), f.state_digest());
        let res = run_step(&f, &r.action).await;
        match outcome(&res) {
            Ok(got) if got == r.expect => {}
            Ok(got) => failures.push(format!(
                "[{}] expected {:?}, got {:?}",
                r.name, r.expect, got
            )),
            Err(msg) => failures.push(format!("[{}] {msg}", r.name)),
        }
        if let Err(e) = &res {
            let msg = e.to_string();
            if !(msg.contains("elfiee grant") || msg.contains("elfiee editor create")) {
                failures.push(format!(
                    "[{}] the error does not say what to do: {msg}",
                    r.name
                ));
            }
            if f.last_seq() != seq || f.state_digest() != digest {
                failures.push(format!("[{}] a refused command changed the file", r.name));
            }
        }
        f.close().await;
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn ownership_and_exact_grants() {
    use Expect::*;
    run_matrix(vec![
        row(
            "the file owner may write its own block",
            vec![],
            write("alice", "doc"),
            Ok,
        ),
        row(
            "a block owner may write it without any grant",
            bob_owns_bobs(),
            write("bob", "bobs"),
            Ok,
        ),
        row(
            "a block owner may read it without any grant",
            bob_owns_bobs(),
            Read("bob", "bobs"),
            Ok,
        ),
        row(
            "a block owner may rename it",
            bob_owns_bobs(),
            Run("bob", "core.rename", Some("bobs"), json!({"name": "mine"})),
            Ok,
        ),
        row(
            "a block owner may delete it",
            bob_owns_bobs(),
            Run("bob", "core.delete", Some("bobs"), json!({})),
            Ok,
        ),
        row(
            "the file owner's `*` grants reach blocks other editors own",
            bob_owns_bobs(),
            write("alice", "bobs"),
            Ok,
        ),
        row(
            "no grant, not the owner: refused",
            vec![],
            write("carol", "doc"),
            Unauthorized("carol", "markdown.write", "doc"),
        ),
        row(
            "no grant: reading is refused too",
            vec![],
            Read("carol", "doc"),
            Unauthorized("carol", "markdown.read", "doc"),
        ),
        row(
            "owning one block gives nothing on another",
            bob_owns_bobs(),
            write("bob", "doc"),
            Unauthorized("bob", "markdown.write", "doc"),
        ),
        row(
            "an exact grant allows that cap on that block",
            vec![grant("alice", Some("doc"), "carol", "markdown.write")],
            write("carol", "doc"),
            Ok,
        ),
        row(
            "an exact grant does not reach another block",
            vec![grant("alice", Some("doc"), "carol", "markdown.write")],
            write("carol", "other"),
            Unauthorized("carol", "markdown.write", "other"),
        ),
        row(
            "an exact grant does not allow another cap",
            vec![grant("alice", Some("doc"), "carol", "markdown.write")],
            Run("carol", "core.rename", Some("doc"), json!({"name": "x"})),
            Unauthorized("carol", "core.rename", "doc"),
        ),
        row(
            "a grant to one editor does not help another",
            vec![grant("alice", Some("doc"), "carol", "markdown.write")],
            write("bob", "doc"),
            Unauthorized("bob", "markdown.write", "doc"),
        ),
        row(
            "an exact read grant allows read_block",
            vec![grant("alice", Some("doc"), "carol", "markdown.read")],
            Read("carol", "doc"),
            Ok,
        ),
        row(
            "a write grant does not allow reading",
            vec![grant("alice", Some("doc"), "carol", "markdown.write")],
            Read("carol", "doc"),
            Unauthorized("carol", "markdown.read", "doc"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn wildcard_grants() {
    use Expect::*;
    run_matrix(vec![
        row(
            "block '*' grant reaches doc",
            vec![grant("alice", None, "carol", "markdown.write")],
            write("carol", "doc"),
            Ok,
        ),
        row(
            "block '*' grant reaches other",
            vec![grant("alice", None, "carol", "markdown.write")],
            write("carol", "other"),
            Ok,
        ),
        row(
            "block '*' grant reaches blocks created later by someone else",
            [
                vec![grant("alice", None, "carol", "markdown.write")],
                bob_owns_bobs(),
            ]
            .concat(),
            write("carol", "bobs"),
            Ok,
        ),
        row(
            "block '*' grant is still only for its editor",
            vec![grant("alice", None, "carol", "markdown.write")],
            write("bob", "doc"),
            Unauthorized("bob", "markdown.write", "doc"),
        ),
        row(
            "block '*' grant is still only for its cap",
            vec![grant("alice", None, "carol", "markdown.write")],
            Run("carol", "core.delete", Some("doc"), json!({})),
            Unauthorized("carol", "core.delete", "doc"),
        ),
        row(
            "editor '*' grant reaches bob",
            vec![grant("alice", Some("doc"), "*", "markdown.write")],
            write("bob", "doc"),
            Ok,
        ),
        row(
            "editor '*' grant reaches carol",
            vec![grant("alice", Some("doc"), "*", "markdown.write")],
            write("carol", "doc"),
            Ok,
        ),
        row(
            "editor '*' grant reaches editors created later",
            vec![
                grant("alice", Some("doc"), "*", "markdown.write"),
                Run(
                    "alice",
                    "editor.create",
                    None,
                    json!({"name": "Dave", "editor_id": "dave"}),
                ),
            ],
            write("dave", "doc"),
            Ok,
        ),
        row(
            "editor '*' grant on doc does not reach other",
            vec![grant("alice", Some("doc"), "*", "markdown.write")],
            write("bob", "other"),
            Unauthorized("bob", "markdown.write", "other"),
        ),
        row(
            "editor '*' and block '*' reaches everything",
            vec![grant("alice", None, "*", "markdown.read")],
            Read("bob", "other"),
            Ok,
        ),
        row(
            "editor '*' grant does not let an unknown editor in",
            vec![grant("alice", None, "*", "markdown.write")],
            write("mallory", "doc"),
            UnknownEditor("mallory"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn revocation_removes_access() {
    use Expect::*;
    run_matrix(vec![
        row(
            "revoking an exact grant removes it",
            vec![
                grant("alice", Some("doc"), "carol", "markdown.write"),
                write("carol", "doc"),
                revoke("alice", Some("doc"), "carol", "markdown.write"),
            ],
            write("carol", "doc"),
            Unauthorized("carol", "markdown.write", "doc"),
        ),
        row(
            "revoking a block '*' grant removes it",
            vec![grant("alice", None, "carol", "markdown.write"), revoke("alice", None, "carol", "markdown.write")],
            write("carol", "other"),
            Unauthorized("carol", "markdown.write", "other"),
        ),
        row(
            "revoking an editor '*' grant removes it for everyone",
            vec![grant("alice", Some("doc"), "*", "markdown.write"), revoke("alice", Some("doc"), "*", "markdown.write")],
            write("bob", "doc"),
            Unauthorized("bob", "markdown.write", "doc"),
        ),
        row(
            "revoking the '*' grant leaves an exact grant in place",
            vec![
                grant("alice", Some("doc"), "*", "markdown.write"),
                grant("alice", Some("doc"), "carol", "markdown.write"),
                revoke("alice", Some("doc"), "*", "markdown.write"),
            ],
            write("carol", "doc"),
            Ok,
        ),
        row(
            "revoking an exact grant leaves a wildcard grant in place",
            vec![
                grant("alice", None, "carol", "markdown.write"),
                grant("alice", Some("doc"), "carol", "markdown.write"),
                revoke("alice", Some("doc"), "carol", "markdown.write"),
            ],
            write("carol", "doc"),
            Ok,
        ),
        row(
            "grant, revoke, grant again: access is back",
            vec![
                grant("alice", Some("doc"), "carol", "markdown.write"),
                revoke("alice", Some("doc"), "carol", "markdown.write"),
                grant("alice", Some("doc"), "carol", "markdown.write"),
            ],
            write("carol", "doc"),
            Ok,
        ),
        row(
            "deleting a block drops the grants on it (a new block with the same id is not reachable)",
            vec![
                grant("alice", Some("doc"), "carol", "markdown.write"),
                Run("alice", "core.delete", Some("doc"), json!({})),
                create("alice", "doc"),
            ],
            write("carol", "doc"),
            Unauthorized("carol", "markdown.write", "doc"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn deleted_and_unknown_editors_have_no_rights() {
    use Expect::*;
    let delete_bob = || Run("alice", "editor.delete", None, json!({"editor_id": "bob"}));
    run_matrix(vec![
        row(
            "a deleted editor cannot write the block it owns",
            [bob_owns_bobs(), vec![delete_bob()]].concat(),
            write("bob", "bobs"),
            UnknownEditor("bob"),
        ),
        row(
            "a deleted editor cannot read the block it owns",
            [bob_owns_bobs(), vec![delete_bob()]].concat(),
            Read("bob", "bobs"),
            UnknownEditor("bob"),
        ),
        row(
            "a deleted editor cannot delete the block it owns",
            [bob_owns_bobs(), vec![delete_bob()]].concat(),
            Run("bob", "core.delete", Some("bobs"), json!({})),
            UnknownEditor("bob"),
        ),
        row(
            "a deleted editor loses its exact grants",
            vec![
                grant("alice", Some("doc"), "bob", "markdown.write"),
                delete_bob(),
            ],
            write("bob", "doc"),
            UnknownEditor("bob"),
        ),
        row(
            "a deleted editor is not revived by an editor '*' grant",
            vec![grant("alice", None, "*", "markdown.write"), delete_bob()],
            write("bob", "doc"),
            UnknownEditor("bob"),
        ),
        row(
            "a deleted editor cannot create",
            vec![grant("alice", None, "bob", "core.create"), delete_bob()],
            create("bob", "late"),
            UnknownEditor("bob"),
        ),
        row(
            "re-creating a deleted editor id does not bring back its grants",
            vec![
                grant("alice", Some("doc"), "bob", "markdown.write"),
                delete_bob(),
                Run(
                    "alice",
                    "editor.create",
                    None,
                    json!({"name": "Bob 2", "editor_id": "bob"}),
                ),
            ],
            write("bob", "doc"),
            Unauthorized("bob", "markdown.write", "doc"),
        ),
        row(
            "a never-created editor has no rights",
            vec![],
            write("mallory", "doc"),
            UnknownEditor("mallory"),
        ),
        row(
            "a never-created editor cannot read",
            vec![],
            Read("mallory", "doc"),
            UnknownEditor("mallory"),
        ),
        row(
            "a never-created editor cannot create",
            vec![],
            create("mallory", "m"),
            UnknownEditor("mallory"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn file_level_caps_need_a_star_grant() {
    use Expect::*;
    run_matrix(vec![
        row(
            "create without a '*' grant is refused",
            vec![],
            create("carol", "c1"),
            Unauthorized("carol", "core.create", "*"),
        ),
        row(
            "a core.create grant on a block does not allow create",
            vec![grant("alice", Some("doc"), "carol", "core.create")],
            create("carol", "c1"),
            Unauthorized("carol", "core.create", "*"),
        ),
        row(
            "create with a '*' grant is allowed",
            vec![grant("alice", None, "carol", "core.create")],
            create("carol", "c1"),
            Ok,
        ),
        row(
            "the creator owns what it created",
            vec![
                grant("alice", None, "carol", "core.create"),
                create("carol", "c1"),
            ],
            Run(
                "carol",
                "core.rename",
                Some("c1"),
                json!({"name": "renamed"}),
            ),
            Ok,
        ),
        row(
            "create via an editor '*' grant on '*'",
            vec![grant("alice", None, "*", "core.create")],
            create("bob", "b1"),
            Ok,
        ),
        row(
            "editor.create without a '*' grant is refused",
            vec![],
            Run(
                "bob",
                "editor.create",
                None,
                json!({"name": "Eve", "editor_id": "eve"}),
            ),
            Unauthorized("bob", "editor.create", "*"),
        ),
        row(
            "editor.create with a '*' grant is allowed",
            vec![grant("alice", None, "bob", "editor.create")],
            Run(
                "bob",
                "editor.create",
                None,
                json!({"name": "Eve", "editor_id": "eve"}),
            ),
            Ok,
        ),
        row(
            "editor.delete without a '*' grant is refused",
            vec![],
            Run("bob", "editor.delete", None, json!({"editor_id": "carol"})),
            Unauthorized("bob", "editor.delete", "*"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn granting_needs_ownership_of_the_block_or_core_grant() {
    use Expect::*;
    run_matrix(vec![
        row(
            "a non-owner without core.grant cannot grant on a block",
            vec![],
            grant("bob", Some("doc"), "carol", "markdown.write"),
            Unauthorized("bob", "core.grant", "doc"),
        ),
        row(
            "a non-owner cannot grant to itself either",
            vec![],
            grant("bob", Some("doc"), "bob", "markdown.write"),
            Unauthorized("bob", "core.grant", "doc"),
        ),
        row(
            "the block owner may grant on its block",
            bob_owns_bobs(),
            grant("bob", Some("bobs"), "carol", "markdown.write"),
            Ok,
        ),
        row(
            "and that grant works",
            [
                bob_owns_bobs(),
                vec![grant("bob", Some("bobs"), "carol", "markdown.write")],
            ]
            .concat(),
            write("carol", "bobs"),
            Ok,
        ),
        row(
            "owning a block gives no right to grant on '*'",
            bob_owns_bobs(),
            grant("bob", None, "carol", "markdown.write"),
            Unauthorized("bob", "core.grant", "*"),
        ),
        row(
            "owning a block gives no right to grant on another block",
            bob_owns_bobs(),
            grant("bob", Some("doc"), "carol", "markdown.write"),
            Unauthorized("bob", "core.grant", "doc"),
        ),
        row(
            "holding core.grant on a block allows granting there",
            vec![grant("alice", Some("doc"), "bob", "core.grant")],
            grant("bob", Some("doc"), "carol", "markdown.write"),
            Ok,
        ),
        row(
            "holding core.grant on a block does not allow granting elsewhere",
            vec![grant("alice", Some("doc"), "bob", "core.grant")],
            grant("bob", Some("other"), "carol", "markdown.write"),
            Unauthorized("bob", "core.grant", "other"),
        ),
        row(
            "holding core.grant on '*' allows granting on '*'",
            vec![grant("alice", None, "bob", "core.grant")],
            grant("bob", None, "carol", "core.create"),
            Ok,
        ),
        row(
            "holding core.grant on '*' allows granting on any block",
            vec![grant("alice", None, "bob", "core.grant")],
            grant("bob", Some("other"), "carol", "markdown.write"),
            Ok,
        ),
        row(
            "core.grant does not include core.revoke",
            vec![
                grant("alice", None, "bob", "core.grant"),
                grant("alice", Some("doc"), "carol", "markdown.write"),
            ],
            revoke("bob", Some("doc"), "carol", "markdown.write"),
            Unauthorized("bob", "core.revoke", "doc"),
        ),
        row(
            "the block owner may revoke on its block",
            [
                bob_owns_bobs(),
                vec![grant("bob", Some("bobs"), "carol", "markdown.write")],
            ]
            .concat(),
            revoke("bob", Some("bobs"), "carol", "markdown.write"),
            Ok,
        ),
        row(
            "a non-owner cannot revoke the owner's grants",
            vec![grant("alice", Some("doc"), "bob", "markdown.write")],
            revoke("carol", Some("doc"), "bob", "markdown.write"),
            Unauthorized("carol", "core.revoke", "doc"),
        ),
    ])
    .await;
}
