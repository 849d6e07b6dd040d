//! The built-in capabilities, one file each: payload type, handler, fold, tests.
//!
//! Each file declares its capabilities as data, `CAPABILITIES: &[Builtin]` (id, target, merge,
//! who authorizes, handler and fold as plain functions: see [`Builtin`]), and registers its
//! folds through [`Capability::fold`], as an embedder's capabilities do: [`Registry::builtin`]
//! is nothing but [`all`] registered one by one, plus the body keys of the built-in block
//! types. Helpers several capabilities share are in `support` (events, the handlers of effect
//! records and reads) and `entries` (a directory's entry list); no capability imports this
//! module.

use std::sync::{Arc, OnceLock};

use elfiee_projections::content::body_keys;

use crate::{Capability, Registry};

mod agent;
mod agent_llm;
mod agent_session;
mod block_read;
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
mod markdown_write;
mod spec;
mod support;
mod terminal;
#[cfg(test)]
pub(crate) mod testkit;

pub use agent::{
    agent_block_of, agent_editor, AgentCreatePayload, AgentStatusPayload, AGENT_DIRECTORY_GRANTS,
    AGENT_GRANTS,
};
pub use agent_llm::{
    proposal, AgentApprovePayload, AgentConfig, AgentConfigurePayload, AgentInvokePayload,
    PROVIDERS,
};
pub use code_write::CodeWritePayload;
pub use core_create::CoreCreatePayload;
pub use core_grant::GrantPayload;
pub use core_link::{link_of, LinkPayload};
pub use core_rename::RenamePayload;
pub use core_restore::{RestoreBlock, RestorePayload};
pub use core_update_metadata::UpdateMetadataPayload;
pub use directory_files::{
    directory_status, DirectoryAddPayload, DirectoryMovePayload, DirectoryRemovePayload,
    DirectoryStatus,
};
pub use directory_import::{check_relative_path, file_block_type, DirectoryImportPayload};
pub use directory_sync::{
    directory_entries, directory_entry, directory_entry_disk, directory_list, DirectorySyncPayload,
};
pub use editor_create::EditorCreatePayload;
pub use editor_delete::EditorDeletePayload;
pub use elf_init::InitPayload;
pub use entries::{entry_path, IMPORT_INCOMPLETE};
pub use markdown_write::MarkdownWritePayload;
pub use spec::{Builtin, FoldFn, Handler};
pub use terminal::{TerminalCreatePayload, TerminalExecutePayload, DEFAULT_TIMEOUT_SECS};

impl Registry {
    /// The registry with every built-in capability, each with its fold, and the body keys of
    /// the built-in kinds and block types (`markdown`, `code`): the same registration an
    /// embedder's capabilities get.
    pub fn builtin() -> Registry {
        // Built once: every registry made from it shares the same folds (`Arc`s), which is
        // how `elfiee::testkit` tells a built-in fold from an embedder's.
        static BUILTIN: OnceLock<Registry> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                let mut r = Registry::default();
                let specs = specs();
                for spec in &specs {
                    r.register(Arc::new(*spec));
                }
                // A body writer (`Builtin::body_write`) declares its block type's body keys.
                for spec in &specs {
                    if let Some(block_type) = spec.body() {
                        r.declare_body(spec.id(), body_keys(block_type));
                        r.declare_block_body(block_type, body_keys(block_type));
                    }
                }
                // A block's body, when it is created, is at the keys of its block type.
                r.declare_typed_body("core.create");
                r
            })
            .clone()
    }
}

/// Every built-in capability, each declared as data ([`Builtin`]) in its file.
pub fn all() -> Vec<Arc<dyn Capability>> {
    specs()
        .into_iter()
        .map(|c| Arc::new(c) as Arc<dyn Capability>)
        .collect()
}

/// The declarations of [`all`], in order.
fn specs() -> Vec<Builtin> {
    [
        elf_init::CAPABILITIES,
        core_create::CAPABILITIES,
        core_delete::CAPABILITIES,
        core_rename::CAPABILITIES,
        core_update_metadata::CAPABILITIES,
        core_link::CAPABILITIES,
        core_unlink::CAPABILITIES,
        core_grant::CAPABILITIES,
        core_revoke::CAPABILITIES,
        core_restore::CAPABILITIES,
        editor_create::CAPABILITIES,
        editor_delete::CAPABILITIES,
        markdown_write::CAPABILITIES,
        code_write::CAPABILITIES,
        block_read::CAPABILITIES,
        directory_import::CAPABILITIES,
        directory_sync::CAPABILITIES,
        directory_files::CAPABILITIES,
        directory_export::CAPABILITIES,
        terminal::CAPABILITIES,
        agent::CAPABILITIES,
        agent_llm::CAPABILITIES,
        agent_session::CAPABILITIES,
    ]
    .concat()
}
