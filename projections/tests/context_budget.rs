//! Context collection: the walk (depth, relations, cycles) and the token budget (never
//! exceeded, deepest dropped first, cuts at character boundaries).

use std::collections::{BTreeMap, HashMap, VecDeque};

use chrono::DateTime;
use elfiee_model::{Block, BlockMetadata, Relation};
use elfiee_projections::context::{collect_context as collect, synthetic_state, TRUNCATION_MARKER};
use elfiee_projections::{collect_context, count_tokens, Context, ContextOptions, State};
use proptest::prelude::*;
use serde_json::{json, Value};

fn block(id: &str, block_type: &str, contents: Value, links: &[(&str, &str)]) -> Block {
    let mut children: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rel, to) in links {
        children
            .entry((*rel).to_owned())
            .or_default()
            .push((*to).to_owned());
    }
    let t = DateTime::from_timestamp_millis(0).unwrap();
    Block {
        block_id: id.into(),
        name: format!("name of {id}"),
        block_type: block_type.into(),
        contents,
        content_refs: Default::default(),
        children,
        owner: "alice".into(),
        metadata: BlockMetadata {
            description: None,
            created_at: t,
            updated_at: t,
            custom: BTreeMap::new(),
        },
    }
}

fn md(id: &str, text: &str, links: &[(&str, &str)]) -> Block {
    block(id, "markdown", json!({ "markdown": text }), links)
}

fn state(blocks: Vec<Block>) -> State {
    let mut s = State::default();
    for b in blocks {
        s.blocks.insert(b.block_id.clone(), b);
    }
    s
}

fn ids(ctx: &Context) -> Vec<&str> {
    ctx.items.iter().map(|i| i.block_id.as_str()).collect()
}

fn roots(r: &[&str]) -> Vec<String> {
    r.iter().map(|s| (*s).to_owned()).collect()
}

fn big() -> ContextOptions {
    budget_of(1_000_000)
}

/// The default options with a budget of `max_tokens`.
fn budget_of(max_tokens: usize) -> ContextOptions {
    ContextOptions {
        max_tokens,
        ..ContextOptions::default()
    }
}

#[test]
fn tokenizer_is_cl100k() {
    // "hello world" is [15339, 1917] in cl100k_base (it would be different in o200k or p50k).
    assert_eq!(count_tokens("hello world"), 2);
    assert_eq!(count_tokens(""), 0);
    assert_eq!(
        count_tokens("<|endoftext|>"),
        7,
        "special-token text counts as ordinary text"
    );
}

#[test]
fn walk_stops_at_max_depth() {
    let s = state(vec![
        md("a", "A", &[("reference", "b")]),
        md("b", "B", &[("implement", "c")]),
        md("c", "C", &[("reference", "d")]),
        md("d", "D", &[]),
    ]);
    let ctx = collect_context(&s, &roots(&["a"]), &big());
    assert_eq!(ids(&ctx), ["a", "b", "c"]);
    assert_eq!(
        ctx.items.iter().map(|i| i.depth).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let to_depth = |max_depth| {
        let opts = ContextOptions { max_depth, ..big() };
        collect_context(&s, &roots(&["a"]), &opts)
    };
    assert_eq!(ids(&to_depth(0)), ["a"]);
    let ctx = to_depth(10);
    assert_eq!(ids(&ctx), ["a", "b", "c", "d"]);
    assert!(ctx.dropped.is_empty() && ctx.truncated.is_none());
}

#[test]
fn cycles_and_shared_children_are_visited_once() {
    // core.link forbids cycles, but a hand-built state may have them: the walk must end.
    let s = state(vec![
        md("a", "A", &[("reference", "b"), ("reference", "c")]),
        md("b", "B", &[("reference", "a"), ("implement", "c")]),
        md("c", "C", &[("reference", "a"), ("reference", "c")]),
    ]);
    let ctx = collect_context(
        &s,
        &roots(&["a", "b", "a"]),
        &ContextOptions {
            max_depth: 50,
            ..big()
        },
    );
    assert_eq!(ids(&ctx), ["a", "b", "c"]);
    assert_eq!(
        ctx.items.iter().map(|i| i.depth).collect::<Vec<_>>(),
        [0, 0, 1]
    );
}

#[test]
fn only_the_chosen_relations_are_followed_and_unknown_roots_skipped() {
    let s = state(vec![
        md(
            "a",
            "A",
            &[("reference", "r"), ("implement", "i"), ("custom", "x")],
        ),
        md("r", "R", &[]),
        md("i", "I", &[]),
        md("x", "X", &[]),
    ]);
    let ctx = collect_context(&s, &roots(&["ghost", "a"]), &big());
    // Children come relation by relation (implement before reference), each in link order.
    assert_eq!(ids(&ctx), ["a", "i", "r"]);
    let only_ref = ContextOptions {
        relations: vec![Relation::Reference],
        ..big()
    };
    assert_eq!(
        ids(&collect_context(&s, &roots(&["a"]), &only_ref)),
        ["a", "r"]
    );
}

#[test]
fn sections_render_markdown_code_and_other_blocks() {
    let s = state(vec![
        md(
            "m",
            "# Title\n\n正文",
            &[("reference", "c"), ("reference", "o")],
        ),
        block(
            "c",
            "code",
            json!({"text": "let s = \"```\";", "language": "rust"}),
            &[],
        ),
        block("o", "terminal", json!({"shell": "sh", "env": {}}), &[]),
    ]);
    let ctx = collect_context(&s, &roots(&["m"]), &big());
    assert_eq!(
        ctx.items[0].section(),
        "## name of m (markdown, m)\n\n# Title\n\n正文\n\n"
    );
    // The code contains ``` so the fence is longer.
    assert_eq!(ctx.items[1].text, "````rust\nlet s = \"```\";\n````");
    assert_eq!(
        ctx.items[2].text,
        serde_json::to_string_pretty(&json!({"shell": "sh", "env": {}})).unwrap()
    );
    assert_eq!(
        ctx.to_markdown(),
        ctx.items.iter().map(|i| i.section()).collect::<String>()
    );
    assert_eq!(ctx.total_tokens, count_tokens(&ctx.to_markdown()));
}

#[test]
fn large_contents_of_other_types_are_shortened() {
    let s = state(vec![block(
        "d",
        "directory",
        json!({"entries": vec!["x".repeat(50); 200]}),
        &[],
    )]);
    let ctx = collect_context(&s, &roots(&["d"]), &big());
    assert!(
        ctx.items[0].text.len() <= 2100,
        "{}",
        ctx.items[0].text.len()
    );
    assert!(ctx.items[0].text.ends_with('…'));
}

#[test]
fn deepest_blocks_are_dropped_first_then_the_last_kept_is_cut() {
    let para = "The engine keeps an append-only log of events. ".repeat(20);
    let s = state(vec![
        md("root", &para, &[("reference", "c1"), ("reference", "c2")]),
        md("c1", &para, &[("reference", "g1")]),
        md("c2", &para, &[]),
        md("g1", &para, &[]),
    ]);
    let full = collect_context(&s, &roots(&["root"]), &big());
    let t: Vec<usize> = full.items.iter().map(|i| i.tokens).collect();
    assert_eq!(ids(&full), ["root", "c1", "c2", "g1"]);

    // Room for everything but the grandchild: it alone goes, nothing is cut.
    let budget = t[0] + t[1] + t[2];
    let ctx = collect_context(&s, &roots(&["root"]), &budget_of(budget));
    assert_eq!(ids(&ctx), ["root", "c1", "c2"]);
    assert_eq!(ctx.dropped, ["g1"]);
    assert_eq!(ctx.truncated, None);
    assert_eq!(ctx.total_tokens, budget);

    // Half of c2's share left: g1 dropped, c2 cut and marked, filled close to the budget.
    let budget = t[0] + t[1] + t[2] / 2;
    let ctx = collect_context(&s, &roots(&["root"]), &budget_of(budget));
    assert_eq!(ids(&ctx), ["root", "c1", "c2"]);
    assert_eq!(ctx.dropped, ["g1"]);
    assert_eq!(ctx.truncated.as_deref(), Some("c2"));
    let cut = &ctx.items[2];
    assert!(cut.text.ends_with(&format!("\n{TRUNCATION_MARKER}")));
    assert!(para.starts_with(
        cut.text
            .trim_end_matches(TRUNCATION_MARKER)
            .trim_end_matches('\n')
    ));
    assert!(
        ctx.total_tokens <= budget && ctx.total_tokens + 5 >= budget,
        "{} of {budget}",
        ctx.total_tokens
    );

    // Less than the root: the root itself is cut, everything else dropped.
    let ctx = collect_context(&s, &roots(&["root"]), &budget_of(40));
    assert_eq!(ids(&ctx), ["root"]);
    assert_eq!(ctx.truncated.as_deref(), Some("root"));
    assert_eq!(ctx.dropped, ["c1", "c2", "g1"]);
    assert!(ctx.total_tokens <= 40);

    // Not even the header fits: nothing at all.
    let ctx = collect_context(&s, &roots(&["root"]), &budget_of(3));
    assert!(ctx.items.is_empty());
    assert_eq!(ctx.dropped, ["root", "c1", "c2", "g1"]);
    assert_eq!(ctx.total_tokens, 0);
}

#[test]
fn cut_code_keeps_its_fence_closed() {
    let code = "fn main() {\n    println!(\"héllo\");\n}\n".repeat(50);
    let s = state(vec![block(
        "c",
        "code",
        json!({"text": code, "language": "rust"}),
        &[],
    )]);
    let ctx = collect_context(&s, &roots(&["c"]), &budget_of(60));
    let text = &ctx.items[0].text;
    assert!(
        text.starts_with("```rust\n") && text.ends_with(&format!("\n```\n{TRUNCATION_MARKER}")),
        "{text}"
    );
    assert!(ctx.total_tokens <= 60);
}

#[test]
fn the_benchmark_state_is_collected_whole_with_an_unlimited_budget() {
    let all = |n| {
        let opts = ContextOptions {
            max_tokens: usize::MAX,
            ..ContextOptions::default()
        };
        let ctx = collect(&synthetic_state(n), &["b0".to_owned()], &opts);
        assert_eq!(ctx.items.len(), n, "every block is reached within depth 2");
        ctx.total_tokens
    };
    let tokens = all(300);
    // Every block contributes a header of more than 10 tokens.
    assert!(tokens > 300 * 10, "{tokens}");
    assert!(all(30) * 5 < tokens);
}

/// The blocks the walk must reach, with their (shortest) depth: a plain BFS over the model.
fn model_reach(s: &State, roots: &[String], opts: &ContextOptions) -> HashMap<String, usize> {
    let mut depth = HashMap::new();
    let mut q = VecDeque::new();
    for r in roots {
        if s.blocks.contains_key(r) && !depth.contains_key(r) {
            depth.insert(r.clone(), 0);
            q.push_back(r.clone());
        }
    }
    while let Some(id) = q.pop_front() {
        let d = depth[&id];
        if d == opts.max_depth {
            continue;
        }
        for (rel, targets) in &s.blocks[&id].children {
            if !opts.relations.iter().any(|r| r.as_str() == rel) {
                continue;
            }
            for t in targets {
                if s.blocks.contains_key(t) && !depth.contains_key(t) {
                    depth.insert(t.clone(), d + 1);
                    q.push_back(t.clone());
                }
            }
        }
    }
    depth
}

fn arb_state() -> impl Strategy<Value = State> {
    let text = prop_oneof![
        "\\PC{0,200}",
        "[a-z \\n]{0,400}",
        "(é|你|🙂|`|\\n| |a|\u{301}){0,150}",
    ];
    let kind = prop_oneof![Just("markdown"), Just("code"), Just("other")];
    (1usize..9)
        .prop_flat_map(move |n| {
            let blocks = proptest::collection::vec((kind.clone(), text.clone(), "[a-z]{0,3}"), n);
            let links = proptest::collection::vec(
                (
                    0..n,
                    0..n,
                    prop_oneof![Just("reference"), Just("implement"), Just("other")],
                ),
                0..(2 * n),
            );
            (blocks, links)
        })
        .prop_map(|(blocks, links)| {
            let mut out = Vec::new();
            for (i, (kind, text, lang)) in blocks.into_iter().enumerate() {
                let links: Vec<(&str, String)> = links
                    .iter()
                    .filter(|(f, _, _)| *f == i)
                    .map(|(_, t, r)| (*r, format!("b{t}")))
                    .collect();
                let link_refs: Vec<(&str, &str)> =
                    links.iter().map(|(r, t)| (*r, t.as_str())).collect();
                let contents = match kind {
                    "markdown" => json!({ "markdown": text }),
                    "code" => json!({ "text": text, "language": lang }),
                    _ => json!({ "note": text, "n": i }),
                };
                out.push(block(&format!("b{i}"), kind, contents, &link_refs));
            }
            state(out)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn context_never_exceeds_the_budget_and_cuts_only_at_char_boundaries(
        s in arb_state(),
        root_picks in proptest::collection::vec(0usize..9, 1..4),
        max_tokens in 0usize..700,
        max_depth in 0usize..4,
        only_reference in any::<bool>(),
    ) {
        let relations = if only_reference { vec![Relation::Reference] } else { Relation::ALL.to_vec() };
        let opts = ContextOptions { max_depth, max_tokens, relations, ..ContextOptions::default() };
        let roots: Vec<String> = root_picks.iter().map(|i| format!("b{i}")).collect();
        let ctx = collect_context(&s, &roots, &opts);

        // The budget holds for the numbers and for the rendered text itself.
        prop_assert!(ctx.total_tokens <= max_tokens);
        let rendered = ctx.to_markdown();
        prop_assert_eq!(count_tokens(&rendered), ctx.total_tokens);
        prop_assert_eq!(ctx.items.iter().map(|i| i.tokens).sum::<usize>(), ctx.total_tokens);
        for item in &ctx.items {
            prop_assert_eq!(count_tokens(&item.section()), item.tokens);
        }

        // Everything reachable is either kept or dropped, once, at its BFS depth.
        let reach = model_reach(&s, &roots, &opts);
        let mut seen: Vec<&str> = ids(&ctx);
        seen.extend(ctx.dropped.iter().map(String::as_str));
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), seen.len(), "a block appears twice");
        prop_assert_eq!(seen.len(), reach.len());
        for item in &ctx.items {
            prop_assert_eq!(reach.get(&item.block_id).copied(), Some(item.depth));
        }

        // Deepest first: nothing kept is deeper than anything dropped.
        let kept_max = ctx.items.iter().map(|i| i.depth).max();
        let dropped_min = ctx.dropped.iter().map(|d| reach[d]).min();
        if let (Some(k), Some(d)) = (kept_max, dropped_min) {
            prop_assert!(k <= d, "kept depth {} but dropped depth {}", k, d);
        }

        // Only the last kept item may be cut; its text is a prefix of the full text + marker.
        let full = collect_context(&s, &roots, &ContextOptions { max_tokens: usize::MAX, ..opts.clone() });
        for (i, item) in ctx.items.iter().enumerate() {
            let whole = &full.items[i];
            prop_assert_eq!(&whole.block_id, &item.block_id);
            if ctx.truncated.as_deref() == Some(item.block_id.as_str()) {
                prop_assert_eq!(i, ctx.items.len() - 1);
                let body = item.text.strip_suffix(TRUNCATION_MARKER).and_then(|t| t.strip_suffix('\n'));
                prop_assert!(body.is_some(), "cut text lacks the marker: {:?}", item.text);
                let body = body.unwrap();
                let raw_prefix = match &s.blocks[&item.block_id].block_type[..] {
                    "code" => body.split_once('\n').map(|(_, r)| r).and_then(|r| r.rsplit_once('\n')).map(|(r, _)| r).unwrap_or(""),
                    _ => body,
                };
                let raw_full = match &s.blocks[&item.block_id].block_type[..] {
                    "code" => s.blocks[&item.block_id].contents["text"].as_str().unwrap().to_owned(),
                    _ => whole.text.clone(),
                };
                prop_assert!(raw_full.starts_with(raw_prefix), "{:?} is not a prefix of {:?}", raw_prefix, raw_full);
            } else {
                prop_assert_eq!(&item.text, &whole.text);
            }
        }
    }
}

/// A state built the way folds build it (the reverse relation index kept).
fn linked_state(blocks: Vec<Block>) -> State {
    let mut s = State::default();
    for b in blocks {
        let id = b.block_id.clone();
        elfiee_projections::set_block(&mut s, &id, Some(b));
    }
    s
}

#[test]
fn a_short_budget_keeps_the_referenced_and_implement_blocks_and_drops_the_rest_first() {
    let para = |topic: &str| format!("{topic}: the engine keeps an append-only log. ").repeat(12);
    // The agent references `req`; `code` implements it (a link *to* req, which the walk from
    // req would never follow); `spec` is implemented by req; six notes hang off req.
    let mut blocks = vec![
        md(
            "req",
            &para("requirement"),
            &[
                ("reference", "n1"),
                ("reference", "n2"),
                ("reference", "n3"),
                ("implement", "spec"),
            ],
        ),
        md("spec", &para("spec"), &[]),
        block(
            "code",
            "code",
            json!({"text": para("fn parse() {}"), "language": "rust"}),
            &[("implement", "req")],
        ),
        md("n1", &para("note one"), &[("reference", "n4")]),
        md("n2", &para("note two"), &[("reference", "n5")]),
        md("n3", &para("note three"), &[("reference", "n6")]),
    ];
    for n in ["n4", "n5", "n6"] {
        blocks.push(md(n, &para(n), &[]));
    }
    let s = linked_state(blocks);
    let all = collect_context(&s, &roots(&["req"]), &big());
    assert_eq!(all.items.len(), 9, "{:?}", ids(&all));
    // Room for about half of the nine.
    let budget = all.total_tokens / 2;
    let ctx = collect_context(&s, &roots(&["req"]), &budget_of(budget));
    let kept = ids(&ctx);
    assert_eq!(&kept[..3], ["req", "spec", "code"], "{kept:?}");
    assert_eq!(ctx.items[1].rank, elfiee_projections::Rank::Implement);
    assert_eq!(ctx.items[2].rank, elfiee_projections::Rank::Implement);
    assert!(kept.len() <= 5, "about half: {kept:?}");
    for deep in ["n4", "n5", "n6"] {
        assert!(
            ctx.dropped.contains(&deep.to_owned()),
            "{deep} dropped first"
        );
    }
    assert!(ctx.total_tokens <= budget);
    assert_eq!(count_tokens(&ctx.to_markdown()), ctx.total_tokens);
    // Each block once, at its latest version (the state holds no other).
    let mut sorted = kept.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), kept.len());
}

#[test]
fn a_directorys_files_come_by_relevance_to_the_request() {
    let file =
        |id: &str, text: &str| block(id, "code", json!({"text": text, "language": "rust"}), &[]);
    let entries = json!([
        {"path": "src/main.rs", "block_id": "f-main"},
        {"path": "src/pdf/render.rs", "block_id": "f-pdf"},
        {"path": "src/net/http.rs", "block_id": "f-http"},
    ]);
    let s = linked_state(vec![
        block("dir", "directory", json!({"entries": entries}), &[]),
        file("f-main", &"fn main() { run() }\n".repeat(30)),
        file("f-pdf", &"pub fn render(page: &Page) {}\n".repeat(30)),
        file("f-http", &"pub fn get(url: &str) {}\n".repeat(30)),
    ]);
    let opts = ContextOptions {
        directory_files: true,
        query: Some("Fix the PDF render of wide pages".into()),
        ..big()
    };
    let all = collect_context(&s, &roots(&["dir"]), &opts);
    assert_eq!(ids(&all), ["dir", "f-pdf", "f-main", "f-http"]);
    // Room for the directory and one file: the relevant one.
    let budget = all.items[0].tokens + all.items[1].tokens + 3;
    let ctx = collect_context(
        &s,
        &roots(&["dir"]),
        &ContextOptions {
            max_tokens: budget,
            ..opts.clone()
        },
    );
    assert_eq!(&ids(&ctx)[..2], ["dir", "f-pdf"]);
    assert!(ctx.total_tokens <= budget);
    // Without the option the files are not offered.
    let plain = collect_context(&s, &roots(&["dir"]), &big());
    assert_eq!(ids(&plain), ["dir"]);
}
