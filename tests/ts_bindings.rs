//! `bindings/elfiee.ts` holds the TypeScript types of every command payload, event, block,
//! editor, grant, agent content, proposal-related payload, result and error type. This test
//! regenerates it from the Rust types and fails when the committed file is stale.
//! Regenerate with `ELFIEE_BLESS=1 cargo test --test ts_bindings`.

use elfiee_adapters as adapters;
use elfiee_capabilities::builtin as caps;
use elfiee_engine as engine;
use elfiee_model as model;
use ts_rs::{Config, TS};

fn render() -> String {
    // u64 values cross JSON as plain numbers (seqs and counts stay far below 2^53).
    let cfg = Config::default().with_large_int("number");
    let mut out = String::from(
        "// Generated from the Rust types by tests/ts_bindings.rs — do not edit.\n\
         // Regenerate: ELFIEE_BLESS=1 cargo test --test ts_bindings\n\n",
    );
    macro_rules! emit {
        ($($t:ty),* $(,)?) => {
            $( out.push_str(&format!("export {}\n\n", <$t as TS>::decl(&cfg))); )*
        };
    }
    emit!(
        serde_json::Value,
        model::Block,
        model::ContentRef,
        model::BlockMetadata,
        model::Relation,
        model::Editor,
        model::EditorType,
        model::Grant,
        model::Command,
        model::Event,
        model::EventPlace,
        model::EventDraft,
        model::CapError,
        model::AgentContents,
        model::AgentStatus,
        model::ImportedFile,
        model::SkippedFile,
        model::DirectoryEntry,
        model::PendingRemoval,
        model::TerminalContents,
        caps::CoreCreatePayload,
        caps::RenamePayload,
        caps::UpdateMetadataPayload,
        caps::LinkPayload,
        caps::GrantPayload,
        caps::EditorCreatePayload,
        caps::EditorDeletePayload,
        caps::InitPayload,
        caps::MarkdownWritePayload,
        caps::CodeWritePayload,
        caps::DirectoryImportPayload,
        caps::DirectorySyncPayload,
        caps::DirectoryAddPayload,
        caps::DirectoryMovePayload,
        caps::DirectoryRemovePayload,
        caps::DirectoryStatus,
        adapters::export::ExportPlan,
        adapters::llm::ProposedCommand,
        adapters::service::Proposal,
        adapters::service::ProposalStatus,
        adapters::service::ExportBeforeRun,
        adapters::export::Refusal,
        caps::TerminalCreatePayload,
        caps::TerminalExecutePayload,
        caps::AgentCreatePayload,
        caps::AgentConfigurePayload,
        caps::AgentConfig,
        caps::AgentInvokePayload,
        caps::AgentApprovePayload,
        engine::EngineError,
        engine::ReplayReport,
        engine::VerifyReport,
        adapters::service::ImportReport,
        adapters::import::SyncReport,
        adapters::service::AgentResult,
        adapters::invoke::LiveDelta,
    );
    out
}

#[test]
fn typescript_bindings_are_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bindings/elfiee.ts");
    let fresh = render();
    if std::env::var_os("ELFIEE_BLESS").is_some() {
        std::fs::write(path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == fresh,
        "bindings/elfiee.ts is stale: regenerate it with `ELFIEE_BLESS=1 cargo test --test ts_bindings` and commit it"
    );
}
