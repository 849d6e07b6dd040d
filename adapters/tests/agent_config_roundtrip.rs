//! `agent.enable` then `agent.disable` leave every file they touched byte for byte as they
//! found it, whatever its formatting (one line, 2 or 4 spaces or tabs, CRLF, with or without a
//! final newline, unusual key order, `\u00e9` escapes, `{}`, an empty file, no file), and files
//! and folders that did not exist do not exist after. Generated over formattings and contents,
//! through the real effect code (engine + effects + a project folder on disk).

mod support;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use elfiee_adapters::service::{create_agent, set_agent_enabled};
use elfiee_adapters::{attach, EffectsConfig};
use elfiee_engine::{Engine, EngineConfig};
use proptest::prelude::*;
use serde_json::{json, Value};

const ELFIEE_BIN: &str = "/usr/local/bin/elfiee";

/// A JSON value with the key order of the file that holds it.
#[derive(Debug, Clone, PartialEq)]
enum J {
    Str(String),
    Num(i64),
    Bool(bool),
    Null,
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn value(&self) -> Value {
        match self {
            J::Str(s) => json!(s),
            J::Num(n) => json!(n),
            J::Bool(b) => json!(b),
            J::Null => Value::Null,
            J::Arr(a) => Value::Array(a.iter().map(J::value).collect()),
            J::Obj(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), v.value())).collect()),
        }
    }

    fn from_value(v: &Value) -> J {
        match v {
            Value::String(s) => J::Str(s.clone()),
            Value::Number(n) => J::Num(n.as_i64().unwrap()),
            Value::Bool(b) => J::Bool(*b),
            Value::Null => J::Null,
            Value::Array(a) => J::Arr(a.iter().map(J::from_value).collect()),
            Value::Object(m) => J::Obj(
                m.iter()
                    .map(|(k, v)| (k.clone(), J::from_value(v)))
                    .collect(),
            ),
        }
    }
}

/// How a file is written.
#[derive(Debug, Clone)]
struct Style {
    /// `None`: the whole file on one line.
    indent: Option<&'static str>,
    /// No space after `,` and `:` in one-line containers.
    compact: bool,
    /// Containers below the top level on one line (`"permissions": {"allow": ["Bash(ls)"]}`).
    nested_inline: bool,
    crlf: bool,
    final_newline: bool,
    /// Non-ASCII characters written as `\uXXXX`.
    escape_unicode: bool,
    /// The inside of an empty object or array: `""`, `" "` or a line break.
    empty_inner: &'static str,
    /// A UTF-8 byte-order mark first (as Windows editors write).
    bom: bool,
}

impl Style {
    fn nl(&self) -> &'static str {
        if self.crlf {
            "\r\n"
        } else {
            "\n"
        }
    }

    fn string(&self, s: &str) -> String {
        let plain = Value::String(s.to_owned()).to_string();
        if !self.escape_unicode {
            return plain;
        }
        plain
            .chars()
            .map(|c| {
                if c.is_ascii() {
                    c.to_string()
                } else {
                    format!("\\u{:04x}", c as u32)
                }
            })
            .collect()
    }

    fn render(&self, j: &J, depth: usize) -> String {
        let (open, close, items): (&str, &str, Vec<(Option<&String>, &J)>) = match j {
            J::Obj(m) => ("{", "}", m.iter().map(|(k, v)| (Some(k), v)).collect()),
            J::Arr(a) => ("[", "]", a.iter().map(|v| (None, v)).collect()),
            J::Str(s) => return self.string(s),
            other => return other.value().to_string(),
        };
        if items.is_empty() {
            let inner = if self.empty_inner == "\n" {
                self.nl()
            } else {
                self.empty_inner
            };
            return format!("{open}{inner}{close}");
        }
        let kv = if self.compact { ":" } else { ": " };
        let item = |(k, v): &(Option<&String>, &J), depth| match k {
            Some(k) => format!("{}{kv}{}", self.string(k), self.render(v, depth)),
            None => self.render(v, depth),
        };
        match self.indent {
            Some(unit) if !(self.nested_inline && depth > 0) => {
                let nl = self.nl();
                let inner = unit.repeat(depth + 1);
                let lines: Vec<String> = items
                    .iter()
                    .map(|i| format!("{inner}{}", item(i, depth + 1)))
                    .collect();
                format!(
                    "{open}{nl}{}{nl}{}{close}",
                    lines.join(&format!(",{nl}")),
                    unit.repeat(depth)
                )
            }
            _ => {
                let sep = if self.compact { "," } else { ", " };
                let parts: Vec<String> = items.iter().map(|i| item(i, depth + 1)).collect();
                format!("{open}{}{close}", parts.join(sep))
            }
        }
    }

    fn file(&self, top: &[(String, J)]) -> String {
        let mut text = if self.bom { "\u{feff}" } else { "" }.to_owned();
        text.push_str(&self.render(&J::Obj(top.to_vec()), 0));
        if self.final_newline {
            text.push_str(self.nl());
        }
        text
    }
}

/// What a config file holds before enable.
#[derive(Debug, Clone)]
enum Content {
    Absent,
    /// An existing file holding exactly this text.
    Text(&'static str),
    Object(Vec<(String, J)>, Style),
}

impl Content {
    fn text(&self) -> Option<String> {
        match self {
            Content::Absent => None,
            Content::Text(t) => Some((*t).to_owned()),
            Content::Object(top, style) => Some(style.file(top)),
        }
    }
}

fn style() -> impl Strategy<Value = Style> {
    (
        prop::option::of(prop::sample::select(vec!["  ", "    ", "\t"])),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec!["", "", " ", "\n"]),
        prop::bool::weighted(0.25),
    )
        .prop_map(
            |(
                indent,
                compact,
                nested_inline,
                crlf,
                final_newline,
                escape_unicode,
                empty_inner,
                bom,
            )| {
                Style {
                    indent,
                    compact,
                    nested_inline,
                    crlf,
                    final_newline,
                    escape_unicode,
                    empty_inner,
                    bom,
                }
            },
        )
}

fn word() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "zeta", "alpha", "note", "$schema", "café", "日本", "über", "x-y", "Bash(ls)", "a b",
    ])
    .prop_map(str::to_owned)
}

fn scalar() -> impl Strategy<Value = J> {
    prop_oneof![
        word().prop_map(J::Str),
        (-1000i64..1000).prop_map(J::Num),
        any::<bool>().prop_map(J::Bool),
        Just(J::Null),
    ]
}

fn value() -> impl Strategy<Value = J> {
    scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(J::Arr),
            prop::collection::btree_map(word(), inner, 0..3)
                .prop_map(|m| J::Obj(m.into_iter().collect())),
        ]
    })
}

/// Members with distinct keys, in a shuffled order.
fn members(
    fixed: Vec<BoxedStrategy<Option<(String, J)>>>,
) -> impl Strategy<Value = Vec<(String, J)>> {
    (
        fixed,
        prop::collection::btree_map(word().prop_map(|w| format!("k-{w}")), value(), 0..3),
    )
        .prop_flat_map(|(fixed, others)| {
            let all: Vec<(String, J)> = fixed.into_iter().flatten().chain(others).collect();
            Just(all).prop_shuffle()
        })
}

fn server() -> impl Strategy<Value = J> {
    (word(), prop::collection::vec(word(), 0..3)).prop_map(|(cmd, args)| {
        J::Obj(vec![
            ("command".into(), J::Str(cmd)),
            (
                "args".into(),
                J::Arr(args.into_iter().map(J::Str).collect()),
            ),
        ])
    })
}

fn mcp_content() -> impl Strategy<Value = Content> {
    let servers = prop::option::of(
        prop::collection::btree_map(word().prop_map(|w| format!("srv-{w}")), server(), 0..3)
            .prop_map(|m| ("mcpServers".to_owned(), J::Obj(m.into_iter().collect()))),
    )
    .boxed();
    content(members(vec![servers]))
}

fn settings_content() -> impl Strategy<Value = Content> {
    let allow = prop::option::of(
        prop::collection::vec(word().prop_map(J::Str), 0..3).prop_map(|a| {
            (
                "permissions".to_owned(),
                J::Obj(vec![("allow".into(), J::Arr(a))]),
            )
        }),
    )
    .boxed();
    let enabled = prop::option::of(
        prop::collection::vec(word().prop_map(|w| J::Str(format!("srv-{w}"))), 0..3)
            .prop_map(|a| ("enabledMcpjsonServers".to_owned(), J::Arr(a))),
    )
    .boxed();
    content(members(vec![allow, enabled]))
}

fn content(
    members: impl Strategy<Value = Vec<(String, J)>> + 'static,
) -> impl Strategy<Value = Content> {
    prop_oneof![
        1 => Just(Content::Absent),
        1 => prop::sample::select(vec!["", "\n", "\r\n", "  \n"]).prop_map(Content::Text),
        6 => (members, style()).prop_map(|(m, s)| Content::Object(m, s)),
    ]
}

/// A project for one case: `.claude/` and the three config files as generated.
struct Project {
    _tmp: tempfile::TempDir,
    elf: PathBuf,
    root: PathBuf,
}

const FILES: [&str; 3] = [
    ".mcp.json",
    ".claude/mcp.json",
    ".claude/settings.local.json",
];

fn project(contents: &[Content; 3]) -> Project {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("project");
    std::fs::create_dir_all(root.join(".claude")).unwrap();
    std::fs::write(root.join("README.md"), "# project\n").unwrap();
    for (name, c) in FILES.iter().zip(contents) {
        if let Some(text) = c.text() {
            std::fs::write(root.join(name), text).unwrap();
        }
    }
    let root = root.canonicalize().unwrap();
    Project {
        elf: tmp.path().join("doc.elf"),
        _tmp: tmp,
        root,
    }
}

#[derive(Debug, PartialEq)]
enum Entry {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
}

/// Every file, folder and link under `root`, with the bytes of the files.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_owned()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_owned();
            let m = p.symlink_metadata().unwrap();
            if m.file_type().is_symlink() {
                out.insert(rel, Entry::Link(std::fs::read_link(&p).unwrap()));
            } else if m.is_dir() {
                out.insert(rel, Entry::Dir);
                todo.push(p);
            } else {
                out.insert(rel, Entry::File(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// What the file's value is after enable: the original with our entries added.
fn expected_after_enable(name: &str, before: &Value, server: &Value) -> Value {
    let mut v = before.clone();
    if name.ends_with("settings.local.json") {
        let list = v
            .as_object_mut()
            .unwrap()
            .entry("enabledMcpjsonServers")
            .or_insert(json!([]));
        list.as_array_mut().unwrap().push(json!("elfiee"));
    } else {
        let servers = v
            .as_object_mut()
            .unwrap()
            .entry("mcpServers")
            .or_insert(json!({}));
        servers["elfiee"] = server.clone();
    }
    v
}

/// Enable changed the file minimally: outside one span, every byte is the original's, and the
/// span it replaced was whitespace only; CRLF files got no bare LF; a one-line file stayed on
/// one line.
fn assert_minimal_edit(name: &str, before: &str, after: &str) {
    let prefix = before
        .bytes()
        .zip(after.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let suffix = before[prefix..]
        .bytes()
        .rev()
        .zip(after[prefix..].bytes().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let replaced = &before[prefix..before.len() - suffix];
    assert!(
        replaced.trim().is_empty(),
        "{name}: enable rewrote {replaced:?} of {before:?} (now {after:?})"
    );
    if before.contains("\r\n") {
        assert!(
            !after.replace("\r\n", "").contains('\n'),
            "{name}: a CRLF file got a bare LF: {after:?}"
        );
    }
    if !before.trim().is_empty() && !before.trim_end().contains('\n') {
        assert!(
            !after.trim_end().contains('\n'),
            "{name}: a one-line file was broken over lines: {after:?}"
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Opens a new document on `p`, imports the project and creates (so enables) an agent for it;
/// `between` runs after enable, then the agent is disabled. Returns the files after enable.
async fn create_enable_disable(
    p: &Project,
    between: impl FnOnce(&BTreeMap<PathBuf, Entry>),
) -> BTreeMap<PathBuf, Entry> {
    let engine = Engine::new(EngineConfig {
        node_id: "t".into(),
        ..EngineConfig::default()
    });
    let file = engine.init(&p.elf, "Alice").await.unwrap();
    let fx = attach(
        &file,
        EffectsConfig {
            elfiee_bin: PathBuf::from(ELFIEE_BIN),
            ..EffectsConfig::default()
        },
    )
    .await
    .unwrap();
    let dir = support::import_folder(&file, &p.root).await;
    let on = create_agent(&file, "alice", Some(&dir), None)
        .await
        .unwrap();
    assert_eq!(on.status, "enabled");
    assert!(on.warnings.is_empty(), "enable: {:?}", on.warnings);
    let enabled = snapshot(&p.root);
    between(&enabled);
    let off = set_agent_enabled(&file, "alice", &on.agent_block_id, false)
        .await
        .unwrap();
    assert!(off.warnings.is_empty(), "disable: {:?}", off.warnings);
    assert!(
        off.message.contains("the project is as enable found it"),
        "{}",
        off.message
    );
    support::settle_and_close(&file, fx).await;
    enabled
}

fn text_of(snap: &BTreeMap<PathBuf, Entry>, name: &str) -> Option<String> {
    match snap.get(Path::new(name)) {
        Some(Entry::File(b)) => Some(String::from_utf8(b.clone()).unwrap()),
        _ => None,
    }
}

/// A config file's text without its byte-order mark, if any (which `serde_json` refuses).
fn unmarked(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// A config file's value.
fn parse(text: &str) -> Value {
    serde_json::from_str(unmarked(text)).unwrap()
}

/// `text` (a settings file enable wrote) without the hook entries enable added, which must be
/// there for every event.
fn without_hooks(text: &str) -> String {
    use elfiee_adapters::hooks::settings::{remove, EVENTS};
    let v = parse(text);
    let command = v["hooks"]["SessionStart"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|g| g["hooks"][0]["command"].as_str())
        .unwrap_or_else(|| panic!("enable installed no hooks: {text}"))
        .to_owned();
    let mut added = vec!["hooks".to_owned()];
    for (event, _) in EVENTS {
        let ours = elfiee_adapters::hooks::settings::group(event, &command);
        assert!(
            v["hooks"][event]
                .as_array()
                .is_some_and(|a| a.contains(&ours)),
            "{event} hook in {text}"
        );
        added.push(format!("hooks.{event}"));
        added.push(format!("hooks.{event}[elfiee]"));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settings.local.json");
    std::fs::write(&path, text).unwrap();
    let mut doc = elfiee_adapters::json_file::JsonFile::open(&path).unwrap();
    let added: Vec<&str> = added.iter().map(String::as_str).collect();
    remove(&mut doc, &command, &added).unwrap();
    let out = doc.text().to_owned();
    match text.strip_prefix('\u{feff}') {
        Some(_) if !out.starts_with('\u{feff}') => out.replacen("   ", "\u{feff}", 1),
        _ => out,
    }
}

/// The round trip for one set of files, with the checks on what enable wrote.
fn round_trip(contents: [Content; 3]) {
    let p = project(&contents);
    let before = snapshot(&p.root);
    let enabled = runtime().block_on(create_enable_disable(&p, |_| {}));
    let server = parse(&text_of(&enabled, ".mcp.json").unwrap())["mcpServers"]["elfiee"].clone();
    assert_eq!(server["command"], ELFIEE_BIN);
    for name in FILES {
        let orig = text_of(&before, name);
        let now = text_of(&enabled, name).unwrap_or_else(|| panic!("enable wrote no {name}"));
        // The settings also get the hooks (checked in adapters/src/hooks/settings.rs and
        // tests/claude_hooks.rs): what enable did besides them is checked here.
        let now = if name.ends_with("settings.local.json") {
            without_hooks(&now)
        } else {
            now
        };
        let orig_value = match orig.as_deref() {
            Some(t) if !unmarked(t).trim().is_empty() => parse(t),
            _ => json!({}),
        };
        assert_eq!(
            parse(&now),
            expected_after_enable(name, &orig_value, &server),
            "{name}: enable added exactly our entry"
        );
        if let Some(orig) = orig.as_deref().filter(|t| !unmarked(t).trim().is_empty()) {
            assert_minimal_edit(name, orig, &now);
        }
    }
    assert_eq!(
        snapshot(&p.root),
        before,
        "disable left the project byte for byte as enable found it"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn enable_then_disable_restores_every_file_byte_for_byte(
        mcp in mcp_content(),
        claude_mcp in mcp_content(),
        settings in settings_content(),
    ) {
        round_trip([mcp, claude_mcp, settings]);
    }
}

/// The example: a one-line `settings.local.json` with a final newline.
#[test]
fn one_line_settings_local_json_is_restored_byte_for_byte() {
    let original = "{\"permissions\": {\"allow\": [\"Bash(ls)\"]}}\n";
    let p = project(&[Content::Absent, Content::Absent, Content::Text(original)]);
    let settings = p.root.join(".claude/settings.local.json");
    let before = snapshot(&p.root);
    let enabled = runtime().block_on(create_enable_disable(&p, |_| {}));
    let now = text_of(&enabled, ".claude/settings.local.json").unwrap();
    assert_eq!(
        without_hooks(&now),
        "{\"permissions\": {\"allow\": [\"Bash(ls)\"]}, \"enabledMcpjsonServers\": [\"elfiee\"]}\n",
        "enable adds the approval on the same line"
    );
    assert_eq!(
        now.trim_end().lines().count(),
        1,
        "and the hooks too: {now}"
    );
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), original);
    assert_eq!(snapshot(&p.root), before);
    assert!(!p.root.join(".mcp.json").exists() && !p.root.join(".claude/skills").exists());
}

/// A byte-order mark (Windows editors write one) is kept through enable and disable, also on
/// a file holding nothing else.
#[test]
fn a_byte_order_mark_is_kept_and_the_file_restored() {
    let settings = "\u{feff}{\r\n  \"permissions\": {\"allow\": [\"Bash(ls)\"]}\r\n}\r\n";
    let p = project(&[
        Content::Text("\u{feff}"),
        Content::Absent,
        Content::Text(settings),
    ]);
    let before = snapshot(&p.root);
    let enabled = runtime().block_on(create_enable_disable(&p, |_| {}));
    for name in [".mcp.json", ".claude/settings.local.json"] {
        let text = text_of(&enabled, name).unwrap();
        assert!(
            text.starts_with('\u{feff}'),
            "{name} lost its mark: {text:?}"
        );
        assert!(parse(&text).is_object(), "{name}: {text:?}");
    }
    assert_eq!(snapshot(&p.root), before);
}

/// Members of `top` with `extra` put at `at` (clamped).
fn with_inserted(top: &[(String, J)], at: usize, extra: (String, J)) -> Vec<(String, J)> {
    let mut out = top.to_vec();
    out.insert(at.min(out.len()), extra);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The user edits `.mcp.json` after enable: adds a server before or after ours, adds a
    /// top-level key, and may reformat the whole file. Disable removes only our entry: the file
    /// is exactly the user's version without it.
    #[test]
    fn disable_keeps_the_users_edits_and_removes_only_our_entry(
        top in members(vec![]),
        servers in prop::collection::btree_map(
            word().prop_map(|w| format!("srv-{w}")), server(), 0..3),
        user_server in server(),
        user_key in value(),
        ours_at in 0usize..4,
        key_at in 0usize..4,
        restyle in style(),
    ) {
        let mut user_style = restyle;
        // An object we empty becomes `{}`.
        user_style.empty_inner = "";
        let servers: Vec<(String, J)> = servers.into_iter().collect();
        let original = with_inserted(&top, 0, ("mcpServers".into(), J::Obj(servers.clone())));
        let p = project(&[
            Content::Object(original.clone(), user_style.clone()),
            Content::Absent,
            Content::Absent,
        ]);
        let mcp = p.root.join(".mcp.json");
        // The user's version, with and without our entry.
        let users = |ours: Option<J>| {
            let mut s = with_inserted(&servers, servers.len(), ("srv-user".into(), user_server.clone()));
            if let Some(ours) = ours {
                s = with_inserted(&s, ours_at, ("elfiee".into(), ours));
            }
            let top = with_inserted(&top, key_at, ("k-user".into(), user_key.clone()));
            user_style.file(&with_inserted(&top, 0, ("mcpServers".into(), J::Obj(s))))
        };
        let mut expected = String::new();
        runtime().block_on(create_enable_disable(&p, |enabled| {
            let v = parse(&text_of(enabled, ".mcp.json").unwrap());
            std::fs::write(&mcp, users(Some(J::from_value(&v["mcpServers"]["elfiee"])))).unwrap();
            expected = users(None);
        }));
        prop_assert_eq!(std::fs::read_to_string(&mcp).unwrap(), expected);
    }
}

/// The user approves another server after ours and adds a key; disable takes out only
/// `"elfiee"` and leaves their bytes as they wrote them.
#[test]
fn disable_keeps_an_approval_the_user_added_after_ours() {
    let original = "{\r\n\t\"enabledMcpjsonServers\": [\"a\"]\r\n}";
    let p = project(&[Content::Absent, Content::Absent, Content::Text(original)]);
    let settings = p.root.join(".claude/settings.local.json");
    runtime().block_on(create_enable_disable(&p, |enabled| {
        assert_eq!(
            without_hooks(&text_of(enabled, ".claude/settings.local.json").unwrap()),
            "{\r\n\t\"enabledMcpjsonServers\": [\"a\", \"elfiee\"]\r\n}"
        );
        std::fs::write(
            &settings,
            "{\r\n\t\"enabledMcpjsonServers\": [\"a\", \"elfiee\", \"b\"],\r\n\t\"k\": 1\r\n}",
        )
        .unwrap();
    }));
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        "{\r\n\t\"enabledMcpjsonServers\": [\"a\", \"b\"],\r\n\t\"k\": 1\r\n}"
    );
}
