//! The `hooks` phase (issue 37, item 7 "Fast"): what one Claude Code tool call recorded by
//! elfiee's hooks costs, as users meet it, on a generated 10,000-file, 100 MB project (2,000
//! files / 20 MB with `--quick`) with one file changed per call — beside spawning `true` and
//! beside the issue-26 checkpoint alone, in the same run.
//!
//! Set up as a user would: the project (with a `.claude/` folder, as Claude Code leaves it)
//! imported (`elfiee dir import`), an agent made with `elfiee agent create --target DIR` (which
//! writes the hook entries into `.claude/settings.local.json`), and `elfiee mcp-server --elf DOC
//! --editor AGENT` started with a piped stdin as Claude Code starts it: the document's owner,
//! which records what the hooks hand it through the owner socket. Then `SessionStart`,
//! `UserPromptSubmit` and the calls: each a `PreToolUse` hook process (payload on stdin), one
//! file changed (a few bytes appended) and a line pair in the session's transcript, a
//! `PostToolUse` hook process. A call's time is both hook processes, spawn to reaping.
//!
//! Calls alternate between the binary run directly (`elfiee hook --elf DOC --editor E`) and
//! the exact command line from `settings.local.json` through `sh -c` (how Claude Code runs a
//! hook command); each series gets the targets. Beside them, in the same run: spawning `true`
//! (and `sh -c true`) with `std::process::Command`, and the checkpoint alone
//! (`FolderTracker::scan` in this process after one file changed, as the `checkpoint` phase).
//!
//! After the calls the owner is stopped and `elfiee --json agent steps SESSION` must list one
//! step per call, each naming exactly the file that call changed: a run that records nothing
//! fails.
//!
//! Targets: a call's p50 ≤ 30 ms, p99 ≤ 100 ms.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use elfiee_adapters::checkpoint::FolderTracker;
use elfiee_bench::project_gen;
use elfiee_engine::Engine;
use serde_json::{json, Value};

use crate::common::{ms_since, path_str, round, BoxError, Cli, Plan};
use crate::sync::{children_cpu_seconds, cpu_seconds};

const TARGET_P50_MS: f64 = 30.0;
const TARGET_P99_MS: f64 = 100.0;
/// A figure closer to its limit than this (relative) is reported as met without margin.
const MARGIN: f64 = 0.05;

/// Sizes of one run of the phase.
pub(crate) struct HookPlan {
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    /// Timed calls per series (direct, through `sh -c`).
    pub(crate) calls: usize,
    pub(crate) warmup: usize,
}

impl HookPlan {
    pub(crate) fn new(plan: &Plan, calls: Option<usize>) -> HookPlan {
        let quick = plan.mode == "quick";
        HookPlan {
            files: if quick { 2_000 } else { 10_000 },
            bytes: if quick { 20_000_000 } else { 100_000_000 },
            calls: calls.unwrap_or(if quick { 50 } else { 200 }).max(1),
            warmup: if quick { 5 } else { 10 },
        }
    }
}

/// Nearest-rank percentile (`p` in 0..=100) of `xs`.
fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn dist(xs: &[f64]) -> Value {
    json!({
        "p50": round(percentile(xs, 50.0), 2),
        "p99": round(percentile(xs, 99.0), 2),
        "max": round(percentile(xs, 100.0), 2),
        "min": round(percentile(xs, 0.0), 2),
        "n": xs.len(),
    })
}

/// The `elfiee mcp-server` that owns the document; stopped (stdin closed, as when Claude Code
/// exits) when dropped.
struct Owner {
    child: Option<Child>,
}

impl Owner {
    fn start(exe: &Path, doc: &Path, editor: &str, log: &Path) -> Result<Owner, BoxError> {
        let child = Command::new(exe)
            .args(["mcp-server", "--elf", path_str(doc)?, "--editor", editor])
            .env_remove("ELFIEE_ELF")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()?;
        let mut owner = Owner { child: Some(child) };
        let sock = doc.join("owner.sock");
        let t = Instant::now();
        while !sock.exists() {
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "`elfiee mcp-server` did not own {} within 30 s: {}",
                    doc.display(),
                    std::fs::read_to_string(log).unwrap_or_default()
                )
                .into());
            }
            if let Some(c) = owner.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    return Err(format!(
                        "`elfiee mcp-server` exited ({status}): {}",
                        std::fs::read_to_string(log).unwrap_or_default()
                    )
                    .into());
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(owner)
    }

    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        drop(c.stdin.take());
        let t = Instant::now();
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if t.elapsed() > Duration::from_secs(20) => {
                    info!("hooks: the owner did not stop in 20 s; killed");
                    let _ = c.kill();
                    let _ = c.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How a hook is run: the binary directly, or the settings' command through `sh -c`.
enum Via<'a> {
    Direct(&'a [String]),
    Shell(&'a str),
}

/// Runs one hook with `payload` on stdin; its wall time (spawn to reaping) in ms. Fails unless
/// it exited 0 and said nothing (a warning means the call was not recorded; a denial that
/// it was refused).
fn hook(exe: &Path, via: &Via<'_>, payload: &Value) -> Result<f64, BoxError> {
    let body = payload.to_string();
    let mut cmd = match via {
        Via::Direct(args) => {
            let mut c = Command::new(exe);
            c.args(*args);
            c
        }
        Via::Shell(line) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(line);
            c
        }
    };
    cmd.env_remove("ELFIEE_ELF")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(body.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let ms = ms_since(t);
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if !out.status.success() || !se.trim().is_empty() || so.contains("deny") {
        return Err(format!(
            "hook {} ({}): stdout {so:?}, stderr {se:?}",
            payload["hook_event_name"], out.status
        )
        .into());
    }
    Ok(ms)
}

fn spawn_ms(program: &str, args: &[&str]) -> Result<f64, BoxError> {
    let t = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let ms = ms_since(t);
    if !status.success() {
        return Err(format!("`{program}` failed: {status}").into());
    }
    Ok(ms)
}

/// Appends a line to the session's transcript (Claude Code writes it beside the hooks).
fn transcript_line(path: &Path, v: Value) -> Result<(), BoxError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(f, "{v}")?;
    Ok(())
}

/// A figure beside its limit: margin = limit / value − 1.
fn target(name: &str, value: f64, limit: f64) -> Value {
    let margin = limit / value - 1.0;
    json!({
        "name": name, "value": round(value, 2), "target": format!("<= {limit} ms"),
        "met": value <= limit, "margin": round(margin, 3),
    })
}

fn summary(targets: &[Value], beside: &[(&str, f64, f64)]) {
    info!("hooks summary:");
    info!(
        "  {:<40} {:>9} {:>9}  {:<10} {:>8}  result",
        "figure", "p50 ms", "p99 ms", "target", "margin"
    );
    for pair in targets.chunks(2) {
        let [p50, p99] = pair else { continue };
        let met = |t: &Value| match (t["met"].as_bool(), t["margin"].as_f64()) {
            (Some(true), Some(m)) if m >= MARGIN => "met",
            (Some(true), _) => "met, no margin (< 5 %)",
            _ => "NOT MET",
        };
        let name = p50["name"].as_str().unwrap_or("").trim_end_matches(" p50");
        info!(
            "  {:<40} {:>9} {:>9}  {:<10} {:>8}  p50 {}",
            name,
            p50["value"],
            "",
            p50["target"].as_str().unwrap_or(""),
            p50["margin"],
            met(p50)
        );
        info!(
            "  {:<40} {:>9} {:>9}  {:<10} {:>8}  p99 {}",
            "",
            "",
            p99["value"],
            p99["target"].as_str().unwrap_or(""),
            p99["margin"],
            met(p99)
        );
    }
    for (name, p50, p99) in beside {
        info!("  {:<40} {:>9.2} {:>9.2}  (beside)", name, p50, p99);
    }
}

pub(super) fn hooks_phase(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    base: &Path,
    plan: &Plan,
    calls: Option<usize>,
) -> Result<Value, BoxError> {
    let hp = HookPlan::new(plan, calls);
    let exe = std::env::current_exe()?.with_file_name("elfiee");
    if !exe.is_file() {
        return Err(format!(
            "{} is missing; build it with `cargo build --release -p elfiee -p elfiee-bench`",
            exe.display()
        )
        .into());
    }
    let dir = base.join("hooks");
    std::fs::create_dir_all(&dir)?;
    let root = dir.join("project");
    let spec = project_gen::Spec {
        seed: 37,
        files: hp.files,
        total_bytes: hp.bytes,
        size_factor: 1,
    };
    let t = Instant::now();
    let gen = project_gen::generate(&root, &spec)?;
    // Claude Code's folder (it holds the settings enable writes into).
    std::fs::create_dir_all(root.join(".claude"))?;
    info!(
        "hooks: generated {} text files ({} bytes) in {:.1} s",
        gen.files,
        gen.text_bytes,
        t.elapsed().as_secs_f64()
    );
    // Files written this close to a scan are hashed again by it (racily clean); a real
    // project's files are older.
    std::thread::sleep(Duration::from_millis(2500));

    // The document, as a user makes it.
    let doc = dir.join("hooks.elf");
    let mut cli = Cli::new(&dir)?;
    cli.run(None, &["init", path_str(&doc)?, "--owner", "Bench"])?;
    let t = Instant::now();
    let imported = cli
        .run(Some(&doc), &["--json", "dir", "import", path_str(&root)?])?
        .json()?;
    let import_s = t.elapsed().as_secs_f64();
    let dir_block = imported["block_id"]
        .as_str()
        .ok_or_else(|| format!("dir import printed no block_id: {imported}"))?
        .to_owned();
    let created = cli
        .run(
            Some(&doc),
            &["--json", "agent", "create", "--target", &dir_block],
        )?
        .json()?;
    drop(cli);
    let editor = created["editor_id"]
        .as_str()
        .ok_or_else(|| format!("agent create printed no editor_id: {created}"))?
        .to_owned();
    if created["warnings"]
        .as_array()
        .is_some_and(|w| !w.is_empty())
    {
        info!("hooks: agent create warned: {}", created["warnings"]);
    }
    // The exact command enable installed.
    let settings: Value = serde_json::from_str(&std::fs::read_to_string(
        root.join(".claude/settings.local.json"),
    )?)?;
    let command = ["PreToolUse", "PostToolUse"]
        .iter()
        .map(|event| {
            settings["hooks"][event]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["hooks"].as_array().into_iter().flatten())
                .filter_map(|h| h["command"].as_str())
                .find(|c| c.contains(" hook --elf "))
                .map(str::to_owned)
                .ok_or_else(|| format!("no elfiee {event} hook in the settings: {settings}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if command[0] != command[1] {
        return Err(
            format!("PreToolUse and PostToolUse run different commands: {command:?}").into(),
        );
    }
    let command = command[0].clone();
    let direct: Vec<String> = vec![
        "hook".into(),
        "--elf".into(),
        path_str(&doc)?.into(),
        "--editor".into(),
        editor.clone(),
    ];
    info!("hooks: imported in {import_s:.1} s; hook command: {command}");

    // Claude Code starts its MCP server: the document's owner.
    let t = Instant::now();
    let mut owner = Owner::start(&exe, &doc, &editor, &dir.join("owner.stderr"))?;
    let owner_start_ms = ms_since(t);

    let session = format!(
        "bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let transcript = dir.join("transcript.jsonl");
    let payload = |event: &str, extra: Value| {
        let mut v = json!({
            "session_id": session,
            "transcript_path": transcript,
            "cwd": root,
            "permission_mode": "default",
            "hook_event_name": event,
        });
        if let Some(o) = extra.as_object() {
            for (k, x) in o {
                v[k] = x.clone();
            }
        }
        v
    };
    let direct_via = Via::Direct(&direct);
    let shell_via = Via::Shell(&command);
    transcript_line(
        &transcript,
        json!({"type": "user", "message": {"role": "user", "content": "Make the benchmark's edits"}}),
    )?;
    let session_start_ms = hook(
        &exe,
        &direct_via,
        &payload("SessionStart", json!({"source": "startup"})),
    )?;
    let prompt_ms = hook(
        &exe,
        &direct_via,
        &payload(
            "UserPromptSubmit",
            json!({"prompt": "Make the benchmark's edits"}),
        ),
    )?;
    info!(
        "hooks: owner up in {owner_start_ms:.0} ms; SessionStart {session_start_ms:.0} ms (the first checkpoint of the folder), UserPromptSubmit {prompt_ms:.0} ms"
    );

    // The calls: warm-up (direct), then direct and `sh -c` alternating, each beside a spawn
    // of `true` and of `sh -c true`.
    let total = hp.warmup + 2 * hp.calls;
    let mut changed: Vec<String> = Vec::with_capacity(total);
    let (mut call_direct, mut call_shell) = (Vec::new(), Vec::new());
    let (mut pre_ms, mut post_ms) = (Vec::new(), Vec::new());
    let (mut spawn_true, mut spawn_sh_true) = (Vec::new(), Vec::new());
    let t_calls = Instant::now();
    // CPU of the timed calls (the owner's, and the hook processes'), summed per series: a
    // figure that the machine's load changes much less than the wall time.
    let owner_pid = owner.child.as_ref().map(Child::id);
    let (mut owner_cpu, mut hooks_cpu) = (0.0, 0.0);
    for i in 0..total {
        let timed = i >= hp.warmup;
        let via = if timed && (i - hp.warmup) % 2 == 1 {
            &shell_via
        } else {
            &direct_via
        };
        let rel = gen.paths[(i * 7919 + 11) % gen.paths.len()].clone();
        let path = root.join(&rel);
        let id = format!("toolu_bench_{i:05}");
        let marker = format!("// hook call {i}");
        let input = json!({"file_path": path, "old_string": "", "new_string": marker});
        let cpu_before = (cpu_seconds(owner_pid), children_cpu_seconds());
        let pre = hook(
            &exe,
            via,
            &payload(
                "PreToolUse",
                json!({"tool_name": "Edit", "tool_input": input, "tool_use_id": id}),
            ),
        )?;
        // The tool's work: a few bytes appended to one file; Claude Code's transcript lines.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
        writeln!(f, "\n{marker}")?;
        drop(f);
        transcript_line(
            &transcript,
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": id, "name": "Edit", "input": input}]}}),
        )?;
        transcript_line(
            &transcript,
            json!({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": "The file has been updated."}]}}),
        )?;
        let post = hook(
            &exe,
            via,
            &payload(
                "PostToolUse",
                json!({"tool_name": "Edit", "tool_input": input, "tool_use_id": id,
                       "tool_response": {"filePath": path, "success": true}}),
            ),
        )?;
        changed.push(rel);
        if !timed {
            continue;
        }
        owner_cpu += cpu_seconds(owner_pid) - cpu_before.0;
        hooks_cpu += children_cpu_seconds() - cpu_before.1;
        match via {
            Via::Direct(_) => call_direct.push(pre + post),
            Via::Shell(_) => call_shell.push(pre + post),
        }
        pre_ms.push(pre);
        post_ms.push(post);
        spawn_true.push(spawn_ms("true", &[])?);
        spawn_sh_true.push(spawn_ms("sh", &["-c", "true"])?);
    }
    let calls_s = t_calls.elapsed().as_secs_f64();
    let timed_calls = (2 * hp.calls) as f64;
    let (owner_cpu_ms, hooks_cpu_ms) = (
        1000.0 * owner_cpu / timed_calls,
        1000.0 * hooks_cpu / timed_calls,
    );
    info!(
        "hooks: CPU per call: the owner {owner_cpu_ms:.1} ms, the two hook processes {hooks_cpu_ms:.1} ms"
    );
    info!(
        "hooks: {total} calls in {calls_s:.1} s; direct p50 {:.1} ms p99 {:.1} ms, sh -c p50 {:.1} ms p99 {:.1} ms",
        percentile(&call_direct, 50.0),
        percentile(&call_direct, 99.0),
        percentile(&call_shell, 50.0),
        percentile(&call_shell, 99.0)
    );
    let stop = hook(
        &exe,
        &direct_via,
        &payload("Stop", json!({"stop_hook_active": false})),
    )?;
    owner.stop();

    // Every call is a step naming its file, or the run fails.
    let mut cli = Cli::new(&dir)?;
    let steps = cli
        .run(Some(&doc), &["--json", "agent", "steps", &session])?
        .json()?;
    drop(cli);
    let steps = steps["steps"].as_array().cloned().unwrap_or_default();
    if steps.len() != total {
        return Err(format!(
            "{} tool calls recorded {} steps (the owner's stderr: {})",
            total,
            steps.len(),
            std::fs::read_to_string(dir.join("owner.stderr")).unwrap_or_default()
        )
        .into());
    }
    for (i, (s, rel)) in steps.iter().zip(&changed).enumerate() {
        let modified: Vec<&str> = s["files_modified"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let others = s["files_created"].as_array().map_or(0, Vec::len)
            + s["files_deleted"].as_array().map_or(0, Vec::len);
        if modified != [rel.as_str()] || others != 0 || s["tools"] != json!(["Edit"]) {
            return Err(format!("call {i} changed {rel}, but its step says {s}").into());
        }
    }
    info!(
        "hooks: {} steps recorded, each naming its file",
        steps.len()
    );
    let _ =
        std::fs::remove_file(std::env::temp_dir().join(format!("elfiee-hook-{session}.warned")));

    // The checkpoint alone, in this process, on the same project.
    let file = rt.block_on(engine.init(dir.join("checkpoint.elf"), "Bench"))?;
    let mut tracker = FolderTracker::open(&file, "bench-dir", &root);
    tracker.scan()?;
    tracker.save();
    let mut checkpoint = Vec::new();
    let mut hashed = 0;
    for i in 0..hp.calls {
        let path = root.join(&gen.paths[(i * 6007 + 5) % gen.paths.len()]);
        let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
        writeln!(f, "\n// checkpoint {i}")?;
        drop(f);
        let t = Instant::now();
        let (_, stats) = tracker.scan()?;
        checkpoint.push(ms_since(t));
        hashed += stats.hashed;
    }
    rt.block_on(file.close());
    if hashed != hp.calls {
        info!(
            "hooks: the checkpoints alone hashed {hashed} files for {} changes",
            hp.calls
        );
    }

    // p50 and p99 of a series against their targets, and of the figures beside them.
    let against = |name: &str, xs: &[f64]| {
        [
            target(&format!("{name} p50"), percentile(xs, 50.0), TARGET_P50_MS),
            target(&format!("{name} p99"), percentile(xs, 99.0), TARGET_P99_MS),
        ]
    };
    let targets: Vec<Value> = [
        against("hook call (elfiee hook)", &call_direct),
        against("hook call (sh -c settings command)", &call_shell),
    ]
    .concat();
    let p50_p99 = |name, xs: &[f64]| (name, percentile(xs, 50.0), percentile(xs, 99.0));
    let beside = [
        p50_p99("  one hook process (PreToolUse)", &pre_ms),
        p50_p99("  one hook process (PostToolUse)", &post_ms),
        p50_p99("spawn `true`", &spawn_true),
        p50_p99("spawn `sh -c true`", &spawn_sh_true),
        p50_p99("checkpoint alone (FolderTracker::scan)", &checkpoint),
    ];
    summary(&targets, &beside);
    Ok(json!({
        "files": gen.files,
        "text_bytes": gen.text_bytes,
        "calls_per_series": hp.calls,
        "warmup_calls": hp.warmup,
        "steps_recorded": steps.len(),
        "call_ms": dist(&call_direct),
        "call_sh_ms": dist(&call_shell),
        "pre_tool_use_ms": dist(&pre_ms),
        "post_tool_use_ms": dist(&post_ms),
        "spawn_true_ms": dist(&spawn_true),
        "spawn_sh_true_ms": dist(&spawn_sh_true),
        "checkpoint_alone_ms": dist(&checkpoint),
        "cpu_per_call_ms": {
            "owner": round(owner_cpu_ms, 2),
            "hook_processes": round(hooks_cpu_ms, 2),
            "how": "utime + stime from /proc (the owner's) and cutime + cstime of this process (the hook processes it reaped), over the timed calls, divided by their number (clock ticks: a sum over many calls)",
        },
        "checkpoint_alone_files_hashed": hashed,
        "setup": {
            "import_s": round(import_s, 2),
            "owner_start_ms": round(owner_start_ms, 1),
            "session_start_ms": round(session_start_ms, 1),
            "user_prompt_submit_ms": round(prompt_ms, 1),
            "stop_ms": round(stop, 1),
            "calls_s": round(calls_s, 1),
            "hook_command": command,
        },
        "how": "`elfiee mcp-server --elf DOC --editor E` owns the document (piped stdin, as Claude Code starts it); a call = the PreToolUse hook process (Edit payload on stdin), a few bytes appended to one file and two transcript lines, the PostToolUse hook process; wall of both processes, spawn to reaping; direct = `elfiee hook --elf DOC --editor E`, sh = `sh -c` with the command from .claude/settings.local.json, alternating; after the run `elfiee --json agent steps SESSION` must list one step per call naming its file",
        "targets": targets,
    }))
}
