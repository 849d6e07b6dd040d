use std::collections::{BTreeMap, BTreeSet};

use elfiee_model::{
    Block, BlockMetadata, CapError, Command, Ctx, DirectoryEntry, EventDraft, ImportedFile,
    SkippedFile, EXTERNAL_ROOT_PATH,
};
use elfiee_projections::State;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::spec::Builtin;
use crate::payload::{check_name, parse};
use crate::{Handled, Target};

/// `directory.import`: the adapter has read a folder; the command carries its files, so this
/// handler stays pure. Creates one `directory` block (with `external_root_path`) and one block
/// per file (`markdown` for `.md`, else `code`), then records what was skipped.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryImportPayload {
    /// Absolute path of the imported folder.
    pub root: String,
    /// Block name; default: the folder's name.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub files: Vec<ImportedFile>,
    #[serde(default)]
    pub skipped: Vec<SkippedFile>,
    /// More files follow in `directory.sync` commands (a streaming import): the block is
    /// marked `import_incomplete` until a sync with `done: true`.
    #[serde(default)]
    pub pending: bool,
}

/// A relative path that cannot leave its root: `/`-separated, no empty, `.` or `..` segment,
/// not absolute, no backslash or NUL.
pub fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty path".into());
    }
    if path.starts_with('/')
        || path.contains('\\')
        || path.contains('\0')
        || path.get(1..2) == Some(":")
    {
        return Err(format!(
            "'{path}' is absolute or uses a backslash; paths must be relative to the root"
        ));
    }
    if path
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "'{path}' has an empty, '.' or '..' segment; it could leave the root"
        ));
    }
    // What an export could never write, or must never: a name longer than a filesystem takes
    // (255 bytes), a path longer than one takes (4,095), and git's own folder (its hooks run
    // code on the next git command).
    if let Some(seg) = path.split('/').find(|seg| seg.len() > 255) {
        return Err(format!(
            "'{}…' is a name of {} bytes; a file name can have at most 255",
            &seg[..(0..=40)
                .rev()
                .find(|&i| seg.is_char_boundary(i))
                .unwrap_or(0)],
            seg.len()
        ));
    }
    if path.len() > 4095 {
        return Err(format!(
            "the path is {} bytes long; a path can have at most 4,095",
            path.len()
        ));
    }
    if path.split('/').any(|seg| seg.eq_ignore_ascii_case(".git")) {
        return Err(format!(
            "'{path}' is inside .git, git's own folder; a directory never holds or writes it"
        ));
    }
    Ok(())
}

/// [`check_relative_path`] as a refused payload of `cap`.
pub(crate) fn check_path(cap: &str, path: &str) -> Result<(), CapError> {
    check_relative_path(path).map_err(|e| CapError::payload(cap, e))
}

/// Every path of a command checked ([`check_path`]), none twice.
pub(crate) fn check_paths<'p>(
    cap: &str,
    paths: impl IntoIterator<Item = &'p String>,
) -> Result<(), CapError> {
    let mut seen = BTreeSet::new();
    for path in paths {
        check_path(cap, path)?;
        if !seen.insert(path) {
            return Err(CapError::payload(cap, format!("'{path}' appears twice")));
        }
    }
    Ok(())
}

/// A file's extension, lowercased (empty when it has none).
fn extension(path: &str) -> String {
    path.rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default()
}

/// The block type a file of a directory gets, by extension: `markdown` for `.md` and
/// `.markdown`, `code` otherwise (what `directory.import`, `directory.sync` and
/// `directory.add` create).
pub fn file_block_type(path: &str) -> &'static str {
    match extension(path).as_str() {
        "md" | "markdown" => "markdown",
        _ => "code",
    }
}

/// Block type and contents for a file, by extension.
fn file_block(path: &str, content: String) -> (&'static str, Value) {
    let ext = extension(path);
    match file_block_type(path) {
        "markdown" => ("markdown", json!({"markdown": content})),
        _ => {
            let language = match ext.as_str() {
                "rs" => "rust",
                "py" => "python",
                "ts" | "tsx" => "typescript",
                "js" | "jsx" | "mjs" => "javascript",
                "json" => "json",
                "toml" => "toml",
                "yaml" | "yml" => "yaml",
                "sh" => "shell",
                "go" => "go",
                "c" | "h" => "c",
                "cpp" | "cc" | "hpp" => "cpp",
                "java" => "java",
                "html" => "html",
                "css" => "css",
                _ => "text",
            };
            ("code", json!({"text": content, "language": language}))
        }
    }
}

const ID: &str = "directory.import";

pub(crate) const CAPABILITIES: &[Builtin] = &[Builtin::new(ID, Target::File, handle)];

fn handle(cmd: &Command, _state: &State, ctx: &Ctx) -> Handled {
    let p: DirectoryImportPayload = parse(ID, &cmd.payload)?;
    let absolute = p.root.starts_with('/') || p.root.get(1..3) == Some(":\\");
    if !absolute {
        return Err(CapError::payload(
            ID,
            format!("'root' must be an absolute path (got {:?})", p.root),
        ));
    }
    let name = p.name.clone().unwrap_or_else(|| {
        p.root
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or("root")
            .to_owned()
    });
    check_name(ID, "name", &name)?;
    check_paths(ID, p.files.iter().map(|f| &f.path))?;
    let dir_id = ctx.new_id(0).to_string();
    let mut drafts = Vec::with_capacity(p.files.len() + 2);
    let mut entries = Vec::with_capacity(p.files.len());
    for (i, f) in p.files.into_iter().enumerate() {
        let (entry, create) =
            new_file(ctx.new_id(i as u32 + 1).to_string(), f, &cmd.editor_id, ctx);
        entries.push(entry);
        drafts.push(create);
    }
    // Entries are kept in path order (lookups binary-search them).
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut custom = BTreeMap::from([(EXTERNAL_ROOT_PATH.to_owned(), json!(p.root))]);
    if p.pending {
        custom.insert(super::entries::IMPORT_INCOMPLETE.to_owned(), json!(true));
    }
    let dir = new_block(
        &dir_id,
        &name,
        "directory",
        json!({"entries": entries}),
        &cmd.editor_id,
        ctx,
        custom,
    );
    drafts.insert(
        0,
        EventDraft::new(
            &dir_id,
            "core.create",
            serde_json::to_value(&dir).unwrap_or_default(),
        ),
    );
    drafts.push(EventDraft::new(
        &dir_id,
        ID,
        json!({"root": p.root, "files": entries.len(), "skipped": p.skipped}),
    ));
    Ok(drafts)
}

/// The hash a directory entry records of a file's bytes on disk (`disk`).
pub(crate) fn disk_hash(content: &str) -> String {
    blake3::hash(content.as_bytes()).to_hex().to_string()
}

/// A file read from disk that gets a new block `id`: its directory entry (with the disk
/// hash) and the `core.create` of its block.
pub(crate) fn new_file(
    id: String,
    f: ImportedFile,
    editor: &str,
    ctx: &Ctx,
) -> (DirectoryEntry, EventDraft) {
    let entry = DirectoryEntry {
        path: f.path.clone(),
        block_id: id.clone(),
        disk: Some(disk_hash(&f.content)),
    };
    let create = file_create(&id, f, editor, ctx);
    (entry, create)
}

/// The `core.create` of the block holding an imported file.
pub(crate) fn file_create(id: &str, f: ImportedFile, editor: &str, ctx: &Ctx) -> EventDraft {
    let (ty, contents) = file_block(&f.path, f.content);
    let block = new_block(id, &f.path, ty, contents, editor, ctx, BTreeMap::new());
    EventDraft::new(
        id,
        "core.create",
        serde_json::to_value(&block).unwrap_or_default(),
    )
}

pub(crate) fn new_block(
    id: &str,
    name: &str,
    ty: &str,
    contents: Value,
    owner: &str,
    ctx: &Ctx,
    custom: BTreeMap<String, Value>,
) -> Block {
    Block {
        block_id: id.to_owned(),
        name: name.to_owned(),
        block_type: ty.to_owned(),
        contents,
        content_refs: Default::default(),
        children: BTreeMap::new(),
        owner: owner.to_owned(),
        metadata: BlockMetadata {
            description: None,
            created_at: ctx.now,
            updated_at: ctx.now,
            custom,
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::builtin::testkit::Kit;
    use serde_json::json;

    #[test]
    fn a_file_is_markdown_by_its_md_or_markdown_extension_else_code() {
        for (path, ty) in [
            ("README.md", "markdown"),
            ("docs/guide.markdown", "markdown"),
            ("NOTES.MD", "markdown"),
            ("src/lib.rs", "code"),
            ("Makefile", "code"),
            ("md", "code"),
        ] {
            assert_eq!(super::file_block_type(path), ty, "{path}");
        }
    }

    #[test]
    fn import_creates_a_directory_block_and_one_block_per_file() {
        let mut k = Kit::new();
        let ev = k.ok("directory.import", None, json!({
            "root": "/tmp/proj",
            "files": [{"path": "README.md", "content": "# hi"}, {"path": "src/main.rs", "content": "fn main() {}"}],
            "skipped": [{"path": "logo.png", "reason": "binary"}]
        }));
        assert_eq!(ev.len(), 4, "dir + 2 files + summary, one atomic command");
        let dir = &k.state.blocks[&ev[0].entity];
        assert_eq!(dir.block_type, "directory");
        assert_eq!(dir.name, "proj");
        assert_eq!(dir.metadata.custom["external_root_path"], "/tmp/proj");
        let entries = dir.contents["entries"].as_array().unwrap();
        let readme = &k.state.blocks[entries[0]["block_id"].as_str().unwrap()];
        assert_eq!(
            (
                readme.block_type.as_str(),
                readme.contents["markdown"].as_str()
            ),
            ("markdown", Some("# hi"))
        );
        let main = &k.state.blocks[entries[1]["block_id"].as_str().unwrap()];
        assert_eq!(main.contents["language"], "rust");
        assert_eq!(ev[3].value["skipped"][0]["reason"], "binary");
    }

    #[test]
    fn import_refuses_paths_that_could_escape_the_root() {
        let mut k = Kit::new();
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "a/../../b",
            "a//b",
            "./a",
            "C:/x",
            "a\\..\\b",
            "",
        ] {
            let e = k.err(
                "directory.import",
                None,
                json!({"root": "/tmp/p", "files": [{"path": bad, "content": ""}]}),
            );
            assert!(e.to_string().contains("invalid payload"), "{bad}: {e}");
        }
        k.err(
            "directory.import",
            None,
            json!({"root": "relative/root", "files": []}),
        );
        k.err("directory.import", None, json!({"root": "/p", "files": [{"path": "a", "content": ""}, {"path": "a", "content": ""}]}));
    }
}
