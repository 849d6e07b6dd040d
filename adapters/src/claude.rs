//! Claude Code integration of an agent (seed 001, corrected by DESIGN.md §7).
//!
//! `agent.enable` → the effect, for the agent's project `<root>`:
//! 1. writes `SKILL.md` into `<elf>/agents/<agent_block_id>/elfiee-client/`;
//! 2. records a plan (`agent.effect_plan`): which of the files and entries below existed, and
//!    for each JSON config the one text edit step 4 makes (with a hash of the bytes it leaves);
//! 3. symlinks `<root>/.claude/skills/elfiee-client` → that folder;
//! 4. makes those edits: server `elfiee` into `<root>/.mcp.json` (what Claude Code reads) and
//!    `<root>/.claude/mcp.json` (the seed's path, kept in sync), and `elfiee` into
//!    `enabledMcpjsonServers` in `<root>/.claude/settings.local.json` — each a minimal edit
//!    in the file's own formatting (`json_file`);
//! 5. records the outcome (`agent.effect_outcome`): ok / warnings, `needs_restart`.
//!
//! `agent.disable` removes exactly what the recorded plans say enable added — entries it added,
//! files and folders it created — and nothing else. A config file still as enable left it gets
//! its original bytes back (the recorded edit, reversed); one edited since loses only our
//! entries. Partial failures become warnings; events are never rolled back. Never deletes a
//! real directory or a symlink that is not ours.

use std::path::{Path, PathBuf};

use elfiee_engine::EngineError;
use elfiee_model::{AgentContents, Event, EXTERNAL_ROOT_PATH};
use serde_json::{json, Value};

use crate::effects::{BoxFuture, Effect, EffectCx, FailedOutcome};
use crate::json_file::{Edit, EditRecord, JsonFile};

pub const SERVER_NAME: &str = "elfiee";
pub const SKILL_NAME: &str = "elfiee-client";

/// Merges `server_config` as `mcpServers.<server_name>` into the JSON file at `path`
/// (seed 001 §10.5) by one minimal edit. Returns what it added: `"mcpServers"` if the key was
/// new, `"mcpServers.<name>"` if the entry was new.
pub fn merge_server(
    path: &Path,
    server_name: &str,
    server_config: &Value,
) -> Result<Vec<String>, String> {
    let (mut f, edit, added) = plan_server(path, server_name, server_config)?;
    if let Some(edit) = edit {
        f.apply(&edit);
    }
    f.save()?;
    Ok(added)
}

/// Opens the MCP config at `path` and computes the edit that sets the server entry, without
/// writing: the file, the edit (`None`: already there), what it adds.
fn plan_server(
    path: &Path,
    server_name: &str,
    server_config: &Value,
) -> Result<(JsonFile, Option<Edit>, Vec<String>), String> {
    let f = JsonFile::open(path)?;
    let mut added = Vec::new();
    let servers = f.get("mcpServers");
    if servers.is_none() {
        added.push("mcpServers".to_owned());
    }
    if servers
        .as_ref()
        .is_none_or(|s| s.get(server_name).is_none())
    {
        added.push(format!("mcpServers.{server_name}"));
    }
    let edit = f.set(&["mcpServers", server_name], server_config)?;
    Ok((f, edit, added))
}

/// Opens the settings at `path` and computes the edit that approves the server: the file, the
/// edit (`None`: already approved), what it adds.
fn plan_approval(path: &Path) -> Result<(JsonFile, Option<Edit>, Vec<String>), String> {
    let f = JsonFile::open(path)?;
    let mut added = Vec::new();
    let list = f.get("enabledMcpjsonServers");
    if list.is_none() {
        added.push("enabledMcpjsonServers".to_string());
    }
    if !list
        .as_ref()
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == SERVER_NAME))
    {
        added.push(format!("enabledMcpjsonServers[{SERVER_NAME}]"));
    }
    let edit = f.push_unique("enabledMcpjsonServers", &json!(SERVER_NAME))?;
    Ok((f, edit, added))
}

/// Removes `mcpServers.<server_name>` (seed 001 §10.6): a missing file or entry is fine; other
/// servers stay; `{"mcpServers": {}}` stays unless `drop_empty_key` (we added the key).
pub fn remove_server(path: &Path, server_name: &str, drop_empty_key: bool) -> Result<(), String> {
    let mut f = JsonFile::open(path)?;
    if !f.existed() {
        return Ok(());
    }
    remove_server_entry(&mut f, server_name, drop_empty_key)?;
    f.save()
}

fn remove_server_entry(f: &mut JsonFile, name: &str, drop_empty_key: bool) -> Result<(), String> {
    if let Some(edit) = f.remove_member(&["mcpServers", name])? {
        f.apply(&edit);
    }
    let now_empty = f
        .get("mcpServers")
        .and_then(|s| s.as_object().map(|o| o.is_empty()))
        .unwrap_or(false);
    if now_empty && drop_empty_key {
        if let Some(edit) = f.remove_member(&["mcpServers"])? {
            f.apply(&edit);
        }
    }
    Ok(())
}

/// Replaces `{elf_path}` in every string of `template` (seed 001 §10.7).
pub fn resolve_template(template: &Value, elf_path: &str) -> Value {
    match template {
        Value::String(s) => Value::String(s.replace("{elf_path}", elf_path)),
        Value::Array(a) => Value::Array(a.iter().map(|v| resolve_template(v, elf_path)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), resolve_template(v, elf_path)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The `elfiee` server entry for an agent.
pub fn server_entry(elfiee_bin: &Path, elf: &Path, editor_id: &str) -> Value {
    json!({
        "command": elfiee_bin.display().to_string(),
        "args": ["mcp-server", "--elf", elf.display().to_string(), "--editor", editor_id],
    })
}

/// `SKILL.md` of the `elfiee-client` skill.
pub fn skill_markdown(elf: &Path) -> String {
    format!(
        "---\nname: {SKILL_NAME}\ndescription: Read and edit the blocks of the Elfiee document {} through the `elfiee` MCP server (list, read, create, write, link blocks; propose changes for approval).\n---\n\n# Elfiee client\n\nThis project is connected to an Elfiee `.elf` document. Use the `elfiee` MCP tools:\n\n- `elfiee_block_list`, `elfiee_block_get` to read blocks;\n- `elfiee_block_create`, `elfiee_markdown_write`, `elfiee_code_write` to write;\n- `elfiee_block_link` to relate code to the requirement it implements (`implement`) or cites (`reference`).\n\nEvery change is recorded as an event authored by this agent and checked against its grants.\n",
        elf.display()
    )
}

/// Where things go for one agent.
struct Paths {
    root: PathBuf,
    skills_dir: PathBuf,
    link: PathBuf,
    skill_src: PathBuf,
    mcp: PathBuf,
    claude_mcp: PathBuf,
    settings: PathBuf,
}

fn paths(elf: &Path, root: &Path, agent_id: &str) -> Paths {
    let claude = root.join(".claude");
    Paths {
        root: root.to_owned(),
        skills_dir: claude.join("skills"),
        link: claude.join("skills").join(SKILL_NAME),
        skill_src: elf.join("agents").join(agent_id).join(SKILL_NAME),
        mcp: root.join(".mcp.json"),
        claude_mcp: claude.join("mcp.json"),
        settings: claude.join("settings.local.json"),
    }
}

/// The agent and its project root, from the committed state.
fn agent_and_root(cx: &EffectCx, agent_id: &str) -> Result<(AgentContents, PathBuf), String> {
    cx.file.with_state(|s| {
        let block = s
            .block(agent_id)
            .ok_or_else(|| format!("agent block {agent_id} no longer exists"))?;
        let agent: AgentContents = serde_json::from_value(block.contents.clone())
            .map_err(|e| format!("agent block {agent_id} is malformed: {e}"))?;
        let target = agent
            .target_project_id
            .clone()
            .ok_or("the agent has no target project")?;
        let dir = s
            .block(&target)
            .ok_or_else(|| format!("Target project block not found: {target}"))?;
        let root = dir
            .metadata
            .custom
            .get(EXTERNAL_ROOT_PATH)
            .and_then(Value::as_str)
            .ok_or("Target project has no external path")?;
        Ok((agent, PathBuf::from(root)))
    })
}

#[cfg(unix)]
fn is_our_link(link: &Path, target: &Path) -> bool {
    link.symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
        && std::fs::read_link(link).is_ok_and(|t| t == target)
}

#[cfg(unix)]
fn make_link(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(src, dst)
}

#[cfg(unix)]
fn is_junction(_: &Path) -> bool {
    false
}

#[cfg(windows)]
fn is_junction(link: &Path) -> bool {
    junction::exists(link).unwrap_or(false)
}

#[cfg(unix)]
fn remove_link(link: &Path) -> std::io::Result<()> {
    std::fs::remove_file(link)
}

/// Removes the junction itself (RemoveDirectory on a reparse point), never its target.
#[cfg(windows)]
fn remove_link(link: &Path) -> std::io::Result<()> {
    std::fs::remove_dir(link)
}

/// On Windows the skill link is a directory junction (seed 001 §8.6): unlike a symlink it
/// needs no administrator rights or developer mode.
#[cfg(windows)]
fn is_our_link(link: &Path, target: &Path) -> bool {
    junction::exists(link).unwrap_or(false) && junction::get_target(link).is_ok_and(|t| t == target)
}

#[cfg(windows)]
fn make_link(src: &Path, dst: &Path) -> std::io::Result<()> {
    junction::create(src, dst)
}

/// The Claude Code integration effect; `elfiee_bin` is the binary written into `.mcp.json`
/// (absolute path).
pub struct ClaudeIntegration {
    pub elfiee_bin: std::path::PathBuf,
}

impl Effect for ClaudeIntegration {
    fn name(&self) -> &'static str {
        "claude"
    }
    fn wants(&self, e: &Event) -> bool {
        matches!(e.cap_id(), "agent.enable" | "agent.disable")
    }
    // The default order key (the agent block): enable and disable of one agent stay in order.
    fn failed_outcome(&self, e: &Event, why: &str) -> FailedOutcome {
        let enabling = e.cap_id() == "agent.enable";
        FailedOutcome {
            cap_id: "agent.effect_outcome",
            block_id: e.entity.clone(),
            payload: json!({
                "ok": false, "warnings": [why], "needs_restart": false, "message": why,
                "action": if enabling { "enable" } else { "disable" },
                "trigger_seq": e.seq,
                "status": if enabling { "enabled" } else { "disabled" },
            }),
        }
    }
    fn run<'a>(&'a self, cx: &'a EffectCx, e: &'a Event) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let enabling = e.cap_id() == "agent.enable";
            let action = if enabling { "enable" } else { "disable" };
            let agent_id = e.entity.clone();
            let mut outcome = match agent_and_root(cx, &agent_id) {
                Ok((agent, root)) => {
                    let p = paths(cx.file.path(), &root, &agent_id);
                    if enabling {
                        enable(cx, &self.elfiee_bin, e, &p, &agent).await?
                    } else {
                        let record = cx.file.with_state(|s| {
                            s.block(&agent_id)
                                .and_then(|b| b.metadata.custom.get("integration"))
                                .cloned()
                        });
                        disable(record)
                    }
                }
                // An LLM-only agent has nothing to integrate.
                Err(msg) if msg == "the agent has no target project" => {
                    json!({"ok": true, "warnings": [], "needs_restart": false, "message": "LLM-only agent: nothing to change on disk"})
                }
                Err(msg) => {
                    json!({"ok": false, "warnings": [msg.clone()], "needs_restart": false, "message": msg})
                }
            };
            outcome["action"] = json!(action);
            outcome["trigger_seq"] = json!(e.seq);
            outcome["status"] = json!(if enabling { "enabled" } else { "disabled" });
            cx.record(e, "outcome", "agent.effect_outcome", &agent_id, outcome)
                .await?;
            Ok(())
        })
    }
}

async fn enable(
    cx: &EffectCx,
    elfiee_bin: &Path,
    e: &Event,
    p: &Paths,
    agent: &AgentContents,
) -> Result<Value, EngineError> {
    let mut warnings: Vec<String> = Vec::new();
    if !p.root.join(".claude").is_dir() {
        let msg = format!(
            "Claude not initialized in target project: {}. Run 'claude' first.",
            p.root.display()
        );
        return Ok(
            json!({"ok": false, "warnings": [msg.clone()], "needs_restart": false, "message": msg}),
        );
    }
    // 1. The skill folder inside the .elf.
    let skill = std::fs::create_dir_all(&p.skill_src).and_then(|_| {
        crate::json_file::write_atomic(
            &p.skill_src.join("SKILL.md"),
            skill_markdown(cx.file.path()).as_bytes(),
        )
    });
    if let Err(err) = skill {
        warnings.push(format!(
            "Failed to write SKILL.md in {}: {err}",
            p.skill_src.display()
        ));
    }
    // 2. The plan: what exists before we touch anything, and for each config file the one edit
    //    enable will make (computed now, written in step 4), so disable can reverse it exactly.
    let mut artifacts = vec![
        json!({"kind": "dir", "path": p.skills_dir, "created": !p.skills_dir.exists()}),
        json!({"kind": "symlink", "path": p.link, "target": p.skill_src, "created": p.link.symlink_metadata().is_err()}),
    ];
    let entry = server_entry(elfiee_bin, cx.file.path(), &agent.editor_id);
    // Each config with its planned edits made in memory, written in step 4.
    let mut configs: Vec<JsonFile> = Vec::new();
    let planned = [
        ("mcp", &p.mcp, plan_server(&p.mcp, SERVER_NAME, &entry)),
        (
            "mcp",
            &p.claude_mcp,
            plan_server(&p.claude_mcp, SERVER_NAME, &entry),
        ),
        ("settings", &p.settings, plan_approval(&p.settings)),
    ];
    for (kind, path, plan) in planned {
        match plan {
            Ok((mut doc, edit, added)) => {
                let mut artifact =
                    json!({"kind": kind, "path": path, "created": !doc.existed(), "added": added});
                if let Some(edit) = &edit {
                    // Only an edit that adds our entries can be undone by reversing it.
                    if !added.is_empty() {
                        artifact["edit"] = json!(edit.record(doc.text()));
                    }
                    doc.apply(edit);
                }
                artifacts.push(artifact);
                if kind == "settings" {
                    // The hooks go into the same file, after the approval: their own artifact
                    // (disable reverses them first), one edit per event.
                    let command = crate::hooks::settings::hook_command(
                        elfiee_bin,
                        cx.file.path(),
                        &agent.editor_id,
                    );
                    match crate::hooks::settings::add(&mut doc, &command) {
                        Ok((records, added)) => {
                            let mut hooks = json!({"kind": "hooks", "path": path, "created": false, "added": added, "command": command});
                            if !records.is_empty() {
                                hooks["edits"] = json!(records);
                            }
                            artifacts.push(hooks);
                        }
                        Err(err) => warnings.push(err),
                    }
                }
                configs.push(doc);
            }
            Err(err) => {
                warnings.push(err);
                artifacts.push(json!({"kind": kind, "path": path, "created": false, "added": []}));
            }
        }
    }
    cx.record(
        e,
        "plan",
        "agent.effect_plan",
        &e.entity,
        json!({"action": "enable", "trigger_seq": e.seq, "artifacts": artifacts}),
    )
    .await?;

    // 3. Symlink.
    if let Err(err) = std::fs::create_dir_all(&p.skills_dir) {
        warnings.push(format!(
            "Failed to create {}: {err}",
            p.skills_dir.display()
        ));
    }
    match p.link.symlink_metadata() {
        Ok(_) if is_our_link(&p.link, &p.skill_src) => {}
        Ok(m) if m.file_type().is_symlink() || is_junction(&p.link) => warnings.push(format!(
            "{} is a symlink that is not ours; left alone",
            p.link.display()
        )),
        Ok(_) => warnings.push(format!(
            "{} exists and is not a symlink; left alone",
            p.link.display()
        )),
        Err(_) => {
            if let Err(err) = make_link(&p.skill_src, &p.link) {
                warnings.push(format!("Failed to create symlink: {err}"));
            }
        }
    }
    // 4. The planned config edits: MCP server entries, the approval.
    for doc in configs {
        if let Err(err) = doc.save() {
            warnings.push(err);
        }
    }
    let message = if warnings.is_empty() {
        "Agent enabled. Restart Claude Code in the project to load the elfiee MCP server."
            .to_owned()
    } else {
        format!(
            "Agent enabled with {} warning(s); run enable again after fixing them.",
            warnings.len()
        )
    };
    Ok(
        json!({"ok": warnings.is_empty(), "warnings": warnings, "needs_restart": true, "message": message}),
    )
}

/// Undoes the recorded artifacts, newest first. What cannot be undone stays in the record.
fn disable(record: Option<Value>) -> Value {
    let mut warnings = Vec::new();
    let mut remaining = Vec::new();
    let artifacts: Vec<Value> = record
        .as_ref()
        .and_then(|r| r.get("artifacts"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for a in artifacts.iter().rev() {
        let path = PathBuf::from(a.get("path").and_then(Value::as_str).unwrap_or_default());
        let created = a.get("created").and_then(Value::as_bool).unwrap_or(false);
        let added: Vec<&str> = a
            .get("added")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let result: Result<(), String> = match a.get("kind").and_then(Value::as_str) {
            Some("symlink") => {
                let target =
                    PathBuf::from(a.get("target").and_then(Value::as_str).unwrap_or_default());
                if is_our_link(&path, &target) {
                    remove_link(&path)
                        .map_err(|e| format!("Failed to remove symlink {}: {e}", path.display()))
                } else {
                    if path.symlink_metadata().is_ok() {
                        warnings.push(format!("{} is not our symlink; left alone", path.display()));
                    }
                    Ok(())
                }
            }
            Some("dir") => {
                if created
                    && path.is_dir()
                    && std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none())
                {
                    std::fs::remove_dir(&path)
                        .map_err(|e| format!("Failed to remove {}: {e}", path.display()))
                } else {
                    Ok(())
                }
            }
            Some("mcp") => undo_json(&path, created, &added, a.get("edit"), |doc| {
                if added.contains(&format!("mcpServers.{SERVER_NAME}").as_str()) {
                    remove_server_entry(doc, SERVER_NAME, added.contains(&"mcpServers"))?;
                }
                Ok(())
            }),
            Some("hooks") => undo_hooks(&path, &added, a),
            Some("settings") => undo_json(&path, created, &added, a.get("edit"), |doc| {
                if added.contains(&format!("enabledMcpjsonServers[{SERVER_NAME}]").as_str()) {
                    while let Some(edit) =
                        doc.remove_item("enabledMcpjsonServers", &json!(SERVER_NAME))?
                    {
                        doc.apply(&edit);
                    }
                    let now_empty = doc
                        .get("enabledMcpjsonServers")
                        .and_then(|l| l.as_array().map(Vec::is_empty))
                        .unwrap_or(false);
                    if now_empty && added.contains(&"enabledMcpjsonServers") {
                        if let Some(edit) = doc.remove_member(&["enabledMcpjsonServers"])? {
                            doc.apply(&edit);
                        }
                    }
                }
                Ok(())
            }),
            _ => Ok(()),
        };
        if let Err(w) = result {
            warnings.push(w);
            remaining.insert(0, a.clone());
        }
    }
    let integration = if remaining.is_empty() {
        Value::Null
    } else {
        json!({"artifacts": remaining})
    };
    let message = if warnings.is_empty() {
        "Agent disabled; the project is as enable found it. Restart Claude Code to unload the server.".to_owned()
    } else {
        format!("Agent disabled with {} warning(s).", warnings.len())
    };
    json!({"ok": warnings.is_empty(), "warnings": warnings, "needs_restart": !artifacts.is_empty(), "message": message, "integration": integration})
}

/// Takes the hook entries enable added out of the settings file: the recorded edits reversed
/// when the file is exactly as they left it (its bytes come back), else our entries removed
/// structurally. The file itself is the `settings` artifact's (undone right after this one).
fn undo_hooks(path: &Path, added: &[&str], artifact: &Value) -> Result<(), String> {
    if added.is_empty() {
        return Ok(());
    }
    let mut doc = JsonFile::open(path)?;
    if !doc.existed() {
        return Ok(());
    }
    let records: Vec<EditRecord> = artifact
        .get("edits")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default();
    match crate::hooks::settings::undo_all(&records, doc.text()) {
        Some(original) if !records.is_empty() => doc.set_text(original),
        _ => {
            let command = artifact
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or_default();
            crate::hooks::settings::remove(&mut doc, command, added)?;
        }
    }
    doc.save()
}

/// Undoes what enable did to a JSON file. If the file still has exactly the bytes enable's
/// recorded edit produced, the edit is reversed and the original bytes come back; otherwise
/// `remove` takes out our entries and leaves everything else as the user has it now. A file we
/// created is deleted once nothing but an empty object is left.
fn undo_json(
    path: &Path,
    created: bool,
    added: &[&str],
    record: Option<&Value>,
    remove: impl FnOnce(&mut JsonFile) -> Result<(), String>,
) -> Result<(), String> {
    if !created && added.is_empty() {
        return Ok(());
    }
    let mut doc = JsonFile::open(path)?;
    if !doc.existed() {
        return Ok(());
    }
    let record: Option<EditRecord> = record.and_then(|r| serde_json::from_value(r.clone()).ok());
    match record.and_then(|r| r.undo(doc.text())) {
        Some(original) => doc.set_text(original),
        None => remove(&mut doc)?,
    }
    if created && doc.is_empty() {
        std::fs::remove_file(path).map_err(|e| format!("Failed to remove {}: {e}", path.display()))
    } else {
        doc.save()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path, text: Option<&str>) -> PathBuf {
        let p = dir.join("mcp.json");
        if let Some(t) = text {
            std::fs::write(&p, t).unwrap();
        }
        p
    }

    fn read(p: &Path) -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn entry() -> Value {
        json!({"command": "elfiee", "args": ["mcp-server", "--elf", "/x.elf"]})
    }

    #[test]
    fn test_merge_new_file() {
        let d = tempfile::tempdir().unwrap();
        let p = cfg(d.path(), None);
        assert_eq!(
            merge_server(&p, "elfiee", &entry()).unwrap(),
            ["mcpServers", "mcpServers.elfiee"]
        );
        assert_eq!(read(&p), json!({"mcpServers": {"elfiee": entry()}}));
    }

    #[test]
    fn test_merge_empty_file() {
        let d = tempfile::tempdir().unwrap();
        let p = cfg(d.path(), Some(""));
        merge_server(&p, "elfiee", &entry()).unwrap();
        assert_eq!(read(&p), json!({"mcpServers": {"elfiee": entry()}}));
    }

    #[test]
    fn test_merge_existing_no_server_and_with_server_and_preserves_others() {
        let d = tempfile::tempdir().unwrap();
        let p = cfg(
            d.path(),
            Some(
                r#"{"mcpServers": {"other-tool": {"command": "other-tool", "args": ["--flag"]}}, "x": 1}"#,
            ),
        );
        assert_eq!(
            merge_server(&p, "elfiee", &entry()).unwrap(),
            ["mcpServers.elfiee"]
        );
        let newer = json!({"command": "elfiee2", "args": []});
        assert!(
            merge_server(&p, "elfiee", &newer).unwrap().is_empty(),
            "an existing entry is overwritten, not added"
        );
        let v = read(&p);
        assert_eq!(v["mcpServers"]["elfiee"], newer);
        assert_eq!(
            v["mcpServers"]["other-tool"],
            json!({"command": "other-tool", "args": ["--flag"]})
        );
        assert_eq!(v["x"], 1);
    }

    #[test]
    fn test_merge_invalid_json() {
        let d = tempfile::tempdir().unwrap();
        let p = cfg(d.path(), Some("{oops"));
        let e = merge_server(&p, "elfiee", &entry()).unwrap_err();
        assert!(e.starts_with("Invalid JSON in"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{oops");
    }

    #[test]
    fn test_remove_existing_nonexistent_missing_file_and_preserves_others() {
        let d = tempfile::tempdir().unwrap();
        let p = cfg(d.path(), None);
        remove_server(&p, "elfiee", false).unwrap();
        assert!(!p.exists(), "removing from a missing file creates nothing");
        std::fs::write(
            &p,
            r#"{"mcpServers": {"elfiee": {}, "keep": {"command": "k"}}}"#,
        )
        .unwrap();
        remove_server(&p, "elfiee", false).unwrap();
        remove_server(&p, "elfiee", false).unwrap();
        assert_eq!(read(&p), json!({"mcpServers": {"keep": {"command": "k"}}}));
    }

    #[test]
    fn test_remove_leaves_empty_object() {
        let d = tempfile::tempdir().unwrap();
        let p = cfg(d.path(), Some(r#"{"mcpServers": {"elfiee": {}}}"#));
        remove_server(&p, "elfiee", false).unwrap();
        assert_eq!(read(&p), json!({"mcpServers": {}}));
        let e = remove_server(&cfg(d.path(), Some("nope")), "elfiee", false).unwrap_err();
        assert!(e.contains("Invalid JSON"));
    }

    #[test]
    fn test_resolve_template_elf_path_and_nested() {
        let t = json!({"mcpServers": {"elfiee": {"command": "elfiee", "args": ["mcp-server", "--elf", "{elf_path}"], "n": 1}}});
        let r = resolve_template(&t, "/home/u/p.elf");
        assert_eq!(r["mcpServers"]["elfiee"]["args"][2], "/home/u/p.elf");
        assert_eq!(r["mcpServers"]["elfiee"]["n"], 1);
    }

    #[test]
    fn skill_frontmatter_names_the_folder() {
        let md = skill_markdown(Path::new("/x.elf"));
        assert!(md.starts_with("---\nname: elfiee-client\ndescription: "));
    }
}
