//! The upcasters' check: every kind's chain of upcasters (`Registry::register_upcast`), on
//! generated JSON values of every payload version, is total (never panics), deterministic
//! (equal values give equal results, every time), and idempotent (the value it gives reads as
//! current: upcast again, it stays as it is).

use elfiee_capabilities::Registry;
use elfiee_projections::{Folds, UpcastError};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{json, Map, Value};

use super::pipeline::{Invariant, Violation};

/// Runs every kind's upcasters on `cases` generated values each (objects of every version the
/// kind had, with keys an upcaster is likely to read, and some values of no shape at all);
/// the first broken invariant comes back with the smallest value proptest shrank it to.
/// Returns how many values were checked. [`super::Check::run`] does this first, without being
/// asked.
///
/// ```
/// use elfiee::capabilities::Registry;
/// use serde_json::Value;
///
/// let mut registry = Registry::builtin();
/// // Version 2 of `todo.add` has a due date. (This one panics on a value that is not an
/// // object: `value["due"] = …` on a number or a string.)
/// registry.register_upcast("todo.add", 1, |mut v: Value| {
///     v["due"] = Value::Null;
///     v
/// });
/// let broken = elfiee::testkit::check_upcasters(&registry, 256).unwrap_err();
/// assert_eq!(broken.invariant, elfiee::testkit::Invariant::UpcastNeverPanics);
/// ```
pub fn check_upcasters(registry: &Registry, cases: u32) -> Result<u64, Violation> {
    let folds = registry.folds();
    let mut checked = 0;
    for (kind, current) in folds.versioned_kinds() {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&payload(current), |value| {
            check_value(folds, kind, &value).map_err(|v| TestCaseError::fail(v.to_string()))
        });
        match result {
            Ok(()) => checked += u64::from(cases),
            Err(TestError::Fail(_, minimal)) => {
                return Err(check_value(folds, kind, &minimal).err().unwrap_or_else(|| {
                    Violation::new(
                        Invariant::UpcastDeterministic,
                        format!(
                            "the upcasters of '{kind}' failed on a value once and passed on it again: {minimal}"
                        ),
                    )
                }))
            }
            Err(TestError::Abort(why)) => {
                return Err(Violation::new(
                    Invariant::UpcastNeverPanics,
                    format!("proptest gave up on the upcasters of '{kind}': {why}"),
                ))
            }
        }
    }
    Ok(checked)
}

/// One value through `kind`'s chain: no panic, the same result four times, and the result
/// upcast again is itself.
fn check_value(folds: &Folds, kind: &str, value: &Value) -> Result<(), Violation> {
    let first = upcast(folds, kind, value)?;
    for _ in 0..3 {
        let again = upcast(folds, kind, &value.clone())?;
        if again != first {
            return Err(Violation::new(
                Invariant::UpcastDeterministic,
                format!(
                    "the upcasters of '{kind}' gave different results for the same value {value}:\n  first: {}\n  then:  {}",
                    text(&first),
                    text(&again)
                ),
            ));
        }
    }
    if let Ok(out) = &first {
        let again = upcast(folds, kind, out)?;
        if again.as_ref() != Ok(out) {
            return Err(Violation::new(
                Invariant::UpcastIdempotent,
                format!(
                    "the upcasters of '{kind}' turned {value} into {out}, which does not read as current (upcast again: {}); give an object (it carries \"$v\") or the value as it was",
                    text(&again)
                ),
            ));
        }
    }
    Ok(())
}

/// The chain's result; a panic is the violation.
fn upcast(
    folds: &Folds,
    kind: &str,
    value: &Value,
) -> Result<Result<Value, UpcastError>, Violation> {
    match folds.upcast(kind, value) {
        Ok(v) => Ok(Ok(v.into_owned())),
        Err(UpcastError::Panicked { from, message }) => Err(Violation::new(
            Invariant::UpcastNeverPanics,
            format!(
                "the upcaster of '{kind}' from version {from} panicked ({message}); value: {value}"
            ),
        )),
        Err(other) => Ok(Err(other)),
    }
}

fn text(r: &Result<Value, UpcastError>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

/// A value an event of a kind at version `current` may hold: mostly an object of an older
/// version (the ones the chain runs on), sometimes of the current, a newer or a malformed
/// one, and now and then no object at all.
fn payload(current: u32) -> BoxedStrategy<Value> {
    let version = prop_oneof![
        6 => (1..=current).prop_map(|v| if v == 1 { None } else { Some(json!(v)) }),
        2 => Just(Some(json!(1))),
        1 => Just(Some(json!(current + 1))),
        1 => prop_oneof![Just(json!(0)), Just(json!("2")), Just(json!(1.5)), Just(Value::Null)].prop_map(Some),
    ];
    prop_oneof![
        8 => (proptest::collection::btree_map(key(), json_value(), 0..5), version).prop_map(|(fields, v)| {
            let mut o: Map<String, Value> = fields.into_iter().collect();
            if let Some(v) = v {
                o.insert("$v".into(), v);
            }
            Value::Object(o)
        }),
        1 => json_value(),
    ]
    .boxed()
}

/// Keys payloads often have, and others.
fn key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => proptest::sample::select(
            &["text", "due", "name", "title", "id", "index", "done", "items", "value", "path", "contents"][..]
        )
        .prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
    ]
    .boxed()
}

/// Any JSON value, three levels deep at most.
fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[a-zA-Z0-9 :-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn with(step: impl Fn(Value) -> Value + Send + Sync + 'static) -> Registry {
        let mut r = Registry::builtin();
        r.register_upcast("todo.add", 1, step);
        r
    }

    #[test]
    fn a_total_deterministic_upcaster_passes() {
        let r = with(|mut v: Value| {
            if let Some(o) = v.as_object_mut() {
                o.insert("due".into(), Value::Null);
            }
            v
        });
        assert_eq!(check_upcasters(&r, 64), Ok(64));
        // A registry without upcasters has nothing to check.
        assert_eq!(check_upcasters(&Registry::builtin(), 64), Ok(0));
    }

    #[test]
    fn an_upcaster_that_panics_on_a_missing_key_is_caught_with_a_small_value() {
        let r = with(|v: Value| json!({"text": v["text"].as_str().expect("a text"), "due": null}));
        let broken = check_upcasters(&r, 256).unwrap_err();
        assert_eq!(broken.invariant, Invariant::UpcastNeverPanics);
        assert!(
            broken
                .detail
                .contains("the upcaster of 'todo.add' from version 1 panicked (a text)"),
            "{broken}"
        );
    }

    #[test]
    fn an_upcaster_with_a_counter_is_not_deterministic() {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let r = with(|mut v: Value| {
            if let Some(o) = v.as_object_mut() {
                o.insert("n".into(), json!(CALLS.fetch_add(1, Ordering::Relaxed)));
            }
            v
        });
        let broken = check_upcasters(&r, 64).unwrap_err();
        assert_eq!(broken.invariant, Invariant::UpcastDeterministic, "{broken}");
    }

    #[test]
    fn the_property_run_checks_the_upcasters_first() {
        let r = with(|v: Value| json!({"text": v["text"].as_str().expect("a text")}));
        let failure = super::super::Check::new(r)
            .engine(false)
            .cases(1)
            .run()
            .unwrap_err();
        assert_eq!(failure.invariant(), Invariant::UpcastNeverPanics);
        assert!(failure.commands.is_empty(), "{failure}");
    }

    #[test]
    #[should_panic(
        expected = "invariant `upcast-never-panics` broken: the upcaster of 'todo.add' from version 1 panicked on event"
    )]
    fn an_old_event_whose_upcaster_panics_breaks_the_kits_invariant() {
        let mut r = with(|v: Value| json!({"text": v["text"].as_str().expect("a text")}));
        r.register_fold(
            "todo.add",
            |_: &mut elfiee_projections::State, _: &elfiee_model::Event| {
                elfiee_projections::Folded::Done
            },
        );
        let mut kit = super::super::Kit::new(r);
        kit.given_owner("Alice");
        let mut old = kit.events()[0].clone();
        old.attribute = "alice/todo.add".into();
        old.value = json!({"txt": "milk"});
        kit.given_events([old]);
    }

    #[test]
    fn an_upcaster_that_wraps_every_value_is_not_idempotent() {
        let r = with(|v: Value| json!([v]));
        let broken = check_upcasters(&r, 64).unwrap_err();
        assert_eq!(broken.invariant, Invariant::UpcastIdempotent, "{broken}");
    }
}
