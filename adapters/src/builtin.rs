//! The built-in effects, registered with the effect runtime, and the settings a host gives
//! them. The runtime ([`crate::effects`]) knows none of them by name.

use std::path::PathBuf;

use elfiee_engine::{EngineError, FileHandle};

use crate::effects::{attach_effects, EffectSet, EffectsHandle, RuntimeConfig};

/// Settings of the built-in effects and of the runtime that runs them.
#[derive(Clone)]
pub struct EffectsConfig {
    /// The `elfiee` binary the Claude Code integration writes into `.mcp.json` (absolute).
    pub elfiee_bin: PathBuf,
    /// Bytes of stdout / stderr the terminal effect keeps per run (the rest is cut with a
    /// note).
    pub terminal_output_limit: usize,
    /// Builds LLM providers for the LLM effect; `None` = the real ones (tests plug in
    /// scripted or local ones).
    pub provider_factory: Option<crate::invoke::ProviderFactory>,
    /// Concurrency, retries, restarts, observer.
    pub runtime: RuntimeConfig,
    /// An embedder's own effects, run beside the built-in ones (see docs/EMBEDDING.md).
    pub extra: EffectSet,
}

impl std::fmt::Debug for EffectsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectsConfig")
            .field("elfiee_bin", &self.elfiee_bin)
            .field("terminal_output_limit", &self.terminal_output_limit)
            .field("runtime", &self.runtime)
            .finish()
    }
}

impl Default for EffectsConfig {
    fn default() -> Self {
        EffectsConfig {
            elfiee_bin: default_elfiee_bin(),
            terminal_output_limit: 256 * 1024,
            provider_factory: None,
            runtime: RuntimeConfig::default(),
            extra: EffectSet::new(),
        }
    }
}

/// This executable if it is `elfiee`, else `elfiee` found on `PATH`, else the bare name.
pub fn default_elfiee_bin() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_stem().is_some_and(|s| s == "elfiee") {
            return exe;
        }
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("elfiee");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    PathBuf::from("elfiee")
}

/// The built-in effects (Claude Code integration, terminal, export, LLM), then the config's
/// `extra` ones.
pub fn builtin_effects(config: &EffectsConfig) -> EffectSet {
    let mut set = EffectSet::new();
    set.register(crate::claude::ClaudeIntegration {
        elfiee_bin: config.elfiee_bin.clone(),
    })
    .register(crate::terminal::TerminalEffect {
        output_limit: config.terminal_output_limit,
    })
    .register(crate::export::ExportEffect)
    .register(crate::invoke::InvokeEffect {
        providers: config
            .provider_factory
            .clone()
            .unwrap_or_else(crate::invoke::default_provider_factory),
    });
    set.extend(&config.extra);
    set
}

/// Starts the built-in effects on `file` (children of its file actor): each catches up from
/// its checkpoint, then follows the live stream. On a handle to a file another process owns,
/// they start if this process takes the file over (its effects run in the owner).
pub async fn attach(
    file: &FileHandle,
    config: EffectsConfig,
) -> Result<EffectsHandle, EngineError> {
    let effects = builtin_effects(&config);
    attach_effects(file, config.runtime, effects).await
}
