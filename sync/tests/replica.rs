//! Three nodes run real commands on their own replicas and exchange signed events in random
//! orders: after everyone has everything, all digests are equal, equal to a fold from
//! scratch in merge order, and equal to a fresh node that ingests every event.

mod common;

use elfiee_capabilities::Registry;
use elfiee_model::Command;
use elfiee_sync::identity::{NodeKey, SyncEvent};
use elfiee_sync::replica::{Added, Replica};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Step {
    /// Node n creates a markdown block.
    Create(usize),
    /// Node n writes text into its k-th known block.
    Write(usize, usize, String),
    /// Node n links its k-th block to its j-th.
    Link(usize, usize, usize),
    /// Node n deletes its k-th block.
    Delete(usize, usize),
    /// Node `to` receives everything node `from` has, in `from`'s order.
    Deliver(usize, usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0..3usize).prop_map(Step::Create),
        4 => (0..3usize, 0..8usize, "[a-z ]{0,12}").prop_map(|(n, k, t)| Step::Write(n, k, t)),
        1 => (0..3usize, 0..8usize, 0..8usize).prop_map(|(n, k, j)| Step::Link(n, k, j)),
        1 => (0..3usize, 0..8usize).prop_map(|(n, k)| Step::Delete(n, k)),
        3 => (0..3usize, 0..3usize).prop_map(|(a, b)| Step::Deliver(a, b)),
    ]
}

struct Node {
    key: NodeKey,
    replica: Replica,
    /// Every event this node has, in the order it got them.
    log: Vec<SyncEvent>,
}

impl Node {
    /// Runs a command against this node's merged state and shares its events.
    fn run(&mut self, registry: &Registry, cmd: Command) {
        let state = self.replica.state().clone();
        let origin = self.replica.index().next_origin(self.key.node());
        let mut seed = [0u8; 16];
        seed.copy_from_slice(
            &blake3::hash(format!("{}:{}", self.key.node(), origin.seq).as_bytes()).as_bytes()
                [..16],
        );
        let ctx = registry.ctx(
            chrono::DateTime::from_timestamp_millis(1_767_225_600_000).unwrap(),
            &self.key.node().to_hex()[..8],
            seed,
        );
        let Ok(events) = registry.execute(&cmd, &state, &ctx) else {
            return; // rejected: nothing to share
        };
        for e in events {
            let origin = self.replica.index().next_origin(self.key.node());
            let sealed = SyncEvent::seal(&self.key, origin, &cmd, &e);
            assert_eq!(self.replica.add(&sealed).unwrap(), Added::Appended);
            self.log.push(sealed);
        }
    }

    fn block(&self, k: usize) -> Option<String> {
        let ids: Vec<String> = self
            .replica
            .state()
            .blocks
            .iter()
            .map(|(id, _)| id.to_owned())
            .collect();
        (!ids.is_empty()).then(|| ids[k % ids.len()].clone())
    }
}

/// `n` nodes with fresh replicas and fixed keys.
fn nodes(registry: &Registry, n: u8) -> Vec<Node> {
    (0..n)
        .map(|i| Node {
            key: NodeKey::from_seed([i + 1; 32]),
            replica: Replica::new(registry.clone()),
            log: Vec::new(),
        })
        .collect()
}

fn deliver(from: &[SyncEvent], to: &mut Node) {
    for e in from {
        if !to.replica.index().contains(&e.id) {
            e.verify(|n| Some(n.0)).unwrap();
            to.replica.add(e).unwrap();
            to.log.push(e.clone());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn equal_event_sets_give_equal_states_whatever_the_arrival_order(
        steps in proptest::collection::vec(step(), 1..120)
    ) {
        let registry = Registry::builtin();
        let mut nodes = nodes(&registry, 3);
        // Node 0 creates the document; the others start from it.
        nodes[0].run(&registry, Command::new("alice", "elf.init", None, json!({"name": "Alice"})));
        for to in 1..3 {
            let log = nodes[0].log.clone();
            deliver(&log, &mut nodes[to]);
        }
        for s in &steps {
            match s {
                Step::Create(n) => nodes[*n].run(&registry, Command::new("alice", "core.create", None, json!({"name": "b", "block_type": "markdown"}))),
                Step::Write(n, k, t) => if let Some(b) = nodes[*n].block(*k) {
                    nodes[*n].run(&registry, Command::new("alice", "markdown.write", Some(&b), json!({"markdown": t})));
                },
                Step::Link(n, k, j) => if let (Some(a), Some(b)) = (nodes[*n].block(*k), nodes[*n].block(*j)) {
                    nodes[*n].run(&registry, Command::new("alice", "core.link", Some(&a), json!({"to": b, "relation": "reference"})));
                },
                Step::Delete(n, k) => if let Some(b) = nodes[*n].block(*k) {
                    nodes[*n].run(&registry, Command::new("alice", "core.delete", Some(&b), json!({})));
                },
                Step::Deliver(a, b) if a != b => {
                    let log = nodes[*a].log.clone();
                    deliver(&log, &mut nodes[*b]);
                }
                Step::Deliver(..) => {}
            }
        }
        for _ in 0..2 {
            for (a, b) in common::ordered_pairs(3) {
                let log = nodes[a].log.clone();
                deliver(&log, &mut nodes[b]);
            }
        }
        let digest = nodes[0].replica.digest();
        for n in &nodes {
            prop_assert_eq!(n.replica.digest(), digest.clone());
            prop_assert_eq!(n.replica.refold().digest(), digest.clone());
        }
        // A new device: everything, node by node.
        let mut fresh = Node { key: NodeKey::from_seed([9; 32]), replica: Replica::new(registry.clone()), log: Vec::new() };
        for i in [2, 1, 0] {
            let log = nodes[i].log.clone();
            deliver(&log, &mut fresh);
        }
        prop_assert_eq!(fresh.replica.digest(), digest);
    }
}

/// Concurrent events: the node that sorts later folded its own first, so the other node's
/// event rolls its state back and everything after it is folded again.
#[test]
fn an_event_that_sorts_before_applied_ones_rolls_back_and_refolds() {
    let registry = Registry::builtin();
    let mut nodes = nodes(&registry, 2);
    // Which node id sorts first decides who has to reorder.
    nodes.sort_by_key(|n| n.key.node());
    nodes[0].run(
        &registry,
        Command::new("alice", "elf.init", None, json!({"name": "Alice"})),
    );
    let init = nodes[0].log.clone();
    deliver(&init, &mut nodes[1]);
    for n in nodes.iter_mut() {
        n.run(
            &registry,
            Command::new(
                "alice",
                "core.create",
                None,
                json!({"name": "mine", "block_type": "markdown"}),
            ),
        );
    }
    // Node 1's create has the same Lamport time as node 0's and a larger node id: node 0's
    // sorts first, so node 1 must put it under its own.
    let first = nodes[0].log[nodes[0].log.len() - 1].clone();
    let added = nodes[1].replica.add(&first).unwrap();
    assert!(
        matches!(added, Added::Reordered { refolded } if refolded >= 2),
        "{added:?}"
    );
    let second = nodes[1].log[nodes[1].log.len() - 1].clone();
    assert_eq!(nodes[0].replica.add(&second).unwrap(), Added::Appended);
    assert_eq!(nodes[0].replica.digest(), nodes[1].replica.digest());
    assert_eq!(
        nodes[1].replica.refold().digest(),
        nodes[1].replica.digest()
    );
    assert_eq!(nodes[1].replica.state().blocks.len(), 2);
    // A redelivery changes nothing.
    assert_eq!(nodes[1].replica.add(&first).unwrap(), Added::Duplicate);
}

/// The partition case of the issue, on replicas: A and B write one block while cut off, and
/// A revokes B's grant; after healing every node shows the same winner, lists the loser in
/// the block's conflicts, and flags B's write after the revoke as unauthorized.
#[test]
fn a_partition_resolves_the_same_way_on_every_node() {
    let registry = Registry::builtin();
    let mut nodes = nodes(&registry, 3);
    let (a, b) = (0, 1);
    nodes[a].run(
        &registry,
        Command::new("alice", "elf.init", None, json!({"name": "Alice"})),
    );
    nodes[a].run(
        &registry,
        Command::new(
            "alice",
            "editor.create",
            None,
            json!({"name": "Bob", "editor_id": "bob"}),
        ),
    );
    nodes[a].run(
        &registry,
        Command::new(
            "alice",
            "core.create",
            None,
            json!({"name": "x", "block_type": "markdown", "block_id": "x"}),
        ),
    );
    nodes[a].run(
        &registry,
        Command::new(
            "alice",
            "core.grant",
            Some("x"),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        ),
    );
    let shared = nodes[a].log.clone();
    for n in nodes.iter_mut().skip(1) {
        deliver(&shared, n);
    }
    // Cut off: A writes and revokes; B writes three times (its last comes after the revoke
    // in merge order: one more Lamport step than A's revoke).
    let write = |who: &str, text: &str| {
        Command::new(who, "markdown.write", Some("x"), json!({"markdown": text}))
    };
    nodes[a].run(&registry, write("alice", "from A"));
    nodes[a].run(
        &registry,
        Command::new(
            "alice",
            "core.revoke",
            Some("x"),
            json!({"editor_id": "bob", "cap_id": "markdown.write"}),
        ),
    );
    for t in ["B one", "B two", "B three"] {
        nodes[b].run(&registry, write("bob", t));
    }
    let b_last = nodes[b].log.last().unwrap().id;
    // Each side saw its own writes applied.
    assert_eq!(
        nodes[b].replica.state().blocks["x"].contents["markdown"],
        "B three"
    );
    // Heal, in different orders on different nodes.
    for (from, to) in [(b, a), (a, b), (a, 2), (b, 2)] {
        let log = nodes[from].log.clone();
        deliver(&log, &mut nodes[to]);
    }
    let digest = nodes[0].replica.digest();
    for n in &nodes {
        assert_eq!(n.replica.digest(), digest);
    }
    let state = nodes[2].replica.state();
    let unauthorized = &state.extensions["sync"]["unauthorized"];
    assert_eq!(
        unauthorized,
        &json!([b_last.to_hex()]),
        "B's write after the revoke"
    );
    let block = &state.blocks["x"];
    let conflicts = block.metadata.custom["conflicts"].as_array().unwrap();
    assert!(!conflicts.is_empty(), "the concurrent writes are listed");
    let text = block.contents["markdown"].as_str().unwrap();
    assert_ne!(text, "B three", "an unauthorized write is not applied");
    // The last conflict's winner is the write whose text the block shows.
    let winner = conflicts.last().unwrap()["winner"].as_str().unwrap();
    let winner_text = nodes
        .iter()
        .flat_map(|n| n.log.iter())
        .find(|e| e.id.to_hex() == winner)
        .map(|e| e.value["contents"]["markdown"].clone())
        .unwrap();
    assert_eq!(winner_text, json!(text));
}

/// The merged state's `last_seq` counts every event in merge order, applied or not (an
/// unauthorized last event included).
#[test]
fn the_merged_state_counts_every_event_in_its_last_seq() {
    let registry = Registry::builtin();
    let mut nodes = nodes(&registry, 2);
    nodes[0].run(
        &registry,
        Command::new("alice", "elf.init", None, json!({"name": "Alice"})),
    );
    let log = nodes[0].log.clone();
    deliver(&log, &mut nodes[1]);
    // Node 1 runs a command as an editor the document does not know of on node 0's side: it
    // is refused by node 1's own pipeline, so forge its event by sealing one by hand.
    let cmd = Command::new(
        "mallory",
        "core.create",
        None,
        json!({"name": "m", "block_type": "markdown"}),
    );
    let mut e = nodes[0].log.last().unwrap().to_event();
    e.attribute = "mallory/core.create".into();
    e.entity = "m".into();
    e.cmd_id = cmd.cmd_id;
    let origin = nodes[1].replica.index().next_origin(nodes[1].key.node());
    let sealed = SyncEvent::seal(&nodes[1].key, origin, &cmd, &e);
    nodes[1].replica.add(&sealed).unwrap();
    let state = nodes[1].replica.state();
    assert_eq!(
        state.extensions["sync"]["unauthorized"],
        json!([sealed.id.to_hex()])
    );
    assert_eq!(state.last_seq, nodes[1].replica.len() as u64);
}

/// An embedder's kind that declares itself a block write (`Capability::merge`) gets conflict
/// marks like `markdown.write`; the same kind left at the default does not (issue 27: sync
/// asks the kind instead of a list of built-in names).
#[test]
fn an_embedders_write_kind_gets_conflict_marks_when_it_says_it_overwrites() {
    use std::sync::Arc;

    use elfiee_capabilities::{Capability, Merge, Target};
    use elfiee_model::{CapError, Ctx, EventDraft};
    use elfiee_projections::{Fold, State};

    struct Notes(Merge);
    impl Capability for Notes {
        fn id(&self) -> &'static str {
            "notes.write"
        }
        fn target(&self) -> Target {
            Target::Block(Some("markdown"))
        }
        fn handle(&self, cmd: &Command, _: &State, _: &Ctx) -> Result<Vec<EventDraft>, CapError> {
            Ok(vec![EventDraft::new(
                cmd.block_id.clone().unwrap_or_default(),
                self.id(),
                json!({"contents": {"notes": cmd.payload["notes"]}}),
            )])
        }
        fn fold(&self) -> Option<Arc<dyn Fold>> {
            Some(Arc::new(elfiee_projections::fold_patch))
        }
        fn merge(&self) -> Merge {
            self.0
        }
    }

    for (merge, marked) in [(Merge::BlockWrite, true), (Merge::Fold, false)] {
        let mut registry = Registry::builtin();
        registry.register(Arc::new(Notes(merge)));
        let mut nodes = nodes(&registry, 2);
        for cmd in [
            Command::new("alice", "elf.init", None, json!({"name": "Alice"})),
            Command::new(
                "alice",
                "core.create",
                None,
                json!({"name": "x", "block_type": "markdown", "block_id": "x"}),
            ),
        ] {
            nodes[0].run(&registry, cmd);
        }
        let shared = nodes[0].log.clone();
        deliver(&shared, &mut nodes[1]);
        // Partitioned: both write the notes.
        for (n, text) in [(0, "from A"), (1, "from B")] {
            nodes[n].run(
                &registry,
                Command::new("alice", "notes.write", Some("x"), json!({"notes": text})),
            );
        }
        let (a, b) = (nodes[0].log.clone(), nodes[1].log.clone());
        deliver(&b, &mut nodes[0]);
        deliver(&a, &mut nodes[1]);
        assert_eq!(nodes[0].replica.digest(), nodes[1].replica.digest());
        for n in &nodes {
            let block = &n.replica.state().blocks["x"];
            let conflicts = block.metadata.custom.get("conflicts");
            assert_eq!(conflicts.is_some(), marked, "{merge:?}: {block:?}");
            if marked {
                let c = &conflicts.unwrap()[0];
                let winner = c["winner"].as_str().unwrap();
                let text = a
                    .iter()
                    .chain(&b)
                    .find(|e| e.id.to_hex() == winner)
                    .map(|e| e.value["contents"]["notes"].clone())
                    .unwrap();
                assert_eq!(
                    block.contents["notes"], text,
                    "the winner's notes are shown"
                );
            }
        }
    }
}

/// A removal cuts the removed node's later events the same way whatever arrived first: a
/// replica that folded them before the removal arrived and one that got the removal first
/// hold equal states, the cut events unapplied (their merge positions counted in
/// `last_seq`), the node's earlier events kept.
#[test]
fn a_removal_cuts_the_same_events_whatever_the_arrival_order() {
    let mut registry = Registry::builtin();
    elfiee_sync::membership::register(&mut registry);
    let mut nodes = nodes(&registry, 3);
    nodes[0].run(
        &registry,
        Command::new("alice", "elf.init", None, json!({"name": "Alice"})),
    );
    let bob = nodes[1].key.node().to_hex();
    for cmd in [
        Command::new(
            "alice",
            "node.add",
            None,
            json!({"node_id": bob, "public_key": bob}),
        ),
        Command::new(
            "alice",
            "editor.create",
            None,
            json!({"name": "bob", "editor_id": "bob"}),
        ),
        Command::new(
            "alice",
            "core.grant",
            None,
            json!({"editor_id": "bob", "cap_id": "core.create"}),
        ),
    ] {
        nodes[0].run(&registry, cmd);
    }
    let setup = nodes[0].log.clone();
    deliver(&setup, &mut nodes[1]);
    deliver(&setup, &mut nodes[2]);
    let create = |name: &str| {
        Command::new(
            "bob",
            "core.create",
            None,
            json!({"name": name, "block_type": "markdown", "block_id": name}),
        )
    };
    nodes[1].run(&registry, create("kept"));
    let kept = nodes[1].log.clone();
    deliver(&kept, &mut nodes[0]);
    // Alice removes bob's node after his first event; bob, not told, writes twice more.
    nodes[0].run(
        &registry,
        Command::new(
            "alice",
            "node.remove",
            None,
            json!({"node_id": bob, "upto": 1}),
        ),
    );
    nodes[1].run(&registry, create("late-1"));
    nodes[1].run(&registry, create("late-2"));
    let (alice, bobs) = (nodes[0].log.clone(), nodes[1].log.clone());
    // Node 0 gets bob's late events after its removal; node 2 before it.
    deliver(&bobs, &mut nodes[0]);
    deliver(&bobs, &mut nodes[2]);
    deliver(&alice, &mut nodes[2]);
    let (a, c) = (nodes[0].replica.state(), nodes[2].replica.state());
    assert_eq!(a.digest(), c.digest());
    assert_eq!(a.digest(), nodes[2].replica.refold().digest());
    assert!(a.blocks.contains_key("kept"));
    assert!(!a.blocks.contains_key("late-1") && !a.blocks.contains_key("late-2"));
    assert_eq!(a.last_seq, nodes[0].replica.len() as u64);
    for n in [&nodes[0], &nodes[2]] {
        assert_eq!(n.replica.refused().get(&nodes[1].key.node()), Some(&2));
    }
}
