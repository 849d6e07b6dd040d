//! Deciding proposals: approve runs every proposed command as the agent's editor, atomically.

mod support;
use elfiee_adapters::service::{decide_proposal, list_proposals};
use elfiee_engine::{EngineError, FileHandle};
use serde_json::{json, Value};

async fn setup() -> (tempfile::TempDir, FileHandle, String, String) {
    let d = support::fresh_doc("p", "p.elf").await;
    let (agent, editor) = support::create_agent(&d.file, "alice", "writer").await;
    (d.dir, d.file, agent, editor)
}

async fn propose(file: &FileHandle, agent: &str, id: &str, commands: Value) {
    support::alice(file, "agent.proposal", Some(agent), json!({
        "trigger_seq": 1, "proposal_id": id, "status": "pending", "prompt": "p", "proposed_commands": commands
    })).await;
}

#[tokio::test]
async fn approving_runs_the_commands_as_the_agent_editor() {
    let (_d, file, agent, editor) = setup().await;
    propose(&file, &agent, "p1", json!([
        {"cap_id": "core.create", "payload": {"name": "Spec", "block_type": "markdown", "block_id": "spec"}},
        {"cap_id": "markdown.write", "block_id": "spec", "payload": {"markdown": "# Spec"}}
    ]))
    .await;
    let ev = decide_proposal(&file, "alice", "p1", true, None)
        .await
        .unwrap();
    assert_eq!(ev.len(), 4);
    assert_eq!(ev[0].attribute, "alice/agent.approve");
    assert_eq!(ev[1].attribute, format!("{editor}/core.create"));
    assert_eq!(ev[2].attribute, format!("{editor}/markdown.write"));
    // The created block is linked from the agent, as the agent loop's are (seed 002 §2.1B).
    assert_eq!(ev[3].attribute, format!("{editor}/core.link"));
    assert_eq!(
        file.block(&agent).unwrap().children["implement"],
        vec!["spec".to_string()]
    );
    let block = file.block("spec").unwrap();
    assert_eq!(
        (block.owner.as_str(), block.contents["markdown"].as_str()),
        (editor.as_str(), Some("# Spec"))
    );
    assert_eq!(list_proposals(&file, Some(&agent))[0]["status"], "approved");
    let again = decide_proposal(&file, "alice", "p1", true, None)
        .await
        .unwrap_err();
    assert!(again.to_string().contains("already approved"), "{again}");
    file.close().await;
}

#[tokio::test]
async fn an_approval_with_one_unauthorized_command_changes_nothing() {
    let (_d, file, agent, _editor) = setup().await;
    let owned = support::create_block(&file, "mine", "markdown").await;
    propose(&file, &agent, "p2", json!([
        {"cap_id": "core.create", "payload": {"name": "ok", "block_type": "markdown", "block_id": "ok"}},
        {"cap_id": "core.delete", "block_id": owned, "payload": {}}
    ]))
    .await;
    let (seq, digest) = (file.last_seq(), file.state_digest());
    let err = decide_proposal(&file, "alice", "p2", true, None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Rejected(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("proposed command 2 of 2") && msg.contains("core.delete"),
        "{msg}"
    );
    assert_eq!(
        (file.last_seq(), file.state_digest()),
        (seq, digest),
        "all or nothing"
    );
    assert!(file.block("ok").is_none());
    assert_eq!(
        list_proposals(&file, None)[0]["status"],
        "pending",
        "still pending: it can be rejected"
    );
    decide_proposal(&file, "alice", "p2", false, Some("needs delete rights"))
        .await
        .unwrap();
    let p = &list_proposals(&file, None)[0];
    assert_eq!(
        (p["status"].as_str(), p["feedback"].as_str()),
        (Some("rejected"), Some("needs delete rights"))
    );
    assert!(decide_proposal(&file, "alice", "p2", true, None)
        .await
        .unwrap_err()
        .to_string()
        .contains("already rejected"));
    file.close().await;
}

#[tokio::test]
async fn an_agent_proposes_over_mcp_and_a_human_approves() {
    let (_d, file, agent, editor) = setup().await;
    let out = elfiee_adapters::mcp::tools::call(
        &file,
        &editor,
        "elfiee_propose",
        json!({"commands": [{"cap_id": "core.create", "payload": {"name": "Plan", "block_type": "markdown", "block_id": "plan"}}], "description": "add a plan"}),
    )
    .await
    .unwrap();
    let pid = out["proposal_id"].as_str().unwrap().to_owned();
    let listed =
        elfiee_adapters::mcp::tools::call(&file, &editor, "elfiee_proposal_list", json!({}))
            .await
            .unwrap();
    assert_eq!(listed["proposals"][0]["proposal_id"], pid.as_str());
    assert_eq!(listed["proposals"][0]["agent_block_id"], agent.as_str());
    assert!(file.block("plan").is_none(), "nothing runs before approval");
    decide_proposal(&file, "alice", &pid, true, None)
        .await
        .unwrap();
    assert_eq!(file.block("plan").unwrap().owner, editor);
    let bad = elfiee_adapters::mcp::tools::call(
        &file,
        &editor,
        "elfiee_propose",
        json!({"commands": [{"payload": {}}], "description": "x"}),
    )
    .await
    .unwrap_err();
    assert!(bad.message.contains("cap_id"), "{}", bad.message);
    file.close().await;
}

/// Seed 002 §3: a block the proposal creates with a path for a name joins the agent's directory
/// at that path when the proposal is approved ("b1 gains the new file").
#[tokio::test]
async fn approving_places_a_created_file_in_the_agents_directory() {
    let (_d, file, agent, _editor) = setup().await;
    let dir = support::alice(&file, "directory.import", None, json!({"root": "/tmp/story-proj", "files": [{"path": "src/main.rs", "content": "fn main() {}"}]})).await[0]
        .entity
        .clone();
    support::reference(&file, &agent, &dir).await;
    propose(
        &file,
        &agent,
        "p9",
        json!([
            {"cap_id": "core.create", "payload": {"name": "src/pdf.rs", "block_type": "code"}},
            {"cap_id": "core.create", "payload": {"name": "Notes", "block_type": "markdown"}}
        ]),
    )
    .await;
    decide_proposal(&file, "alice", "p9", true, None)
        .await
        .unwrap();
    let (entries, pdf) = file.with_state(|s| {
        let entries = elfiee_capabilities::builtin::directory_entries(s.block(&dir).unwrap());
        let pdf = s
            .blocks
            .values()
            .find(|b| b.name == "src/pdf.rs")
            .unwrap()
            .block_id
            .clone();
        (entries, pdf)
    });
    assert_eq!(entries.get("src/pdf.rs"), Some(&pdf), "{entries:?}");
    assert!(
        !entries.contains_key("Notes"),
        "a name that is no path stays out"
    );
    assert_eq!(entries.len(), 2);
    file.close().await;
}
