//! The effect runtime as a host sees it: effects run concurrently (ordered per key), failed
//! runs are retried and end as failed outcomes, failed effect actors are restarted by the file
//! actor, and every outcome is recorded exactly once.

mod llm_support;
mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use elfiee_adapters::effects::{
    attach_effects, effect_cmd_id, BoxFuture, Effect, EffectCx, EffectSet, FailedOutcome,
    RuntimeConfig,
};
use elfiee_adapters::service::{invoke_agent, run_terminal};
use elfiee_adapters::{attach, builtin_effects, EffectsConfig, EffectsHandle};
use elfiee_engine::{ChildState, Engine, EngineError, FileHandle, RestartPolicy};
use elfiee_model::Event;
use llm_support::{answer_stream, MockServer, Reply};
use serde_json::json;

async fn doc() -> (tempfile::TempDir, Engine, FileHandle) {
    let d = support::fresh_doc("fx", "fx.elf").await;
    (d.dir, d.engine, d.file)
}

/// A terminal block named `name`; its id.
async fn terminal(file: &FileHandle, name: &str) -> String {
    support::alice(file, "terminal.create", None, json!({ "name": name })).await[0]
        .entity
        .clone()
}

async fn create(file: &FileHandle, id: &str, block_type: &str) {
    support::alice(
        file,
        "core.create",
        None,
        json!({"name": id, "block_type": block_type, "block_id": id}),
    )
    .await;
}

/// Two agents' calls to a provider that answers after 4 s run at once: the second request
/// reaches the provider while the first is still waiting, and both end in less than the 8 s
/// that one after the other takes at the least (the bounds do not depend on how loaded the
/// machine is: in turn, they cannot be met).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_invokes_of_two_agents_against_a_slow_provider_overlap() {
    std::env::set_var("ELFIEE_FX_TEST_KEY", "sk-fx");
    let mut slow = Reply::sse(&answer_stream("no changes needed"), 64);
    slow.stall = Duration::from_secs(4);
    let server = MockServer::start(vec![slow]).await;
    let (_tmp, _engine, file) = doc().await;
    let fx = attach(&file, EffectsConfig::default()).await.unwrap();
    let mut agents = Vec::new();
    for name in ["first", "second"] {
        let (agent, _) = support::create_agent(&file, "alice", name).await;
        support::alice(&file, "agent.configure", Some(&agent), json!({"base_url": server.base_url, "api_key_env": "ELFIEE_FX_TEST_KEY", "model": "claude-test"})).await;
        agents.push(agent);
    }
    let started = Instant::now();
    let (a, b) = tokio::join!(
        invoke_agent(&file, "alice", &agents[0], "look", &[], |_| {}),
        invoke_agent(&file, "alice", &agents[1], "look", &[], |_| {}),
    );
    let took = started.elapsed();
    assert_eq!(a.unwrap()["status"], "pending");
    assert_eq!(b.unwrap()["status"], "pending");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let apart = reqs[1].at.duration_since(reqs[0].at);
    assert!(
        apart < Duration::from_secs(4),
        "the second call started {apart:?} after the first: the calls did not overlap"
    );
    assert!(
        took < Duration::from_secs(8),
        "two 4 s calls took {took:?} together: they ran in turn"
    );
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    file.close().await;
}

/// `(label, start ns, end ns)` lines a shell command appended to `log`.
fn spans(log: &std::path::Path) -> HashMap<String, (u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut out: HashMap<String, (u128, u128)> = HashMap::new();
    for line in text.lines() {
        let mut p = line.split_whitespace();
        let (what, label, at) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap());
        let at: u128 = at.parse().unwrap();
        let e = out.entry(label.to_owned()).or_default();
        if what == "begin" {
            e.0 = at;
        } else {
            e.1 = at;
        }
    }
    out
}

fn timed(log: &std::path::Path, label: &str, secs: &str) -> String {
    let log = log.display();
    format!("echo begin {label} $(date +%s%N) >> '{log}'; sleep {secs}; echo end {label} $(date +%s%N) >> '{log}'")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_two_terminals_overlap_and_runs_of_one_terminal_stay_in_order() {
    let (tmp, _engine, file) = doc().await;
    let fx = attach(&file, EffectsConfig::default()).await.unwrap();
    let (t1, t2) = (terminal(&file, "t1").await, terminal(&file, "t2").await);
    let log = tmp.path().join("runs.log");

    // Two terminals at once: their runs overlap.
    let (ca, cb) = (timed(&log, "a", "3"), timed(&log, "b", "3"));
    let (a, b) = tokio::join!(
        run_terminal(&file, "alice", &t1, &ca, Some(20)),
        run_terminal(&file, "alice", &t2, &cb, Some(20)),
    );
    assert_eq!(a.unwrap()["exit_code"], 0);
    assert_eq!(b.unwrap()["exit_code"], 0);
    let s = spans(&log);
    let (a, b) = (s["a"], s["b"]);
    assert!(
        a.0 < b.1 && b.0 < a.1,
        "runs of two terminals did not overlap: {a:?} {b:?}"
    );

    // Three runs on one terminal, submitted together: one at a time, in seq order.
    std::fs::remove_file(&log).unwrap();
    let mut triggers = Vec::new();
    for label in ["x", "y", "z"] {
        let ev = support::alice(
            &file,
            "terminal.execute",
            Some(&t1),
            json!({"command": timed(&log, label, "0.2"), "timeout_secs": 20}),
        )
        .await;
        triggers.push(ev[0].clone());
    }
    for t in &triggers {
        elfiee_adapters::effects::wait_for_outcome(&file, "terminal", t, Duration::from_secs(20))
            .await
            .unwrap();
    }
    let s = spans(&log);
    let (x, y, z) = (s["x"], s["y"], s["z"]);
    assert!(
        x.1 <= y.0 && y.1 <= z.0,
        "runs of one terminal overlapped or changed order: {x:?} {y:?} {z:?}"
    );
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    file.close().await;
}

/// A test effect on `markdown.write`: panics on the first `panics` attempts of each trigger
/// whose text is `"flaky"` (every attempt when the text is `"always"`), then records a
/// `core.create` of block `out-<seq>`. Its failed outcome creates `failed-<seq>`.
struct Flaky {
    attempts: Mutex<HashMap<u64, u32>>,
    panics: u32,
    /// Panic in `wants` once (the effect actor fails and is restarted).
    wants_panics_once: AtomicBool,
    /// The `why` of every failed outcome.
    failures: Mutex<Vec<String>>,
}

impl Flaky {
    fn new(panics: u32) -> Arc<Flaky> {
        Arc::new(Flaky {
            attempts: Mutex::default(),
            panics,
            wants_panics_once: AtomicBool::new(false),
            failures: Mutex::default(),
        })
    }
    fn attempts(&self, seq: u64) -> u32 {
        self.attempts
            .lock()
            .unwrap()
            .get(&seq)
            .copied()
            .unwrap_or(0)
    }
}

fn text(e: &Event) -> &str {
    e.value
        .get("contents")
        .and_then(|c| c.get("markdown"))
        .and_then(|v| v.as_str())
        .unwrap_or_default()
}

impl Effect for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn wants(&self, e: &Event) -> bool {
        if e.cap_id() == "markdown.write" && self.wants_panics_once.swap(false, Ordering::SeqCst) {
            panic!("wants exploded");
        }
        e.cap_id() == "markdown.write"
    }
    fn run<'a>(&'a self, cx: &'a EffectCx, e: &'a Event) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let n = {
                let mut a = self.attempts.lock().unwrap();
                let n = a.entry(e.seq).or_insert(0);
                *n += 1;
                *n
            };
            if text(e) == "always" || (text(e) == "flaky" && n <= self.panics) {
                panic!("attempt {n} of trigger {} exploded", e.seq);
            }
            let id = format!("out-{}", e.seq);
            cx.record(
                e,
                "outcome",
                "core.create",
                "*",
                json!({"name": id, "block_type": "markdown", "block_id": id}),
            )
            .await?;
            Ok(())
        })
    }
    fn failed_outcome(&self, e: &Event, why: &str) -> FailedOutcome {
        self.failures.lock().unwrap().push(why.to_owned());
        let id = format!("failed-{}", e.seq);
        FailedOutcome {
            cap_id: "core.create",
            block_id: "*".into(),
            payload: json!({"name": id, "block_type": "markdown", "block_id": id}),
        }
    }
}

struct Shared(Arc<Flaky>);

impl Effect for Shared {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn wants(&self, e: &Event) -> bool {
        self.0.wants(e)
    }
    fn run<'a>(&'a self, cx: &'a EffectCx, e: &'a Event) -> BoxFuture<'a, Result<(), EngineError>> {
        self.0.run(cx, e)
    }
    fn failed_outcome(&self, e: &Event, why: &str) -> FailedOutcome {
        self.0.failed_outcome(e, why)
    }
}

fn runtime(backoff_ms: u64) -> RuntimeConfig {
    RuntimeConfig {
        retry_backoff: Duration::from_millis(backoff_ms),
        restart: RestartPolicy {
            backoff: Duration::from_millis(20),
            ..RestartPolicy::default()
        },
        ..RuntimeConfig::default()
    }
}

/// The built-in effects plus `flaky`.
/// The built-in effects and `flaky` attached to `file`, retrying after `backoff_ms`.
async fn attach_flaky(file: &FileHandle, flaky: &Arc<Flaky>, backoff_ms: u64) -> EffectsHandle {
    attach_effects(file, runtime(backoff_ms), with_flaky(flaky))
        .await
        .unwrap()
}

fn with_flaky(flaky: &Arc<Flaky>) -> EffectSet {
    let mut set = builtin_effects(&EffectsConfig::default());
    set.register(Shared(flaky.clone()));
    set
}

async fn write(file: &FileHandle, block: &str, text: &str) -> Event {
    support::alice(
        file,
        "markdown.write",
        Some(block),
        json!({"markdown": text}),
    )
    .await
    .remove(0)
}

fn outcomes(file: &FileHandle, trigger: &Event) -> usize {
    let id = effect_cmd_id("flaky", trigger, "outcome");
    file.events(1)
        .unwrap()
        .iter()
        .filter(|e| e.cmd_id == id)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_panics_twice_is_retried_records_once_and_other_effects_keep_working() {
    let (_tmp, _engine, file) = doc().await;
    create(&file, "note", "markdown").await;
    let t = terminal(&file, "t").await;
    let flaky = Flaky::new(2);
    let fx = attach_flaky(&file, &flaky, 400).await;
    let trigger = write(&file, "note", "flaky").await;
    // While `flaky` waits for its retries (0.4 s, then 0.8 s), the terminal effect works.
    let out = run_terminal(&file, "alice", &t, "echo meanwhile", Some(10))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "meanwhile\n");
    assert!(
        file.block(&format!("out-{}", trigger.seq)).is_none(),
        "the terminal run finished while the flaky trigger was still backing off"
    );
    let done = elfiee_adapters::effects::wait_for_outcome(
        &file,
        "flaky",
        &trigger,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(done[0].entity, format!("out-{}", trigger.seq));
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    assert_eq!(flaky.attempts(trigger.seq), 3, "two panics, then success");
    assert_eq!(outcomes(&file, &trigger), 1, "the outcome is recorded once");
    let status = fx.status();
    let st = status.iter().find(|s| s.name == "flaky").unwrap();
    assert_eq!(st.retries, 2, "{st:?}");
    assert!(st.failed_triggers.is_empty(), "{st:?}");
    assert!(
        st.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("exploded"),
        "{st:?}"
    );
    file.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_that_always_panics_ends_as_a_failed_outcome_and_the_effect_goes_on() {
    let (_tmp, _engine, file) = doc().await;
    create(&file, "note", "markdown").await;
    let flaky = Flaky::new(0);
    let fx = attach_flaky(&file, &flaky, 10).await;
    let bad = write(&file, "note", "always").await;
    let good = write(&file, "note", "fine").await;
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    assert_eq!(flaky.attempts(bad.seq), 3, "max_attempts runs, no more");
    assert!(
        file.block(&format!("failed-{}", bad.seq)).is_some(),
        "the failed outcome is recorded"
    );
    let why = flaky.failures.lock().unwrap().clone();
    assert_eq!(why.len(), 1);
    assert!(
        why[0].contains("failed 3 times") && why[0].contains("exploded"),
        "{why:?}"
    );
    assert_eq!(outcomes(&file, &bad), 1);
    assert!(
        file.block(&format!("out-{}", good.seq)).is_some(),
        "the next trigger was handled"
    );
    let status = fx.status();
    let st = status.iter().find(|s| s.name == "flaky").unwrap();
    assert_eq!(st.failed_triggers, vec![bad.seq], "{st:?}");
    assert_eq!(st.checkpoint, file.last_seq(), "{st:?}");
    file.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_effect_actor_is_restarted_from_its_checkpoint_and_the_host_sees_it() {
    let (_tmp, engine, file) = doc().await;
    create(&file, "note", "markdown").await;
    let flaky = Flaky::new(0);
    flaky.wants_panics_once.store(true, Ordering::SeqCst);
    let fx = attach_flaky(&file, &flaky, 10).await;
    let trigger = write(&file, "note", "fine").await;
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    assert_eq!(outcomes(&file, &trigger), 1);
    assert_eq!(flaky.attempts(trigger.seq), 1);
    let st = fx.status();
    let st = st.iter().find(|s| s.name == "flaky").unwrap();
    assert_eq!(st.starts, 2, "{st:?}");
    let children = file.children().await;
    let child = children.iter().find(|c| c.name == "effect:flaky").unwrap();
    assert_eq!(child.restarts, 1, "{child:?}");
    assert_eq!(child.state, ChildState::Running, "{child:?}");
    assert!(
        child
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("wants exploded"),
        "{child:?}"
    );
    // The engine supervisor reports the same through the host's engine.
    let files = engine.status().await;
    assert_eq!(files.len(), 1);
    assert!(files[0]
        .children
        .iter()
        .any(|c| c.name == "effect:flaky" && c.restarts == 1));
    assert!(files[0]
        .children
        .iter()
        .any(|c| c.name == "effect:terminal"));
    file.close().await;
    assert!(
        engine.status().await.is_empty(),
        "a closed file is forgotten"
    );
}

/// Effects stay exactly-once across a close in the middle of retries: the reopened file's
/// effect picks the trigger up from its checkpoint and records it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_interrupted_by_close_is_finished_once_after_reopen() {
    let (tmp, engine, file) = doc().await;
    create(&file, "note", "markdown").await;
    let flaky = Flaky::new(1);
    let _fx = attach_flaky(&file, &flaky, 5_000).await;
    let trigger = write(&file, "note", "flaky").await;
    // First attempt panics; the retry is 5 s away when the file closes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while flaky.attempts(trigger.seq) < 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    file.close().await;
    let file = engine.open(tmp.path().join("fx.elf")).await.unwrap();
    let fx = attach_flaky(&file, &flaky, 10).await;
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    assert_eq!(outcomes(&file, &trigger), 1);
    assert_eq!(flaky.attempts(trigger.seq), 2);
    file.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_refuse_to_attach_twice_and_on_a_closed_file() {
    let (_tmp, _engine, file) = doc().await;
    let _fx = attach(&file, EffectsConfig::default()).await.unwrap();
    let again = attach(&file, EffectsConfig::default()).await;
    assert!(
        matches!(&again, Err(EngineError::Effect(m)) if m.contains("already supervised")),
        "{:?}",
        again.err()
    );
    file.close().await;
    let closed = attach(&file, EffectsConfig::default()).await;
    assert!(closed.is_err());
}

/// Effects skip another device's events by the origin that comes with each committed event:
/// with sync off, reading the events (the backlog from the log, then live) costs no storage
/// read per event to learn where it came from; a foreign event is never run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_learn_an_events_origin_without_a_storage_read_per_event() {
    let (_tmp, _engine, file) = doc().await;
    create(&file, "note", "markdown").await;
    // A backlog the effect catches up on from the log, then live events.
    let mut triggers = Vec::new();
    for i in 0..20 {
        triggers.push(write(&file, "note", &format!("before {i}")).await);
    }
    let reads = file.side_reads().expect("this process owns the file");
    let flaky = Flaky::new(0);
    let fx = attach_effects(&file, runtime(50), with_flaky(&flaky))
        .await
        .unwrap();
    for i in 0..20 {
        triggers.push(write(&file, "note", &format!("after {i}")).await);
    }
    for t in &triggers {
        elfiee_adapters::effects::wait_for_outcome(&file, "flaky", t, Duration::from_secs(10))
            .await
            .unwrap();
    }
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    let read = file.side_reads().unwrap() - reads;
    // The effects (five of them) caught up from the log once each at most (the backlog),
    // with one read of each of the three places origins are kept, whatever the number of
    // events; never one read per event, also not for a live event whose commit is still
    // being sent when the effect asks for the next one (before session 20 such an event was
    // read from the log: 17–41 reads on a loaded machine).
    assert!(
        read <= 5 * 3,
        "{read} side-record reads for {} wanted events",
        triggers.len()
    );

    // Another device's write of the same kind: appended through the foreign seam, seen by
    // the effect's `wants`, never run.
    let mut foreign = triggers[0].clone();
    foreign.value = json!({"contents": {"markdown": "from elsewhere"}});
    let appended = file
        .foreign_log()
        .unwrap()
        .append(vec![(foreign, b"origin".to_vec())], Vec::new())
        .await
        .unwrap();
    let after = write(&file, "note", "after the foreign one").await;
    elfiee_adapters::effects::wait_for_outcome(&file, "flaky", &after, Duration::from_secs(10))
        .await
        .unwrap();
    fx.settle(&file, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        flaky.attempts(appended[0].seq),
        0,
        "a foreign event is not run"
    );
    assert_eq!(flaky.attempts(after.seq), 1);
    file.close().await;
}
