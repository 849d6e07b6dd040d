//! The extension point of the projection: which pure function folds each event kind into the
//! [`State`].
//!
//! Every event kind has at most one [`Fold`], kept in a [`Folds`] table. This crate knows no
//! kind by name: the built-in kinds bring their folds with their capabilities
//! (`elfiee_capabilities::Registry::builtin().folds()`), exactly as an embedder's kinds do
//! (`Capability::fold`, or `Registry::register_fold`); there is no closed list that custom
//! kinds cannot join. The shapes folds share are in [`crate::toolkit`].
//!
//! [`Folds::apply`] does the bookkeeping every event gets (`last_seq`, the vector clock, the
//! block's seq when the fold says it touched its block), and records the kinds it has no fold
//! for in [`State::unknown_kinds`], so a document written by a program that knew more kinds
//! still opens, and says what it could not give a meaning.
//!
//! A kind's payload may change shape: [`Folds::register_upcast`] registers the step from one
//! version to the next, and [`Folds::apply`] brings an event's value to the current shape
//! before the kind's fold sees it ([`crate::upcast`]); the log is never rewritten.
//!
//! ```
//! use elfiee_projections::{Folded, Folds, State};
//! use elfiee_model::Event;
//!
//! // A counter kept in the state's extension data: its own namespace, its own fold.
//! fn bump(state: &mut State, _event: &Event) -> Folded {
//!     let n = state.extensions.entry("counter".into()).or_insert(0.into());
//!     *n = (n.as_u64().unwrap_or(0) + 1).into();
//!     Folded::Done
//! }
//! let mut folds = Folds::default();
//! folds.register("counter.bump", bump);
//! assert!(folds.knows("counter.bump") && !folds.knows("core.create"));
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use elfiee_model::Event;
use serde_json::Value;

use crate::caught::panic_message;
use crate::state::State;
use crate::upcast::{self, Chain, UpcastError, VERSION_KEY};

/// What a fold did with its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folded {
    /// It changed the block the event names (`event.entity`): that block's seq (used for
    /// optimistic concurrency, `Command::expected_seq`) becomes the event's.
    Block,
    /// Anything else: it changed something other than a block, or nothing (a malformed value,
    /// a block that is gone — folds skip what they cannot use, they never fail).
    Done,
}

/// A pure function from (state, event) to the next state, for one event kind.
///
/// It must be total and deterministic: no I/O, no clock, no randomness, no iteration over
/// hash maps whose order leaks into the state, and no panics (a panic is caught and logged,
/// and leaves the state however far the fold got). `elfiee::testkit` checks all of this.
pub trait Fold: Send + Sync + 'static {
    fn apply(&self, state: &mut State, event: &Event) -> Folded;

    /// Bump when the meaning of the kind changes: snapshots record the versions of the folds
    /// that made them, and one made by other folds is not used (the log is replayed instead).
    fn version(&self) -> u32 {
        1
    }
}

impl<F> Fold for F
where
    F: Fn(&mut State, &Event) -> Folded + Send + Sync + 'static,
{
    fn apply(&self, state: &mut State, event: &Event) -> Folded {
        self(state, event)
    }
}

/// The kind of the event `elfiee salvage` puts in place of an event it could not recover (its
/// value says why), so the events after it keep their seqs. Every fold table knows it and it
/// changes nothing but `last_seq`; it is outside [`Folds::fingerprint`] (no snapshot made
/// before it existed can hold one).
pub const SALVAGE_LOST: &str = "salvage.lost";

/// What [`Folds::apply`] did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Its kind's fold ran.
    Folded(Folded),
    /// No fold is registered for its kind, or its payload version is newer than the kind's
    /// (or not a version): it is counted in [`State::unknown_kinds`], under `kind` or
    /// `kind@v3` ([`UpcastError::unknown_kind`]).
    Unknown,
    /// The kind's fold panicked (with this message); the state holds what it did until then.
    Panicked(String),
    /// The kind's upcaster from version `from` panicked (with this message); the fold did not
    /// run.
    UpcastPanicked { from: u32, message: String },
}

/// The fold of every known event kind.
#[derive(Clone, Default)]
pub struct Folds {
    by_kind: BTreeMap<String, Arc<dyn Fold>>,
    /// Kind → its upcasters, for a kind whose payload changed shape.
    upcasts: BTreeMap<String, Chain>,
    fingerprint: String,
    /// Event kind → the `value.contents` keys that may hold a large body.
    bodies: BTreeMap<String, Vec<String>>,
    /// Block type → the `contents` keys of its body (set by a kind of `typed_bodies`).
    block_bodies: BTreeMap<String, Vec<String>>,
    /// Kinds whose body keys are those of the block type their value names (`core.create`).
    typed_bodies: BTreeSet<String>,
}

impl std::fmt::Debug for Folds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Folds")
            .field("kinds", &self.by_kind.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Folds {
    /// Sets the fold of `kind` (replacing one registered before).
    pub fn register(&mut self, kind: impl Into<String>, fold: impl Fold) {
        self.register_arc(kind, Arc::new(fold));
    }

    /// [`Folds::register`] for a fold already shared.
    pub fn register_arc(&mut self, kind: impl Into<String>, fold: Arc<dyn Fold>) {
        self.by_kind.insert(kind.into(), fold);
        self.fingerprint = fingerprint(&self.by_kind, &self.upcasts);
    }

    /// Registers the upcaster of `kind` from payload version `from_version` to the next
    /// ([`crate::upcast`]): a pure, total function from a value of the old shape to one of the
    /// new. The kind's current version becomes `from_version + 1`; events the registry's
    /// handlers commit say so in their value's `"$v"`, and older events are upcast before its
    /// fold sees them.
    ///
    /// # Panics
    ///
    /// When `from_version` is not the kind's current version: upcasters are registered once
    /// each, in order, from version 1 (a mistake in the program, found when it builds its
    /// registry).
    pub fn register_upcast(
        &mut self,
        kind: impl Into<String>,
        from_version: u32,
        upcaster: impl Fn(Value) -> Value + Send + Sync + 'static,
    ) {
        let kind = kind.into();
        let chain = self.upcasts.entry(kind.clone()).or_default();
        chain.push(&kind, from_version, Arc::new(upcaster));
        self.fingerprint = fingerprint(&self.by_kind, &self.upcasts);
    }

    /// The current payload version of `kind`: 1 plus the number of its upcasters.
    pub fn version(&self, kind: &str) -> u32 {
        self.upcasts.get(kind).map_or(1, Chain::current)
    }

    /// The kinds with upcasters and their current versions, sorted.
    pub fn versioned_kinds(&self) -> impl Iterator<Item = (&str, u32)> {
        self.upcasts.iter().map(|(k, c)| (k.as_str(), c.current()))
    }

    /// `value`, an event of `kind`'s, in the kind's current shape: borrowed when it is already
    /// (no copy), else upcast. What [`Folds::apply`] gives the fold; an effect that reads old
    /// events' values reads them through this too.
    pub fn upcast<'v>(&self, kind: &str, value: &'v Value) -> Result<Cow<'v, Value>, UpcastError> {
        match self.upcasts.get(kind) {
            Some(chain) => chain.upcast(value),
            None => upcast::upcast_with(&[], value),
        }
    }

    /// Marks a value a handler wrote for `kind` with the kind's current version: `"$v"` set
    /// when the version is above 1, removed when it is 1 (absent means 1), so an event says
    /// which shape it carries whatever the handler put there. Values that are not objects
    /// are left as they are (they read as version 1).
    pub fn stamp_version(&self, kind: &str, value: &mut Value) {
        let Value::Object(o) = value else {
            return;
        };
        match self.version(kind) {
            1 => {
                o.remove(VERSION_KEY);
            }
            v => {
                o.insert(VERSION_KEY.into(), v.into());
            }
        }
    }

    /// Registers `kind` as known with no effect on the state (a request that an effect
    /// answers, a read): its events are not reported as unknown.
    pub fn register_noop(&mut self, kind: impl Into<String>) {
        self.register(kind, |_: &mut State, _: &Event| Folded::Done);
    }

    /// Declares that events of `kind` may carry large bodies at `value.contents.<key>` for
    /// each of `keys`: the engine stores a body of 256 bytes or more in the document's content
    /// store and the event carries a reference, which [`crate::toolkit::fold_patch`] (or a fold that
    /// calls [`crate::content::take_refs`]) moves into the block's `content_refs`.
    pub fn declare_body(&mut self, kind: impl Into<String>, keys: &[&str]) {
        self.bodies
            .insert(kind.into(), keys.iter().map(|k| k.to_string()).collect());
    }

    /// Declares the body keys of blocks of `block_type`: an event of a kind declared with
    /// [`Folds::declare_typed_body`] (the built-ins' `core.create`) that makes such a block with
    /// large `contents` at those keys stores them in the content store.
    pub fn declare_block_body(&mut self, block_type: impl Into<String>, keys: &[&str]) {
        self.block_bodies.insert(
            block_type.into(),
            keys.iter().map(|k| k.to_string()).collect(),
        );
    }

    /// Declares that events of `kind` make a block whose type is the value's `block_type`:
    /// their body keys are that type's ([`Folds::declare_block_body`]), not the kind's.
    pub fn declare_typed_body(&mut self, kind: impl Into<String>) {
        self.typed_bodies.insert(kind.into());
    }

    /// The `value.contents` keys an event of `kind` with this value may set a body at.
    pub fn body_keys<'a>(&'a self, kind: &str, value: &serde_json::Value) -> &'a [String] {
        let keys = if self.typed_bodies.contains(kind) {
            let ty = value
                .get("block_type")
                .and_then(|t| t.as_str())
                .unwrap_or("");
            self.block_bodies.get(ty)
        } else {
            self.bodies.get(kind)
        };
        keys.map_or(&[], Vec::as_slice)
    }

    pub fn get(&self, kind: &str) -> Option<&Arc<dyn Fold>> {
        self.by_kind.get(kind)
    }

    pub fn knows(&self, kind: &str) -> bool {
        kind == SALVAGE_LOST || self.by_kind.contains_key(kind)
    }

    /// Every kind with a fold, sorted.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.by_kind.keys().map(String::as_str)
    }

    /// A short hash of the kinds, their fold versions and their payload versions. Snapshots
    /// record it: a state folded by other folds (or without an upcaster) is not the one these
    /// folds would give.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Folds one committed event into `state`: `last_seq`, the vector clock, then the kind's
    /// fold (panics caught) on the event's value in the kind's current shape ([`Folds::upcast`];
    /// an event of a newer version is counted as unknown, `kind@v3`), then the block's seq if
    /// the fold touched its block. Total.
    pub fn apply(&self, state: &mut State, event: &Event) -> Applied {
        state.last_seq = event.seq;
        for (k, v) in &event.clock {
            let e = state.clocks.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
        let kind = event.cap_id();
        if kind == SALVAGE_LOST {
            return Applied::Folded(Folded::Done);
        }
        let Some(fold) = self.by_kind.get(kind) else {
            *state.unknown_kinds.entry(kind.to_owned()).or_insert(0) += 1;
            return Applied::Unknown;
        };
        let upcast;
        let event = match self.upcast(kind, &event.value) {
            Ok(Cow::Borrowed(_)) => event,
            Ok(Cow::Owned(value)) => {
                upcast = with_value(event, value);
                &upcast
            }
            Err(UpcastError::Panicked { from, message }) => {
                tracing::error!(
                    kind,
                    seq = event.seq,
                    from,
                    %message,
                    "an upcaster panicked; the event's meaning is missing from this state"
                );
                return Applied::UpcastPanicked { from, message };
            }
            Err(unreadable) => {
                let name = unreadable.unknown_kind(kind);
                *state.unknown_kinds.entry(name).or_insert(0) += 1;
                return Applied::Unknown;
            }
        };
        match catch_unwind(AssertUnwindSafe(|| fold.apply(state, event))) {
            Ok(Folded::Block) => {
                state.block_seq.insert(event.entity.clone(), event.seq);
                Applied::Folded(Folded::Block)
            }
            Ok(Folded::Done) => Applied::Folded(Folded::Done),
            Err(p) => {
                let message = panic_message(p.as_ref());
                tracing::error!(
                    kind,
                    seq = event.seq,
                    %message,
                    "a fold panicked; the event's meaning is incomplete in this state"
                );
                Applied::Panicked(message)
            }
        }
    }
}

/// `event` with another value (the rest copied; the old value is not).
fn with_value(event: &Event, value: Value) -> Event {
    Event {
        seq: event.seq,
        event_id: event.event_id,
        cmd_id: event.cmd_id,
        entity: event.entity.clone(),
        attribute: event.attribute.clone(),
        value,
        clock: event.clock.clone(),
        created_at: event.created_at,
        hash: event.hash,
    }
}

fn fingerprint(
    by_kind: &BTreeMap<String, Arc<dyn Fold>>,
    upcasts: &BTreeMap<String, Chain>,
) -> String {
    let mut h = blake3::Hasher::new();
    for (kind, fold) in by_kind {
        h.update(kind.as_bytes());
        h.update(&[0]);
        h.update(&fold.version().to_le_bytes());
        // Only for a kind with upcasters, so folds without any keep their fingerprint (and
        // their snapshots). 0xff starts no UTF-8 text, so no kind name reads the same.
        if let Some(chain) = upcasts.get(kind) {
            h.update(&[0xff]);
            h.update(&chain.current().to_le_bytes());
        }
    }
    h.finalize().to_hex()[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use elfiee_model::EventHash;
    use serde_json::json;

    fn ev(seq: u64, kind: &str, value: Value) -> Event {
        Event {
            seq,
            event_id: uuid::Uuid::nil(),
            cmd_id: uuid::Uuid::nil(),
            entity: "list".into(),
            attribute: format!("alice/{kind}"),
            value,
            clock: [("n:alice".to_string(), seq)].into(),
            created_at: DateTime::from_timestamp_millis(seq as i64 * 1000).unwrap(),
            hash: EventHash::ZERO,
        }
    }

    /// `todo.add` keeps every value its fold sees, in order, in the extension `todo`.
    fn todo_folds() -> Folds {
        let mut folds = Folds::default();
        folds.register("todo.add", |s: &mut State, e: &Event| {
            let seen = s.extension_mut("todo").entry("seen").or_insert(json!([]));
            if let Some(list) = seen.as_array_mut() {
                list.push(e.value.clone());
            }
            Folded::Done
        });
        folds
    }

    fn add_due(mut v: Value) -> Value {
        if let Some(o) = v.as_object_mut() {
            o.insert("due".into(), Value::Null);
        }
        v
    }

    fn seen(s: &State) -> Value {
        s.extensions["todo"]["seen"].clone()
    }

    #[test]
    fn the_fold_sees_old_and_new_events_in_the_current_shape() {
        let mut folds = todo_folds();
        folds.register_upcast("todo.add", 1, add_due);
        folds.register_upcast("todo.add", 2, |mut v: Value| {
            if let Some(o) = v.as_object_mut() {
                let text = o.remove("text").unwrap_or(Value::Null);
                o.insert("title".into(), text);
            }
            v
        });
        let mut s = State::default();
        let old = ev(1, "todo.add", json!({"text": "milk"}));
        let kept = old.clone();
        folds.apply(&mut s, &old);
        folds.apply(
            &mut s,
            &ev(
                2,
                "todo.add",
                json!({"text": "tea", "due": "2026-12-01", "$v": 2}),
            ),
        );
        folds.apply(
            &mut s,
            &ev(3, "todo.add", json!({"title": "jam", "due": null, "$v": 3})),
        );
        assert_eq!(
            seen(&s),
            json!([
                {"title": "milk", "due": null, "$v": 3},
                {"title": "tea", "due": "2026-12-01", "$v": 3},
                {"title": "jam", "due": null, "$v": 3},
            ])
        );
        // The event itself (what the log holds) is not touched.
        assert_eq!(old, kept);
        assert!(s.unknown_kinds.is_empty());
    }

    #[test]
    fn a_newer_or_malformed_version_is_counted_as_unknown_not_misread() {
        let mut folds = todo_folds();
        folds.register_upcast("todo.add", 1, add_due);
        let mut s = State::default();
        let applied = folds.apply(&mut s, &ev(1, "todo.add", json!({"text": "a", "$v": 3})));
        assert_eq!(applied, Applied::Unknown);
        folds.apply(&mut s, &ev(2, "todo.add", json!({"text": "b", "$v": 3})));
        folds.apply(&mut s, &ev(3, "todo.add", json!({"text": "c", "$v": "2"})));
        assert_eq!(
            s.unknown_kinds,
            [
                ("todo.add@v3".to_string(), 2),
                ("todo.add@v?".to_string(), 1)
            ]
            .into()
        );
        assert!(!s.extensions.contains_key("todo"));
        assert_eq!(s.last_seq, 3);
        // A kind without upcasters is at version 1: a `$v` of 2 is newer too.
        let mut plain = todo_folds();
        plain.register("todo.tick", |_: &mut State, _: &Event| Folded::Done);
        let mut s = State::default();
        plain.apply(&mut s, &ev(1, "todo.tick", json!({"$v": 2})));
        plain.apply(&mut s, &ev(2, "todo.tick", json!({"$v": 1})));
        assert_eq!(s.unknown_kinds, [("todo.tick@v2".to_string(), 1)].into());
    }

    #[test]
    fn a_panicking_upcaster_is_caught_and_the_fold_does_not_run() {
        let mut folds = todo_folds();
        folds.register_upcast("todo.add", 1, |v: Value| {
            let text = v["text"].as_str().expect("a text");
            json!({"text": text, "due": null})
        });
        let mut s = State::default();
        let applied = folds.apply(&mut s, &ev(1, "todo.add", json!({"txt": "a"})));
        assert_eq!(
            applied,
            Applied::UpcastPanicked {
                from: 1,
                message: "a text".into()
            }
        );
        assert!(!s.extensions.contains_key("todo"));
        assert_eq!(s.last_seq, 1);
        folds.apply(&mut s, &ev(2, "todo.add", json!({"text": "b"})));
        assert_eq!(seen(&s), json!([{"text": "b", "due": null, "$v": 2}]));
    }

    #[test]
    fn the_fingerprint_counts_each_kinds_upcasters() {
        let plain = todo_folds();
        let mut one = todo_folds();
        one.register_upcast("todo.add", 1, add_due);
        let mut again = todo_folds();
        again.register_upcast("todo.add", 1, add_due);
        let mut two = one.clone();
        two.register_upcast("todo.add", 2, add_due);
        assert_ne!(plain.fingerprint(), one.fingerprint());
        assert_ne!(one.fingerprint(), two.fingerprint());
        assert_eq!(one.fingerprint(), again.fingerprint());
        // The order of registration (fold, upcaster) does not matter.
        let mut first = Folds::default();
        first.register_upcast("todo.add", 1, add_due);
        first.register_arc("todo.add", todo_folds().get("todo.add").unwrap().clone());
        assert_eq!(first.fingerprint(), one.fingerprint());
        assert_eq!((one.version("todo.add"), two.version("todo.add")), (2, 3));
        assert_eq!(plain.version("todo.add"), 1);
    }

    #[test]
    fn stamping_sets_the_current_version_and_drops_a_stray_one() {
        let mut folds = todo_folds();
        folds.register_upcast("todo.add", 1, add_due);
        let mut v = json!({"text": "a", "$v": 9});
        folds.stamp_version("todo.add", &mut v);
        assert_eq!(v, json!({"text": "a", "$v": 2}));
        let mut v = json!({"n": 1, "$v": 9});
        folds.stamp_version("todo.tick", &mut v);
        assert_eq!(v, json!({"n": 1}));
        let mut v = json!([1]);
        folds.stamp_version("todo.add", &mut v);
        assert_eq!(v, json!([1]));
    }
}
