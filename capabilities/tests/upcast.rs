//! Payload versions through the registry: `Registry::register_upcast`, the `"$v"` the pipeline
//! stamps on the events it commits, and handlers that read old events in the current shape.

use std::sync::Arc;

use elfiee_capabilities::{Capability, Registry, Target};
use elfiee_model::{CapError, Command, Ctx, Event, EventDraft};
use elfiee_projections::{update_block, Fold, State};
use serde_json::{json, Value};

/// `todo.add {text, due}` (version 2: version 1 had no `due`): the value (without `$v`) is
/// appended to the block's `contents.items`.
struct Add;

impl Capability for Add {
    fn id(&self) -> &'static str {
        "todo.add"
    }
    fn target(&self) -> Target {
        Target::Block(None)
    }
    fn handle(&self, cmd: &Command, _: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        // Whatever `$v` a handler writes, the pipeline writes the kind's own.
        let mut value = cmd.payload.clone();
        value["$v"] = json!(7);
        Ok(vec![EventDraft::new(
            cmd.block_id.as_deref().unwrap_or_default(),
            self.id(),
            value,
        )])
    }
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(|state: &mut State, event: &Event| {
            update_block(state, event, |b, v| {
                let mut item = v.clone();
                if let Some(o) = item.as_object_mut() {
                    o.remove("$v");
                }
                match b.contents.get_mut("items").and_then(Value::as_array_mut) {
                    Some(items) => items.push(item),
                    None => b.contents["items"] = json!([item]),
                }
            })
        }))
    }
}

/// `todo.overdue {index, today}`: refused unless the item has a due date before `today`, read
/// from the state (so from events of either version).
struct Overdue;

impl Capability for Overdue {
    fn id(&self) -> &'static str {
        "todo.overdue"
    }
    fn target(&self) -> Target {
        Target::Block(None)
    }
    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let block = state
            .block(cmd.block_id.as_deref().unwrap_or_default())
            .unwrap();
        let index = cmd.payload["index"].as_u64().unwrap_or(0) as usize;
        let item = &block.contents["items"][index];
        let Some(due) = item.get("due") else {
            return Err(CapError::rejected(format!(
                "item {index} has no 'due' key: {item}"
            )));
        };
        match due.as_str() {
            Some(d) if d < cmd.payload["today"].as_str().unwrap_or("") => Ok(vec![]),
            _ => Err(CapError::rejected(format!("item {index} is not overdue"))),
        }
    }
}

fn add_due(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("due".into(), Value::Null);
    }
    v
}

fn registry() -> Registry {
    let mut r = Registry::builtin();
    r.register(Arc::new(Add));
    r.register(Arc::new(Overdue));
    r.register_upcast("todo.add", 1, add_due);
    r
}

struct Doc {
    registry: Registry,
    state: State,
    ctx: Ctx,
}

impl Doc {
    /// A document owned by alice with one markdown block, `list`.
    fn new(registry: Registry) -> Doc {
        let ctx = registry.ctx(
            chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
            "n1",
            [0; 16],
        );
        let mut doc = Doc {
            registry,
            state: State::default(),
            ctx,
        };
        doc.run("elf.init", None, json!({"name": "Alice"})).unwrap();
        doc.run(
            "core.create",
            None,
            json!({"name": "list", "block_type": "markdown", "block_id": "list"}),
        )
        .unwrap();
        doc
    }

    fn run(
        &mut self,
        cap: &str,
        block: Option<&str>,
        payload: Value,
    ) -> Result<Vec<Event>, CapError> {
        let cmd = Command::new("alice", cap, block, payload);
        let events = self.registry.execute(&cmd, &self.state, &self.ctx)?;
        for e in &events {
            self.fold(e.clone());
        }
        Ok(events)
    }

    /// Folds an event as committed (its seq continues the log).
    fn fold(&mut self, mut e: Event) {
        e.seq = self.state.last_seq + 1;
        self.registry.apply(&mut self.state, &e);
    }
}

#[test]
fn events_of_a_versioned_kind_carry_its_version_and_others_none() {
    let mut doc = Doc::new(registry());
    let added = doc
        .run(
            "todo.add",
            Some("list"),
            json!({"text": "milk", "due": "2026-12-01"}),
        )
        .unwrap();
    assert_eq!(
        added[0].value,
        json!({"text": "milk", "due": "2026-12-01", "$v": 2})
    );
    // A kind at version 1 carries no `$v`, even when its payload brought one (the built-in
    // `agent.session` keeps its payload whole).
    doc.run("agent.create", None, json!({"name": "a"})).unwrap();
    let agent = doc
        .state
        .blocks
        .iter()
        .find(|(_, b)| b.block_type == "agent")
        .map(|(id, _)| id.to_owned())
        .unwrap();
    let session = doc
        .run(
            "agent.session",
            Some(&agent),
            json!({"session_id": "s", "entry": "message", "$v": 5}),
        )
        .unwrap();
    assert_eq!(session[0].cap_id(), "agent.session");
    assert!(session[0].value.get("$v").is_none(), "{}", session[0].value);
    assert!(doc.state.unknown_kinds.is_empty());
    assert_eq!(doc.registry.folds().version("todo.add"), 2);
    assert_eq!(doc.registry.folds().version("core.create"), 1);
}

#[test]
fn a_handler_reads_old_events_in_the_current_shape() {
    let mut doc = Doc::new(registry());
    // Version 1, as a program before `due` wrote it: no `$v`, no `due`.
    let mut old = doc
        .run(
            "todo.add",
            Some("list"),
            json!({"text": "milk", "due": null}),
        )
        .unwrap()
        .remove(0);
    old.value = json!({"text": "old"});
    doc.fold(old);
    doc.run(
        "todo.add",
        Some("list"),
        json!({"text": "tea", "due": "2020-01-01"}),
    )
    .unwrap();
    let items = doc.state.block("list").unwrap().contents["items"].clone();
    assert_eq!(
        items,
        json!([
            {"text": "milk", "due": null},
            {"text": "old", "due": null},
            {"text": "tea", "due": "2020-01-01"},
        ])
    );
    // The old item has a `due` key (null) for the handler, as the new ones do.
    let err = doc
        .run(
            "todo.overdue",
            Some("list"),
            json!({"index": 1, "today": "2026-01-01"}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("item 1 is not overdue"), "{err}");
    doc.run(
        "todo.overdue",
        Some("list"),
        json!({"index": 2, "today": "2026-01-01"}),
    )
    .unwrap();
}

#[test]
fn without_the_upcaster_the_handler_meets_the_old_shape() {
    // What the test above sees with no upcaster registered (so it can fail).
    let mut r = Registry::builtin();
    r.register(Arc::new(Add));
    r.register(Arc::new(Overdue));
    let mut doc = Doc::new(r);
    let mut old = doc
        .run("todo.add", Some("list"), json!({"text": "milk"}))
        .unwrap()
        .remove(0);
    old.value = json!({"text": "old"});
    doc.fold(old);
    assert_eq!(
        doc.state.block("list").unwrap().contents["items"][1],
        json!({"text": "old"})
    );
    let err = doc
        .run(
            "todo.overdue",
            Some("list"),
            json!({"index": 1, "today": "2026-01-01"}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("item 1 has no 'due' key"), "{err}");
    let mut folds = doc.registry.folds().clone();
    folds.register_upcast("todo.add", 1, add_due);
    assert_ne!(folds.fingerprint(), doc.registry.folds().fingerprint());
}

#[test]
#[should_panic(expected = "the next upcaster of 'todo.add' goes from version 2")]
fn registering_an_upcaster_twice_is_refused_when_the_registry_is_built() {
    let mut r = registry();
    r.register_upcast("todo.add", 1, add_due);
}
