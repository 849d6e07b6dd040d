//! A test kit for capability handlers and folds — the built-in ones and an embedder's
//! (cargo feature `testkit`; put `elfiee = { version = "…", features = ["testkit"] }` in your
//! dev-dependencies).
//!
//! Two tools, and every invariant checked by both without the test asking:
//!
//! - [`Kit`]: given / when / then on the pure pipeline with a log in memory. Given commands or
//!   events, when a command, then its events, its error (by kind and message) or a predicate
//!   on the state. The clock, the ids and the node id are fixed and settable.
//! - [`Check`]: generated step sequences ([`ops`]: the built-in capabilities' steps plus your
//!   strategies) through the pure pipeline and the real sled engine side by side, with
//!   close-and-reopen steps; a broken invariant comes back as a [`Failure`] that names it,
//!   with the sequence shrunk to a minimal one. `Check::new(registry).ops(1, my_steps()).assert()`
//!   is the one line for a test suite. With `Check::older(registry)`, [`Op::Older`] steps run
//!   commands with the program as it was before a payload changed shape, so one log holds
//!   old and new payload versions.
//! - [`check_upcasters`]: every kind's upcasters (`Registry::register_upcast`) on generated
//!   values: total, deterministic, idempotent (`Check::run` does it first).
//!
//! And for end-to-end tests of a binary built on `elfiee::cli`: [`serve`] starts its
//! `serve --sync` processes and waits until the devices agree.
//!
//! The invariants ([`Invariant`]), checked on every command:
//! the handler is deterministic (run twice on equal inputs: equal events); a rejected command
//! writes nothing; commands, events and the state survive the log's encoding, a snapshot image
//! and JSON; folding (upcasters included) never panics and is deterministic; and the live
//! state equals the state replayed from the log and the state loaded from a snapshot plus the
//! events after it. With
//! the engine: it accepts and rejects what the pure pipeline does, commits the same events
//! (same ids, values and hashes), and has the same state after every step, after reopening,
//! and after its own replay, and `verify` passes.
//!
//! ```
//! use elfiee::testkit::Kit;
//! use elfiee::Command;
//! use serde_json::json;
//!
//! let mut kit = Kit::builtin();
//! kit.given_owner("alice");
//! let note = kit.given(Command::new("alice", "core.create", None, json!({"name": "n", "block_type": "markdown"})))[0]
//!     .entity
//!     .clone();
//! kit.when(Command::new("alice", "markdown.write", Some(&note), json!({"markdown": "# Hi"})))
//!     .kinds(&["markdown.write"])
//!     .state(|s| s.blocks[note.as_str()].contents["markdown"] == "# Hi");
//! kit.when(Command::new("bob", "markdown.write", Some(&note), json!({"markdown": "x"})))
//!     .rejected("unknown_editor", "bob");
//! ```

pub mod golden;
pub mod latency;
mod machine;
pub mod ops;
mod pipeline;
pub mod serve;
mod upcast;

use chrono::{DateTime, Utc};
use elfiee_capabilities::Registry;
use elfiee_model::{CapError, Command, Event};
use elfiee_projections::State;

pub use machine::{Check, Failure, Report};
pub use ops::{Op, OpCmd};
pub use pipeline::{default_fixed_ctx, Invariant, Violation, NODE_ID};
pub use upcast::check_upcasters;

/// Given / when / then over the pure pipeline; see the [module docs](self).
pub struct Kit {
    p: pipeline::Pipeline,
}

impl Kit {
    /// An empty document (no events yet) over `registry`, at the kit's fixed time and ids.
    pub fn new(registry: Registry) -> Kit {
        Kit {
            p: pipeline::Pipeline::new(registry),
        }
    }

    /// [`Kit::new`] over the built-in capabilities.
    pub fn builtin() -> Kit {
        Kit::new(Registry::builtin())
    }

    /// Commands from now on run at `now` (kept to the millisecond, as the log keeps it).
    pub fn set_now(&mut self, now: DateTime<Utc>) -> &mut Kit {
        self.p.fixed.now = DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
        self
    }

    /// Ids from now on derive from `base` (and the state's last seq).
    pub fn set_id_base(&mut self, base: [u8; 16]) -> &mut Kit {
        self.p.fixed.id_base = base;
        self
    }

    /// The node id in vector-clock keys.
    pub fn set_node_id(&mut self, node: &str) -> &mut Kit {
        self.p.node_id = node.to_owned();
        self
    }

    /// `elf.init` by `name` (its id is the name in lower case); returns the owner's id.
    pub fn given_owner(&mut self, name: &str) -> String {
        let id = name.to_lowercase();
        self.given(Command::new(
            &id,
            "elf.init",
            None,
            serde_json::json!({"name": name}),
        ));
        id
    }

    /// Runs a command that must be accepted (the invariants are checked as for `when`);
    /// returns its events.
    pub fn given(&mut self, cmd: Command) -> Vec<Event> {
        match self.try_when(cmd.clone()) {
            Ok(then) => match then.outcome {
                Ok(events) => events,
                Err(e) => panic!("given '{}' was rejected: {e}", cmd.cap_id),
            },
            Err(v) => panic!("given '{}': {v}", cmd.cap_id),
        }
    }

    /// Appends events as if committed (their seqs continue the log); folds them, checking
    /// that no fold panics.
    pub fn given_events(&mut self, events: impl IntoIterator<Item = Event>) -> Vec<Event> {
        self.p
            .commit(events.into_iter().collect())
            .unwrap_or_else(|v| panic!("given events: {v}"))
    }

    /// Runs `cmd` and checks every invariant; panics naming the one that broke.
    pub fn when(&mut self, cmd: Command) -> Then<'_> {
        let cap = cmd.cap_id.clone();
        match self.try_when(cmd) {
            Ok(then) => then,
            Err(v) => panic!("when '{cap}': {v}"),
        }
    }

    /// [`Kit::when`] returning the broken invariant instead of panicking.
    pub fn try_when(&mut self, cmd: Command) -> Result<Then<'_>, Violation> {
        let snapshot = self.p.snapshot();
        let outcome = self.p.run(&cmd)?;
        self.p.check_state(&[snapshot])?;
        Ok(Then {
            kit: self,
            cap: cmd.cap_id,
            outcome,
        })
    }

    /// The state after everything given and run so far.
    pub fn state(&self) -> &State {
        &self.p.state
    }

    /// Every event committed so far, in order.
    pub fn events(&self) -> &[Event] {
        &self.p.events
    }

    /// The registry the kit runs commands with.
    pub fn registry(&self) -> &Registry {
        &self.p.registry
    }

    /// A body the content-store step took out of an event (by its reference).
    pub fn content(&self, r: &elfiee_model::ContentRef) -> Option<&str> {
        self.p.content.get(&r.hash).map(|s| &**s)
    }
}

/// The outcome of a [`Kit::when`], with assertions that panic with a message saying what
/// happened instead.
pub struct Then<'k> {
    kit: &'k Kit,
    cap: String,
    /// The committed events, or why the command was rejected.
    pub outcome: Result<Vec<Event>, CapError>,
}

impl<'k> Then<'k> {
    /// The committed events; panics if the command was rejected.
    pub fn events(&self) -> &[Event] {
        match &self.outcome {
            Ok(e) => e,
            Err(e) => panic!("'{}' was rejected ({e}); expected events", self.cap),
        }
    }

    /// The events' kinds are these, in order.
    pub fn kinds(self, expected: &[&str]) -> Then<'k> {
        let got: Vec<&str> = self.events().iter().map(Event::cap_id).collect();
        assert_eq!(got, expected, "kinds of the events of '{}'", self.cap);
        self
    }

    /// The events' values are these, in order.
    pub fn values(self, expected: &[serde_json::Value]) -> Then<'k> {
        let got: Vec<&serde_json::Value> = self.events().iter().map(|e| &e.value).collect();
        let expected: Vec<&serde_json::Value> = expected.iter().collect();
        assert_eq!(got, expected, "values of the events of '{}'", self.cap);
        self
    }

    /// The command was rejected with an error of `kind` (the `kind` of its JSON form:
    /// `unauthorized`, `block_not_found`, `invalid_payload`, `rejected`, …) whose message
    /// contains `message`.
    pub fn rejected(self, kind: &str, message: &str) -> Then<'k> {
        match &self.outcome {
            Ok(events) => panic!(
                "'{}' was accepted with {} events; expected a {kind} error",
                self.cap,
                events.len()
            ),
            Err(e) => {
                let got = error_kind(e);
                assert_eq!(got, kind, "error kind of '{}' ({e})", self.cap);
                assert!(
                    e.to_string().contains(message),
                    "the error of '{}' ({e}) does not mention {message:?}",
                    self.cap
                );
            }
        }
        self
    }

    /// `check` holds on the state after the command.
    pub fn state(self, check: impl FnOnce(&State) -> bool) -> Then<'k> {
        assert!(
            check(&self.kit.p.state),
            "the state after '{}' does not satisfy the check",
            self.cap
        );
        self
    }
}

/// The `kind` of an error's JSON form (`unauthorized`, `invalid_payload`, …).
pub fn error_kind(e: &CapError) -> String {
    serde_json::to_value(e)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str().map(str::to_owned)))
        .unwrap_or_default()
}
