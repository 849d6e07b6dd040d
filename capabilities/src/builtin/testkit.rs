//! A tiny in-memory pipeline for the handler tests: execute, assign seqs, apply.
use elfiee_model::{CapError, Command, Ctx, Event};
use elfiee_projections::State;
use serde_json::{json, Value};

use crate::Registry;

pub struct Kit {
    pub registry: Registry,
    pub state: State,
    pub ctx: Ctx,
    pub n: u8,
}

impl Kit {
    /// A file owned by `alice`, with `bob` as a plain editor.
    pub fn new() -> Kit {
        let registry = Registry::builtin();
        let ctx = registry.ctx(
            chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
            "n1",
            [0; 16],
        );
        let mut kit = Kit {
            registry,
            state: State::default(),
            ctx,
            n: 0,
        };
        kit.ok("elf.init", None, json!({"name": "Alice"}));
        kit.ok(
            "editor.create",
            None,
            json!({"name": "Bob", "editor_id": "bob"}),
        );
        kit
    }

    /// A [`Kit::new`] file with one block of type `ty` named `name`, and that block's id.
    pub fn with_block(ty: &str, name: &str) -> (Kit, String) {
        let mut kit = Kit::new();
        let id = kit.block(ty, name);
        (kit, id)
    }

    pub fn run(
        &mut self,
        editor: &str,
        cap: &str,
        block: Option<&str>,
        payload: Value,
    ) -> Result<Vec<Event>, CapError> {
        self.n = self.n.wrapping_add(1);
        self.ctx.id_seed = [self.n; 16];
        let cmd = Command::new(editor, cap, block, payload);
        let events = self.registry.execute(&cmd, &self.state, &self.ctx)?;
        let mut out = Vec::new();
        for mut e in events {
            e.seq = self.state.last_seq + 1;
            self.registry.apply(&mut self.state, &e);
            out.push(e);
        }
        Ok(out)
    }

    /// Runs a command of the file owner (`alice`) that must succeed; returns its events.
    pub fn ok(&mut self, cap: &str, block: Option<&str>, payload: Value) -> Vec<Event> {
        self.ok_by("alice", cap, block, payload)
    }

    /// Runs a command of the file owner that must be rejected (see [`Kit::err_by`]).
    pub fn err(&mut self, cap: &str, block: Option<&str>, payload: Value) -> CapError {
        self.err_by("alice", cap, block, payload)
    }

    /// Runs a command of the file owner that must be rejected with a message containing
    /// `part` (see [`Kit::err_contains_by`]).
    pub fn err_contains(&mut self, cap: &str, block: Option<&str>, payload: Value, part: &str) {
        self.err_contains_by("alice", cap, block, payload, part)
    }

    /// Runs a command of `editor` that must succeed; returns its events.
    pub fn ok_by(
        &mut self,
        editor: &str,
        cap: &str,
        block: Option<&str>,
        payload: Value,
    ) -> Vec<Event> {
        self.run(editor, cap, block, payload.clone())
            .unwrap_or_else(|e| panic!("{cap} {payload} should succeed: {e}"))
    }

    /// Runs a command of `editor` that must be rejected, and must leave the state as it was.
    pub fn err_by(
        &mut self,
        editor: &str,
        cap: &str,
        block: Option<&str>,
        payload: Value,
    ) -> CapError {
        let before = self.state.clone();
        let e = self
            .run(editor, cap, block, payload)
            .expect_err("command should be rejected");
        assert_eq!(
            before, self.state,
            "a rejected command must not change state"
        );
        e
    }

    /// Runs a command of `editor` that must be rejected with a message containing `part` (and
    /// must leave the state as it was, as [`Kit::err_by`] checks).
    pub fn err_contains_by(
        &mut self,
        editor: &str,
        cap: &str,
        block: Option<&str>,
        payload: Value,
        part: &str,
    ) {
        let e = self.err_by(editor, cap, block, payload).to_string();
        assert!(e.contains(part), "expected {part:?} in: {e}");
    }

    /// Imports a project folder holding `files` (`directory.import` at `/tmp/proj`) as alice
    /// and returns the directory block's id.
    pub fn project(&mut self, files: Value) -> String {
        let ev = self.ok(
            "directory.import",
            None,
            json!({"root": "/tmp/proj", "files": files}),
        );
        ev[0].entity.clone()
    }

    /// Creates an agent (`agent.create` with `payload`) as alice and returns its block id.
    pub fn agent(&mut self, payload: Value) -> String {
        self.ok("agent.create", None, payload)[1].entity.clone()
    }

    /// Links `from` to `to` with `relation` as alice.
    pub fn link(&mut self, from: &str, to: &str, relation: &str) {
        self.ok(
            "core.link",
            Some(from),
            json!({"to": to, "relation": relation}),
        );
    }

    /// Grants `cap` on `block` (`None`: on `*`) to `editor` as alice.
    pub fn grant(&mut self, editor: &str, cap: &str, block: Option<&str>) {
        self.ok(
            "core.grant",
            block,
            json!({"editor_id": editor, "cap_id": cap}),
        );
    }

    /// Creates a block as alice and returns its id.
    pub fn block(&mut self, ty: &str, name: &str) -> String {
        let ev = self.ok("core.create", None, json!({"name": name, "block_type": ty}));
        ev[0].entity.clone()
    }
}
