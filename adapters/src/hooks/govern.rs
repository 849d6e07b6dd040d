//! Whether an agent may make the change a Claude Code tool call is about to make (its
//! `PreToolUse` hook), judged by the document's grants. Pure: the state and the paths in,
//! a verdict out.
//!
//! - an existing file of a directory block needs `<its block type>.write` on its block;
//! - a new file (or one the directory does not track) needs `directory.add` on the directory;
//! - a path in no directory block of the document is outside every grant: denied.
//!
//! A denial names the missing grant and the command the document's owner runs to give it.

use std::path::{Component, Path, PathBuf};

use elfiee_capabilities::builtin::directory_entry;
use elfiee_capabilities::cbac::authorize;
use elfiee_model::{Block, EXTERNAL_ROOT_PATH};
use elfiee_projections::State;
use serde_json::Value;

/// Claude Code's own tools that write files, and the input field naming the file.
pub const FILE_TOOLS: &[(&str, &str)] = &[
    ("Write", "file_path"),
    ("Edit", "file_path"),
    ("MultiEdit", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// The tools whose calls are steps: the file tools, `Bash`, and MCP tools (an MCP tool of the
/// `elfiee` server that only reads is left out by the recorder).
pub fn records_steps(tool: &str) -> bool {
    tool == "Bash" || tool.starts_with("mcp__") || FILE_TOOLS.iter().any(|(t, _)| *t == tool)
}

/// The file a file tool is about to write (absolute, as Claude Code gives it; a relative one
/// is taken from `cwd`).
pub fn target_path(tool: &str, input: &Value, cwd: &Path) -> Option<PathBuf> {
    let field = FILE_TOOLS.iter().find(|(t, _)| *t == tool)?.1;
    let p = Path::new(input.get(field)?.as_str()?);
    Some(normalize(&cwd.join(p)))
}

/// `path` without `.` and `..` components (lexically; the file may not exist yet), its
/// existing part resolved through symlinks as the file system would.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    // The longest existing ancestor, canonical (a symlinked folder leads where it points).
    let mut existing = out.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(p), Some(n)) => {
                rest.push(n.to_owned());
                existing = p;
            }
            _ => return out,
        }
    }
    let mut real = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    for n in rest.iter().rev() {
        real.push(n);
    }
    real
}

/// The agent a hook speaks for.
#[derive(Debug, Clone)]
pub struct AgentRef {
    pub block_id: String,
    pub name: String,
    pub editor_id: String,
}

/// What the `PreToolUse` hook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused, with the reason the model and the user see.
    Deny(String),
}

/// The directory block whose folder holds `path` (the deepest one) and `path` relative to it.
pub fn directory_of<'a>(state: &'a State, path: &Path) -> Option<(&'a Block, String)> {
    directory_among(state.blocks.values(), path)
}

/// [`directory_of`] among `blocks` (in block order; those that are no directory are passed
/// over): for a caller that knows where the document's directory blocks are.
pub fn directory_among<'a>(
    blocks: impl Iterator<Item = &'a Block>,
    path: &Path,
) -> Option<(&'a Block, String)> {
    blocks
        .filter(|b| b.block_type == "directory")
        .filter_map(|b| {
            let root = b.metadata.custom.get(EXTERNAL_ROOT_PATH)?.as_str()?;
            let rel = path.strip_prefix(Path::new(root)).ok()?;
            let rel = rel.to_string_lossy().replace('\\', "/");
            Some((b, rel, root.len()))
        })
        .filter(|(_, rel, _)| !rel.is_empty())
        .max_by_key(|(_, _, len)| *len)
        .map(|(b, rel, _)| (b, rel))
}

/// Judges a file tool's write of `path` by `agent` (`elf`: the document, for the command
/// the owner would run).
pub fn judge(state: &State, agent: &AgentRef, path: &Path, elf: &Path) -> Verdict {
    judge_in(state, agent, path, elf, directory_of(state, path))
}

/// [`judge`], the directory that holds `path` already found (by [`directory_of`] or
/// [`directory_among`]).
pub fn judge_in(
    state: &State,
    agent: &AgentRef,
    path: &Path,
    elf: &Path,
    found: Option<(&Block, String)>,
) -> Verdict {
    let who = format!("agent '{}' ({})", agent.name, agent.editor_id);
    let grant_cmd = |cap: &str, block: &str| {
        format!(
            "elfiee --elf '{}' grant {} {cap} {block}",
            elf.display(),
            agent.editor_id
        )
    };
    let Some((dir, rel)) = found else {
        return Verdict::Deny(format!(
            "elfiee: {who} may not write {}: it is outside every project folder of the document {}. \
             To allow it, the document's owner imports that folder (`elfiee --elf '{}' dir import FOLDER`) \
             and grants the agent `directory.add` on it.",
            path.display(),
            elf.display(),
            elf.display()
        ));
    };
    let tracked = directory_entry(dir, &rel).and_then(|id| state.block(id));
    match tracked {
        Some(b) => {
            let cap = format!("{}.write", b.block_type);
            match authorize(state, &agent.editor_id, &cap, Some(b)) {
                Ok(()) => Verdict::Allow,
                Err(_) => Verdict::Deny(format!(
                    "elfiee: {who} may not change {rel}: it lacks the grant {cap} on block '{}' ({}). \
                     The document's owner can give it with: {}",
                    b.name,
                    b.block_id,
                    grant_cmd(&cap, &b.block_id)
                )),
            }
        }
        None => match authorize(state, &agent.editor_id, "directory.add", Some(dir)) {
            Ok(()) => Verdict::Allow,
            Err(_) => Verdict::Deny(format!(
                "elfiee: {who} may not create {rel}: it lacks the grant directory.add on directory '{}' ({}). \
                 The document's owner can give it with: {}",
                dir.name,
                dir.block_id,
                grant_cmd("directory.add", &dir.block_id)
            )),
        },
    }
}

/// Which of a step's changed files `agent` had no grant for (what `Bash` did, judged after
/// the fact): modified files without `<type>.write` on their block, new files without
/// `directory.add`, deleted ones without `directory.remove`, on the state before the step.
pub fn outside_grants(
    state: &State,
    agent: &AgentRef,
    dir: &Block,
    changes: &[crate::checkpoint::FileChange],
) -> Vec<String> {
    let may = |cap: &str, b: &Block| authorize(state, &agent.editor_id, cap, Some(b)).is_ok();
    changes
        .iter()
        .filter(|c| {
            let tracked = directory_entry(dir, &c.path).and_then(|id| state.block(id));
            match (tracked, c.after.is_some()) {
                (Some(b), true) => !may(&format!("{}.write", b.block_type), b),
                (Some(_), false) => !may("directory.remove", dir),
                (None, true) => !may("directory.add", dir),
                (None, false) => false,
            }
        })
        .map(|c| c.path.clone())
        .collect()
}
