//! What the model is told: the system prompt (seed 003's sections), the folder the shell runs
//! in, the session title and the short calls that make titles and summaries.

use std::sync::Arc;

use serde_json::Value;

use super::super::memory::{self, Memory};
use super::super::permissions::Autonomy;
use super::history::*;
use super::state::*;
use super::tools::Markers;
use crate::llm::{ContentBlock, LlmRequest, Message, Provider, ToolDef};

/// `YYYY-MM-DD HH:MM UTC` for the system prompt's environment section.
pub(super) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// A short title from the first user message (3–6 words, or 24 characters of CJK text).
pub(super) fn title_of(message: &str) -> String {
    let words: Vec<&str> = message.split_whitespace().collect();
    if words.len() > 1 {
        return memory::clip(&words.into_iter().take(6).collect::<Vec<_>>().join(" "), 60);
    }
    memory::clip(message, 24)
}

/// What the title call asks for (seed 004: 3–6 words).
pub const TITLE_INSTRUCTION: &str =
    "Name this conversation: answer with a title of 3 to 6 words and nothing else.";

/// Temperature of the short calls (title, turn summary): low, so they stay plain and stable.
pub const SHORT_CALL_TEMPERATURE: f32 = 0.2;

/// A model's title answer without quotes, at most 80 characters; `None` if empty.
pub(super) fn clean_title(answer: Option<String>) -> Option<String> {
    answer
        .map(|t| memory::clip(t.trim_matches(|c| c == '"' || c == '\''), 80))
        .filter(|t| !t.is_empty())
}

/// The text of a message's text blocks.
pub(super) fn text_of(m: &Message) -> String {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One short model call without tools (owned, so it can run in a task): the answer's first
/// non-empty line, or `None` when the call fails or answers nothing.
pub(super) async fn short_call_with(
    provider: Arc<dyn Provider>,
    req: LlmRequest,
) -> Option<String> {
    let resp = provider
        .complete(&req, &mut |_| {})
        .await
        .map_err(|e| tracing::debug!(error = %e, "short model call failed; using the derived text"))
        .ok()?;
    resp.joined_text()
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

impl AgentSession {
    /// The system prompt (seed 003's six sections): identity, tools, safety, memory,
    /// environment, decision principles (+ reply language).
    pub(super) fn system_prompt(&self, tools: &[ToolDef], recalled: &[&Memory]) -> String {
        let mut s = format!(
            "# Identity\nYou are an agent working inside an Elfiee document (agent block {}, editor {}, session {}). You act only through the tools; every change you make is recorded as yours.\n",
            self.agent_block_id, self.agent_editor, self.session_id
        );
        if let Some(i) = &self.opts.instructions {
            s.push_str(i.trim());
            s.push('\n');
        }
        s.push_str("\n# Tools\n");
        for t in tools {
            s.push_str(&format!(
                "- {}: {}\n",
                t.name,
                first_lines(&t.description, 1)
            ));
        }
        let safety = match self.opts.autonomy {
            Autonomy::ReadOnly => "Read-only: every tool that changes something is refused. Do not try to edit.",
            Autonomy::Supervised => "Supervised: changes may need the user's confirmation; a refused call comes back as a failure — do not retry it unchanged.",
            Autonomy::Full => "Full autonomy: you may act without confirmation, except where a rule forbids it. Be careful with destructive commands.",
        };
        s.push_str(&format!(
            "\n# Safety\n{safety}\nRepeating the same call three times in a turn asks the user.\n"
        ));
        // Knowledge seeds (seed 003 §4): the user's standing facts, always recalled, before
        // the summaries of earlier sessions that match this message.
        let knowledge = self.file.with_state(|st| {
            st.block(&self.agent_block_id)
                .map(|b| elfiee_capabilities::builtin::AgentConfig::of(&b.contents).knowledge)
                .unwrap_or_default()
        });
        if !knowledge.is_empty() || !recalled.is_empty() {
            s.push_str("\n# Memory\n");
        }
        if !knowledge.is_empty() {
            s.push_str("Knowledge (standing facts from the user; treat them as true):\n");
            for k in &knowledge {
                s.push_str(&format!("- {}\n", k.replace('\n', " ")));
            }
        }
        if !recalled.is_empty() {
            s.push_str("Earlier sessions:\n");
            for m in recalled {
                s.push_str(&format!("- {}\n", m.summary));
            }
        }
        s.push_str(&format!(
            "\n# Environment\nDocument: {}\nWorking directory: {}\nTime: {}\n",
            self.file.path().display(),
            self.shell_folder(),
            utc_now()
        ));
        s.push_str(
            "\n# Principles\n\
- Look before you act: when unsure, check with self_info or by reading blocks.\n\
- If you cannot find out, ask the user.\n\
- Say why before you call a tool.\n\
- Read before you write; keep changes small; link code to the requirement it implements with elfiee_block_link (relation \"implement\").\n\
- Tool results: success is the output itself; \"[failed] …\" means the call did not succeed (a \"[partial output]\" section may follow); \"[error] …\" is a system error. Reflect on a failure; after a second failure, ask the user.\n\
- Stop when the task is done.\n",
        );
        if let Some(lang) = &self.opts.language {
            let m = Markers::for_language(Some(lang));
            s.push_str(&format!("- Reply in {lang}.\n"));
            if m.failed != Markers::EN.failed {
                s.push_str(&format!(
                    "- In this language the tool-result markers are {} (failed), {} (partial output) and {} (system error).\n",
                    m.failed, m.partial, m.error
                ));
            }
        }
        s
    }

    /// Where the agent's `shell` runs, for the system prompt: the folder [`Self::agent_terminal`]
    /// would use (the terminal's cwd rule, `terminal::working_dir`), without creating anything.
    /// A referenced terminal → its linked directory's folder, else `<elf>/terminals/<id>`; a
    /// referenced directory (or target project) → its folder on disk; neither → the agent's own
    /// terminal's folder inside the document.
    pub(super) fn shell_folder(&self) -> String {
        use elfiee_model::EXTERNAL_ROOT_PATH;
        let own_name = format!("shell: {}", self.agent_editor);
        let in_elf = |id: &str| {
            self.file
                .path()
                .join("terminals")
                .join(id)
                .display()
                .to_string()
        };
        self.file.with_state(|s| {
            let root_of = |dir: &str| -> String {
                match s.block(dir) {
                    Some(b) => match b.metadata.custom.get(EXTERNAL_ROOT_PATH).and_then(Value::as_str) {
                        Some(root) => format!("{root} (the project folder of directory \"{}\"; `shell` runs here)", b.name),
                        None => format!("none: directory \"{}\" has no folder on disk, so `shell` fails until it is exported or imported", b.name),
                    },
                    None => format!("none: the linked directory {dir} is gone, so `shell` fails"),
                }
            };
            let linked = |b: &elfiee_model::Block| {
                b.contents
                    .get("linked_directory_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            if let Some(t) = crate::service::agent_referenced(s, &self.agent_block_id, "terminal") {
                return match linked(t) {
                    Some(d) => root_of(&d),
                    None => format!("{} (inside the document: your terminal \"{}\" has no linked directory)", in_elf(&t.block_id), t.name),
                };
            }
            let directory = crate::service::agent_referenced(s, &self.agent_block_id, "directory");
            if let Some(d) = directory {
                return root_of(&d.block_id);
            }
            let own = s
                .blocks
                .values()
                .find(|b| b.block_type == "terminal" && b.name == own_name)
                .filter(|b| linked(b).is_none());
            let folder = match own {
                Some(t) => in_elf(&t.block_id),
                None => in_elf("<your terminal's id>"),
            };
            format!("{folder} (a folder inside the document: you reference no project directory; link one to work on a project)")
        })
    }
}
