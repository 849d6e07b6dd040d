//! An example embedder: a `checklist` block type on the Elfiee engine, built on its public
//! API only (the `elfiee` facade crate). docs/EMBEDDING.md walks through it.
//!
//! Three capabilities, each a pure handler with its own pure fold:
//! - `checklist.add {text, due}` appends an unticked item to `contents.items`, with an
//!   optional due date (`YYYY-MM-DD`). Its payload changed shape: version 1 was `{text}`, and
//!   [`add_due`], registered as the upcaster from version 1, reads those events as version 2
//!   with no due date (their log entries stay as written; docs/EMBEDDING.md, "Changing a
//!   payload's shape");
//! - `checklist.tick {index, done}` ticks (or unticks) an item; ticking a ticked item commits
//!   nothing;
//! - `checklist.notes {notes}` sets the list's notes, a body that goes to the content store
//!   when it is 256 bytes or more (the built-in block patch fold handles the reference);
//! - `checklist.export {path}` asks for the list to be written to a Markdown file: a request
//!   that changes no state. The [`ExportEffect`] does the writing (I/O lives in effects, never
//!   in handlers) and records `checklist.exported {trigger_seq, path, bytes | error}`, whose
//!   fold keeps it in `metadata.custom.last_export`. Replaying the log writes nothing.
//!
//! [`registry`] is the built-in registry plus these; give it to the engine
//! (`EngineConfig { registry, .. }`), the command line (`elfiee::cli::main_with_effects`
//! with [`effects`], see `src/main.rs`) and the test kit
//! (`elfiee::testkit::Check::new(registry())`).

use std::sync::Arc;

use elfiee::adapters::effects::{BoxFuture, Effect, EffectCx, EffectSet, FailedOutcome};
use elfiee::capabilities::{Capability, Registry, Target};
use elfiee::model::{Block, CapError, Command, Ctx, Event, EventDraft};
use elfiee::projections::{fold_patch, update_block, Fold, State};
use elfiee::EngineError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ts_rs::TS;

/// The block type.
pub const BLOCK_TYPE: &str = "checklist";

/// Longest item text, in characters.
pub const MAX_TEXT: usize = 500;

/// `checklist.add` (payload version 2; version 1 had no `due`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct AddPayload {
    pub text: String,
    /// When it is due, `YYYY-MM-DD` (none when absent or null).
    #[serde(default)]
    #[ts(optional = nullable)]
    pub due: Option<String>,
}

/// `checklist.tick`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct TickPayload {
    /// Position of the item, from 0.
    pub index: u32,
    /// `false` unticks it (default `true`).
    #[serde(default = "yes")]
    #[ts(optional, as = "Option<bool>")]
    pub done: bool,
}

/// `checklist.notes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct NotesPayload {
    pub notes: String,
}

/// One item, as a checklist block keeps it in `contents.items`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Item {
    pub text: String,
    pub done: bool,
    /// When it is due, `YYYY-MM-DD`; null for none (and for every item added before due
    /// dates existed).
    #[serde(default)]
    pub due: Option<String>,
}

fn yes() -> bool {
    true
}

/// The built-in capabilities plus the checklist's, with their folds and body keys.
pub fn registry() -> Registry {
    let mut r = Registry::builtin();
    r.register(Arc::new(Add));
    r.register_upcast("checklist.add", 1, add_due);
    r.register(Arc::new(Tick));
    r.register(Arc::new(Notes));
    r.register(Arc::new(Export));
    r.register(Arc::new(Exported));
    r.declare_body("checklist.notes", &["notes"]);
    r.declare_block_body(BLOCK_TYPE, &["notes"]);
    // Its documents may be shared between devices (`elfiee-checklist serve --sync`): sync's
    // own capability belongs in the registry every engine of the program uses, so their
    // snapshots agree on the folds (the command line adds it when a registry lacks it).
    elfiee::sync::membership::register(&mut r);
    r
}

/// The items of a checklist block (none if it has none or is not a checklist).
pub fn items(block: &Block) -> Vec<Item> {
    block
        .contents
        .get("items")
        .and_then(|v| Vec::<Item>::deserialize(v).ok())
        .unwrap_or_default()
}

/// The upcaster of `checklist.add` from version 1 (`{text}`) to version 2 (`{text, due}`):
/// an item added before due dates existed has none. Pure and total: a value that is not an
/// object comes back as it was (the fold skips it).
pub fn add_due(mut value: Value) -> Value {
    if let Some(o) = value.as_object_mut() {
        o.insert("due".into(), Value::Null);
    }
    value
}

/// Checks a due date is `YYYY-MM-DD` and a day of the calendar.
fn check_due(due: &str) -> Result<(), String> {
    let b = due.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let d = b.get(r)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(d).ok()?.parse().ok()
    };
    let shape = b.len() == 10 && b[4] == b'-' && b[7] == b'-';
    let (true, Some(year), Some(month), Some(day)) =
        (shape, digits(0..4), digits(5..7), digits(8..10))
    else {
        return Err("it is not YYYY-MM-DD".into());
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(format!("there is no month {month}")),
    };
    if day == 0 || day > days {
        return Err(format!("{year}-{month:02} has no day {day}"));
    }
    Ok(())
}

fn parse<T: for<'de> Deserialize<'de>>(cmd: &Command) -> Result<T, CapError> {
    T::deserialize(&cmd.payload).map_err(|e| CapError::payload(&cmd.cap_id, e.to_string()))
}

/// The target block (the pipeline checked it exists and is a checklist before the handler).
fn target<'s>(cmd: &Command, state: &'s State) -> Result<&'s Block, CapError> {
    let id = cmd.block_id.as_deref().unwrap_or_default();
    state
        .block(id)
        .ok_or_else(|| CapError::BlockNotFound(id.to_owned()))
}

pub struct Add;

impl Capability for Add {
    fn id(&self) -> &'static str {
        "checklist.add"
    }

    fn target(&self) -> Target {
        Target::Block(Some(BLOCK_TYPE))
    }

    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let p: AddPayload = parse(cmd)?;
        let text = p.text.trim();
        if text.is_empty() {
            return Err(CapError::payload(self.id(), "the item's text is empty"));
        }
        let chars = text.chars().count();
        if chars > MAX_TEXT {
            return Err(CapError::payload(
                self.id(),
                format!("the item's text has {chars} characters; the limit is {MAX_TEXT}"),
            ));
        }
        if let Some(due) = &p.due {
            check_due(due).map_err(|why| {
                CapError::payload(
                    self.id(),
                    format!("due '{due}' is not a date: {why}; write it as YYYY-MM-DD, e.g. \"2026-12-01\", or leave it out"),
                )
            })?;
        }
        let block = target(cmd, state)?;
        // The pipeline adds `"$v": 2` (the kind's version, from its upcaster).
        Ok(vec![EventDraft::new(
            &block.block_id,
            self.id(),
            json!({"text": text, "due": p.due}),
        )])
    }

    /// Folds version 2 only (`{text, due}`, `due` a date or null; anything else is skipped):
    /// version 1 events reach it through [`add_due`].
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(|state: &mut State, event: &Event| {
            update_block(state, event, |b, v| {
                let text = v.get("text").and_then(Value::as_str);
                let due = v.get("due").filter(|d| d.is_null() || d.is_string());
                let (Some(text), Some(due)) = (text, due) else {
                    return;
                };
                let item = json!({"text": text, "done": false, "due": due});
                if !b.contents.is_object() {
                    b.contents = json!({});
                }
                match b.contents.get_mut("items").and_then(Value::as_array_mut) {
                    Some(list) => list.push(item),
                    None => b.contents["items"] = json!([item]),
                }
            })
        }))
    }
}

pub struct Tick;

impl Capability for Tick {
    fn id(&self) -> &'static str {
        "checklist.tick"
    }

    fn target(&self) -> Target {
        Target::Block(Some(BLOCK_TYPE))
    }

    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let p: TickPayload = parse(cmd)?;
        let block = target(cmd, state)?;
        let list = items(block);
        let Some(item) = list.get(p.index as usize) else {
            return Err(CapError::rejected(format!(
                "item {} does not exist; the list '{}' has {} items (numbered from 0)",
                p.index,
                block.name,
                list.len()
            )));
        };
        if item.done == p.done {
            return Ok(Vec::new());
        }
        Ok(vec![EventDraft::new(
            &block.block_id,
            self.id(),
            json!({"index": p.index, "done": p.done}),
        )])
    }

    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(|state: &mut State, event: &Event| {
            update_block(state, event, |b, v| {
                let index = v.get("index").and_then(Value::as_u64);
                let done = v.get("done").and_then(Value::as_bool);
                let (Some(index), Some(done)) = (index, done) else {
                    return;
                };
                let item = b
                    .contents
                    .get_mut("items")
                    .and_then(Value::as_array_mut)
                    .and_then(|list| list.get_mut(index as usize));
                if let Some(Value::Object(item)) = item {
                    item.insert("done".into(), Value::Bool(done));
                }
            })
        }))
    }
}

pub struct Notes;

impl Capability for Notes {
    fn id(&self) -> &'static str {
        "checklist.notes"
    }

    fn target(&self) -> Target {
        Target::Block(Some(BLOCK_TYPE))
    }

    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let p: NotesPayload = parse(cmd)?;
        let block = target(cmd, state)?;
        Ok(vec![EventDraft::new(
            &block.block_id,
            self.id(),
            json!({"contents": {"notes": p.notes}}),
        )])
    }

    /// The built-in block patch: `contents.notes` (or its content reference) into the block.
    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(fold_patch))
    }

    /// Notes are overwritten whole: when two devices write them at once, the later in the
    /// merged order wins and the block lists the loser in its conflicts, as `markdown.write`.
    fn merge(&self) -> elfiee::capabilities::Merge {
        elfiee::capabilities::Merge::BlockWrite
    }
}

/// `checklist.export`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct ExportPayload {
    /// Absolute path of the Markdown file to write.
    pub path: String,
}

/// The request: checked here (pure), carried out by [`ExportEffect`].
pub struct Export;

impl Capability for Export {
    fn id(&self) -> &'static str {
        "checklist.export"
    }

    fn target(&self) -> Target {
        Target::Block(Some(BLOCK_TYPE))
    }

    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        let p: ExportPayload = parse(cmd)?;
        if !std::path::Path::new(&p.path).is_absolute() || !p.path.ends_with(".md") {
            return Err(CapError::payload(
                self.id(),
                format!("'{}' is not an absolute path to a .md file", p.path),
            ));
        }
        let block = target(cmd, state)?;
        Ok(vec![EventDraft::new(
            &block.block_id,
            self.id(),
            json!({"path": p.path}),
        )])
    }
}

/// The effect's record, authorized by the request's capability (as `terminal.output` is by
/// `terminal.execute`).
pub struct Exported;

impl Capability for Exported {
    fn id(&self) -> &'static str {
        "checklist.exported"
    }

    fn target(&self) -> Target {
        Target::Block(Some(BLOCK_TYPE))
    }

    fn authorized_by(&self, _: &Command) -> &'static str {
        "checklist.export"
    }

    fn handle(&self, cmd: &Command, state: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
        if cmd
            .payload
            .get("trigger_seq")
            .and_then(Value::as_u64)
            .is_none()
        {
            return Err(CapError::payload(
                self.id(),
                "expected an object with a numeric 'trigger_seq'",
            ));
        }
        let block = target(cmd, state)?;
        Ok(vec![EventDraft::new(
            &block.block_id,
            self.id(),
            cmd.payload.clone(),
        )])
    }

    fn fold(&self) -> Option<Arc<dyn Fold>> {
        Some(Arc::new(|state: &mut State, event: &Event| {
            update_block(state, event, |b, v| {
                b.metadata.custom.insert("last_export".into(), v.clone());
            })
        }))
    }
}

/// The list as Markdown: `- [x] text` per item, `(due YYYY-MM-DD)` after it when it has one.
pub fn markdown(block: &Block) -> String {
    let mut out = format!("# {}\n\n", block.name);
    for item in items(block) {
        let mark = if item.done { 'x' } else { ' ' };
        let due = item.due.map(|d| format!(" (due {d})")).unwrap_or_default();
        out.push_str(&format!("- [{mark}] {}{due}\n", item.text));
    }
    out
}

/// Writes the list named by a `checklist.export` event to its path, then records
/// `checklist.exported`. Runs where a host attaches effects (the CLI does, for every
/// command; so does `elfiee::adapters::attach` with [`effects`] as `extra`).
pub struct ExportEffect;

impl Effect for ExportEffect {
    fn name(&self) -> &'static str {
        "checklist-export"
    }

    fn wants(&self, event: &Event) -> bool {
        event.cap_id() == "checklist.export"
    }

    fn run<'a>(&'a self, cx: &'a EffectCx, e: &'a Event) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let path = e
                .value
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let text = cx.file.block(&e.entity).map(|b| markdown(&b));
            let mut out = json!({"trigger_seq": e.seq, "path": path});
            match text {
                None => out["error"] = json!(format!("block {} no longer exists", e.entity)),
                Some(text) => match std::fs::write(path, &text) {
                    Ok(()) => out["bytes"] = json!(text.len()),
                    Err(err) => out["error"] = json!(format!("cannot write {path}: {err}")),
                },
            }
            cx.record(e, "outcome", "checklist.exported", &e.entity, out)
                .await?;
            Ok(())
        })
    }

    fn failed_outcome(&self, e: &Event, why: &str) -> FailedOutcome {
        FailedOutcome {
            cap_id: "checklist.exported",
            block_id: e.entity.clone(),
            payload: json!({"trigger_seq": e.seq, "path": e.value.get("path"), "error": why}),
        }
    }
}

/// The checklist's effects, for `EffectsConfig::extra` or `cli::main_with_effects`.
pub fn effects() -> EffectSet {
    let mut set = EffectSet::new();
    set.register(ExportEffect);
    set
}
