//! Where a hook call finds its agent block and the document's directory blocks without
//! reading every block: a document with an imported 10,000-file project holds 10,000 blocks,
//! and reading them all took a few milliseconds of each call, twice (issue 37, "Fast").
//!
//! [`Lookup`] keeps which blocks are agents (with their editor) and which are directories, as
//! of a seq. At each call the events since are read (a call's own step made a handful): the
//! kinds a hook's records and steps make leave the lists as they are; a block created that is
//! an agent or a directory, one of theirs deleted, or any other kind makes it read every
//! block again. What the answers say about a block (its name, owner, status, root) is read
//! from the state at each call, so the answers are those of a full read.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use elfiee_capabilities::builtin::{agent_block_of, agent_editor};
use elfiee_engine::FileHandle;
use elfiee_model::{Block, Event};
use elfiee_projections::State;
use serde_json::Value;

use super::govern::{self, AgentRef, Verdict};

/// Event kinds that create, delete or retype no agent or directory block and change no
/// agent's editor: what a hook's records and steps commit (`core.create` and `core.delete`
/// are judged by their block).
const KEEP_LISTS: &[&str] = &[
    "agent.session",
    "markdown.write",
    "code.write",
    "directory.sync",
    "core.link",
    "core.unlink",
    "core.grant",
    "core.revoke",
];

#[derive(Default)]
struct Known {
    /// The seq the lists are right for (0: not read yet).
    seq: u64,
    /// Agent blocks in block order: (editor id, block id).
    agents: Vec<(String, String)>,
    /// Directory blocks in block order.
    dirs: Vec<String>,
}

impl Known {
    fn read(s: &State) -> Known {
        let mut k = Known {
            seq: s.last_seq.max(1),
            ..Known::default()
        };
        for b in s.blocks.values() {
            match b.block_type.as_str() {
                "agent" => {
                    if let Some(e) = agent_editor(b) {
                        k.agents.push((e.to_owned(), b.block_id.clone()));
                    }
                }
                "directory" => k.dirs.push(b.block_id.clone()),
                _ => {}
            }
        }
        k
    }

    /// Whether `e` leaves the lists as they are (`s`: the state now).
    fn keeps(&self, s: &State, e: &Event) -> bool {
        match e.cap_id() {
            kind if KEEP_LISTS.contains(&kind) => true,
            "core.create" => s
                .block(&e.entity)
                .is_some_and(|b| b.block_type != "agent" && b.block_type != "directory"),
            "core.delete" => {
                !self.dirs.contains(&e.entity) && !self.agents.iter().any(|(_, b)| *b == e.entity)
            }
            _ => false,
        }
    }
}

/// Where the agents and directories of one document are (see the module documentation).
#[derive(Default)]
pub(crate) struct Lookup {
    known: Mutex<Known>,
}

impl Lookup {
    /// The lists, brought up to the document's last event.
    fn known(&self, file: &FileHandle) -> MutexGuard<'_, Known> {
        let mut k = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let last = file.last_seq();
        if k.seq != 0 && last == k.seq {
            return k;
        }
        if k.seq != 0 && last > k.seq {
            if let Ok(events) = file.events(k.seq + 1) {
                if file.with_state(|s| events.iter().all(|e| k.keeps(s, e))) {
                    k.seq = events.last().map_or(k.seq, |e| e.seq.max(k.seq));
                    return k;
                }
            }
        }
        *k = file.with_state(Known::read);
        k
    }

    /// The agent whose editor is `editor`: its block, name, the block's owner, whether it is
    /// enabled (as a read of every block finds it: the first agent block with that editor).
    pub(crate) fn agent(
        &self,
        file: &FileHandle,
        editor: &str,
    ) -> Option<(AgentRef, String, bool)> {
        let id = self
            .known(file)
            .agents
            .iter()
            .find(|(e, _)| e == editor)
            .map(|(_, id)| id.clone())?;
        file.with_state(|s| {
            let b = s.block(&id).filter(|b| agent_editor(b) == Some(editor));
            // The lists did not see a change of that block: read every block.
            b.or_else(|| agent_block_of(s, editor))
                .map(|b| agent_ref(b, editor))
        })
    }

    /// [`govern::judge`] of `agent` writing `path`, the directory found among the known ones.
    pub(crate) fn judge(&self, file: &FileHandle, agent: &AgentRef, path: &Path) -> Verdict {
        let dirs = self.known(file).dirs.clone();
        file.with_state(|s| {
            let found = govern::directory_among(dirs.iter().filter_map(|id| s.block(id)), path);
            govern::judge_in(s, agent, path, file.path(), found)
        })
    }
}

fn agent_ref(b: &Block, editor: &str) -> (AgentRef, String, bool) {
    let enabled = b.contents.get("status").and_then(Value::as_str) != Some("disabled");
    (
        AgentRef {
            block_id: b.block_id.clone(),
            name: b.name.clone(),
            editor_id: editor.to_owned(),
        },
        b.owner.clone(),
        enabled,
    )
}
