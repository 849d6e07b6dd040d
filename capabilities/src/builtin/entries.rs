//! The entry list of a directory block (`contents.entries`, kept in path order, and
//! `contents.pending_removals`): how the folds of `directory.sync`, `directory.add`,
//! `directory.move`, `directory.remove` and `directory.export_outcome` change it, and how
//! handlers find an entry.

use elfiee_model::Block;
use serde_json::Value;

/// Metadata key of a directory block whose streaming import has not finished yet.
pub const IMPORT_INCOMPLETE: &str = "import_incomplete";

/// The `path` of a directory entry (empty when it has none).
pub fn entry_path(e: &Value) -> &str {
    e.get("path").and_then(Value::as_str).unwrap_or("")
}

/// The strings in the array at `v[key]` (none if it is missing or not an array).
pub(crate) fn strings<'v>(v: &'v Value, key: &str) -> impl Iterator<Item = &'v str> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// `contents[key]` of a directory block as a list (made if missing).
pub(crate) fn list_mut<'a>(b: &'a mut Block, key: &str) -> Option<&'a mut Vec<Value>> {
    if !b.contents.is_object() {
        b.contents = Value::Object(Default::default());
    }
    let obj = b.contents.as_object_mut()?;
    let v = obj
        .entry(key.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !v.is_array() {
        *v = Value::Array(Vec::new());
    }
    v.as_array_mut()
}

/// Applies a `directory.sync` value's `added` and `removed` to `contents.entries`, kept in
/// path order (binary search: a chunk of k entries costs O(k log n), not a rebuild).
pub(crate) fn sync_entries(b: &mut Block, v: &Value) {
    let Some(list) = list_mut(b, "entries") else {
        return;
    };
    if !sorted(list) {
        list.sort_by(|a, b| entry_path(a).cmp(entry_path(b)));
    }
    for p in strings(v, "removed") {
        if let Ok(i) = list.binary_search_by(|e| entry_path(e).cmp(p)) {
            list.remove(i);
        }
    }
    for e in v
        .get("added")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match list.binary_search_by(|x| entry_path(x).cmp(entry_path(e))) {
            Ok(i) => list[i] = e.clone(),
            Err(i) => list.insert(i, e.clone()),
        }
    }
}

/// Whether `list` is in path order: one pass reading each entry's path once (a directory of
/// 10,000 files is checked at every sync, so this is half the work of comparing pairs).
fn sorted(list: &[Value]) -> bool {
    let mut paths = list.iter().map(entry_path);
    let Some(mut prev) = paths.next() else {
        return true;
    };
    for p in paths {
        if prev > p {
            return false;
        }
        prev = p;
    }
    true
}

/// Sets the recorded disk hash (`v.disk`: path → blake3) of the entries it names.
pub(crate) fn set_disk_hashes(b: &mut Block, v: &Value) {
    let Some(Value::Object(disk)) = v.get("disk") else {
        return;
    };
    let Some(list) = list_mut(b, "entries") else {
        return;
    };
    for (path, hash) in disk {
        if let Ok(i) = list.binary_search_by(|e| entry_path(e).cmp(path)) {
            if let Some(e) = list[i].as_object_mut() {
                e.insert("disk".into(), hash.clone());
            }
        }
    }
}

/// Removes the entry at `path`; a file the disk still holds (it has a disk hash) becomes a
/// pending removal for the next export. Returns the entry's block id.
pub(crate) fn take_entry(b: &mut Block, path: &str) -> Option<String> {
    let list = list_mut(b, "entries")?;
    let i = list.binary_search_by(|e| entry_path(e).cmp(path)).ok()?;
    let e = list.remove(i);
    let id = e.get("block_id").and_then(Value::as_str)?.to_owned();
    if let Some(disk) = e.get("disk").cloned() {
        if let Some(pending) = list_mut(b, "pending_removals") {
            pending.retain(|p| entry_path(p) != path);
            pending.push(serde_json::json!({"path": path, "disk": disk}));
        }
    }
    Some(id)
}

/// Puts an entry at `path` for block `id` (replacing one there). A pending removal at that
/// path is taken back: the file on disk becomes this entry's, with its disk hash.
pub(crate) fn put_entry(b: &mut Block, path: &str, id: &str) {
    let mut disk = None;
    if let Some(pending) = list_mut(b, "pending_removals") {
        if let Some(i) = pending.iter().position(|p| entry_path(p) == path) {
            disk = pending.remove(i).get("disk").cloned();
        }
    }
    let mut e = serde_json::json!({"path": path, "block_id": id});
    if let Some(d) = disk {
        e["disk"] = d;
    }
    let Some(list) = list_mut(b, "entries") else {
        return;
    };
    match list.binary_search_by(|x| entry_path(x).cmp(path)) {
        Ok(i) => list[i] = e,
        Err(i) => list.insert(i, e),
    }
}
