//! Generated steps: commands written against placeholders that are resolved against the
//! state when they run, so every subsequence of a sequence is still a meaningful sequence
//! (what lets proptest shrink a failure by dropping steps).
//!
//! Placeholders, in the editor, the block id and anywhere in the payload (whole strings):
//! - `$owner` — the file owner;
//! - `$editor:N` — the N-th editor (sorted by id, N taken modulo their number);
//! - `$block:N` — the N-th block (sorted by id, modulo); `$block:TYPE:N` — the N-th block of
//!   that type; a missing block resolves to `missing-block` (so the command is rejected);
//! - `$id:N` — a fixed id `id-N` (to create blocks or editors with a known id).

use elfiee_model::Command;
use elfiee_projections::State;
use proptest::prelude::*;
use serde_json::{json, Value};

/// One step of a generated run.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Run a command.
    Run(OpCmd),
    /// Close and reopen the document (the engine loads its snapshot plus the tail); the pure
    /// pipeline takes a snapshot image here and checks snapshot + tail = live at the end.
    Reopen,
    /// Run a command with the older program (`Check::older`): its registry's handlers, on the
    /// document as its folds see it, and the engine closes the document, lets that program
    /// open it and commit, then reopens it (its snapshot plus the older program's events).
    /// What mixes old and new payload versions in one log.
    Older(OpCmd),
}

/// A command with placeholders (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct OpCmd {
    /// Who runs it: an editor id or a placeholder (`$owner`, `$editor:N`).
    pub editor: String,
    /// The capability id.
    pub cap: String,
    /// The target block: an id or a placeholder (`$block:N`, `$block:TYPE:N`); `None` for
    /// the whole file.
    pub block: Option<String>,
    /// The payload; any whole string in it may be a placeholder.
    pub payload: Value,
}

impl OpCmd {
    /// A command run by the owner on no block.
    pub fn new(cap: impl Into<String>, payload: Value) -> OpCmd {
        OpCmd {
            editor: "$owner".into(),
            cap: cap.into(),
            block: None,
            payload,
        }
    }

    /// The same command on `block` (an id or a placeholder).
    pub fn on(mut self, block: impl Into<String>) -> OpCmd {
        self.block = Some(block.into());
        self
    }

    /// The same command run by `editor` (an id or a placeholder).
    pub fn by(mut self, editor: impl Into<String>) -> OpCmd {
        self.editor = editor.into();
        self
    }

    /// The command with every placeholder resolved against `state`.
    pub fn resolve(&self, state: &State) -> Command {
        Command::new(
            resolve_str(&self.editor, state),
            &self.cap,
            self.block
                .as_deref()
                .map(|b| resolve_str(b, state))
                .as_deref(),
            resolve_value(&self.payload, state),
        )
    }
}

impl From<OpCmd> for Op {
    fn from(c: OpCmd) -> Op {
        Op::Run(c)
    }
}

fn resolve_value(v: &Value, state: &State) -> Value {
    match v {
        Value::String(s) if s.starts_with('$') => Value::String(resolve_str(s, state)),
        Value::Array(a) => Value::Array(a.iter().map(|x| resolve_value(x, state)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), resolve_value(x, state)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One placeholder resolved (other strings come back as they are).
pub fn resolve_str(s: &str, state: &State) -> String {
    let Some(rest) = s.strip_prefix('$') else {
        return s.to_owned();
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let pick = |ids: Vec<String>, n: &str, missing: &str| -> String {
        let n: usize = n.parse().unwrap_or(0);
        if ids.is_empty() {
            missing.to_owned()
        } else {
            ids[n % ids.len()].clone()
        }
    };
    match parts.as_slice() {
        ["owner"] => state.file_owner.clone().unwrap_or_else(|| "owner".into()),
        ["editor", n] => pick(state.editors.keys().cloned().collect(), n, "missing-editor"),
        ["block", n] => pick(
            state.blocks.iter().map(|(id, _)| id.to_owned()).collect(),
            n,
            "missing-block",
        ),
        ["block", ty, n] => pick(
            state
                .blocks
                .iter()
                .filter(|(_, b)| b.block_type == *ty)
                .map(|(id, _)| id.to_owned())
                .collect(),
            n,
            "missing-block",
        ),
        ["id", n] => format!("id-{n}"),
        _ => s.to_owned(),
    }
}

/// Short texts, sometimes empty, sometimes long enough (≥ 256 bytes) for the content store.
pub fn text() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-z #\n]{0,24}",
        1 => Just(String::new()),
        1 => "[a-zé ]{250,300}",
    ]
    .boxed()
}

/// `$block:N` (any block).
pub fn any_block() -> BoxedStrategy<String> {
    (0usize..16).prop_map(|n| format!("$block:{n}")).boxed()
}

/// `$block:TYPE:N`.
pub fn block_of(ty: &str) -> BoxedStrategy<String> {
    let ty = ty.to_owned();
    (0usize..16)
        .prop_map(move |n| format!("$block:{ty}:{n}"))
        .boxed()
}

/// Mostly the owner, sometimes another editor (whose commands CBAC mostly rejects).
pub fn editor() -> BoxedStrategy<String> {
    prop_oneof![
        6 => Just("$owner".to_string()),
        1 => (0usize..4).prop_map(|n| format!("$editor:{n}")),
    ]
    .boxed()
}

/// Steps over the built-in capabilities of directories, terminals and agents: import and sync
/// of a few small files, add / move / remove of entries, terminals and their run requests,
/// LLM agents, their settings and invocations (requests only: the kit attaches no effects).
pub fn builtin_projects() -> BoxedStrategy<Op> {
    let path =
        || proptest::sample::select(&["a.md", "src/x.rs", "src/y.rs", "docs/z.md", "../up"][..]);
    let files = || {
        proptest::collection::btree_map(path(), text(), 0..4).prop_map(|m| {
            m.into_iter()
                .map(|(p, t)| json!({"path": p, "content": t}))
                .collect::<Vec<_>>()
        })
    };
    prop_oneof![
        2 => (editor(), files(), any::<bool>()).prop_map(|(ed, files, pending)| {
            OpCmd::new("directory.import", json!({"root": "/proj", "files": files, "pending": pending})).by(ed).into()
        }),
        3 => (editor(), block_of("directory"), files(), proptest::collection::vec(path(), 0..2), any::<bool>())
            .prop_map(|(ed, b, files, mut deleted, done)| {
                deleted.sort();
                deleted.dedup();
                OpCmd::new("directory.sync", json!({"files": files, "deleted": deleted, "done": done})).on(b).by(ed).into()
            }),
        2 => (editor(), block_of("directory"), path(), proptest::option::of(text())).prop_map(|(ed, b, p, content)| {
            let mut v = json!({"path": p});
            if let Some(c) = content {
                v["content"] = json!(c);
            }
            OpCmd::new("directory.add", v).on(b).by(ed).into()
        }),
        1 => (editor(), block_of("directory"), path(), path()).prop_map(|(ed, b, from, to)| {
            OpCmd::new("directory.move", json!({"from": from, "to": to})).on(b).by(ed).into()
        }),
        1 => (editor(), block_of("directory"), path(), any::<bool>()).prop_map(|(ed, b, p, keep)| {
            OpCmd::new("directory.remove", json!({"path": p, "keep_block": keep})).on(b).by(ed).into()
        }),
        1 => (editor(), "[a-z]{1,6}", proptest::option::of(block_of("directory"))).prop_map(|(ed, name, dir)| {
            let mut v = json!({"name": name});
            if let Some(d) = dir {
                v["linked_directory_id"] = json!(d);
            }
            OpCmd::new("terminal.create", v).by(ed).into()
        }),
        2 => (editor(), block_of("terminal"), "[a-z ]{0,12}").prop_map(|(ed, b, c)| {
            OpCmd::new("terminal.execute", json!({"command": c})).on(b).by(ed).into()
        }),
        1 => (editor(), "[a-z]{1,6}").prop_map(|(ed, name)| {
            OpCmd::new("agent.create", json!({"name": name})).by(ed).into()
        }),
        1 => (editor(), block_of("agent"), proptest::option::of("[a-z-]{1,10}"), proptest::option::of(1u64..200_000))
            .prop_map(|(ed, b, model, max)| {
                let mut v = json!({});
                if let Some(m) = model {
                    v["model"] = json!(m);
                }
                if let Some(n) = max {
                    v["max_context_tokens"] = json!(n);
                }
                OpCmd::new("agent.configure", v).on(b).by(ed).into()
            }),
        1 => (editor(), block_of("agent"), "[a-z ]{0,12}", proptest::collection::vec(any_block(), 0..2))
            .prop_map(|(ed, b, prompt, ctx)| {
                OpCmd::new("agent.invoke", json!({"prompt": prompt, "context_block_ids": ctx})).on(b).by(ed).into()
            }),
    ]
    .boxed()
}

/// Steps over the built-in capabilities that act on blocks, editors and grants — create
/// (of the built-in types and of `extra_types`), write, rename, metadata, link, unlink,
/// delete, grant, revoke, editors — and `Reopen` now and then. `grantable` are the capability
/// ids grants are made for (an embedder adds its own).
pub fn builtin(extra_types: &[&str], grantable: &[&str]) -> BoxedStrategy<Op> {
    let mut types: Vec<String> = vec!["markdown".into(), "code".into()];
    types.extend(extra_types.iter().map(|t| t.to_string()));
    let mut caps: Vec<String> = [
        "markdown.write",
        "markdown.read",
        "code.write",
        "core.rename",
        "core.link",
        "core.delete",
    ]
    .iter()
    .map(|c| c.to_string())
    .collect();
    caps.extend(grantable.iter().map(|c| c.to_string()));
    let relation = prop_oneof![Just("reference"), Just("implement")];
    prop_oneof![
        6 => (editor(), proptest::sample::select(types), "[a-z]{1,8}", proptest::option::weighted(0.1, 0u32..4))
            .prop_map(|(ed, ty, name, id)| {
                let mut p = json!({"name": name, "block_type": ty});
                if let Some(n) = id {
                    p["block_id"] = json!(format!("$id:{n}"));
                }
                OpCmd::new("core.create", p).by(ed).into()
            }),
        5 => (editor(), block_of("markdown"), text()).prop_map(|(ed, b, t)| {
            OpCmd::new("markdown.write", json!({"markdown": t})).on(b).by(ed).into()
        }),
        3 => (editor(), block_of("code"), text(), "[a-z]{1,4}").prop_map(|(ed, b, t, lang)| {
            OpCmd::new("code.write", json!({"text": t, "language": lang})).on(b).by(ed).into()
        }),
        2 => (editor(), any_block(), "[a-z ]{0,10}").prop_map(|(ed, b, name)| {
            OpCmd::new("core.rename", json!({"name": name})).on(b).by(ed).into()
        }),
        2 => (editor(), any_block(), "[a-z]{1,6}", prop_oneof![Just(Value::Null), "[a-z]{0,6}".prop_map(Value::from), (0i64..100).prop_map(Value::from)])
            .prop_map(|(ed, b, key, v)| {
                OpCmd::new("core.update_metadata", json!({"description": "d", "custom": {key: v}})).on(b).by(ed).into()
            }),
        4 => (editor(), any_block(), any_block(), relation.clone(), any::<bool>()).prop_map(|(ed, from, to, rel, link)| {
            let cap = if link { "core.link" } else { "core.unlink" };
            OpCmd::new(cap, json!({"to": to, "relation": rel})).on(from).by(ed).into()
        }),
        1 => (editor(), any_block()).prop_map(|(ed, b)| OpCmd::new("core.delete", json!({})).on(b).by(ed).into()),
        2 => (editor(), (0usize..4).prop_map(|n| format!("$editor:{n}")), proptest::sample::select(caps), prop_oneof![any_block(), Just("*".to_string())], any::<bool>())
            .prop_map(|(ed, who, cap, b, grant)| {
                let kind = if grant { "core.grant" } else { "core.revoke" };
                OpCmd::new(kind, json!({"editor_id": who, "cap_id": cap})).on(b).by(ed).into()
            }),
        1 => ("[a-z]{1,6}", proptest::option::of(0u32..3)).prop_map(|(name, id)| {
            let mut p = json!({"name": name});
            if let Some(n) = id {
                p["editor_id"] = json!(format!("$id:e{n}"));
            }
            OpCmd::new("editor.create", p).into()
        }),
        1 => (0usize..4).prop_map(|n| OpCmd::new("editor.delete", json!({"editor_id": format!("$editor:{n}")})).into()),
        1 => Just(Op::Reopen),
    ]
    .boxed()
}
