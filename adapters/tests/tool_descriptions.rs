//! Every tool of the catalogue (DESIGN.md §7) says true things: one row per tool, each row
//! names phrases of the tool's description (they must be in it) and checks what they claim by
//! calling the tool through `mcp::tools::call` on a real document. A catalogue tool without a
//! row fails the test, so a new tool cannot ship with an unchecked description; so does a
//! description that says the tool is not available.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use elfiee_adapters::agent_loop::{AgentSession, Autonomy, DenyAll, SessionOptions};
use elfiee_adapters::llm::{LlmResponse, ScriptedProvider};
use elfiee_adapters::mcp::tools::{call, call_in_session, catalogue, ToolError};
use elfiee_adapters::{attach, service, EffectsConfig, EffectsHandle};
use elfiee_engine::{Engine, EngineError, FileHandle};
use elfiee_model::Event;
use serde_json::{json, Value};

struct Fx {
    _dir: tempfile::TempDir,
    _engine: Engine,
    file: FileHandle,
    effects: EffectsHandle,
    /// The project folder, imported as `dir` and referenced by the agent.
    proj: std::path::PathBuf,
    dir: String,
    agent: String,
    agent_editor: String,
}

const REQ: &str = "Parse <command> blocks.";

/// A document owned by `alice` with a markdown block `req`, an agent `builder` that
/// references an imported project folder (README.md, src/main.rs), and an editor `bob`
/// without grants. Each row gets its own.
async fn fixture() -> Fx {
    let support::Fresh {
        dir, engine, file, ..
    } = support::fresh_doc("tools", "a.elf").await;
    let effects = attach(&file, EffectsConfig::default()).await.unwrap();
    support::requirement(&file, REQ).await;
    support::alice(
        &file,
        "editor.create",
        None,
        json!({"name": "Bob", "editor_id": "bob"}),
    )
    .await;
    let proj = dir.path().join("project");
    write(&proj.join("README.md"), "# Demo\n");
    write(&proj.join("src/main.rs"), "fn main() {}\n");
    let project = support::import_folder(&file, &proj).await;
    let (agent, agent_editor) = support::create_agent(&file, "alice", "builder").await;
    support::reference(&file, &agent, &project).await;
    Fx {
        _dir: dir,
        _engine: engine,
        file,
        effects,
        proj,
        dir: project,
        agent,
        agent_editor,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

impl Fx {
    /// `editor` approves the proposal a tool call answered with.
    async fn approve(&self, editor: &str, v: &Value) -> Result<Vec<Event>, EngineError> {
        let id = v["proposal_id"].as_str().unwrap();
        service::decide_proposal(&self.file, editor, id, true, None).await
    }

    async fn ok(&self, editor: &str, tool: &str, args: Value) -> Value {
        call(&self.file, editor, tool, args.clone())
            .await
            .unwrap_or_else(|e| panic!("{tool} {args} as {editor}: {e}"))
    }

    async fn err(&self, editor: &str, tool: &str, args: Value) -> ToolError {
        match call(&self.file, editor, tool, args.clone()).await {
            Ok(v) => panic!("{tool} {args} as {editor} should fail, got {v}"),
            Err(e) => e,
        }
    }

    fn block(&self, id: &str) -> Option<elfiee_model::Block> {
        self.file.with_state(|s| s.block(id).cloned())
    }

    fn text(&self, id: &str, key: &str) -> Option<String> {
        self.block(id).and_then(|b| {
            b.contents
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    }

    fn children(&self, id: &str) -> Vec<(String, String)> {
        self.file.with_state(|s| {
            s.children_of(id)
                .map(|(r, c)| (r.as_str().to_owned(), c.to_owned()))
                .collect()
        })
    }

    /// The directory's entries: path → block id.
    fn entries(&self) -> std::collections::BTreeMap<String, String> {
        self.file.with_state(|s| {
            elfiee_capabilities::builtin::directory_entries(s.block(&self.dir).unwrap())
        })
    }

    async fn export(&self) -> Value {
        service::export_directory(&self.file, "alice", &self.dir)
            .await
            .unwrap()
    }

    fn disk(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.proj.join(rel)).ok()
    }

    /// A markdown block made by alice; returns its id.
    async fn markdown(&self, name: &str) -> String {
        self.ok(
            "alice",
            "elfiee_block_create",
            json!({"block_type": "markdown", "name": name}),
        )
        .await["block_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn close(self) {
        self.effects
            .settle(&self.file, Duration::from_secs(10))
            .await
            .unwrap();
        self.file.close().await;
    }
}

fn tool_call(id: &str, name: &str, input: Value) -> LlmResponse {
    support::tool_calls(&[(id, name, input)])
}

/// An agent-loop session of two steps: the agent rewrites `req`, then its shell rewrites the
/// project's README.md. Returns the session id.
async fn two_steps(fx: &Fx) -> String {
    let p = Arc::new(ScriptedProvider::new([
        tool_call(
            "t1",
            "elfiee_markdown_write",
            json!({"block_id": "req", "markdown": "agent text"}),
        ),
        tool_call(
            "t2",
            "shell",
            json!({"command": "printf 'agent readme\\n' > README.md"}),
        ),
        LlmResponse::text("scripted", "done"),
    ]));
    let mut o = SessionOptions::new(p, "scripted");
    o.autonomy = Autonomy::Full;
    let mut s = AgentSession::open(&fx.file, "alice", &fx.agent, None, o).unwrap();
    s.run_turn("rewrite", &mut DenyAll).await.unwrap();
    assert_eq!(fx.text("req", "markdown").as_deref(), Some("agent text"));
    assert_eq!(fx.disk("README.md").as_deref(), Some("agent readme\n"));
    s.session_id().to_owned()
}

async fn in_session(fx: &Fx, session: &str, tool: &str, args: Value) -> Result<Value, ToolError> {
    call_in_session(&fx.file, &fx.agent_editor, Some(session), tool, args).await
}

/// The phrases of `tool`'s description that its row checks.
fn claims(tool: &str, phrases: &[&str]) {
    let spec = catalogue()
        .into_iter()
        .find(|t| t.name == tool)
        .unwrap_or_else(|| panic!("{tool} has a row but is not in the catalogue; drop the row"));
    for p in phrases {
        assert!(
            spec.description.contains(p),
            "{tool}: the row checks {p:?}, which its description no longer says: {:?}; update the row with the description",
            spec.description
        );
    }
}

/// One row per catalogue tool: the description's claims, checked by calling it. Returns
/// false for a tool without a row.
async fn row(tool: &str) -> bool {
    let fx = fixture().await;
    let (alice, agent) = ("alice", fx.agent_editor.clone());
    match tool {
        "elfiee_block_list" => {
            claims(
                tool,
                &[
                    "List every block",
                    "id, name, type, owner, outgoing relations",
                    "whether you may read its contents",
                ],
            );
            let v = fx.ok("bob", tool, json!({})).await;
            let blocks = v["blocks"].as_array().unwrap();
            assert_eq!(
                blocks.len(),
                fx.file.with_state(|s| s.blocks.len()),
                "every block"
            );
            for b in blocks {
                for k in [
                    "block_id",
                    "name",
                    "block_type",
                    "owner",
                    "children",
                    "readable",
                ] {
                    assert!(b.get(k).is_some(), "{k} in {b}");
                }
                assert!(b.get("contents").is_none(), "no contents: {b}");
            }
            let req = |v: &Value| {
                v["blocks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|b| b["block_id"] == "req")
                    .unwrap()["readable"]
                    .clone()
            };
            assert_eq!(req(&v), false, "bob holds no markdown.read");
            assert_eq!(
                req(&fx.ok(alice, tool, json!({})).await),
                true,
                "alice owns it"
            );
        }
        "elfiee_block_get" => {
            claims(
                tool,
                &[
                    "its contents, children (outgoing relations) and parents",
                    "Needs the `<type>.read` capability",
                    "unless you own the block",
                ],
            );
            let a = fx.markdown("A").await;
            fx.ok(
                alice,
                "elfiee_block_link",
                json!({"from": a, "to": "req", "relation": "reference"}),
            )
            .await;
            let v = fx.ok(alice, tool, json!({"block_id": "req"})).await;
            assert_eq!(v["contents"]["markdown"], REQ);
            assert_eq!(v["parents"], json!([{"from": a, "relation": "reference"}]));
            let v = fx.ok(alice, tool, json!({"block_id": a})).await;
            assert!(v["children"].to_string().contains("req"), "{v}");
            assert_eq!(
                fx.err("bob", tool, json!({"block_id": "req"})).await.kind,
                "unauthorized"
            );
            // Bob may create blocks but holds no markdown.read: he reads his own.
            fx.ok(alice, "elfiee_exec", json!({"capability": "core.grant", "payload": {"editor_id": "bob", "cap_id": "core.create"}})).await;
            let own = fx
                .ok(
                    "bob",
                    "elfiee_block_create",
                    json!({"block_type": "markdown", "name": "bob's"}),
                )
                .await;
            fx.ok("bob", tool, json!({"block_id": own["block_id"]}))
                .await;
        }
        "elfiee_block_create" => {
            claims(
                tool,
                &[
                    "Create an empty block; you become its owner",
                    "Returns the new block_id",
                    "With `directory` and `path` the block is a new file of that directory",
                    "`.md` files are markdown, others code",
                    "written to the project folder by the next export",
                ],
            );
            let v = fx
                .ok(
                    &agent,
                    tool,
                    json!({"block_type": "markdown", "name": "notes"}),
                )
                .await;
            let b = fx.block(v["block_id"].as_str().unwrap()).unwrap();
            assert_eq!(
                (b.owner.as_str(), b.name.as_str(), b.block_type.as_str()),
                (agent.as_str(), "notes", "markdown")
            );
            assert!(
                fx.text(&b.block_id, "markdown")
                    .unwrap_or_default()
                    .is_empty(),
                "empty: {}",
                b.contents
            );
            let v = fx
                .ok(
                    &agent,
                    tool,
                    json!({"block_type": "markdown", "directory": fx.dir, "path": "docs/guide.md"}),
                )
                .await;
            assert_eq!(
                fx.entries().get("docs/guide.md"),
                v["block_id"].as_str().map(str::to_owned).as_ref()
            );
            let e = fx
                .err(
                    &agent,
                    tool,
                    json!({"block_type": "code", "directory": fx.dir, "path": "docs/other.md"}),
                )
                .await;
            assert!(e.message.contains("markdown"), "{}", e.message);
            assert_eq!(fx.disk("docs/guide.md"), None, "not before the export");
            fx.export().await;
            assert_eq!(fx.disk("docs/guide.md").as_deref(), Some(""));
        }
        "elfiee_block_delete" => {
            claims(tool, &["Delete a block and every relation to or from it"]);
            let (a, b, c) = (
                fx.markdown("A").await,
                fx.markdown("B").await,
                fx.markdown("C").await,
            );
            fx.ok(
                alice,
                "elfiee_block_link",
                json!({"from": a, "to": b, "relation": "reference"}),
            )
            .await;
            fx.ok(
                alice,
                "elfiee_block_link",
                json!({"from": c, "to": a, "relation": "implement"}),
            )
            .await;
            fx.ok(alice, tool, json!({"block_id": a})).await;
            assert!(fx.block(&a).is_none());
            assert!(fx.children(&c).is_empty(), "the relation to it is gone");
            assert!(
                fx.file.with_state(|s| s.parents_of(&b).next().is_none()),
                "the relation from it is gone"
            );
        }
        "elfiee_markdown_write" => {
            claims(tool, &["Replace the contents of a markdown block"]);
            fx.ok(alice, tool, json!({"block_id": "req", "markdown": "one"}))
                .await;
            fx.ok(alice, tool, json!({"block_id": "req", "markdown": "two"}))
                .await;
            assert_eq!(fx.text("req", "markdown").as_deref(), Some("two"));
        }
        "elfiee_code_write" => {
            claims(
                tool,
                &[
                    "Replace the contents of a code block",
                    "optionally set its language",
                ],
            );
            let id = fx
                .ok(
                    alice,
                    "elfiee_block_create",
                    json!({"block_type": "code", "name": "x.rs"}),
                )
                .await["block_id"]
                .as_str()
                .unwrap()
                .to_owned();
            fx.ok(
                alice,
                tool,
                json!({"block_id": id, "text": "a", "language": "rust"}),
            )
            .await;
            fx.ok(alice, tool, json!({"block_id": id, "text": "b"}))
                .await;
            assert_eq!(
                (
                    fx.text(&id, "text").as_deref(),
                    fx.text(&id, "language").as_deref()
                ),
                (Some("b"), Some("rust"))
            );
        }
        "elfiee_block_link" => {
            claims(
                tool,
                &[
                    "Add a relation from one block to another",
                    "No self-links, no cycles, no duplicates",
                ],
            );
            let (a, b) = (fx.markdown("A").await, fx.markdown("B").await);
            fx.ok(
                alice,
                tool,
                json!({"from": a, "to": b, "relation": "reference"}),
            )
            .await;
            assert_eq!(fx.children(&a), vec![("reference".to_owned(), b.clone())]);
            fx.err(
                alice,
                tool,
                json!({"from": a, "to": a, "relation": "reference"}),
            )
            .await;
            fx.err(
                alice,
                tool,
                json!({"from": a, "to": b, "relation": "reference"}),
            )
            .await;
            fx.err(
                alice,
                tool,
                json!({"from": b, "to": a, "relation": "reference"}),
            )
            .await;
            assert_eq!(
                fx.children(&a).len() + fx.children(&b).len(),
                1,
                "nothing else was linked"
            );
        }
        "elfiee_block_unlink" => {
            claims(tool, &["Remove a relation from one block to another"]);
            let (a, b) = (fx.markdown("A").await, fx.markdown("B").await);
            fx.ok(
                alice,
                "elfiee_block_link",
                json!({"from": a, "to": b, "relation": "implement"}),
            )
            .await;
            fx.ok(
                alice,
                tool,
                json!({"from": a, "to": b, "relation": "implement"}),
            )
            .await;
            assert!(fx.children(&a).is_empty());
        }
        "elfiee_block_history" => {
            claims(
                tool,
                &[
                    "The committed events that concern a block",
                    "links to and from it",
                    "oldest first, with who made each change",
                ],
            );
            let a = fx.markdown("A").await;
            fx.ok(
                &agent,
                "elfiee_markdown_write",
                json!({"block_id": a, "markdown": "by the agent"}),
            )
            .await;
            fx.ok(
                alice,
                "elfiee_block_link",
                json!({"from": "req", "to": a, "relation": "reference"}),
            )
            .await;
            let v = fx.ok(alice, tool, json!({"block_id": a})).await;
            let ev = v["events"].as_array().unwrap();
            let kinds: Vec<&str> = ev.iter().map(|e| e["kind"].as_str().unwrap()).collect();
            assert_eq!(kinds, ["core.create", "markdown.write", "core.link"], "{v}");
            let who: Vec<&str> = ev
                .iter()
                .map(|e| e["editor_id"].as_str().unwrap())
                .collect();
            assert_eq!(who, ["alice", agent.as_str(), "alice"]);
            assert!(ev
                .windows(2)
                .all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64()));
        }
        "elfiee_directory_import" => {
            claims(
                tool,
                &[
                    "as a directory block with one markdown/code block per text file",
                    "skips .git, target, node_modules, binary",
                ],
            );
            let other = fx.proj.parent().unwrap().join("other");
            write(&other.join("NOTES.md"), "notes\n");
            write(&other.join("lib.rs"), "pub fn f() {}\n");
            for skipped in [".git/HEAD", "target/debug.rs", "node_modules/m.js"] {
                write(&other.join(skipped), "x\n");
            }
            std::fs::write(other.join("logo.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
            let v = fx.ok(alice, tool, json!({"path": other})).await;
            let dir = fx.block(v["block_id"].as_str().unwrap()).unwrap();
            assert_eq!(dir.block_type, "directory");
            let entries = elfiee_capabilities::builtin::directory_entries(&dir);
            assert_eq!(
                entries.keys().collect::<Vec<_>>(),
                ["NOTES.md", "lib.rs"],
                "{v}"
            );
            assert_eq!(
                fx.block(&entries["NOTES.md"]).unwrap().block_type,
                "markdown"
            );
            assert_eq!(fx.block(&entries["lib.rs"]).unwrap().block_type, "code");
        }
        "elfiee_directory_sync" => {
            claims(tool, &["changed files are written, new files get blocks, deleted files' blocks are deleted", "Returns the counts (changed, added, deleted, unchanged)"]);
            let main = fx.entries()["src/main.rs"].clone();
            write(&fx.proj.join("README.md"), "# Changed\n");
            write(&fx.proj.join("src/new.rs"), "pub fn n() {}\n");
            std::fs::remove_file(fx.proj.join("src/main.rs")).unwrap();
            let v = fx.ok(alice, tool, json!({"block_id": fx.dir})).await;
            assert_eq!(
                (
                    v["changed"].as_u64(),
                    v["added"].as_u64(),
                    v["deleted"].as_u64(),
                    v["unchanged"].as_u64()
                ),
                (Some(1), Some(1), Some(1), Some(0)),
                "{v}"
            );
            assert_eq!(
                fx.text(&fx.entries()["README.md"], "markdown").as_deref(),
                Some("# Changed\n")
            );
            assert!(fx.entries().contains_key("src/new.rs"));
            assert!(
                fx.block(&main).is_none(),
                "the deleted file's block is deleted"
            );
        }
        "elfiee_directory_add" => {
            claims(
                tool,
                &[
                    "Make a new file in a directory block at a relative path",
                    "a markdown block for `.md`, a code block otherwise",
                    "owned by you and linked from you (`implement`)",
                    "The next export",
                    "writes it to the project folder",
                    "Returns the new block_id",
                ],
            );
            let v = fx.ok(&agent, tool, json!({"directory": fx.dir, "path": "src/agent_made.rs", "content": "pub fn made() {}\n"})).await;
            let id = v["block_id"].as_str().unwrap().to_owned();
            assert_eq!(fx.entries().get("src/agent_made.rs"), Some(&id));
            let b = fx.block(&id).unwrap();
            assert_eq!(
                (b.block_type.as_str(), b.owner.as_str()),
                ("code", agent.as_str())
            );
            assert!(
                fx.children(&fx.agent)
                    .contains(&("implement".to_owned(), id.clone())),
                "linked from the agent"
            );
            let md = fx
                .ok(
                    &agent,
                    tool,
                    json!({"directory": fx.dir, "path": "NOTES.md"}),
                )
                .await;
            assert_eq!(
                fx.block(md["block_id"].as_str().unwrap())
                    .unwrap()
                    .block_type,
                "markdown"
            );
            fx.err(
                &agent,
                tool,
                json!({"directory": fx.dir, "path": "../escape.rs"}),
            )
            .await;
            assert_eq!(fx.disk("src/agent_made.rs"), None, "not before the export");
            fx.export().await;
            assert_eq!(
                fx.disk("src/agent_made.rs").as_deref(),
                Some("pub fn made() {}\n")
            );
        }
        "elfiee_directory_move" => {
            claims(
                tool,
                &[
                    "Move (rename) a file of a directory block to another relative path",
                    "The next export renames it in the project folder",
                ],
            );
            let main = fx.entries()["src/main.rs"].clone();
            fx.ok(
                &agent,
                tool,
                json!({"directory": fx.dir, "from": "src/main.rs", "to": "src/app.rs"}),
            )
            .await;
            assert_eq!(fx.entries().get("src/app.rs"), Some(&main));
            assert!(!fx.entries().contains_key("src/main.rs"));
            fx.export().await;
            assert_eq!(
                (fx.disk("src/app.rs").as_deref(), fx.disk("src/main.rs")),
                (Some("fn main() {}\n"), None)
            );
        }
        "elfiee_directory_remove" => {
            claims(tool, &["Remove a file from a directory block (its block is deleted unless keep_block)", "The next export deletes it from the project folder, unless the file there changed since it was last read"]);
            let (readme, main) = (
                fx.entries()["README.md"].clone(),
                fx.entries()["src/main.rs"].clone(),
            );
            fx.ok(
                &agent,
                tool,
                json!({"directory": fx.dir, "path": "README.md"}),
            )
            .await;
            assert!(fx.block(&readme).is_none(), "its block is deleted");
            fx.ok(
                &agent,
                tool,
                json!({"directory": fx.dir, "path": "src/main.rs", "keep_block": true}),
            )
            .await;
            assert!(fx.block(&main).is_some(), "keep_block keeps the block");
            assert!(fx.entries().is_empty());
            write(&fx.proj.join("src/main.rs"), "fn main() { changed() }\n");
            let x = fx.export().await;
            assert_eq!(fx.disk("README.md"), None, "the export deleted it");
            assert_eq!(
                fx.disk("src/main.rs").as_deref(),
                Some("fn main() { changed() }\n"),
                "changed on disk: left alone"
            );
            assert!(x["refused"].to_string().contains("src/main.rs"), "{x}");
        }
        "elfiee_steps" => {
            claims(
                tool,
                &[
                    "Your steps in this session, oldest first",
                    "the document's seq range it changed",
                    "the project files it created, modified and deleted",
                    "whether it is done or undone",
                ],
            );
            let e = fx.err(&agent, tool, json!({})).await;
            assert!(e.message.contains("session"), "{}", e.message);
            let sid = two_steps(&fx).await;
            let v = in_session(&fx, &sid, tool, json!({})).await.unwrap();
            let steps = v["steps"].as_array().unwrap();
            assert_eq!(steps.len(), 2, "{v}");
            assert_eq!(
                (steps[0]["step"].as_u64(), steps[1]["step"].as_u64()),
                (Some(1), Some(2))
            );
            assert!(steps.iter().all(|s| s["status"] == "done"), "{v}");
            assert!(steps[0]["doc_from"].as_u64() <= steps[0]["doc_to"].as_u64());
            assert_eq!(steps[1]["files_modified"], json!(["README.md"]), "{v}");
            in_session(&fx, &sid, "elfiee_undo", json!({}))
                .await
                .unwrap();
            let v = in_session(&fx, &sid, tool, json!({})).await.unwrap();
            assert_eq!(v["steps"][1]["status"], "undone", "{v}");
        }
        "elfiee_undo" => {
            claims(tool, &["Take back your newest `steps` steps of this session (default 1) in the document and in the project folder, byte for byte", "Refused, with nothing changed, when a block or file you changed was changed since by someone else"]);
            let sid = two_steps(&fx).await;
            in_session(&fx, &sid, tool, json!({})).await.unwrap();
            assert_eq!(
                fx.disk("README.md").as_deref(),
                Some("# Demo\n"),
                "step 2 taken back on disk"
            );
            assert_eq!(
                fx.text("req", "markdown").as_deref(),
                Some("agent text"),
                "default: one step"
            );
            // Someone else changes what step 1 changed: refused, nothing changed.
            fx.ok(
                alice,
                "elfiee_markdown_write",
                json!({"block_id": "req", "markdown": "alice's"}),
            )
            .await;
            in_session(&fx, &sid, tool, json!({"steps": 1}))
                .await
                .unwrap_err();
            assert_eq!(fx.text("req", "markdown").as_deref(), Some("alice's"));
            fx.ok(
                alice,
                "elfiee_markdown_write",
                json!({"block_id": "req", "markdown": "agent text"}),
            )
            .await;
        }
        "elfiee_redo" => {
            claims(tool, &["Bring back the steps your newest elfiee_undo took back, in the document and in the project folder"]);
            let sid = two_steps(&fx).await;
            in_session(&fx, &sid, "elfiee_undo", json!({"steps": 2}))
                .await
                .unwrap();
            assert_eq!(
                (
                    fx.text("req", "markdown").as_deref(),
                    fx.disk("README.md").as_deref()
                ),
                (Some(REQ), Some("# Demo\n"))
            );
            in_session(&fx, &sid, tool, json!({})).await.unwrap();
            assert_eq!(
                (
                    fx.text("req", "markdown").as_deref(),
                    fx.disk("README.md").as_deref()
                ),
                (Some("agent text"), Some("agent readme\n"))
            );
        }
        "elfiee_terminal_run" => {
            claims(
                tool,
                &[
                    "Run a shell command in a terminal block",
                    "its working directory is the terminal's linked directory",
                    "wait for the recorded output: stdout, stderr, exit_code",
                ],
            );
            let t = fx.ok(alice, "elfiee_exec", json!({"capability": "terminal.create", "payload": {"name": "t", "linked_directory_id": fx.dir}})).await;
            let tid = t["events"][0]["entity"].as_str().unwrap().to_owned();
            let v = fx
                .ok(
                    alice,
                    tool,
                    json!({"terminal_id": tid, "command": "pwd; echo oops >&2; exit 3"}),
                )
                .await;
            let cwd = std::path::PathBuf::from(v["stdout"].as_str().unwrap().trim());
            assert_eq!(
                cwd.canonicalize().unwrap(),
                fx.proj.canonicalize().unwrap(),
                "{v}"
            );
            assert_eq!(
                (v["stderr"].as_str().map(str::trim), v["exit_code"].as_i64()),
                (Some("oops"), Some(3)),
                "{v}"
            );
        }
        "elfiee_proposal_list" => {
            claims(
                tool,
                &[
                    "List change proposals with their status",
                    "oldest first",
                    "yours when you are an agent, every agent's otherwise",
                    "proposal_id, prompt and proposed_commands",
                ],
            );
            let (_, other) = support::create_agent(&fx.file, "alice", "other").await;
            let propose = |who: String, what: &'static str| {
                let fx = &fx;
                async move {
                    fx.ok(&who, "elfiee_propose", json!({"commands": [{"cap_id": "markdown.write", "block_id": "req", "payload": {"markdown": what}}], "description": what})).await["proposal_id"].clone()
                }
            };
            let p1 = propose(agent.clone(), "first").await;
            let p2 = propose(other.clone(), "second").await;
            let mine = fx.ok(&agent, tool, json!({})).await;
            let ids = |v: &Value| {
                v["proposals"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["proposal_id"].clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                ids(&mine),
                std::slice::from_ref(&p1),
                "an agent sees its own"
            );
            let all = fx.ok(alice, tool, json!({})).await;
            assert_eq!(ids(&all), [p1, p2], "everyone's, oldest first");
            let first = &all["proposals"][0];
            assert_eq!(
                (first["status"].as_str(), first["prompt"].as_str()),
                (Some("pending"), Some("first")),
                "{first}"
            );
            assert_eq!(first["proposed_commands"][0]["cap_id"], "markdown.write");
        }
        "elfiee_propose" => {
            claims(
                tool,
                &[
                    "for a human to approve or reject; nothing runs now",
                    "Only an agent may propose",
                    "Returns the pending proposal_id",
                    "every command runs as you, all or nothing, each checked against your grants",
                ],
            );
            let cmd = |block: &str, text: &str| json!({"cap_id": "markdown.write", "block_id": block, "payload": {"markdown": text}});
            assert_eq!(
                fx.err(
                    alice,
                    tool,
                    json!({"commands": [cmd("req", "x")], "description": "d"})
                )
                .await
                .kind,
                "not_an_agent"
            );
            let v = fx
                .ok(
                    &agent,
                    tool,
                    json!({"commands": [cmd("req", "proposed")], "description": "d"}),
                )
                .await;
            assert_eq!(v["status"], "pending");
            assert_eq!(
                fx.text("req", "markdown").as_deref(),
                Some(REQ),
                "nothing ran yet"
            );
            fx.approve(alice, &v).await.unwrap();
            assert_eq!(fx.text("req", "markdown").as_deref(), Some("proposed"));
            let by = fx
                .ok(alice, "elfiee_block_history", json!({"block_id": "req"}))
                .await["events"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()["editor_id"]
                .clone();
            assert_eq!(by, json!(agent), "ran as the agent");
            // All or nothing: the second command fails, so the first does not run either.
            let v = fx.ok(&agent, tool, json!({"commands": [cmd("req", "half"), cmd("ghost", "x")], "description": "d"})).await;
            fx.approve(alice, &v).await.unwrap_err();
            assert_eq!(fx.text("req", "markdown").as_deref(), Some("proposed"));
            // Checked against the agent's grants: it holds no core.delete on alice's block.
            let v = fx.ok(&agent, tool, json!({"commands": [{"cap_id": "core.delete", "block_id": "req", "payload": {}}], "description": "d"})).await;
            fx.approve(alice, &v).await.unwrap_err();
            assert!(fx.block("req").is_some());
        }
        "elfiee_exec" => {
            claims(
                tool,
                &[
                    "Run one command of any capability",
                    "checked against your grants",
                    "Returns the committed events (seq, kind, entity, value)",
                ],
            );
            let v = fx.ok(alice, tool, json!({"capability": "core.rename", "block_id": "req", "payload": {"name": "Spec"}})).await;
            let e = &v["events"][0];
            assert_eq!(
                (e["kind"].as_str(), e["entity"].as_str()),
                (Some("core.rename"), Some("req")),
                "{v}"
            );
            assert!(
                e["seq"].as_u64().is_some() && e.get("value").is_some(),
                "{v}"
            );
            assert_eq!(fx.block("req").unwrap().name, "Spec");
            assert_eq!(fx.err("bob", tool, json!({"capability": "markdown.write", "block_id": "req", "payload": {"markdown": "x"}})).await.kind, "unauthorized");
            assert_eq!(
                fx.err(alice, tool, json!({"capability": "nope.nothing"}))
                    .await
                    .kind,
                "unknown_capability"
            );
        }
        // A new catalogue tool gets its row here: the phrases of its description and a call
        // that shows each of them true.
        _ => {
            fx.close().await;
            return false;
        }
    }
    fx.close().await;
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_description_is_checked_against_the_tool() {
    let mut missing = Vec::new();
    for spec in catalogue() {
        let lower = spec.description.to_lowercase();
        assert!(
            !lower.contains("not available") && !lower.contains("not implemented"),
            "{}: {:?}",
            spec.name,
            spec.description
        );
        if !row(spec.name).await {
            missing.push(spec.name);
        }
    }
    assert!(
        missing.is_empty(),
        "catalogue tools without a row in adapters/tests/tool_descriptions.rs: {missing:?}; add one that checks what the description says"
    );
}
