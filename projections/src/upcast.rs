//! Payload versions and upcasters: how an event kind changes the shape of its payload without
//! rewriting the log.
//!
//! An event's value names the shape it carries in a top-level `"$v"` key, a JSON integer from
//! 1; a value without it (or one that is not an object) is version 1. A kind's current version
//! is 1 plus the number of upcasters registered for it ([`crate::Folds::register_upcast`]):
//! the upcaster from version `n` turns a value of shape `n` into one of shape `n + 1`. Before
//! a kind's fold sees an event, [`crate::Folds::apply`] runs the steps from the event's version
//! up to the current one on a copy of its value and sets `"$v"` to the current version, so a
//! fold (and every handler's state check, which reads the folded state) sees one shape only.
//! The log keeps what was written; an event already at the current version is not copied.
//!
//! An upcaster is pure and total like a fold: no I/O, no clock, no randomness, and an answer
//! for every value (a malformed one included: give it back as it is). A panic is caught, and
//! the event's meaning is left out of the state (`Applied::UpcastPanicked`). `elfiee::testkit`
//! checks all of this on generated values.
//!
//! ```
//! use elfiee_projections::Folds;
//! use serde_json::{json, Value};
//!
//! let mut folds = Folds::default();
//! // Version 2 of `todo.add` has a `due` date; version 1 had none.
//! folds.register_upcast("todo.add", 1, |mut v: Value| {
//!     if let Some(o) = v.as_object_mut() {
//!         o.insert("due".into(), Value::Null);
//!     }
//!     v
//! });
//! assert_eq!(folds.version("todo.add"), 2);
//! let old = json!({"text": "milk"});
//! assert_eq!(
//!     folds.upcast("todo.add", &old).unwrap().into_owned(),
//!     json!({"text": "milk", "due": null, "$v": 2})
//! );
//! // A value from a program that knows version 3 is not misread.
//! assert!(folds.upcast("todo.add", &json!({"text": "x", "$v": 3})).is_err());
//! ```

use std::borrow::Cow;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use serde_json::Value;

use crate::caught::panic_message;

/// The key of an event's value that holds its payload version.
pub const VERSION_KEY: &str = "$v";

/// One step of a kind's chain: a value of version `n` to one of version `n + 1`.
pub type Upcaster = Arc<dyn Fn(Value) -> Value + Send + Sync>;

/// Why a value cannot be brought to its kind's current shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpcastError {
    /// Written by a program that knows a newer version of the kind than these folds.
    Newer { version: u64, current: u32 },
    /// Its `"$v"` is not an integer from 1.
    BadVersion,
    /// The upcaster from version `from` panicked with this message.
    Panicked { from: u32, message: String },
}

impl UpcastError {
    /// The name [`crate::Folds::apply`] counts an unreadable event under in
    /// [`crate::State::unknown_kinds`]: `kind@v3` for a newer version, `kind@v?` for a bad one.
    pub fn unknown_kind(&self, kind: &str) -> String {
        match self {
            UpcastError::Newer { version, .. } => format!("{kind}@v{version}"),
            _ => format!("{kind}@v?"),
        }
    }
}

impl fmt::Display for UpcastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpcastError::Newer { version, current } => write!(
                f,
                "payload version {version} is newer than this program's {current}: open the document with the program that wrote it"
            ),
            UpcastError::BadVersion => {
                write!(f, "the payload's \"$v\" is not an integer from 1")
            }
            UpcastError::Panicked { from, message } => {
                write!(f, "the upcaster from version {from} panicked: {message}")
            }
        }
    }
}

impl std::error::Error for UpcastError {}

/// The payload version `value` declares: its `"$v"`, or 1 when it has none.
pub fn version_of(value: &Value) -> Result<u64, UpcastError> {
    match value.get(VERSION_KEY) {
        None => Ok(1),
        Some(v) => v
            .as_u64()
            .filter(|v| *v >= 1)
            .ok_or(UpcastError::BadVersion),
    }
}

/// The upcasters of one kind, in order: `steps[i]` upcasts from version `i + 1`.
#[derive(Clone, Default)]
pub(crate) struct Chain {
    steps: Vec<Upcaster>,
}

impl Chain {
    /// The kind's current version.
    pub(crate) fn current(&self) -> u32 {
        self.steps.len() as u32 + 1
    }

    /// Appends the step from `from`; registering out of order or twice is a programming error.
    pub(crate) fn push(&mut self, kind: &str, from: u32, step: Upcaster) {
        let next = self.current();
        assert!(
            from == next,
            "register_upcast(\"{kind}\", {from}, …): the next upcaster of '{kind}' goes from version {next} \
             (upcasters are registered once each, in order, from version 1)"
        );
        self.steps.push(step);
    }

    /// `value` in the current shape: borrowed when it is already, else upcast (a copy).
    pub(crate) fn upcast<'v>(&self, value: &'v Value) -> Result<Cow<'v, Value>, UpcastError> {
        upcast_with(&self.steps, value)
    }
}

/// [`Chain::upcast`] for a kind with these steps (none: version 1 is current).
pub(crate) fn upcast_with<'v>(
    steps: &[Upcaster],
    value: &'v Value,
) -> Result<Cow<'v, Value>, UpcastError> {
    let current = steps.len() as u32 + 1;
    let version = version_of(value)?;
    if version == u64::from(current) {
        return Ok(Cow::Borrowed(value));
    }
    if version > u64::from(current) {
        return Err(UpcastError::Newer { version, current });
    }
    let mut v = value.clone();
    for (from, step) in (version as u32..).zip(&steps[version as usize - 1..]) {
        v = catch_unwind(AssertUnwindSafe(|| step(v))).map_err(|p| UpcastError::Panicked {
            from,
            message: panic_message(p.as_ref()),
        })?;
    }
    if let Value::Object(o) = &mut v {
        o.insert(VERSION_KEY.into(), current.into());
    }
    Ok(Cow::Owned(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chain(steps: Vec<Upcaster>) -> Chain {
        let mut c = Chain::default();
        for (i, s) in steps.into_iter().enumerate() {
            c.push("k", i as u32 + 1, s);
        }
        c
    }

    fn tag(name: &'static str) -> Upcaster {
        Arc::new(move |mut v: Value| {
            if let Some(Value::Array(trail)) = v.get_mut("trail") {
                trail.push(json!(name));
            }
            v
        })
    }

    #[test]
    fn steps_run_in_order_from_the_values_version() {
        let c = chain(vec![tag("1>2"), tag("2>3"), tag("3>4")]);
        assert_eq!(c.current(), 4);
        // No `$v`: version 1, every step.
        assert_eq!(
            c.upcast(&json!({"trail": []})).unwrap().into_owned(),
            json!({"trail": ["1>2", "2>3", "3>4"], "$v": 4})
        );
        assert_eq!(
            c.upcast(&json!({"trail": [], "$v": 3}))
                .unwrap()
                .into_owned(),
            json!({"trail": ["3>4"], "$v": 4})
        );
        // Already current: borrowed, not copied.
        let now = json!({"trail": [], "$v": 4});
        assert!(matches!(c.upcast(&now), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn a_value_that_is_not_an_object_is_version_1() {
        let c = chain(vec![Arc::new(|v: Value| json!([v]))]);
        assert_eq!(c.upcast(&json!("x")).unwrap().into_owned(), json!(["x"]));
        assert_eq!(version_of(&json!(null)), Ok(1));
    }

    #[test]
    fn newer_and_malformed_versions_are_refused_not_misread() {
        let c = chain(vec![tag("1>2")]);
        assert_eq!(
            c.upcast(&json!({"$v": 3})),
            Err(UpcastError::Newer {
                version: 3,
                current: 2
            })
        );
        for bad in [json!(0), json!(-1), json!(1.5), json!("2"), json!(null)] {
            assert_eq!(
                c.upcast(&json!({"$v": bad})),
                Err(UpcastError::BadVersion),
                "{bad}"
            );
        }
        assert_eq!(
            UpcastError::Newer {
                version: 3,
                current: 2
            }
            .unknown_kind("k"),
            "k@v3"
        );
        assert_eq!(UpcastError::BadVersion.unknown_kind("k"), "k@v?");
    }

    #[test]
    fn a_panicking_step_is_caught_and_named() {
        let c = chain(vec![tag("1>2"), Arc::new(|_: Value| panic!("no shape"))]);
        assert_eq!(
            c.upcast(&json!({"trail": []})),
            Err(UpcastError::Panicked {
                from: 2,
                message: "no shape".into()
            })
        );
    }

    #[test]
    #[should_panic(expected = "the next upcaster of 'k' goes from version 1")]
    fn a_chain_starts_at_version_1() {
        Chain::default().push("k", 2, tag("2>3"));
    }

    #[test]
    #[should_panic(expected = "the next upcaster of 'k' goes from version 2")]
    fn a_step_is_registered_once() {
        let mut c = chain(vec![tag("1>2")]);
        c.push("k", 1, tag("1>2 again"));
    }
}
