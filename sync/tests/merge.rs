//! The merge order is the same on every node whatever order events arrive in, it extends the
//! causal order, and "happened before" agrees with reachability through prev and deps.

mod common;

use std::collections::{HashMap, HashSet};

use elfiee_sync::identity::{EventId, NodeId, Origin, Rejection};
use elfiee_sync::merge::{InsertError, MergeIndex, Missing};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    /// Node n writes an event.
    Write(usize),
    /// Node `to` receives everything node `from` has.
    Deliver { from: usize, to: usize },
}

fn step(nodes: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..nodes).prop_map(Step::Write),
        2 => (0..nodes, 0..nodes).prop_map(|(from, to)| Step::Deliver { from, to }),
    ]
}

struct Node {
    id: NodeId,
    index: MergeIndex,
    /// Everything this node has, in the order it got it (a causal order).
    log: Vec<(EventId, Origin)>,
}

fn id_of(origin: &Origin) -> EventId {
    EventId(*blake3::hash(format!("{origin:?}").as_bytes()).as_bytes())
}

fn deliver(from: &[(EventId, Origin)], to: &mut Node) {
    for (id, origin) in from {
        if !to.index.contains(id) {
            to.index
                .insert(*id, origin)
                .expect("causal delivery never misses");
            to.log.push((*id, origin.clone()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn every_node_ends_with_the_same_order_and_it_extends_causality(
        steps in proptest::collection::vec(step(3), 1..80)
    ) {
        let mut nodes: Vec<Node> = (0..3u8)
            .map(|i| Node { id: NodeId([i + 1; 32]), index: MergeIndex::new(), log: Vec::new() })
            .collect();
        let mut all: HashMap<EventId, Origin> = HashMap::new();
        for s in &steps {
            match *s {
                Step::Write(n) => {
                    let origin = nodes[n].index.next_origin(nodes[n].id);
                    let id = id_of(&origin);
                    nodes[n].index.insert(id, &origin).unwrap();
                    nodes[n].log.push((id, origin.clone()));
                    all.insert(id, origin);
                }
                Step::Deliver { from, to } if from != to => {
                    let log = nodes[from].log.clone();
                    deliver(&log, &mut nodes[to]);
                }
                Step::Deliver { .. } => {}
            }
        }
        // Heal: everyone gets everything, each in its own arrival order.
        for _ in 0..2 {
            for (from, to) in common::ordered_pairs(3) {
                let log = nodes[from].log.clone();
                deliver(&log, &mut nodes[to]);
            }
        }
        let order: Vec<_> = nodes[0].index.order().copied().collect();
        prop_assert_eq!(order.len(), all.len());
        for n in &nodes[1..] {
            let other: Vec<_> = n.index.order().copied().collect();
            prop_assert_eq!(&other, &order);
        }
        // Reachability through prev and deps, by search.
        let reach = |from: &EventId| -> HashSet<EventId> {
            let mut seen = HashSet::new();
            let mut stack = vec![*from];
            while let Some(x) = stack.pop() {
                let o = &all[&x];
                for p in o.prev.iter().chain(&o.deps) {
                    if seen.insert(*p) {
                        stack.push(*p);
                    }
                }
            }
            seen
        };
        let index = &nodes[0].index;
        for b in all.keys() {
            let past = reach(b);
            for a in all.keys() {
                prop_assert_eq!(index.happened_before(a, b), past.contains(a));
                if past.contains(a) {
                    prop_assert!(index.key(a) < index.key(b), "merge order must extend causality");
                }
            }
        }
    }
}

#[test]
fn gaps_wait_and_forks_are_rejected() {
    let n = NodeId([1; 32]);
    let mut a = MergeIndex::new();
    let first = a.next_origin(n);
    let first_id = id_of(&first);
    a.insert(first_id, &first).unwrap();
    let second = a.next_origin(n);
    let second_id = id_of(&second);
    a.insert(second_id, &second).unwrap();

    // Another node that has neither: the second waits for the first.
    let mut b = MergeIndex::new();
    assert_eq!(
        b.insert(second_id, &second),
        Err(InsertError::Missing(Missing::Events(vec![first_id])))
    );
    b.insert(first_id, &first).unwrap();
    b.insert(second_id, &second).unwrap();
    // Inserting again is harmless (a redelivery).
    assert_eq!(b.insert(second_id, &second), Ok(a.key(&second_id).unwrap()));

    // A fork: another event after the first, with the same origin_seq as the second.
    let fork = Origin {
        node: n,
        seq: 2,
        prev: Some(first_id),
        deps: vec![],
    };
    let fork_id = EventId([7; 32]);
    assert!(matches!(
        b.insert(fork_id, &fork),
        Err(InsertError::Rejected(Rejection::BrokenPrev { seq: 2, .. }))
    ));
    // A first event that claims a later origin_seq.
    let mut c = MergeIndex::new();
    let bad = Origin {
        node: NodeId([2; 32]),
        seq: 3,
        prev: None,
        deps: vec![],
    };
    assert!(matches!(
        c.insert(EventId([8; 32]), &bad),
        Err(InsertError::Rejected(Rejection::BrokenPrev { seq: 3, .. }))
    ));
}
