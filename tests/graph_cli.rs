//! `elfiee graph` end to end: a generated 1,000-block document drawn as SVG (read back by an
//! XML parser), DOT (read back by graphviz-rust's grammar-based parser), Mermaid and JSON, each
//! holding every block and every relation; `--from` / `--depth` on a small document whose
//! reachability is known; refusals of bad input with their exit codes.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use common::{run_elfiee, success_json};
use elfiee::graph::sample;
use serde_json::Value;

fn elfiee(elf: &Path, args: &[&str]) -> Output {
    run_elfiee(elf, args, &[("ELFIEE_NODE_ID", "graph-test")])
}

fn json_ok(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    success_json(&all, &elfiee(elf, &all))
}

fn stdout_ok(elf: &Path, args: &[&str]) -> String {
    let out = elfiee(elf, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

type Triple = (String, String, String);

/// The 1,000-block sample document, built through the engine; returns its block ids (plan
/// order) and its relations as (from id, to id, relation).
async fn sample_document(elf: &Path) -> (Vec<String>, BTreeSet<Triple>) {
    let engine = elfiee::Engine::new(elfiee::EngineConfig::default());
    let file = engine.init(elf, "Alice").await.unwrap();
    let plan = sample::plan(1000, 42);
    let ids = sample::build(&file, "alice", &plan).await.unwrap();
    file.close().await;
    let links = plan
        .links
        .iter()
        .map(|(a, b, r)| (ids[*a].clone(), ids[*b].clone(), (*r).to_owned()))
        .collect();
    (ids, links)
}

/// DOT escString text of a quoted id from graphviz-rust.
fn unquote(id: &graphviz_rust::dot_structures::Id) -> String {
    use graphviz_rust::dot_structures::Id;
    let Id::Escaped(raw) = id else {
        panic!("expected a quoted string, got {id:?}");
    };
    let mut out = String::new();
    let mut chars = raw[1..raw.len() - 1].chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => panic!("dangling backslash"),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// Nodes (id, label) and edges (from, to, label) of a DOT digraph, through graphviz-rust.
fn parse_dot(dot: &str) -> (Vec<(String, String)>, BTreeSet<Triple>) {
    use graphviz_rust::dot_structures::{Attribute, EdgeTy, Graph, Id, Stmt, Vertex};
    let label = |attrs: &[Attribute]| {
        attrs
            .iter()
            .find_map(|Attribute(k, v)| {
                matches!(k, Id::Plain(k) if k == "label").then(|| unquote(v))
            })
            .unwrap_or_default()
    };
    let Graph::DiGraph { stmts, .. } = graphviz_rust::parse(dot).expect("DOT the parser accepts")
    else {
        panic!("not a digraph")
    };
    let (mut nodes, mut edges) = (Vec::new(), BTreeSet::new());
    for stmt in stmts {
        match stmt {
            Stmt::Node(n) => nodes.push((unquote(&n.id.0), label(&n.attributes))),
            Stmt::Edge(e) => {
                let EdgeTy::Pair(Vertex::N(a), Vertex::N(b)) = &e.ty else {
                    panic!("unexpected edge {e:?}")
                };
                edges.insert((unquote(&a.0), unquote(&b.0), label(&e.attributes)));
            }
            Stmt::GAttribute(_) => {}
            other => panic!("unexpected statement {other:?}"),
        }
    }
    (nodes, edges)
}

/// Blocks (data-block) and relations (data-from, data-to, data-relation) of the SVG, read by
/// an XML parser; also checks every block has a title and a box.
fn parse_svg(svg: &str) -> (Vec<String>, BTreeSet<Triple>) {
    let doc = roxmltree::Document::parse(svg).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let has_class = |n: &roxmltree::Node, c: &str| {
        n.attribute("class")
            .is_some_and(|v| v.split(' ').any(|x| x == c))
    };
    let mut blocks = Vec::new();
    let mut relations = BTreeSet::new();
    for n in doc.descendants().filter(|n| n.has_tag_name("g")) {
        if has_class(&n, "node") {
            assert!(n.children().any(|c| c.has_tag_name("rect")));
            assert!(n.children().any(|c| c.has_tag_name("title")));
            blocks.push(n.attribute("data-block").unwrap().to_owned());
        } else if has_class(&n, "edge") {
            assert!(n.children().any(|c| c.has_tag_name("path")));
            let a = |k: &str| n.attribute(k).unwrap().to_owned();
            relations.insert((a("data-from"), a("data-to"), a("data-relation")));
        }
    }
    (blocks, relations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_block_document_draws_as_svg_dot_mermaid_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = tmp.path().join("big.elf");
    let (ids, links) = sample_document(&elf).await;
    let all_ids: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(all_ids.len(), 1000);
    assert!(links.len() > 1000, "{}", links.len());

    // SVG: one node element per block, one edge element per relation.
    let svg_path = tmp.path().join("graph.svg");
    let v = json_ok(&elf, &["graph", "-o", svg_path.to_str().unwrap()]);
    assert_eq!(v["format"], "svg");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let (blocks, relations) = parse_svg(&svg);
    assert_eq!(blocks.len(), 1000);
    assert_eq!(blocks.iter().cloned().collect::<BTreeSet<_>>(), all_ids);
    assert_eq!(relations, links);

    // DOT on stdout (the default format), through an independent parser.
    let dot = stdout_ok(&elf, &["graph"]);
    let (nodes, edges) = parse_dot(&dot);
    assert_eq!(nodes.len(), 1000);
    assert_eq!(
        nodes.iter().map(|n| n.0.clone()).collect::<BTreeSet<_>>(),
        all_ids
    );
    assert!(nodes.iter().any(|(_, label)| label == "spec 0\nmarkdown"));
    assert!(nodes.iter().any(|(_, label)| label == "note 0\nmarkdown"));
    assert_eq!(edges, links);

    // Mermaid: a node line per block, an edge line per relation, arrows by relation.
    let mermaid = stdout_ok(&elf, &["graph", "--format", "mermaid"]);
    let mut lines = mermaid.lines();
    assert_eq!(lines.next(), Some("flowchart BT"));
    let body: Vec<&str> = lines.collect();
    let node_lines = body.iter().filter(|l| l.contains("[\"")).count();
    let comments: BTreeSet<String> = body
        .iter()
        .filter_map(|l| l.trim().strip_prefix("%% "))
        .map(|c| c.split_once(" = ").unwrap().1.to_owned())
        .collect();
    let implement = body
        .iter()
        .filter(|l| l.contains(" -.->|implement| "))
        .count();
    let reference = body
        .iter()
        .filter(|l| l.contains(" -->|reference| "))
        .count();
    assert_eq!(node_lines, 1000);
    assert_eq!(comments, all_ids);
    assert_eq!(
        implement,
        links.iter().filter(|l| l.2 == "implement").count()
    );
    assert_eq!(
        reference,
        links.iter().filter(|l| l.2 == "reference").count()
    );

    // JSON: the same nodes and edges.
    let v = json_ok(&elf, &["graph"]);
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1000);
    assert!(nodes
        .iter()
        .all(|n| n["name"].is_string() && n["block_type"].is_string()));
    let edges: BTreeSet<Triple> = v["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_owned();
            (s("from"), s("to"), s("relation"))
        })
        .collect();
    assert_eq!(edges, links);
}

/// spec ← parser (implement) ← tests (reference) ← ci (reference); notes alone; a name with
/// every character the formats must escape.
fn small_document(dir: &Path) -> std::path::PathBuf {
    let elf = dir.join("small.elf");
    json_ok(&elf, &["init", elf.to_str().unwrap(), "--owner", "Alice"]);
    for (name, ty) in [
        ("spec", "markdown"),
        ("parser", "code"),
        ("tests", "code"),
        ("ci", "terminal"),
        ("notes", "markdown"),
    ] {
        json_ok(&elf, &["block", "create", "--type", ty, "--name", name]);
    }
    json_ok(
        &elf,
        &[
            "block",
            "create",
            "--type",
            "markdown",
            "--name",
            "a \"b\" <c> & d\\e #f |g",
        ],
    );
    for (from, to, rel) in [
        ("parser", "spec", "implement"),
        ("tests", "parser", "reference"),
        ("ci", "tests", "reference"),
        ("a \"b\" <c> & d\\e #f |g", "spec", "reference"),
    ] {
        json_ok(&elf, &["block", "link", from, to, "--relation", rel]);
    }
    elf
}

fn names(v: &Value) -> BTreeSet<String> {
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn from_and_depth_keep_the_blocks_within_reach_in_both_directions() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = small_document(tmp.path());
    let odd = "a \"b\" <c> & d\\e #f |g";

    let v = json_ok(&elf, &["graph", "--from", "parser", "--depth", "1"]);
    assert_eq!(names(&v), set(&["spec", "parser", "tests"]));
    assert_eq!(v["edges"].as_array().unwrap().len(), 2);

    let v = json_ok(&elf, &["graph", "--from", "parser", "--depth", "2"]);
    assert_eq!(names(&v), set(&["spec", "parser", "tests", "ci", odd]));

    let v = json_ok(&elf, &["graph", "--from", "ci", "--depth", "0"]);
    assert_eq!(names(&v), set(&["ci"]));
    assert_eq!(v["edges"].as_array().unwrap().len(), 0);

    let v = json_ok(&elf, &["graph", "--from", "ci"]);
    assert_eq!(names(&v), set(&["spec", "parser", "tests", "ci", odd]));

    let v = json_ok(&elf, &["graph", "--from", "notes", "--depth", "5"]);
    assert_eq!(names(&v), set(&["notes"]));

    let v = json_ok(&elf, &["graph"]);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 6);
    assert_eq!(v["edges"].as_array().unwrap().len(), 4);
}

#[test]
fn names_with_quotes_and_markup_stay_intact_in_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = small_document(tmp.path());
    let odd = "a \"b\" <c> & d\\e #f |g";

    let (blocks, relations) = parse_svg(&stdout_ok(&elf, &["graph", "--format", "svg"]));
    assert_eq!(blocks.len(), 6);
    assert_eq!(relations.len(), 4);
    let svg = stdout_ok(&elf, &["graph", "--format", "svg"]);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert!(doc
        .descendants()
        .any(|n| n.has_tag_name("title") && n.text().is_some_and(|t| t.starts_with(odd))));

    let (nodes, edges) = parse_dot(&stdout_ok(&elf, &["graph", "--format", "dot"]));
    assert!(nodes.iter().any(|(_, l)| l == &format!("{odd}\nmarkdown")));
    assert_eq!(edges.len(), 4);

    let mermaid = stdout_ok(&elf, &["graph", "--format", "mermaid"]);
    assert!(
        mermaid.contains("[\"a #quot;b#quot; #lt;c#gt; #amp; d\\e #35;f #124;g<br/>markdown\"]")
    );
}

#[test]
fn the_output_file_and_its_extension_pick_the_format() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = small_document(tmp.path());
    for (file, head) in [
        ("g.svg", "<svg "),
        ("g.dot", "digraph "),
        ("g.gv", "digraph "),
        ("g.mmd", "flowchart BT"),
    ] {
        let path = tmp.path().join(file);
        let out = stdout_ok(&elf, &["graph", "-o", path.to_str().unwrap()]);
        assert!(out.starts_with("wrote "), "{out}");
        assert!(
            std::fs::read_to_string(&path).unwrap().starts_with(head),
            "{file}"
        );
    }
    // --format wins over the extension.
    let path = tmp.path().join("g.txt");
    stdout_ok(
        &elf,
        &["graph", "--format", "mermaid", "-o", path.to_str().unwrap()],
    );
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .starts_with("flowchart BT"));
}

#[test]
fn bad_input_is_refused_with_a_clear_error_and_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let elf = small_document(tmp.path());
    let refused = |args: &[&str], code: i32, says: &str| {
        let out = elfiee(&elf, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(&["graph", "--depth", "2"], 2, "--from");
    refused(
        &["graph", "--from", "nothing-like-it"],
        1,
        "block 'nothing-like-it' not found",
    );
    refused(&["graph", "--format", "png"], 2, "png");
    refused(&["graph", "-o", "picture.png"], 2, "cannot tell the format");
    refused(&["--json", "graph", "--format", "svg"], 2, "pass -o FILE");
    let missing = tmp.path().join("no-such-dir").join("g.svg");
    refused(
        &["graph", "-o", missing.to_str().unwrap()],
        1,
        "cannot write",
    );
    assert!(!missing.exists());
}
