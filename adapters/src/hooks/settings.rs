//! The hook entries `agent enable` puts into the project's `.claude/settings.local.json`
//! beside `enabledMcpjsonServers`, and their removal: minimal text edits (`json_file`), so a
//! user's own hooks stay and keep running, and disable gives the file back byte for byte.

use std::path::Path;

use serde_json::{json, Value};

use crate::json_file::{EditRecord, JsonFile};

/// Tools whose calls the `PreToolUse` / `PostToolUse` hooks see (Claude Code matchers are
/// regular expressions over the tool name): the ones that can change files. Read-only tools
/// (`Read`, `Grep`, `Glob`, …) start no hook process at all.
pub const TOOL_MATCHER: &str = "Write|Edit|MultiEdit|NotebookEdit|Bash|mcp__.*";

/// The hook events elfiee listens to, and whether their entry takes the tool matcher.
pub const EVENTS: &[(&str, bool)] = &[
    ("SessionStart", false),
    ("UserPromptSubmit", false),
    ("PreToolUse", true),
    ("PostToolUse", true),
    // A call that failed (a `Bash` with a non-zero exit) may still have changed files.
    ("PostToolUseFailure", true),
    ("Stop", false),
    ("SubagentStop", false),
    ("SessionEnd", false),
];

/// Seconds Claude Code gives a hook before it stops it (the hook itself gives up sooner).
pub const TIMEOUT_SECS: u64 = 10;

/// `s` quoted for `sh` (single quotes; a quote inside becomes `'\''`).
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command of every elfiee hook entry. When the binary is gone (moved, uninstalled), the
/// hook says so once per Claude Code process (a non-blocking message) and lets it go on.
pub fn hook_command(elfiee_bin: &Path, elf: &Path, editor_id: &str) -> String {
    let bin = quote(&elfiee_bin.display().to_string());
    let elf_q = quote(&elf.display().to_string());
    let gone = quote(&format!(
        "elfiee: {} is gone; Claude Code's work here is not recorded in {}. Run `elfiee agent enable` again.",
        elfiee_bin.display(),
        elf.display()
    ));
    format!(
        "if [ -x {bin} ]; then exec {bin} hook --elf {elf_q} --editor {editor}; fi; \
         m=\"${{TMPDIR:-/tmp}}/elfiee-hook-gone-$PPID\"; [ -e \"$m\" ] && exit 0; : > \"$m\"; echo {gone} >&2; exit 1",
        editor = quote(editor_id)
    )
}

/// Our matcher group for `event`.
pub fn group(event: &str, command: &str) -> Value {
    let tools = EVENTS.iter().any(|(e, m)| *e == event && *m);
    let hook = json!({"type": "command", "command": command, "timeout": TIMEOUT_SECS});
    if tools {
        json!({"matcher": TOOL_MATCHER, "hooks": [hook]})
    } else {
        json!({"hooks": [hook]})
    }
}

/// Adds our groups to `doc` (in memory, one edit per event): the records of the edits, in
/// order, and what they added (`hooks`, `hooks.<Event>`, `hooks.<Event>[elfiee]`).
pub fn add(doc: &mut JsonFile, command: &str) -> Result<(Vec<EditRecord>, Vec<String>), String> {
    let (mut records, mut added) = (Vec::new(), Vec::new());
    match doc.get("hooks") {
        None => added.push("hooks".to_owned()),
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(format!(
                "{}: \"hooks\" is not an object; fix it, then run enable again",
                doc.path.display()
            ))
        }
    }
    for (event, _) in EVENTS {
        if doc.get_at(&["hooks", event]).is_none() {
            added.push(format!("hooks.{event}"));
        }
        if let Some(edit) = doc.push_unique_at(&["hooks", event], &group(event, command))? {
            records.push(edit.record(doc.text()));
            doc.apply(&edit);
            added.push(format!("hooks.{event}[elfiee]"));
        }
    }
    Ok((records, added))
}

/// Takes our groups out of `doc` structurally (the file changed since enable): other
/// groups stay; an event list or the `hooks` object we added goes once empty.
pub fn remove(doc: &mut JsonFile, command: &str, added: &[&str]) -> Result<(), String> {
    for (event, _) in EVENTS {
        if !added.contains(&format!("hooks.{event}[elfiee]").as_str()) {
            continue;
        }
        let ours = group(event, command);
        while let Some(edit) = doc.remove_item_at(&["hooks", event], &ours)? {
            doc.apply(&edit);
        }
        let empty = doc
            .get_at(&["hooks", event])
            .and_then(|l| l.as_array().map(Vec::is_empty))
            .unwrap_or(false);
        if empty && added.contains(&format!("hooks.{event}").as_str()) {
            if let Some(edit) = doc.remove_member(&["hooks", event])? {
                doc.apply(&edit);
            }
        }
    }
    let empty = doc
        .get("hooks")
        .and_then(|h| h.as_object().map(|o| o.is_empty()))
        .unwrap_or(false);
    if empty && added.contains(&"hooks") {
        if let Some(edit) = doc.remove_member(&["hooks"])? {
            doc.apply(&edit);
        }
    }
    Ok(())
}

/// The text before `records` were made, if `text` is exactly what they left.
pub fn undo_all(records: &[EditRecord], text: &str) -> Option<String> {
    records
        .iter()
        .rev()
        .try_fold(text.to_owned(), |t, r| r.undo(&t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(before: &str) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("settings.local.json");
        std::fs::write(&p, before).unwrap();
        let mut doc = JsonFile::open(&p).unwrap();
        let cmd = hook_command(
            Path::new("/opt/my tools/elfiee"),
            Path::new("/w/it's.elf"),
            "agent-1",
        );
        let (records, added) = add(&mut doc, &cmd).unwrap();
        let after = doc.text().to_owned();
        let v: Value = serde_json::from_str(&after).unwrap();
        for (event, _) in EVENTS {
            let list = v["hooks"][event].as_array().unwrap();
            assert!(list.contains(&group(event, &cmd)), "{event} in {after}");
        }
        // Idempotent.
        let (again, _) = add(&mut doc, &cmd).unwrap();
        assert!(again.is_empty());
        // Reversed exactly.
        assert_eq!(undo_all(&records, &after).as_deref(), Some(before));
        // Structurally, after someone else's edit.
        doc.set_text(after.replacen('{', "{\"theirs\": 1, ", 1));
        let added: Vec<&str> = added.iter().map(String::as_str).collect();
        remove(&mut doc, &cmd, &added).unwrap();
        let left: Value = serde_json::from_str(doc.text()).unwrap();
        let mut want: Value = serde_json::from_str(before).unwrap_or(json!({}));
        want["theirs"] = json!(1);
        assert_eq!(left, want);
    }

    #[test]
    fn hooks_go_in_beside_the_users_own_and_come_out_exactly() {
        roundtrip("{}\n");
        roundtrip("");
        roundtrip("{\r\n\t\"enabledMcpjsonServers\": [\"x\"],\r\n\t\"hooks\": {\r\n\t\t\"PreToolUse\": [{\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"echo mine\"}]}]\r\n\t}\r\n}");
        roundtrip("{\"permissions\":{\"allow\":[\"Bash(ls)\"]},\"hooks\":{\"Stop\":[]}}");
    }

    #[test]
    fn the_command_quotes_paths_and_survives_a_missing_binary() {
        let cmd = hook_command(
            Path::new("/nope/elf iee"),
            Path::new("/w/a'b.elf"),
            "agent-1",
        );
        let tmp = tempfile::tempdir().unwrap();
        let run = || {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(&cmd)
                .env("TMPDIR", tmp.path())
                .output()
                .unwrap()
        };
        let out = run();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("/nope/elf iee is gone"));
        // Once per Claude Code process: the next call of the same parent is silent.
        let out = run();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(out.stderr.is_empty());
    }
}
