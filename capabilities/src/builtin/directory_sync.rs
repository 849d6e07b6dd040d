use std::collections::BTreeMap;

use elfiee_model::{
    CapError, Command, Ctx, DirectoryEntry, Event, EventDraft, ImportedFile, SkippedFile,
};
use elfiee_projections::content::{body_hash, body_keys};
use elfiee_projections::{update_block, Folded, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::directory_import::{check_paths, disk_hash, new_file};
use super::entries::{entry_path, set_disk_hashes, sync_entries, IMPORT_INCOMPLETE};
use super::spec::Builtin;
use crate::payload::parse;
use crate::{Handled, Target};

/// `directory.sync`: brings a directory block up to date with what the adapter found on disk
/// (a rescan, or one chunk of a streaming import). Files whose text equals the block's are
/// left alone; changed ones get a write event on their block, new ones a new block, deleted
/// ones are deleted (relations and grants first, as `core.delete` does). One `directory.sync`
/// event on the directory records the entries added and removed.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectorySyncPayload {
    /// New or changed files (unchanged ones may be sent too: they write nothing).
    pub files: Vec<ImportedFile>,
    /// Paths gone from disk.
    pub deleted: Vec<String>,
    pub skipped: Vec<SkippedFile>,
    /// The last chunk: clears `import_incomplete`.
    pub done: bool,
}

/// The block id of the entry at `path` of a directory block (entries are kept in path order).
pub fn directory_entry<'a>(dir: &'a elfiee_model::Block, path: &str) -> Option<&'a str> {
    entry_field(dir, path, "block_id")
}

/// The recorded disk hash of the entry at `path` (see [`DirectoryEntry::disk`]).
pub fn directory_entry_disk<'a>(dir: &'a elfiee_model::Block, path: &str) -> Option<&'a str> {
    entry_field(dir, path, "disk")
}

/// A string field of the entry at `path` (entries are kept in path order).
fn entry_field<'a>(dir: &'a elfiee_model::Block, path: &str, field: &str) -> Option<&'a str> {
    let list = dir.contents.get("entries")?.as_array()?;
    let i = list.binary_search_by(|e| entry_path(e).cmp(path)).ok()?;
    list[i].get(field)?.as_str()
}

/// `contents[key]` of a directory block read as a list of `T` (empty when absent or
/// unreadable): `entries` as [`DirectoryEntry`], `pending_removals` as
/// [`elfiee_model::PendingRemoval`].
pub fn directory_list<T: serde::de::DeserializeOwned>(
    dir: &elfiee_model::Block,
    key: &str,
) -> Vec<T> {
    dir.contents
        .get(key)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// The entries of a directory block: path → block id.
pub fn directory_entries(dir: &elfiee_model::Block) -> BTreeMap<String, String> {
    directory_list::<DirectoryEntry>(dir, "entries")
        .into_iter()
        .map(|e| (e.path, e.block_id))
        .collect()
}

const ID: &str = "directory.sync";

pub(crate) const CAPABILITIES: &[Builtin] =
    &[Builtin::new(ID, Target::Block(Some("directory")), handle).fold(fold_sync)];

fn handle(cmd: &Command, state: &State, ctx: &Ctx) -> Handled {
    let p: DirectorySyncPayload = parse(ID, &cmd.payload)?;
    let dir_id = cmd.block_id.clone().unwrap_or_default();
    let dir = state
        .block(&dir_id)
        .ok_or_else(|| CapError::BlockNotFound(dir_id.clone()))?;
    check_paths(ID, p.files.iter().map(|f| &f.path).chain(&p.deleted))?;
    let mut drafts = Vec::new();
    let (mut added, mut changed, mut removed) = (Vec::new(), Vec::new(), Vec::new());
    // What the disk holds now, for entries whose recorded disk hash this changes.
    let mut disk = serde_json::Map::new();
    for (i, f) in p.files.into_iter().enumerate() {
        let existing = directory_entry(dir, &f.path).and_then(|id| state.block(id));
        if let Some(b) = existing {
            let Some(key) = body_keys(&b.block_type).first() else {
                return Err(CapError::rejected(format!(
                    "'{}' is a {} block; only markdown and code entries can be synced",
                    f.path, b.block_type
                )));
            };
            let hash = disk_hash(&f.content);
            if directory_entry_disk(dir, &f.path) != Some(hash.as_str()) {
                disk.insert(f.path.clone(), json!(hash));
            }
            if body_hash(b, key).as_deref() == Some(hash.as_str()) {
                continue;
            }
            let kind = format!("{}.write", b.block_type);
            drafts.push(EventDraft::new(
                &b.block_id,
                kind,
                json!({"contents": {*key: f.content}}),
            ));
            changed.push(f.path);
            continue;
        }
        let (entry, create) =
            new_file(ctx.new_id(i as u32 + 1).to_string(), f, &cmd.editor_id, ctx);
        added.push(entry);
        drafts.push(create);
    }
    for path in p.deleted {
        let Some(id) = directory_entry(dir, &path) else {
            continue;
        };
        if state.block(id).is_some() {
            drafts.extend(super::support::delete_events(state, id));
        }
        removed.push(path);
    }
    let completes = p.done && dir.metadata.custom.contains_key(IMPORT_INCOMPLETE);
    if drafts.is_empty()
        && removed.is_empty()
        && p.skipped.is_empty()
        && disk.is_empty()
        && !completes
    {
        return Ok(Vec::new());
    }
    drafts.push(EventDraft::new(
        &dir_id,
        ID,
        json!({
            "added": added,
            "removed": removed,
            "changed": changed,
            "skipped": p.skipped,
            "done": p.done,
            "disk": disk,
        }),
    ));
    Ok(drafts)
}

/// A directory's entries change: `added` entries join (replacing one at the same path),
/// `removed` paths leave; the last chunk of an import (`done`) completes it.
fn fold_sync(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        sync_entries(b, v);
        set_disk_hashes(b, v);
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            b.metadata.custom.remove(IMPORT_INCOMPLETE);
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn sync_writes_only_what_changed_and_tracks_entries() {
        let mut k = Kit::new();
        let ev = k.ok("directory.import", None, json!({
            "root": "/tmp/proj", "pending": true,
            "files": [{"path": "a.md", "content": "# a"}, {"path": "src/b.rs", "content": "fn b() {}"}]
        }));
        let dir = ev[0].entity.clone();
        assert_eq!(
            k.state.blocks[&dir].metadata.custom["import_incomplete"],
            true
        );
        // Unchanged files write nothing at all.
        let none = k.ok(
            "directory.sync",
            Some(&dir),
            json!({
                "files": [{"path": "a.md", "content": "# a"}]
            }),
        );
        assert!(none.is_empty());
        let ev = k.ok("directory.sync", Some(&dir), json!({
            "files": [{"path": "a.md", "content": "# a, changed"}, {"path": "c.txt", "content": "new"}],
            "deleted": ["src/b.rs", "not/there"],
            "done": true
        }));
        let kinds: Vec<_> = ev.iter().map(|e| e.cap_id().to_owned()).collect();
        assert_eq!(
            kinds,
            [
                "markdown.write",
                "core.create",
                "core.delete",
                "directory.sync"
            ]
        );
        let d = &k.state.blocks[&dir];
        assert!(!d.metadata.custom.contains_key("import_incomplete"));
        let paths: Vec<_> = d.contents["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(paths, ["a.md", "c.txt"]);
        let a = super::directory_entries(d)["a.md"].clone();
        assert_eq!(k.state.blocks[&a].contents["markdown"], "# a, changed");
        let n = |k: &str| ev[3].value[k].as_array().map_or(0, Vec::len);
        assert_eq!((n("added"), n("changed"), n("removed")), (1, 1, 1));
    }

    #[test]
    fn sync_refuses_escaping_or_repeated_paths_and_other_block_types() {
        let mut k = Kit::new();
        let ev = k.ok("directory.import", None, json!({"root": "/p", "files": []}));
        let dir = ev[0].entity.clone();
        for bad in ["../x", "/abs", "a//b"] {
            k.err(
                "directory.sync",
                Some(&dir),
                json!({"files": [{"path": bad, "content": ""}]}),
            );
        }
        k.err(
            "directory.sync",
            Some(&dir),
            json!({"files": [{"path": "a", "content": ""}], "deleted": ["a"]}),
        );
        let md = k.block("markdown", "m");
        k.err_contains("directory.sync", Some(&md), json!({}), "directory");
    }
}
