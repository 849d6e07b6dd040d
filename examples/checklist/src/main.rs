//! `elfiee-checklist`: the whole `elfiee` command line, over a registry that also knows
//! checklists (`elfiee-checklist exec checklist.add --block LIST --payload '{"text": "milk"}'`,
//! with `"due": "2026-12-01"` for a due date) and runs their export effect.

fn main() -> std::process::ExitCode {
    elfiee::cli::main_with_effects(
        elfiee::EngineConfig {
            registry: elfiee_checklist::registry(),
            ..Default::default()
        },
        elfiee_checklist::effects(),
    )
}
