//! The built-in capabilities, one file each: payload type, handler, fold, tests.
//!
//! Each registers its fold through [`Capability::fold`], as an embedder's capabilities do:
//! [`Registry::builtin`] is nothing but [`all`] registered one by one, plus the body keys of
//! the built-in block types. Helpers several capabilities share are in `support` (events) and
//! `entries` (a directory's entry list); no capability imports this module.

use std::sync::Arc;

use elfiee_projections::content::body_keys;

use crate::{Capability, Registry};

mod agent;
mod agent_llm;
mod agent_session;
mod code_read;
mod code_write;
mod core_create;
mod core_delete;
mod core_grant;
mod core_link;
mod core_rename;
mod core_restore;
mod core_revoke;
mod core_unlink;
mod core_update_metadata;
mod directory_export;
mod directory_files;
mod directory_import;
mod directory_sync;
mod editor_create;
mod editor_delete;
mod elf_init;
mod entries;
mod markdown_read;
mod markdown_write;
mod support;
mod terminal;

pub use agent::{AgentCreatePayload, AgentStatusPayload, AGENT_DIRECTORY_GRANTS, AGENT_GRANTS};
pub use agent_llm::{
    proposal, AgentApprovePayload, AgentConfig, AgentConfigurePayload, AgentInvokePayload,
    PROVIDERS,
};
pub use code_write::CodeWritePayload;
pub use core_create::CoreCreatePayload;
pub use core_grant::GrantPayload;
pub use core_link::LinkPayload;
pub use core_rename::RenamePayload;
pub use core_restore::{RestoreBlock, RestorePayload};
pub use core_update_metadata::UpdateMetadataPayload;
pub use directory_files::{
    directory_status, DirectoryAddPayload, DirectoryMovePayload, DirectoryRemovePayload,
    DirectoryStatus,
};
pub use directory_import::{check_relative_path, DirectoryImportPayload};
pub use directory_sync::{
    directory_entries, directory_entry, directory_entry_disk, directory_list, DirectorySyncPayload,
};
pub use editor_create::EditorCreatePayload;
pub use editor_delete::EditorDeletePayload;
pub use elf_init::InitPayload;
pub use entries::{entry_path, IMPORT_INCOMPLETE};
pub use markdown_write::MarkdownWritePayload;
pub use terminal::{TerminalCreatePayload, TerminalExecutePayload, DEFAULT_TIMEOUT_SECS};

impl Registry {
    /// The registry with every built-in capability, each with its fold, and the body keys of
    /// the built-in kinds and block types (`markdown`, `code`): the same registration an
    /// embedder's capabilities get.
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        for cap in all() {
            r.register(cap);
        }
        for (kind, block_type) in [("markdown.write", "markdown"), ("code.write", "code")] {
            r.declare_body(kind, body_keys(block_type));
            r.declare_block_body(block_type, body_keys(block_type));
        }
        r
    }
}

/// Every built-in capability.
pub fn all() -> Vec<Arc<dyn Capability>> {
    vec![
        Arc::new(elf_init::ElfInit),
        Arc::new(core_create::CoreCreate),
        Arc::new(core_delete::CoreDelete),
        Arc::new(core_rename::CoreRename),
        Arc::new(core_update_metadata::CoreUpdateMetadata),
        Arc::new(core_link::CoreLink),
        Arc::new(core_unlink::CoreUnlink),
        Arc::new(core_grant::CoreGrant),
        Arc::new(core_revoke::CoreRevoke),
        Arc::new(core_restore::CoreRestore),
        Arc::new(editor_create::EditorCreate),
        Arc::new(editor_delete::EditorDelete),
        Arc::new(markdown_write::MarkdownWrite),
        Arc::new(markdown_read::MarkdownRead),
        Arc::new(code_write::CodeWrite),
        Arc::new(code_read::CodeRead),
        Arc::new(directory_import::DirectoryImport),
        Arc::new(directory_sync::DirectorySync),
        Arc::new(directory_files::DirectoryAdd),
        Arc::new(directory_files::DirectoryMove),
        Arc::new(directory_files::DirectoryRemove),
        Arc::new(directory_export::DirectoryExport),
        Arc::new(directory_export::DirectoryExportOutcome),
        Arc::new(terminal::TerminalCreate),
        Arc::new(terminal::TerminalExecute),
        Arc::new(terminal::TerminalOutput),
        Arc::new(agent::AgentCreate),
        Arc::new(agent::AgentSetStatus(elfiee_model::AgentStatus::Enabled)),
        Arc::new(agent::AgentSetStatus(elfiee_model::AgentStatus::Disabled)),
        Arc::new(agent::AgentEffectPlan),
        Arc::new(agent::AgentEffectOutcome),
        Arc::new(agent_llm::AgentConfigure),
        Arc::new(agent_llm::AgentInvoke),
        Arc::new(agent_llm::AgentProposal),
        Arc::new(agent_llm::AgentApprove),
        Arc::new(agent_session::AgentSession),
    ]
}

#[cfg(test)]
pub(crate) mod testkit {
    //! A tiny in-memory pipeline for handler tests: execute, assign seqs, apply.
    use elfiee_model::{CapError, Command, Ctx, Event};
    use elfiee_projections::State;
    use serde_json::{json, Value};

    use crate::Registry;

    pub struct Kit {
        pub registry: Registry,
        pub state: State,
        pub ctx: Ctx,
        pub n: u8,
    }

    impl Kit {
        /// A file owned by `alice`, with `bob` as a plain editor.
        pub fn new() -> Kit {
            let registry = Registry::builtin();
            let ctx = registry.ctx(
                chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
                "n1",
                [0; 16],
            );
            let mut kit = Kit {
                registry,
                state: State::default(),
                ctx,
                n: 0,
            };
            kit.ok("alice", "elf.init", None, json!({"name": "Alice"}));
            kit.ok(
                "alice",
                "editor.create",
                None,
                json!({"name": "Bob", "editor_id": "bob"}),
            );
            kit
        }

        pub fn run(
            &mut self,
            editor: &str,
            cap: &str,
            block: Option<&str>,
            payload: Value,
        ) -> Result<Vec<Event>, CapError> {
            self.n = self.n.wrapping_add(1);
            self.ctx.id_seed = [self.n; 16];
            let cmd = Command::new(editor, cap, block, payload);
            let events = self.registry.execute(&cmd, &self.state, &self.ctx)?;
            let mut out = Vec::new();
            for mut e in events {
                e.seq = self.state.last_seq + 1;
                self.registry.apply(&mut self.state, &e);
                out.push(e);
            }
            Ok(out)
        }

        pub fn ok(
            &mut self,
            editor: &str,
            cap: &str,
            block: Option<&str>,
            payload: Value,
        ) -> Vec<Event> {
            self.run(editor, cap, block, payload.clone())
                .unwrap_or_else(|e| panic!("{cap} {payload} should succeed: {e}"))
        }

        pub fn err(
            &mut self,
            editor: &str,
            cap: &str,
            block: Option<&str>,
            payload: Value,
        ) -> CapError {
            let before = self.state.clone();
            let e = self
                .run(editor, cap, block, payload)
                .expect_err("command should be rejected");
            assert_eq!(
                before, self.state,
                "a rejected command must not change state"
            );
            e
        }

        /// Creates a block as alice and returns its id.
        pub fn block(&mut self, ty: &str, name: &str) -> String {
            let ev = self.ok(
                "alice",
                "core.create",
                None,
                json!({"name": name, "block_type": ty}),
            );
            ev[0].entity.clone()
        }
    }
}
