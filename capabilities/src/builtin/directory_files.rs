//! Files made, moved and removed inside a directory block (the document owns them; the next
//! `directory.export` writes them out, see `adapters/src/export.rs`).
//!
//! - `directory.add` — a new file block at a relative path (or an existing markdown / code
//!   block placed there);
//! - `directory.move` — an entry to another path;
//! - `directory.remove` — an entry out of the directory (its block deleted unless `keep_block`).
//!
//! An entry whose file is on disk (it has a disk hash) and leaves its path becomes a *pending
//! removal*: the export removes that file, and only if the disk still holds what the document
//! last read or wrote there.

use elfiee_model::{CapError, Command, Ctx, Event, EventDraft, ImportedFile};
use elfiee_projections::content::body_keys;
use elfiee_projections::{update_block, Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::directory_import::{check_path, file_create};
use super::directory_sync::{directory_entry, directory_list};
use super::entries::{put_entry, take_entry};
use super::spec::Builtin;
use crate::payload::{check_id, parse};
use crate::{Handled, Target};

/// `directory.add` payload.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryAddPayload {
    /// Relative path inside the directory (`/`-separated, no `..`).
    pub path: String,
    /// Text of the new file (a `markdown` block for `.md`, else `code`); empty when absent.
    #[serde(default)]
    pub content: Option<String>,
    /// Place this existing markdown or code block at `path` instead of making a new one.
    #[serde(default)]
    pub block_id: Option<String>,
}

/// `directory.move` payload.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryMovePayload {
    pub from: String,
    pub to: String,
}

/// `directory.remove` payload.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryRemovePayload {
    pub path: String,
    /// Keep the block (only the entry leaves the directory).
    #[serde(default)]
    pub keep_block: bool,
}

fn directory<'a>(
    cap: &str,
    cmd: &Command,
    state: &'a State,
) -> Result<&'a elfiee_model::Block, CapError> {
    let id = cmd.block_id.as_deref().unwrap_or_default();
    state
        .block(id)
        .filter(|b| b.block_type == "directory")
        .ok_or_else(|| CapError::rejected(format!("{cap}: '{id}' is not a directory block")))
}

/// The block of the entry at `path`, or a refusal naming the path.
fn existing<'a>(cap: &str, dir: &'a elfiee_model::Block, path: &str) -> Result<&'a str, CapError> {
    directory_entry(dir, path).ok_or_else(|| {
        CapError::rejected(format!(
            "{cap}: the directory has no '{path}'; see `elfiee dir status`"
        ))
    })
}

fn free(cap: &str, dir: &elfiee_model::Block, path: &str) -> Result<(), CapError> {
    match directory_entry(dir, path) {
        Some(_) => Err(CapError::rejected(format!(
            "{cap}: the directory already has '{path}'; move or remove it first"
        ))),
        None => Ok(()),
    }
}

/// What a directory holds that its folder on disk does not have yet (see
/// `elfiee dir status`): derived from the state alone, no disk read.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectoryStatus {
    /// Files made (or moved) inside the document, not written out yet.
    pub new: Vec<String>,
    /// Files whose text changed in the document since the last import, rescan or export.
    pub modified: Vec<String>,
    /// Files that left the directory (removed or moved away) still on disk.
    pub removed: Vec<String>,
    /// Entries whose text is what the disk was last seen to hold.
    pub clean: usize,
}

impl DirectoryStatus {
    /// Whether an export would have something to do.
    pub fn is_dirty(&self) -> bool {
        !(self.new.is_empty() && self.modified.is_empty() && self.removed.is_empty())
    }
}

/// The status of directory block `dir` in `state` (entries compared by body hash with what
/// the disk was last seen to hold).
pub fn directory_status(state: &State, dir: &elfiee_model::Block) -> DirectoryStatus {
    let mut st = DirectoryStatus::default();
    for e in directory_list::<elfiee_model::DirectoryEntry>(dir, "entries") {
        let body = state.block(&e.block_id).and_then(|b| {
            body_keys(&b.block_type)
                .first()
                .and_then(|k| elfiee_projections::content::body_hash(b, k))
        });
        match (&e.disk, body) {
            (None, _) => st.new.push(e.path),
            (Some(d), Some(h)) if *d == h => st.clean += 1,
            _ => st.modified.push(e.path),
        }
    }
    st.removed = directory_list::<elfiee_model::PendingRemoval>(dir, "pending_removals")
        .into_iter()
        .map(|p| p.path)
        .collect();
    st
}

const ADD: &str = "directory.add";
const MOVE: &str = "directory.move";
const REMOVE: &str = "directory.remove";

pub(crate) const CAPABILITIES: &[Builtin] = &[
    Builtin::new(ADD, Target::Block(Some("directory")), handle_add).fold(fold_add),
    Builtin::new(MOVE, Target::Block(Some("directory")), handle_move).fold(fold_move),
    Builtin::new(REMOVE, Target::Block(Some("directory")), handle_remove).fold(fold_remove),
];

fn handle_add(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let p: DirectoryAddPayload = parse(ADD, &cmd.payload)?;
    let dir = directory(ADD, cmd, state)?;
    check_path(ADD, &p.path)?;
    free(ADD, dir, &p.path)?;
    let mut drafts = Vec::new();
    let block_id = match p.block_id {
        Some(id) => {
            check_id(ADD, "block_id", &id)?;
            let b = state
                .block(&id)
                .ok_or_else(|| CapError::BlockNotFound(id.clone()))?;
            if body_keys(&b.block_type).is_empty() {
                return Err(CapError::rejected(format!(
                    "'{id}' is a {} block; only markdown and code blocks can be files",
                    b.block_type
                )));
            }
            if p.content.is_some() {
                return Err(CapError::payload(
                    ADD,
                    "give 'content' for a new file or 'block_id' for an existing block, not both",
                ));
            }
            if let Some(at) = super::directory_sync::directory_entries(dir)
                .into_iter()
                .find(|(_, b)| *b == id)
                .map(|(p, _)| p)
            {
                return Err(CapError::rejected(format!(
                    "'{id}' is already in this directory at '{at}'; use directory.move"
                )));
            }
            id
        }
        None => {
            let id = ctx.new_id(0).to_string();
            drafts.push(file_create(
                &id,
                ImportedFile {
                    path: p.path.clone(),
                    content: p.content.unwrap_or_default(),
                },
                &cmd.editor_id,
                ctx,
            ));
            id
        }
    };
    drafts.push(EventDraft::new(
        &dir.block_id,
        ADD,
        json!({"path": p.path, "block_id": block_id}),
    ));
    Ok(drafts)
}

fn handle_move(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    let p: DirectoryMovePayload = parse(MOVE, &cmd.payload)?;
    let dir = directory(MOVE, cmd, state)?;
    check_path(MOVE, &p.from)?;
    check_path(MOVE, &p.to)?;
    let block_id = existing(MOVE, dir, &p.from)?;
    if p.from == p.to {
        return Ok(Vec::new());
    }
    free(MOVE, dir, &p.to)?;
    Ok(vec![EventDraft::new(
        &dir.block_id,
        MOVE,
        json!({"from": p.from, "to": p.to, "block_id": block_id}),
    )])
}

fn handle_remove(cmd: &Command, state: &State, _ctx: &Ctx) -> Handled {
    let p: DirectoryRemovePayload = parse(REMOVE, &cmd.payload)?;
    let dir = directory(REMOVE, cmd, state)?;
    check_path(REMOVE, &p.path)?;
    let block_id = existing(REMOVE, dir, &p.path)?;
    let mut drafts = vec![EventDraft::new(
        &dir.block_id,
        REMOVE,
        json!({"path": p.path, "block_id": block_id, "keep_block": p.keep_block}),
    )];
    if !p.keep_block && state.block(block_id).is_some() {
        drafts.extend(super::support::delete_events(state, block_id));
    }
    Ok(drafts)
}

// Files made, moved and removed inside the document (see `directory_status`).

fn fold_add(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        if let (Some(path), Some(id)) = (str_at(v, "path"), str_at(v, "block_id")) {
            put_entry(b, path, id);
        }
    })
}

fn fold_move(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        if let (Some(from), Some(to)) = (str_at(v, "from"), str_at(v, "to")) {
            if let Some(id) = take_entry(b, from) {
                put_entry(b, to, &id);
            }
        }
    })
}

fn fold_remove(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        if let Some(path) = str_at(v, "path") {
            take_entry(b, path);
        }
    })
}

fn str_at<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    fn project(k: &mut Kit) -> String {
        k.project(json!([{"path": "src/main.rs", "content": "fn main() {}"}]))
    }

    fn entries(k: &Kit, dir: &str) -> Vec<(String, bool)> {
        k.state.blocks[dir].contents["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["path"].as_str().unwrap().to_owned(),
                    e.get("disk").is_some(),
                )
            })
            .collect()
    }

    #[test]
    fn add_move_remove_keep_entries_in_order_and_track_what_disk_holds() {
        let mut k = Kit::new();
        let dir = project(&mut k);
        let ev = k.ok(
            "directory.add",
            Some(&dir),
            json!({"path": "src/pdf.rs", "content": "pub fn pdf() {}"}),
        );
        assert_eq!(ev[0].cap_id(), "core.create");
        let pdf = ev[0].entity.clone();
        assert_eq!(k.state.blocks[&pdf].contents["language"], "rust");
        assert_eq!(
            entries(&k, &dir),
            vec![("src/main.rs".into(), true), ("src/pdf.rs".into(), false)],
            "an imported file has a disk hash, a new one has none"
        );
        // Moving a file that is on disk leaves a pending removal at the old path.
        k.ok(
            "directory.move",
            Some(&dir),
            json!({"from": "src/main.rs", "to": "src/bin/main.rs"}),
        );
        assert_eq!(
            entries(&k, &dir),
            vec![
                ("src/bin/main.rs".into(), false),
                ("src/pdf.rs".into(), false)
            ]
        );
        let pending = &k.state.blocks[&dir].contents["pending_removals"];
        assert_eq!(pending[0]["path"], "src/main.rs");
        // Moving it back takes the file on disk back.
        k.ok(
            "directory.move",
            Some(&dir),
            json!({"from": "src/bin/main.rs", "to": "src/main.rs"}),
        );
        assert_eq!(entries(&k, &dir)[0], ("src/main.rs".into(), true));
        assert_eq!(k.state.blocks[&dir].contents["pending_removals"], json!([]));
        // Removing deletes the block unless asked to keep it.
        k.ok(
            "directory.remove",
            Some(&dir),
            json!({"path": "src/pdf.rs"}),
        );
        assert!(!k.state.blocks.contains_key(&pdf));
        let main = k.state.blocks[&dir].contents["entries"][0]["block_id"]
            .as_str()
            .unwrap()
            .to_owned();
        k.ok(
            "directory.remove",
            Some(&dir),
            json!({"path": "src/main.rs", "keep_block": true}),
        );
        assert!(k.state.blocks.contains_key(&main));
        assert_eq!(
            k.state.blocks[&dir].contents["pending_removals"][0]["path"],
            "src/main.rs"
        );
        // An existing block can be placed in the directory.
        k.ok(
            "directory.add",
            Some(&dir),
            json!({"path": "lib/main.rs", "block_id": main}),
        );
        assert_eq!(entries(&k, &dir), vec![("lib/main.rs".into(), false)]);
    }

    #[test]
    fn bad_paths_taken_paths_and_missing_entries_are_refused() {
        let mut k = Kit::new();
        let dir = project(&mut k);
        for bad in ["../x", "/etc/passwd", "a//b", "", "a/./b"] {
            let e = k.err("directory.add", Some(&dir), json!({"path": bad}));
            assert!(e.to_string().contains("invalid payload"), "{bad}: {e}");
            k.err(
                "directory.move",
                Some(&dir),
                json!({"from": "src/main.rs", "to": bad}),
            );
        }
        k.err_contains(
            "directory.add",
            Some(&dir),
            json!({"path": "src/main.rs"}),
            "already has",
        );
        k.err_contains(
            "directory.move",
            Some(&dir),
            json!({"from": "nope.rs", "to": "x.rs"}),
            "has no 'nope.rs'",
        );
        k.ok("directory.add", Some(&dir), json!({"path": "b.rs"}));
        k.err_contains(
            "directory.move",
            Some(&dir),
            json!({"from": "b.rs", "to": "src/main.rs"}),
            "already has",
        );
        k.err("directory.remove", Some(&dir), json!({"path": "nope.rs"}));
        // Another editor without a grant on the directory is refused by CBAC.
        k.err_contains_by(
            "bob",
            "directory.add",
            Some(&dir),
            json!({"path": "c.rs"}),
            "bob",
        );
    }
}
