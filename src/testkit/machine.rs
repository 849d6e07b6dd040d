//! The property runner: generated step sequences through the pure pipeline and the real sled
//! engine side by side, with close-and-reopen steps, every invariant checked, and a failure
//! shrunk to a minimal sequence.

use std::cell::Cell;
use std::fmt;
use std::ops::Range;
use std::path::Path;

use elfiee_capabilities::Registry;
use elfiee_engine::{Engine, EngineConfig, EngineError, FileHandle};
use elfiee_model::{Command, Event};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

use super::ops::{self, Op};
use super::pipeline::{Invariant, Pipeline, Violation, NODE_ID};

/// A property run over a registry: see the [module docs](super).
///
/// ```
/// use elfiee::capabilities::Registry;
/// use elfiee::testkit::Check;
///
/// let registry = Registry::builtin(); // with your capabilities registered
/// // A test suite's line is `Check::new(registry).assert()` (32 sequences of up to 60 steps);
/// // this example runs a few short ones, each through the pure pipeline and the sled engine.
/// let report = Check::new(registry).cases(3).steps(5..15).assert();
/// assert_eq!(report.cases, 3);
/// assert!(report.accepted > 0);
/// ```
pub struct Check {
    registry: Registry,
    older: Option<Registry>,
    ops: Vec<(u32, BoxedStrategy<Op>)>,
    extra_types: Vec<String>,
    grantable: Vec<String>,
    builtin_weight: u32,
    cases: u32,
    steps: Range<usize>,
    engine: bool,
    max_shrink_iters: u32,
}

/// What a passing run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Generated sequences run.
    pub cases: u32,
    /// Commands run, accepted or not.
    pub commands: u64,
    /// Commands that committed.
    pub accepted: u64,
    /// Commands refused (each checked to have written nothing).
    pub rejected: u64,
    /// Close-and-reopen steps ([`Op::Reopen`]).
    pub reopens: u64,
    /// Commands the older program committed ([`Op::Older`]).
    pub older: u64,
    /// Values run through the upcasters ([`super::check_upcasters`]).
    pub upcast_values: u64,
}

/// A broken invariant with the minimal step sequence proptest shrank the failing one to.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Which invariant broke, and how.
    pub violation: Violation,
    /// The minimal sequence's commands, placeholders resolved (as they ran), in order; a
    /// `None` is a close-and-reopen step.
    pub commands: Vec<Option<Command>>,
    /// The same sequence as generated.
    pub ops: Vec<Op>,
}

impl Failure {
    /// The invariant that broke.
    pub fn invariant(&self) -> Invariant {
        self.violation.invariant
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.violation)?;
        if self.ops.is_empty() {
            // Not from a sequence (the upcasters' check, before any).
            return Ok(());
        }
        writeln!(
            f,
            "minimal command sequence ({} steps, after the document's elf.init):",
            self.commands.len()
        )?;
        for (i, c) in self.commands.iter().enumerate() {
            let by = match self.ops.get(i) {
                Some(Op::Older(_)) => " (the older program)",
                _ => "",
            };
            match c {
                Some(c) => writeln!(
                    f,
                    "  {:>3}. {} {} on {} {}{by}",
                    i + 1,
                    c.editor_id,
                    c.cap_id,
                    c.block_id.as_deref().unwrap_or("*"),
                    c.payload
                )?,
                None => writeln!(f, "  {:>3}. (close and reopen)", i + 1)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

impl Check {
    /// A run over `registry` with the built-in steps ([`ops::builtin`]).
    pub fn new(registry: Registry) -> Check {
        Check {
            registry,
            older: None,
            ops: Vec::new(),
            extra_types: Vec::new(),
            grantable: Vec::new(),
            builtin_weight: 10,
            cases: 32,
            steps: 1..60,
            engine: true,
            max_shrink_iters: 512,
        }
    }

    /// Adds the embedder's steps, drawn with this weight beside the built-in steps (blocks,
    /// editors and grants weigh 10 by default, directories, terminals and agents half that).
    pub fn ops(mut self, weight: u32, strategy: impl Strategy<Value = Op> + 'static) -> Check {
        self.ops.push((weight, strategy.boxed()));
        self
    }

    /// Block types of the embedder's that the built-in steps should create too, and
    /// capability ids they should grant and revoke.
    pub fn block_types(mut self, types: &[&str], grantable: &[&str]) -> Check {
        self.extra_types.extend(types.iter().map(|t| t.to_string()));
        self.grantable
            .extend(grantable.iter().map(|t| t.to_string()));
        self
    }

    /// The registry of the program as it was before a payload changed shape (the kind at its
    /// old version, without the upcaster): [`Op::Older`] steps run their commands with it, so
    /// the log mixes old and new payload versions, and every invariant (live = replay =
    /// snapshot + tail, engine = pipeline) holds across them.
    pub fn older(mut self, registry: Registry) -> Check {
        self.older = Some(registry);
        self
    }

    /// How often the built-in steps are drawn (0: only the embedder's).
    pub fn builtin_weight(mut self, weight: u32) -> Check {
        self.builtin_weight = weight;
        self
    }

    /// Number of generated sequences (default 32).
    pub fn cases(mut self, cases: u32) -> Check {
        self.cases = cases;
        self
    }

    /// Length of each sequence (default 1..60).
    pub fn steps(mut self, steps: Range<usize>) -> Check {
        self.steps = steps;
        self
    }

    /// Whether the real sled engine runs beside the pure pipeline (default true). Without it
    /// a run is much faster and checks everything but [`Invariant::EngineEqualsPipeline`].
    pub fn engine(mut self, on: bool) -> Check {
        self.engine = on;
        self
    }

    /// Bound on proptest's shrinking steps (default 512).
    pub fn max_shrink_iters(mut self, n: u32) -> Check {
        self.max_shrink_iters = n;
        self
    }

    fn strategy(&self) -> BoxedStrategy<Vec<Op>> {
        let types: Vec<&str> = self.extra_types.iter().map(String::as_str).collect();
        let grantable: Vec<&str> = self.grantable.iter().map(String::as_str).collect();
        let mut arms: Vec<(u32, BoxedStrategy<Op>)> = Vec::new();
        if self.builtin_weight > 0 {
            arms.push((self.builtin_weight, ops::builtin(&types, &grantable)));
            arms.push((self.builtin_weight.div_ceil(2), ops::builtin_projects()));
        }
        arms.extend(self.ops.iter().cloned());
        let one = proptest::strategy::Union::new_weighted(arms).boxed();
        proptest::collection::vec(one, self.steps.clone()).boxed()
    }

    /// Runs the upcasters' check ([`super::check_upcasters`]), then the cases; the first broken
    /// invariant comes back shrunk.
    pub fn run(self) -> Result<Report, Failure> {
        let upcast_values =
            super::upcast::check_upcasters(&self.registry, UPCAST_CASES).map_err(|violation| {
                Failure {
                    violation,
                    commands: Vec::new(),
                    ops: Vec::new(),
                }
            })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime for the engine");
        let mut runner = TestRunner::new(Config {
            cases: self.cases,
            failure_persistence: None,
            max_shrink_iters: self.max_shrink_iters,
            ..Config::default()
        });
        let report = Cell::new(Report::default());
        let strategy = self.strategy();
        let result = runner.run(&strategy, |steps| {
            let mut stats = report.get();
            let outcome = rt.block_on(self.run_case(&steps, &mut stats));
            stats.cases += 1;
            report.set(stats);
            outcome
                .map(|_| ())
                .map_err(|(v, _)| TestCaseError::fail(v.to_string()))
        });
        match result {
            Ok(()) => {
                let mut r = report.get();
                r.cases = self.cases;
                r.upcast_values = upcast_values;
                Ok(r)
            }
            Err(TestError::Fail(reason, minimal)) => {
                // Run the minimal sequence again for its commands as they ran (a failure that
                // depends on chance, such as a hash map's order, may need a few tries), then
                // drop every step whose removal keeps the same invariant broken: proptest
                // shrinks a step into another kind of step after its removal pass, which can
                // leave steps that are not needed.
                let mut failing = None;
                let mut commands = Vec::new();
                for _ in 0..8 {
                    match rt.block_on(self.run_case(&minimal, &mut Report::default())) {
                        Err(found) => {
                            failing = Some(found);
                            break;
                        }
                        Ok(c) => commands = c,
                    }
                }
                let Some((mut violation, mut commands)) = failing else {
                    return Err(Failure {
                        violation: Violation::new(
                            Invariant::HandlerDeterministic,
                            format!("the sequence failed once ({reason}) and passed 8 times when run again: something outside the inputs decides the outcome"),
                        ),
                        commands,
                        ops: minimal,
                    });
                };
                let mut ops = minimal;
                let mut i = 0;
                while i < ops.len() && ops.len() > 1 {
                    let mut fewer = ops.clone();
                    fewer.remove(i);
                    match rt.block_on(self.run_case(&fewer, &mut Report::default())) {
                        Err((v, c)) if v.invariant == violation.invariant => {
                            ops = fewer;
                            violation = v;
                            commands = c;
                        }
                        _ => i += 1,
                    }
                }
                Err(Failure {
                    violation,
                    commands,
                    ops,
                })
            }
            Err(TestError::Abort(why)) => Err(Failure {
                violation: Violation::new(
                    Invariant::EngineEqualsPipeline,
                    format!("proptest gave up: {why}"),
                ),
                commands: Vec::new(),
                ops: Vec::new(),
            }),
        }
    }

    /// [`Check::run`], panicking with the failure's message (for a `#[test]`).
    pub fn assert(self) -> Report {
        match self.run() {
            Ok(r) => r,
            Err(f) => panic!("{f}"),
        }
    }

    /// One sequence. Returns the resolved commands; on a broken invariant, the violation and
    /// the commands up to it.
    async fn run_case(
        &self,
        steps: &[Op],
        stats: &mut Report,
    ) -> Result<Vec<Option<Command>>, (Violation, Vec<Option<Command>>)> {
        let mut p = Pipeline::new(self.registry.clone());
        let mut done: Vec<Option<Command>> = Vec::new();
        let dir = tempfile::tempdir().map_err(|e| (io_violation(e), Vec::new()))?;
        let path = dir.path().join("kit.elf");
        let engine = self.engine.then(|| engine_for(self.registry.clone(), &p));
        let older = self
            .older
            .as_ref()
            .filter(|_| self.engine)
            .map(|r| engine_for(r.clone(), &p));
        let mut file = None;
        // The document: the engine's elf.init, or the same command in the pipeline alone.
        let init = Command::new(
            "alice",
            "elf.init",
            None,
            serde_json::json!({"name": "Alice"}),
        );
        match &engine {
            Some(engine) => {
                let f = engine
                    .init_with_owner(&path, "Alice", "alice")
                    .await
                    .map_err(|e| (engine_violation(format!("init failed: {e}")), Vec::new()))?;
                let given = f.events(1).map_err(|e| {
                    (
                        engine_violation(format!("cannot read the log: {e}")),
                        Vec::new(),
                    )
                })?;
                p.commit(given).map_err(|v| (v, Vec::new()))?;
                file = Some(f);
            }
            None => {
                p.run(&init).map_err(|v| (v, Vec::new()))?.map_err(|e| {
                    (
                        engine_violation(format!("elf.init failed: {e}")),
                        Vec::new(),
                    )
                })?;
            }
        }
        let mut snapshots = Vec::new();
        let result = self
            .run_steps(
                steps,
                &mut p,
                (engine.as_ref(), older.as_ref()),
                &mut file,
                &path,
                &mut snapshots,
                &mut done,
                stats,
            )
            .await;
        let result = match result {
            Ok(()) => p.check_state(&snapshots),
            Err(v) => Err(v),
        };
        let result = match (result, &file) {
            (Ok(()), Some(f)) => match same_digest(f, &p, "at the end") {
                Ok(()) => final_engine_checks(f, &p).await,
                Err(v) => Err(v),
            },
            (r, _) => r,
        };
        if let Some(f) = file {
            f.close().await;
        }
        match result {
            Ok(()) => Ok(done),
            Err(v) => Err((v, done)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_steps(
        &self,
        steps: &[Op],
        p: &mut Pipeline,
        (engine, older): (Option<&Engine>, Option<&Engine>),
        file: &mut Option<FileHandle>,
        path: &Path,
        snapshots: &mut Vec<(u64, Vec<u8>)>,
        done: &mut Vec<Option<Command>>,
        stats: &mut Report,
    ) -> Result<(), Violation> {
        for op in steps {
            match op {
                Op::Reopen => {
                    done.push(None);
                    stats.reopens += 1;
                    snapshots.push(p.snapshot());
                    if let (Some(engine), Some(f)) = (engine, file.take()) {
                        f.close().await;
                        let f = engine
                            .open(path)
                            .await
                            .map_err(|e| engine_violation(format!("reopen failed: {e}")))?;
                        same_digest(&f, p, "after close and reopen (snapshot + tail)")?;
                        *file = Some(f);
                    }
                }
                Op::Older(c) => {
                    snapshots.push(p.snapshot());
                    self.run_older(c, p, (engine, older), file, path, done, stats)
                        .await?;
                }
                Op::Run(c) => {
                    let cmd = c.resolve(&p.state);
                    done.push(Some(cmd.clone()));
                    stats.commands += 1;
                    let pure = p.run(&cmd)?;
                    match &pure {
                        Ok(_) => stats.accepted += 1,
                        Err(_) => stats.rejected += 1,
                    }
                    if let Some(f) = file.as_ref() {
                        let before = f.last_seq();
                        let real = f.submit(cmd.clone()).await;
                        compare(&cmd, &pure, real, before, f)?;
                        // The events are equal (compared above, hashes included); the states
                        // are compared every few steps, after each reopen and at the end.
                        if stats.commands.is_multiple_of(8) {
                            same_digest(f, p, &format!("after '{}'", cmd.cap_id))?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// An [`Op::Older`] step: the older program's handler on the log as its folds see it,
    /// committed to the pure pipeline; in the engine, the document closed, opened by the older
    /// program (same state as its pipeline), the command committed there (same events), and
    /// the document opened again by this program (its snapshot plus the older events: the
    /// same state as the pipeline).
    #[allow(clippy::too_many_arguments)]
    async fn run_older(
        &self,
        c: &ops::OpCmd,
        p: &mut Pipeline,
        (engine, older): (Option<&Engine>, Option<&Engine>),
        file: &mut Option<FileHandle>,
        path: &Path,
        done: &mut Vec<Option<Command>>,
        stats: &mut Report,
    ) -> Result<(), Violation> {
        let registry = self
            .older
            .clone()
            .expect("an Op::Older step needs the older program's registry: Check::older(registry)");
        // The older program's view: the same log, folded by its folds.
        let mut old = Pipeline::new(registry);
        old.fixed = p.fixed;
        old.node_id = p.node_id.clone();
        old.commit(p.events.clone())?;
        let cmd = c.resolve(&old.state);
        done.push(Some(cmd.clone()));
        stats.commands += 1;
        let opened = match (older, file.take()) {
            (Some(older), Some(f)) => {
                f.close().await;
                let of = older.open(path).await.map_err(|e| {
                    engine_violation(format!("the older program cannot open it: {e}"))
                })?;
                if let Err(v) = same_digest(&of, &old, "in the older program, once opened") {
                    of.close().await;
                    return Err(v);
                }
                Some(of)
            }
            _ => None,
        };
        let pure = old.run(&cmd);
        if let (Ok(pure), Some(of)) = (&pure, opened.as_ref()) {
            let before = of.last_seq();
            let real = of.submit(cmd.clone()).await;
            let compared = compare(&cmd, pure, real, before, of);
            if compared.is_err() {
                of.close().await;
                compared?;
            }
        }
        if let Some(of) = opened {
            of.close().await;
        }
        match pure? {
            Ok(events) => {
                stats.accepted += 1;
                stats.older += 1;
                p.content.append(&mut old.content);
                p.commit(events)?;
            }
            Err(_) => stats.rejected += 1,
        }
        if let Some(engine) = engine.filter(|_| older.is_some()) {
            let f = engine.open(path).await.map_err(|e| {
                engine_violation(format!("reopen after the older program failed: {e}"))
            })?;
            same_digest(
                &f,
                p,
                "after the older program wrote (snapshot + its events)",
            )?;
            *file = Some(f);
        }
        Ok(())
    }
}

/// Values each kind's upcasters are run on by [`Check::run`].
const UPCAST_CASES: u32 = 256;

/// An engine over `registry` that commits what the pipeline `p` commits (its fixed time, ids
/// and node), snapshotting often and at every close.
fn engine_for(registry: Registry, p: &Pipeline) -> Engine {
    Engine::new(EngineConfig {
        registry,
        fixed_ctx: Some(p.fixed),
        node_id: NODE_ID.into(),
        snapshot_every: 16,
        snapshot_at_close_after: 1,
        ..EngineConfig::default()
    })
}

fn compare(
    cmd: &Command,
    pure: &Result<Vec<Event>, elfiee_model::CapError>,
    real: Result<Vec<Event>, EngineError>,
    before: u64,
    f: &FileHandle,
) -> Result<(), Violation> {
    match (pure, real) {
        (Ok(a), Ok(b)) => {
            if a.len() != b.len() {
                return Err(engine_violation(format!(
                    "'{}' committed {} events in the engine and {} in the pure pipeline",
                    cmd.cap_id,
                    b.len(),
                    a.len()
                )));
            }
            for (x, y) in a.iter().zip(&b) {
                if x != y {
                    return Err(engine_violation(format!(
                        "'{}': event {} differs\n  pipeline: {}\n  engine:   {}",
                        cmd.cap_id,
                        x.seq,
                        serde_json::to_string(x).unwrap_or_default(),
                        serde_json::to_string(y).unwrap_or_default()
                    )));
                }
            }
            Ok(())
        }
        (Err(_), Err(EngineError::Rejected(_))) => {
            if f.last_seq() != before {
                return Err(Violation::new(
                    Invariant::RejectedWritesNothing,
                    format!(
                        "the engine rejected '{}' but its log moved from seq {before} to {}",
                        cmd.cap_id,
                        f.last_seq()
                    ),
                ));
            }
            Ok(())
        }
        (Ok(_), Err(e)) => Err(engine_violation(format!(
            "the pure pipeline accepted '{}' and the engine refused it: {e}",
            cmd.cap_id
        ))),
        (Err(e), Ok(_)) => Err(engine_violation(format!(
            "the pure pipeline rejected '{}' ({e}) and the engine committed it",
            cmd.cap_id
        ))),
        (Err(_), Err(e)) => Err(engine_violation(format!(
            "the engine failed on '{}' for another reason than a rejection: {e}",
            cmd.cap_id
        ))),
    }
}

fn same_digest(f: &FileHandle, p: &Pipeline, when: &str) -> Result<(), Violation> {
    let (real, pure) = (f.state_digest(), p.state.digest());
    if real != pure {
        return Err(engine_violation(format!(
            "the engine's state differs from the pure pipeline's {when} (digest {} vs {}){}",
            &real[..12],
            &pure[..12],
            super::pipeline::first_difference(&p.state, &f.state())
        )));
    }
    Ok(())
}

async fn final_engine_checks(f: &FileHandle, p: &Pipeline) -> Result<(), Violation> {
    let (report, _) = f
        .replay()
        .await
        .map_err(|e| engine_violation(format!("replay failed: {e}")))?;
    if report.state_digest != p.state.digest() {
        return Err(Violation::new(
            Invariant::ReplayEqualsLive,
            "the engine's replay of its log gives another state than the live one",
        ));
    }
    let verified = f
        .verify()
        .await
        .map_err(|e| engine_violation(format!("verify failed: {e}")))?;
    if !verified.ok {
        return Err(engine_violation(format!(
            "verify found problems: {}",
            verified.problems.join("; ")
        )));
    }
    Ok(())
}

fn engine_violation(detail: impl Into<String>) -> Violation {
    Violation::new(Invariant::EngineEqualsPipeline, detail)
}

fn io_violation(e: std::io::Error) -> Violation {
    engine_violation(format!("cannot make a temporary folder: {e}"))
}
