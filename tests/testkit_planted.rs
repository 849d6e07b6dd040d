//! The test kit catches planted bugs: each test registers a deliberately broken handler or
//! fold next to the built-ins and asserts that a property run fails naming the broken
//! invariant, with the failing sequence shrunk to a minimal one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use elfiee::capabilities::{Capability, Registry, Target};
use elfiee::model::{CapError, Command, Ctx, Event, EventDraft};
use elfiee::projections::{update_block, Fold, Folded, State};
use elfiee::testkit::{Check, Failure, Invariant, Kit, Op, OpCmd};
use proptest::prelude::*;
use serde_json::{json, Value};

type Handler = fn(&Command, &State, &Ctx) -> Result<Vec<EventDraft>, CapError>;
type FoldFn = fn(&mut State, &Event) -> Folded;

/// A capability on blocks of type `planted`, made of a handler and a fold.
struct Planted {
    id: &'static str,
    handle: Handler,
    fold: FoldFn,
}

impl Capability for Planted {
    fn id(&self) -> &'static str {
        self.id
    }
    fn target(&self) -> Target {
        Target::Block(Some("planted"))
    }
    fn handle(&self, cmd: &Command, state: &State, ctx: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        (self.handle)(cmd, state, ctx)
    }
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(self.fold))
    }
}

fn registry_with(cap: Planted) -> Registry {
    let mut r = Registry::builtin();
    r.register(Arc::new(cap));
    r
}

/// The value as it came, on the command's block.
fn echo(cmd: &Command, _: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
    Ok(vec![EventDraft::new(
        cmd.block_id.clone().unwrap_or_default(),
        &cmd.cap_id,
        cmd.payload.clone(),
    )])
}

/// Keeps the event's value under `contents.last`.
fn keep_last(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| b.contents = json!({"last": v}))
}

/// Built-in steps (which create `planted` blocks too) and `step` on a planted block.
fn run(registry: Registry, step: BoxedStrategy<Value>, cap: &'static str, engine: bool) -> Failure {
    let planted = (0usize..4, step).prop_map(move |(n, payload)| -> Op {
        OpCmd::new(cap, payload)
            .on(format!("$block:planted:{n}"))
            .into()
    });
    let failure = Check::new(registry)
        .block_types(&["planted"], &[cap])
        .builtin_weight(3)
        .ops(6, planted)
        .cases(64)
        .steps(1..30)
        .engine(engine)
        .run()
        .expect_err("the planted bug must be found");
    eprintln!("{failure}");
    failure
}

fn assert_named_and_shrunk(failure: &Failure, invariant: Invariant, cap: &str) {
    assert_eq!(failure.invariant(), invariant, "{failure}");
    let text = failure.to_string();
    assert!(
        text.contains(&format!("invariant `{}` broken", invariant.name())),
        "{text}"
    );
    assert!(text.contains("minimal command sequence"), "{text}");
    // Shrunk: the planted block's creation and the one command that breaks it.
    let cmds: Vec<&Command> = failure.commands.iter().flatten().collect();
    assert_eq!(cmds.len(), 2, "not shrunk to a minimal sequence:\n{text}");
    assert_eq!(cmds[0].cap_id, "core.create", "{text}");
    assert_eq!(cmds[1].cap_id, cap, "{text}");
    assert!(
        !failure.commands.iter().any(Option::is_none),
        "a reopen step left in:\n{text}"
    );
}

static STAMPS: AtomicU64 = AtomicU64::new(0);

/// Output that depends on something other than the inputs: a counter in a static.
fn stamp(cmd: &Command, _: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
    let n = STAMPS.fetch_add(1, Ordering::Relaxed);
    Ok(vec![EventDraft::new(
        cmd.block_id.clone().unwrap_or_default(),
        "stamp.add",
        json!({"stamp": n}),
    )])
}

#[test]
fn a_handler_with_a_counter_in_a_static_breaks_handler_determinism() {
    let registry = || {
        registry_with(Planted {
            id: "stamp.add",
            handle: stamp,
            fold: keep_last,
        })
    };
    let failure = run(registry(), Just(json!({})).boxed(), "stamp.add", true);
    assert_named_and_shrunk(&failure, Invariant::HandlerDeterministic, "stamp.add");
    // given/when/then finds it on the first command.
    let mut kit = Kit::new(registry());
    kit.given_owner("alice");
    let b = kit.given(Command::new(
        "alice",
        "core.create",
        None,
        json!({"name": "p", "block_type": "planted"}),
    ))[0]
        .entity
        .clone();
    let v = kit
        .try_when(Command::new("alice", "stamp.add", Some(&b), json!({})))
        .err()
        .expect("the counter is caught");
    assert_eq!(v.invariant, Invariant::HandlerDeterministic);
}

/// A progress ratio kept as a float: many such floats do not read back exactly from JSON.
fn progress(cmd: &Command, _: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
    let get = |k: &str| cmd.payload.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (done, total) = (get("done"), get("total").max(1));
    Ok(vec![EventDraft::new(
        cmd.block_id.clone().unwrap_or_default(),
        "progress.set",
        json!({"ratio": done as f64 / total as f64}),
    )])
}

#[test]
fn events_that_do_not_survive_the_json_round_trip_are_caught() {
    let registry = registry_with(Planted {
        id: "progress.set",
        handle: progress,
        fold: keep_last,
    });
    // About one pair in thirteen of these ratios does not read back exactly. A run only has
    // a few dozen accepted `progress.set` commands, so drawing pairs uniformly missed the bug
    // in roughly one run in ten (seen in CI). Three draws in four come from the pairs that
    // do not round-trip, found here by the same serde_json round trip the kit performs.
    let pair = |(done, total): (u64, u64)| json!({"done": done, "total": total});
    let lossy: Vec<(u64, u64)> = (0u64..50)
        .flat_map(|done| (1u64..50).map(move |total| (done, total)))
        .filter(|&(done, total)| {
            let v = json!({"ratio": done as f64 / total as f64});
            serde_json::from_str::<Value>(&v.to_string()).ok() != Some(v)
        })
        .collect();
    assert!(
        !lossy.is_empty(),
        "serde_json now reads every ratio back exactly"
    );
    let step = prop_oneof![
        3 => proptest::sample::select(lossy).prop_map(pair),
        1 => (0u64..50, 1u64..50).prop_map(pair),
    ]
    .boxed();
    let failure = run(registry, step, "progress.set", false);
    assert_named_and_shrunk(&failure, Invariant::JsonRoundTrip, "progress.set");
    assert!(failure.to_string().contains("ratio"), "{failure}");
}

/// A fold that trusts its value: `n` must be a non-negative number, or it panics.
fn tally(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        let n = v["n"].as_u64().expect("n is a count");
        let total = b.contents.get("total").and_then(Value::as_u64).unwrap_or(0);
        b.contents = json!({"total": total + n});
    })
}

#[test]
fn a_fold_that_panics_on_some_value_is_caught() {
    let registry = registry_with(Planted {
        id: "tally.add",
        handle: echo,
        fold: tally,
    });
    let step = (-5i64..20).prop_map(|n| json!({"n": n})).boxed();
    let failure = run(registry, step, "tally.add", false);
    assert_named_and_shrunk(&failure, Invariant::FoldNeverPanics, "tally.add");
    let cmds: Vec<&Command> = failure.commands.iter().flatten().collect();
    assert_eq!(
        cmds[1].payload,
        json!({"n": -1}),
        "shrunk to the smallest bad value:\n{failure}"
    );
}

/// A fold whose result follows a hash map's iteration order.
fn tags(state: &mut State, event: &Event) -> Folded {
    update_block(state, event, |b, v| {
        let set: HashMap<String, bool> = v
            .get("tags")
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, x)| (k.clone(), x.as_bool().unwrap_or(false)))
                    .collect()
            })
            .unwrap_or_default();
        let order: Vec<&String> = set.keys().collect();
        b.contents = json!({"tags": order});
    })
}

#[test]
fn a_fold_that_depends_on_map_iteration_order_is_caught() {
    let registry = registry_with(Planted {
        id: "tags.set",
        handle: echo,
        fold: tags,
    });
    let step = proptest::collection::btree_map("[a-z]{1,3}", any::<bool>(), 0..6)
        .prop_map(|m| json!({"tags": m}))
        .boxed();
    let failure = run(registry, step, "tags.set", false);
    assert_named_and_shrunk(&failure, Invariant::FoldDeterministic, "tags.set");
}
