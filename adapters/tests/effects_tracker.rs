//! A model of the effect runtime's bookkeeping ([`Tracker`]) under any interleaving of event
//! arrival, run completion, failure and retry: the checkpoint never passes a trigger that has
//! not finished, never goes back, runs stay within the bound, and triggers of one key run one
//! at a time in seq order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use elfiee_adapters::effects::Tracker;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// The next event arrives: a trigger with this key, or (None) an event the effect ignores.
    Event(Option<u8>),
    /// The n-th running trigger (mod count) finishes.
    Finish(usize),
    /// The n-th running trigger fails and backs off.
    Fail(usize),
    /// The n-th backing-off trigger's retry is due.
    Wake(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => proptest::option::weighted(0.7, 0u8..4).prop_map(Op::Event),
        3 => any::<usize>().prop_map(Op::Finish),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::Wake),
    ]
}

struct Model {
    tracker: Tracker,
    limit: usize,
    last_seq: u64,
    keys: BTreeMap<u64, String>,
    unfinished: BTreeSet<u64>,
    running: BTreeSet<u64>,
    backing_off: BTreeSet<u64>,
    /// Per key, the triggers started so far (in the order they started).
    started: HashMap<String, Vec<u64>>,
    checkpoint: u64,
}

impl Model {
    fn start(&mut self) {
        for seq in self.tracker.start(self.limit) {
            assert!(
                self.unfinished.contains(&seq),
                "started {seq}, which is not pending"
            );
            assert!(!self.running.contains(&seq), "started {seq} twice at once");
            assert!(
                !self.backing_off.contains(&seq),
                "started {seq} during its backoff"
            );
            let key = self.keys[&seq].clone();
            // Every earlier trigger with the same key has finished.
            for earlier in self.unfinished.range(..seq) {
                assert_ne!(
                    self.keys[earlier], key,
                    "{seq} started while {earlier} (same key) is unfinished"
                );
            }
            self.started.entry(key).or_default().push(seq);
            self.running.insert(seq);
        }
    }

    fn check(&mut self) {
        let cp = self.tracker.checkpoint();
        assert!(
            cp >= self.checkpoint,
            "checkpoint went back: {} → {cp}",
            self.checkpoint
        );
        assert!(
            cp <= self.last_seq,
            "checkpoint {cp} past the last event {}",
            self.last_seq
        );
        if let Some(first) = self.unfinished.first() {
            assert!(
                cp < *first,
                "checkpoint {cp} passed unfinished trigger {first}"
            );
        } else {
            assert_eq!(
                cp, self.last_seq,
                "nothing unfinished, yet the checkpoint lags"
            );
        }
        self.checkpoint = cp;
        assert!(
            self.running.len() <= self.limit,
            "more than {} running",
            self.limit
        );
        assert_eq!(self.tracker.running(), self.running.len());
        assert_eq!(self.tracker.unfinished(), self.unfinished.len());
        let mut keys = BTreeSet::new();
        for s in &self.running {
            assert!(
                keys.insert(&self.keys[s]),
                "two runs of key {} at once",
                self.keys[s]
            );
        }
        for seqs in self.started.values() {
            let mut sorted = seqs.clone();
            sorted.sort();
            assert_eq!(
                &sorted, seqs,
                "triggers of one key started out of seq order"
            );
        }
    }
}

fn nth(set: &BTreeSet<u64>, n: usize) -> Option<u64> {
    (!set.is_empty()).then(|| *set.iter().nth(n % set.len()).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_checkpoint_never_passes_an_unfinished_trigger(
        start in 0u64..5,
        limit in 1usize..4,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut m = Model {
            tracker: Tracker::new(start),
            limit,
            last_seq: start,
            keys: BTreeMap::new(),
            unfinished: BTreeSet::new(),
            running: BTreeSet::new(),
            backing_off: BTreeSet::new(),
            started: HashMap::new(),
            checkpoint: start,
        };
        for op in ops {
            match op {
                Op::Event(key) => {
                    m.last_seq += 1;
                    match key {
                        Some(k) => {
                            let key = format!("k{k}");
                            m.keys.insert(m.last_seq, key.clone());
                            m.unfinished.insert(m.last_seq);
                            m.tracker.admit(m.last_seq, key);
                        }
                        None => m.tracker.seen(m.last_seq),
                    }
                }
                Op::Finish(n) => {
                    if let Some(s) = nth(&m.running, n) {
                        m.running.remove(&s);
                        m.unfinished.remove(&s);
                        m.tracker.finish(s);
                    }
                }
                Op::Fail(n) => {
                    if let Some(s) = nth(&m.running, n) {
                        m.running.remove(&s);
                        m.backing_off.insert(s);
                        m.tracker.back_off(s);
                    }
                }
                Op::Wake(n) => {
                    if let Some(s) = nth(&m.backing_off, n) {
                        m.backing_off.remove(&s);
                        m.tracker.wake(s);
                    }
                }
            }
            m.start();
            m.check();
        }
        // Drain: wake and finish everything; the checkpoint reaches the last event.
        for _ in 0..10_000 {
            if m.unfinished.is_empty() {
                break;
            }
            for s in std::mem::take(&mut m.backing_off) {
                m.tracker.wake(s);
            }
            for s in std::mem::take(&mut m.running) {
                m.unfinished.remove(&s);
                m.tracker.finish(s);
            }
            m.start();
            m.check();
        }
        prop_assert!(m.unfinished.is_empty(), "triggers never ran: {:?}", m.unfinished);
        prop_assert_eq!(m.tracker.checkpoint(), m.last_seq);
    }
}
