//! The context an agent sees: blocks reachable from its referenced blocks, as Markdown, within a
//! token budget (DESIGN.md §8, seed 000 §3.10–3.12).
//!
//! [`collect_context`] walks the relation graph breadth-first from the roots (following the
//! chosen relations, `reference` and `implement` by default) down to `max_depth`, visiting each
//! block once, so a cycle — impossible through `core.link`, but a hand-built state may have
//! one — cannot loop. What is kept when the budget is short is chosen by the relation graph,
//! not by position (seed 000 §3.12, docs/AGENT_LOOP.md "Context policy"), in this order:
//!
//! 1. the roots (the blocks the agent references, the request's extra blocks);
//! 2. their `implement` neighbours, both ways (the code implementing a referenced
//!    requirement, the requirement a referenced file implements), even when the walk's
//!    direction would not reach them;
//! 3. with [`ContextOptions::directory_files`], the files of the directories reached, most
//!    relevant to [`ContextOptions::query`] first (keywords shared with the path);
//! 4. the rest of the walk, shallow before deep;
//!
//! and, within each, by relevance to the query, then by walk order. Each block appears once,
//! at its latest version (the state holds no other). Each block becomes a section
//!
//! ```text
//! ## {name} ({block_type}, {block_id})
//!
//! {text}
//!
//! ```
//!
//! where the text is `contents.markdown` for markdown blocks, `contents.text` in a fenced code
//! block for code blocks, and a short pretty JSON of `contents` otherwise. Tokens are counted
//! with tiktoken's `cl100k_base` (loaded once, bundled in the binary). To fit the budget the
//! deepest sections are dropped first (breadth-first order is shallow-to-deep), and the last
//! section kept is cut at a character boundary and marked `[… truncated]`, so the rendered
//! context never has more than `max_tokens` tokens.
//!
//! Pure: reads only its arguments.
//!
//! ```
//! use elfiee_projections::{collect_context, ContextOptions, State};
//! let ctx = collect_context(&State::default(), &["missing".to_owned()], &ContextOptions::default());
//! assert!(ctx.items.is_empty());
//! assert_eq!(ctx.total_tokens, 0);
//! ```

use std::collections::{HashSet, VecDeque};
use std::sync::OnceLock;

use elfiee_model::{Block, Relation};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tiktoken_rs::CoreBPE;

/// Appended (on its own line) to a section whose text was cut to fit the budget.
pub const TRUNCATION_MARKER: &str = "[… truncated]";

/// Longest JSON shown for a block type without a text view (bytes).
pub const OTHER_CONTENTS_MAX_BYTES: usize = 2000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextOptions {
    /// Roots are depth 0; their direct links depth 1; … (default 2).
    pub max_depth: usize,
    /// Budget for the rendered context (default 8000, the agent config's default).
    pub max_tokens: usize,
    /// Relations followed (default both: `reference` and `implement`).
    pub relations: Vec<Relation>,
    /// What the context is for (the user's request): blocks and files sharing more of its
    /// keywords come first within their rank.
    #[serde(default)]
    pub query: Option<String>,
    /// Also offer the files of the directories reached (default off).
    #[serde(default)]
    pub directory_files: bool,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            max_depth: 2,
            max_tokens: 8000,
            relations: Relation::ALL.to_vec(),
            query: None,
            directory_files: false,
        }
    }
}

/// Why a block is in the context (its rank: lower is kept first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rank {
    /// A block the agent references (or the request names).
    Root,
    /// Linked to a root by `implement`, either way.
    Implement,
    /// A file of a directory reached.
    File,
    /// Reached by the walk.
    Linked,
}

/// One block's section of the context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextItem {
    pub block_id: String,
    pub name: String,
    pub block_type: String,
    pub depth: usize,
    pub rank: Rank,
    /// The section's body (after the header), possibly cut and marked.
    pub text: String,
    /// Tokens of the whole section: header, body and the blank line after it.
    pub tokens: usize,
}

impl ContextItem {
    /// The Markdown section: header, body, blank line.
    pub fn section(&self) -> String {
        section(&self.name, &self.block_type, &self.block_id, &self.text)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// Breadth-first order: roots first, deeper blocks later.
    pub items: Vec<ContextItem>,
    /// Sum of the items' tokens = tokens of [`Context::to_markdown`]; never above the budget.
    pub total_tokens: usize,
    /// Blocks reached but left out for the budget, shallowest first.
    pub dropped: Vec<String>,
    /// The block whose text was cut to fit, if any.
    pub truncated: Option<String>,
}

impl Context {
    /// The sections joined: what goes into the prompt.
    pub fn to_markdown(&self) -> String {
        self.items.iter().map(ContextItem::section).collect()
    }
}

/// The `cl100k_base` tokenizer, built once per process from the vocabulary bundled in the
/// binary (nothing is downloaded).
pub fn tokenizer() -> &'static CoreBPE {
    static BPE: OnceLock<CoreBPE> = OnceLock::new();
    // The vocabulary is compiled in; failing to parse it is a build defect, not an input error.
    BPE.get_or_init(|| {
        tiktoken_rs::cl100k_base().expect("the bundled cl100k_base vocabulary parses")
    })
}

/// Tokens of `text` (`cl100k_base`, special-token text counted as ordinary text).
pub fn count_tokens(text: &str) -> usize {
    tokenizer().encode_ordinary(text).len()
}

/// Collects the context reachable from `roots` (unknown ids are skipped) within the budget.
/// Bodies kept in the content store count as empty; see [`collect_context_with`].
pub fn collect_context(
    state: &crate::state::State,
    roots: &[String],
    opts: &ContextOptions,
) -> Context {
    collect_context_with(state, roots, opts, &|_| None)
}

/// [`collect_context`] with `fetch` reading the bodies kept in the content store (a body it
/// cannot read counts as empty).
pub fn collect_context_with(
    state: &crate::state::State,
    roots: &[String],
    opts: &ContextOptions,
    fetch: &dyn Fn(&elfiee_model::ContentRef) -> Option<String>,
) -> Context {
    // Breadth-first walk: the order is non-decreasing in depth, which the budget step relies on.
    let mut visited: HashSet<&str> = HashSet::new();
    let mut queue: VecDeque<(&Block, usize)> = VecDeque::new();
    for root in roots {
        if let Some(b) = state.block(root) {
            if visited.insert(b.block_id.as_str()) {
                queue.push_back((b, 0));
            }
        }
    }
    let mut reached: Vec<(&Block, usize)> = Vec::new();
    while let Some((block, depth)) = queue.pop_front() {
        reached.push((block, depth));
        if depth >= opts.max_depth {
            continue;
        }
        for (rel, child) in state.children_of(&block.block_id) {
            if !opts.relations.contains(&rel) {
                continue;
            }
            if let Some(c) = state.block(child) {
                if visited.insert(c.block_id.as_str()) {
                    queue.push_back((c, depth + 1));
                }
            }
        }
    }

    let ranked = rank(state, reached, opts);
    let mut ctx = Context::default();
    let mut budget_left = opts.max_tokens;
    let mut rest = ranked.into_iter();
    for (block, depth, rank) in rest.by_ref() {
        let body = Body::of(block, fetch);
        let text = body.render(body.raw.len(), false);
        let tokens = count_tokens(&section(
            &block.name,
            &block.block_type,
            &block.block_id,
            &text,
        ));
        if tokens <= budget_left {
            budget_left -= tokens;
            ctx.items.push(item(block, depth, rank, text, tokens));
            continue;
        }
        // The first section that does not fit is cut; everything after it (ranked lower) is
        // dropped.
        match cut_to_fit(block, &body, budget_left) {
            Some((text, tokens)) => {
                ctx.items.push(item(block, depth, rank, text, tokens));
                ctx.truncated = Some(block.block_id.clone());
            }
            None => ctx.dropped.push(block.block_id.clone()),
        }
        break;
    }
    ctx.dropped.extend(rest.map(|(b, _, _)| b.block_id.clone()));
    ctx.total_tokens = ctx.items.iter().map(|i| i.tokens).sum();
    debug_assert!(ctx.total_tokens <= opts.max_tokens);
    ctx
}

fn item(block: &Block, depth: usize, rank: Rank, text: String, tokens: usize) -> ContextItem {
    ContextItem {
        block_id: block.block_id.clone(),
        name: block.name.clone(),
        block_type: block.block_type.clone(),
        depth,
        rank,
        text,
        tokens,
    }
}

/// Lower-cased words of 3+ characters and character bigrams of CJK runs, without common
/// English words: what two texts must share to be related (no model, no network).
pub fn keywords(text: &str) -> std::collections::BTreeSet<String> {
    const STOP: &[&str] = &[
        "the", "and", "for", "with", "that", "this", "from", "into", "are", "was", "were", "you",
        "your", "our", "have", "has", "not", "but", "all", "any", "can", "its", "then", "than",
        "them", "they", "what", "when", "where", "which", "who", "how", "now", "please", "use",
    ];
    fn is_cjk(c: char) -> bool {
        matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
    }
    let mut out = std::collections::BTreeSet::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush_word = |w: &mut String, out: &mut std::collections::BTreeSet<String>| {
        if w.chars().count() >= 3 && !STOP.contains(&w.as_str()) {
            out.insert(std::mem::take(w));
        }
        w.clear();
    };
    let flush_cjk = |c: &mut Vec<char>, out: &mut std::collections::BTreeSet<String>| {
        if c.len() == 1 {
            out.insert(c[0].to_string());
        }
        for pair in c.windows(2) {
            out.insert(pair.iter().collect());
        }
        c.clear();
    };
    for ch in text.chars() {
        if is_cjk(ch) {
            flush_word(&mut word, &mut out);
            cjk.push(ch);
        } else if ch.is_alphanumeric() || ch == '_' {
            flush_cjk(&mut cjk, &mut out);
            word.extend(ch.to_lowercase());
        } else {
            flush_word(&mut word, &mut out);
            flush_cjk(&mut cjk, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_cjk(&mut cjk, &mut out);
    out
}

/// The walk's blocks (plus the roots' `implement` neighbours and, when asked, the files of
/// the directories reached) in the order the budget keeps them (see the module docs).
fn rank<'a>(
    state: &'a crate::state::State,
    reached: Vec<(&'a Block, usize)>,
    opts: &ContextOptions,
) -> Vec<(&'a Block, usize, Rank)> {
    let query = opts.query.as_deref().map(keywords).unwrap_or_default();
    let relevance = |text: &str| -> usize {
        if query.is_empty() {
            return 0;
        }
        keywords(text).intersection(&query).count()
    };
    let roots: Vec<&str> = reached
        .iter()
        .filter(|(_, d)| *d == 0)
        .map(|(b, _)| b.block_id.as_str())
        .collect();
    let mut implement: HashSet<&str> = HashSet::new();
    if opts.max_depth >= 1 && opts.relations.contains(&Relation::Implement) {
        for r in &roots {
            implement.extend(
                state
                    .children_of(r)
                    .chain(state.parents_of(r))
                    .filter(|(rel, _)| *rel == Relation::Implement)
                    .map(|(_, id)| id),
            );
        }
    }
    let mut seen: HashSet<&str> = reached.iter().map(|(b, _)| b.block_id.as_str()).collect();
    // (rank, depth, relevance, walk order, block)
    let mut out: Vec<(Rank, usize, usize, usize, &Block)> = Vec::new();
    for (i, (b, depth)) in reached.iter().enumerate() {
        let rank = if *depth == 0 {
            Rank::Root
        } else if implement.contains(b.block_id.as_str()) {
            Rank::Implement
        } else {
            Rank::Linked
        };
        out.push((rank, *depth, relevance(&b.name), i, b));
    }
    let mut order = reached.len();
    for id in &implement {
        if seen.insert(id) {
            if let Some(b) = state.block(id) {
                out.push((Rank::Implement, 1, relevance(&b.name), order, b));
                order += 1;
            }
        }
    }
    if opts.directory_files {
        let dirs: Vec<(&Block, usize)> = out
            .iter()
            .filter(|(.., b)| b.block_type == "directory")
            .map(|(_, d, _, _, b)| (*b, *d))
            .collect();
        for (dir, depth) in dirs {
            let entries = dir
                .contents
                .get("entries")
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            for e in entries {
                let (Some(path), Some(id)) = (
                    e.get("path").and_then(Value::as_str),
                    e.get("block_id").and_then(Value::as_str),
                ) else {
                    continue;
                };
                if let Some(b) = state.block(id) {
                    if seen.insert(b.block_id.as_str()) {
                        out.push((Rank::File, depth + 1, relevance(path), order, b));
                        order += 1;
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| {
        (a.0, a.1, std::cmp::Reverse(a.2), a.3).cmp(&(b.0, b.1, std::cmp::Reverse(b.2), b.3))
    });
    out.into_iter().map(|(r, d, _, _, b)| (b, d, r)).collect()
}

fn section(name: &str, block_type: &str, block_id: &str, text: &str) -> String {
    // Newlines in a name would break the header line.
    let name = name.replace(['\n', '\r'], " ");
    format!("## {name} ({block_type}, {block_id})\n\n{text}\n\n")
}

/// The longest cut of `body` whose section fits in `budget` tokens, with its token count;
/// `None` if not even the header and the marker fit.
fn cut_to_fit(block: &Block, body: &Body, budget: usize) -> Option<(String, usize)> {
    let tokens_at = |len: usize| {
        let text = body.render(len, true);
        let n = count_tokens(&section(
            &block.name,
            &block.block_type,
            &block.block_id,
            &text,
        ));
        (text, n)
    };
    let empty = tokens_at(0);
    if empty.1 > budget {
        return None;
    }
    // Guess from the body's own tokens: the prefix made of the first `budget - overhead` tokens.
    let bpe = tokenizer();
    let room = budget - empty.1;
    let tokens = bpe.encode_ordinary(&body.raw);
    let guess_bytes: usize = tokens
        .iter()
        .take(room)
        .map(|t| bpe.decode_bytes(&[*t]).map_or(0, |b| b.len()))
        .sum();
    let guess = floor_char_boundary(&body.raw, guess_bytes.min(body.raw.len()));
    let at_guess = tokens_at(guess);
    if at_guess.1 <= budget {
        return Some(at_guess);
    }
    // Re-tokenizing a cut can differ at the seam; search below the guess (the invariant: `lo` fits).
    let bounds: Vec<usize> = body.raw[..guess]
        .char_indices()
        .map(|(i, _)| i)
        .chain([guess])
        .collect();
    let (mut lo, mut hi) = (0usize, bounds.len() - 1); // indices into bounds; bounds[0] = 0
    let mut best = empty;
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let cand = tokens_at(bounds[mid]);
        if cand.1 <= budget {
            lo = mid;
            best = cand;
        } else {
            hi = mid - 1;
        }
    }
    Some(best)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A block's text, before any cut, and how to present it.
struct Body {
    raw: String,
    /// For code: the fence and the language tag.
    fence: Option<(String, String)>,
}

impl Body {
    fn of(block: &Block, fetch: &dyn Fn(&elfiee_model::ContentRef) -> Option<String>) -> Body {
        let str_field = |key: &str| match block.content_refs.get(key) {
            Some(r) => fetch(r).unwrap_or_default(),
            None => block
                .contents
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
        match block.block_type.as_str() {
            "markdown" => Body {
                raw: str_field("markdown"),
                fence: None,
            },
            "code" => {
                let raw = str_field("text");
                // A fence longer than any backtick run inside, so the code cannot close it.
                let longest = raw.split(|c| c != '`').map(str::len).max().unwrap_or(0);
                Body {
                    fence: Some(("`".repeat(longest.max(2) + 1), str_field("language"))),
                    raw,
                }
            }
            _ => {
                let json = serde_json::to_string_pretty(&block.contents).unwrap_or_default();
                let raw = if json.len() > OTHER_CONTENTS_MAX_BYTES {
                    format!(
                        "{}\n…",
                        &json[..floor_char_boundary(&json, OTHER_CONTENTS_MAX_BYTES)]
                    )
                } else {
                    json
                };
                Body { raw, fence: None }
            }
        }
    }

    /// The body showing the first `len` bytes of the text (a char boundary), marked if cut.
    fn render(&self, len: usize, truncated: bool) -> String {
        let text = &self.raw[..len];
        let mut out = match &self.fence {
            Some((fence, lang)) => format!("{fence}{lang}\n{text}\n{fence}"),
            None => text.to_owned(),
        };
        if truncated {
            out.push('\n');
            out.push_str(TRUNCATION_MARKER);
        }
        out
    }
}

/// A synthetic state of `n` blocks (markdown and code with mixed-script text), `b0` linking to
/// about √n blocks that each link to about √n more: the benchmark's input.
#[doc(hidden)]
pub fn synthetic_state(n: usize) -> crate::state::State {
    bench_state(n)
}

fn bench_state(n: usize) -> crate::state::State {
    use std::collections::BTreeMap;

    let fanout = ((n.max(2) - 1) as f64).sqrt().ceil() as usize;
    let epoch = chrono::DateTime::from_timestamp_millis(0).unwrap_or_default();
    let mut state = crate::state::State::default();
    for i in 0..n {
        let (block_type, contents) = if i % 3 == 2 {
            (
                "code",
                serde_json::json!({"text": format!("fn f{i}(x: u32) -> u32 {{\n    // 第{i}号 函数\n    x * {i} + 1\n}}\n"), "language": "rust"}),
            )
        } else {
            (
                "markdown",
                serde_json::json!({"markdown": format!("# Block {i}\n\nRequirement {i}: the engine keeps an append-only log; \
                every change is an event. 需求 {i}：事件溯源，日志只追加。 Émoji ✓ — naïve café.\n")}),
            )
        };
        // Level 1: b1..=b{fanout} under b0; level 2: the rest, spread over level 1.
        let children: Vec<String> = if i == 0 {
            (1..=fanout.min(n - 1)).map(|c| format!("b{c}")).collect()
        } else if i <= fanout {
            (0..fanout)
                .map(|k| fanout + 1 + (i - 1) * fanout + k)
                .filter(|&c| c < n)
                .map(|c| format!("b{c}"))
                .collect()
        } else {
            Vec::new()
        };
        let block = Block {
            block_id: format!("b{i}"),
            name: format!("block {i}"),
            block_type: block_type.into(),
            contents,
            content_refs: Default::default(),
            children: if children.is_empty() {
                BTreeMap::new()
            } else {
                BTreeMap::from([("reference".to_owned(), children)])
            },
            owner: "bench".into(),
            metadata: elfiee_model::BlockMetadata {
                description: None,
                created_at: epoch,
                updated_at: epoch,
                custom: BTreeMap::new(),
            },
        };
        state.blocks.insert(block.block_id.clone(), block);
    }
    state
}
