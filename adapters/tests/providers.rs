//! Provider names: `agent.configure` accepts the names in
//! `elfiee_capabilities::builtin::PROVIDERS`, and `elfiee_adapters::llm::CLIENTS` maps each to its
//! client. These tests tie the two lists together, so a provider added to one and not the other
//! fails here instead of at a user's first call (an unknown name once fell through to Anthropic).

use elfiee_adapters::invoke::default_provider_factory;
use elfiee_adapters::llm::{build_provider, LlmError, ProviderConfig, CLIENTS};
use elfiee_capabilities::builtin::{AgentConfig, PROVIDERS};

/// Only the first test sets it (and reads it); the other one reads no environment.
const KEY_ENV: &str = "ELFIEE_PROVIDERS_TEST_KEY";

#[test]
fn every_accepted_provider_builds_its_own_client_and_the_table_names_no_other() {
    std::env::set_var(KEY_ENV, "sk-test-not-a-real-key");
    for name in PROVIDERS {
        let client = build_provider(name, KEY_ENV, ProviderConfig::default())
            .unwrap_or_else(|e| panic!("provider '{name}' has no client: {e}"));
        assert_eq!(
            client.name(),
            *name,
            "'{name}' builds another provider's client"
        );
    }
    for (name, _) in CLIENTS {
        assert!(
            PROVIDERS.contains(name),
            "llm::CLIENTS has '{name}', which agent.configure does not accept (add it to PROVIDERS)"
        );
    }
    assert_eq!(CLIENTS.len(), PROVIDERS.len(), "a name is listed twice");
}

#[test]
fn an_unknown_provider_is_an_error_naming_the_known_ones() {
    let cfg = AgentConfig {
        provider: "mistral".into(),
        api_key_env: KEY_ENV.into(),
        ..AgentConfig::default()
    };
    let Err(err) = default_provider_factory()(&cfg) else {
        panic!("an unknown provider built a client");
    };
    assert!(
        matches!(&err, LlmError::UnknownProvider { name, .. } if name == "mistral"),
        "{err:?}"
    );
    let text = err.to_string();
    for name in PROVIDERS {
        assert!(text.contains(name), "'{text}' does not list '{name}'");
    }
}
