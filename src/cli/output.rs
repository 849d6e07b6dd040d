use crate::EngineError;
use serde_json::{json, Value};

/// A CLI failure with its exit code: 1 for a rejected command or an unusable file, 2 for usage.
#[derive(Debug)]
pub enum CliError {
    /// The command line is wrong (exit 2); the message says how to write it.
    Usage(String),
    /// The command ran and was refused, or the document could not be used (exit 1).
    Failed {
        /// A stable name of what went wrong (`rejected`, `locked`, `unauthorized`, …), the
        /// `kind` of `--json`'s `{"error": {"kind", "message"}}`.
        kind: String,
        /// What went wrong and what to do, in words.
        message: String,
    },
}

impl CliError {
    /// A usage error saying `msg`.
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError::Usage(msg.into())
    }

    /// A failure of kind `kind` saying `msg`.
    pub fn failed(kind: &str, msg: impl Into<String>) -> CliError {
        CliError::Failed {
            kind: kind.into(),
            message: msg.into(),
        }
    }

    /// The process exit code: 2 for usage, 1 for a failure.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Failed { .. } => 1,
        }
    }

    /// `error: …` on stderr; with `--json` also `{"error": {"kind", "message"}}` on stdout.
    pub fn report(&self, json: bool) {
        let (kind, message) = match self {
            CliError::Usage(m) => ("usage", m.as_str()),
            CliError::Failed { kind, message } => (kind.as_str(), message.as_str()),
        };
        eprintln!("error: {message}");
        if json {
            println!("{}", json!({"error": {"kind": kind, "message": message}}));
        }
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        let kind = match &e {
            EngineError::Rejected(c) => serde_json::to_value(c)
                .ok()
                .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "rejected".into()),
            other => serde_json::to_value(other)
                .ok()
                .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "error".into()),
        };
        CliError::Failed {
            kind,
            message: e.to_string(),
        }
    }
}

/// Prints `value` as JSON when `--json`, else the human text.
pub struct Out {
    pub json: bool,
}

impl Out {
    /// Prints text already in the right form (JSON when `--json`); nothing when empty.
    pub fn print_text(&self, text: &str) {
        use std::io::Write;
        if text.is_empty() && !self.json {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}").and_then(|_| out.flush());
    }

    /// A closed stdout (`elfiee log | head`) ends the output quietly instead of panicking.
    pub fn print(&self, value: &Value, human: impl FnOnce() -> String) {
        let text = if self.json {
            value.to_string()
        } else {
            human()
        };
        self.print_text(&text);
    }
}
