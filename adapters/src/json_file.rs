//! Editing JSON config files that belong to someone else (`.mcp.json`,
//! `.claude/settings.local.json`) by text edits that touch only what we add or remove.
//!
//! - An edit replaces one span of the text ([`Edit`]); everything around it — key order,
//!   spacing, indentation, line ends, escapes, the final newline — stays as the file has it.
//!   What we insert follows the container it goes into: on one line if the container is on one
//!   line, else on its own lines with the indentation and line end of its neighbours.
//! - [`EditRecord`] keeps an edit and a hash of the bytes it produced. Undoing it on a file that
//!   still has exactly those bytes gives back the original bytes, whatever their formatting.
//!   A file edited since is handled structurally instead ([`JsonFile::remove_member`], …),
//!   which keeps the other person's edits.
//! - Parsing (byte ranges of every member) is `jsonc-parser`'s AST with every JSONC extension
//!   turned off; validity is `serde_json`'s. Invalid JSON is an error and the file is left
//!   untouched.
//! - Writes are atomic: a temporary file in the same directory, then `rename`.

use std::io::Write;
use std::path::{Path, PathBuf};

use jsonc_parser::ast::{self, ObjectProp};
use jsonc_parser::common::Ranged;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One text edit: at byte `at`, `removed` is replaced by `inserted`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub at: usize,
    pub removed: String,
    pub inserted: String,
}

impl Edit {
    /// The text with the edit made.
    pub fn apply(&self, text: &str) -> String {
        debug_assert_eq!(&text[self.at..self.at + self.removed.len()], self.removed);
        let mut out = String::with_capacity(text.len() + self.inserted.len());
        out.push_str(&text[..self.at]);
        out.push_str(&self.inserted);
        out.push_str(&text[self.at + self.removed.len()..]);
        out
    }

    /// The record that lets [`EditRecord::undo`] reverse this edit on `before` exactly.
    pub fn record(&self, before: &str) -> EditRecord {
        EditRecord {
            at: self.at,
            removed: self.removed.clone(),
            inserted: self.inserted.clone(),
            blake3_after: blake3::hash(self.apply(before).as_bytes())
                .to_hex()
                .to_string(),
        }
    }
}

/// An edit enable made, kept in its plan so disable can reverse it byte for byte. `removed` is
/// only ever whitespace (the inside of an empty container, or a blank file): the record holds
/// our entry and a hash, never the other person's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditRecord {
    pub at: usize,
    pub removed: String,
    pub inserted: String,
    /// blake3 of the whole file right after the edit.
    pub blake3_after: String,
}

impl EditRecord {
    /// The text before the edit, if `text` is exactly what the edit produced; `None` when the
    /// file changed since (then the caller removes its entries structurally).
    pub fn undo(&self, text: &str) -> Option<String> {
        if blake3::hash(text.as_bytes()).to_hex().as_str() != self.blake3_after {
            return None;
        }
        let end = self.at.checked_add(self.inserted.len())?;
        if text.get(self.at..end)? != self.inserted {
            return None;
        }
        Some(
            Edit {
                at: self.at,
                removed: self.inserted.clone(),
                inserted: self.removed.clone(),
            }
            .apply(text),
        )
    }
}

/// A JSON object file opened for editing. A missing file or a blank one reads as `{}`.
#[derive(Debug)]
pub struct JsonFile {
    pub path: PathBuf,
    /// The text as read; `None` if the file did not exist.
    read: Option<String>,
    /// The current text (what [`JsonFile::save`] writes), a byte-order mark masked.
    text: String,
    /// The file starts with a UTF-8 byte-order mark (Windows editors write one).
    bom: bool,
}

/// A UTF-8 byte-order mark, which `serde_json` refuses. [`masked`] reads it as three spaces
/// (the same three bytes), so every byte position stays the file's own and an edit never
/// touches it; [`JsonFile::save`] writes it back.
const BOM: &str = "\u{feff}";
const BOM_MASK: &str = "   ";

/// `text` with a leading byte-order mark read as [`BOM_MASK`], and whether it had one.
fn masked(text: String) -> (String, bool) {
    match text.strip_prefix(BOM) {
        Some(rest) => (format!("{BOM_MASK}{rest}"), true),
        None => (text, false),
    }
}

/// Strict JSON: every JSONC extension of the parser off (what `serde_json` and Claude Code's
/// `JSON.parse` accept).
fn strict() -> jsonc_parser::ParseOptions {
    jsonc_parser::ParseOptions {
        allow_comments: false,
        allow_loose_object_property_names: false,
        allow_trailing_commas: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    }
}

/// The root object of `text` (`None` for a blank text). Errors name `path` and say what to do.
fn root_object<'t>(path: &Path, text: &'t str) -> Result<Option<ast::Object<'t>>, String> {
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
        if text.trim().is_empty() {
            return Ok(None);
        }
        return Err(format!(
            "Invalid JSON in {}: {e}. The file was left unchanged; fix it (or move it away) and run the command again.",
            path.display()
        ));
    }
    let parsed = jsonc_parser::parse_to_ast(text, &Default::default(), &strict())
        .map_err(|e| format!("Invalid JSON in {}: {e}", path.display()))?;
    match parsed.value {
        Some(ast::Value::Object(o)) => Ok(Some(o)),
        _ => Err(format!(
            "{} does not hold a JSON object at the top level. The file was left unchanged; make it an object (`{{}}`) and run the command again.",
            path.display()
        )),
    }
}

/// The member named `key` (the last one, as `JSON.parse` keeps the last of duplicates).
fn member<'a, 't>(o: &'a ast::Object<'t>, key: &str) -> Option<(usize, &'a ObjectProp<'t>)> {
    o.properties
        .iter()
        .enumerate()
        .rev()
        .find(|(_, p)| p.name.as_str() == key)
}

fn to_value(v: &ast::Value) -> Value {
    match v {
        ast::Value::StringLit(s) => Value::String(s.value.to_string()),
        ast::Value::NumberLit(n) => serde_json::from_str(n.value).unwrap_or(Value::Null),
        ast::Value::BooleanLit(b) => Value::Bool(b.value),
        ast::Value::NullKeyword(_) => Value::Null,
        ast::Value::Array(a) => Value::Array(a.elements.iter().map(to_value).collect()),
        ast::Value::Object(o) => Value::Object(
            o.properties
                .iter()
                .map(|p| (p.name.as_str().to_owned(), to_value(&p.value)))
                .collect(),
        ),
    }
}

impl JsonFile {
    /// Reads `path`. Invalid JSON, or a top level that is not an object, is an error naming the
    /// file and saying what to do; nothing is written.
    pub fn open(path: &Path) -> Result<JsonFile, String> {
        let (read, bom) = match Self::read_masked(path)? {
            Some((t, bom)) => (Some(t), bom),
            None => (None, false),
        };
        let text = read.clone().unwrap_or_default();
        root_object(path, &text)?;
        Ok(JsonFile {
            path: path.to_owned(),
            read,
            text,
            bom,
        })
    }

    /// The file's text (a byte-order mark masked) and whether it had one; `None` if missing.
    fn read_masked(path: &Path) -> Result<Option<(String, bool)>, String> {
        match std::fs::read_to_string(path) {
            Ok(t) => Ok(Some(masked(t))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("Failed to read {}: {e}", path.display())),
        }
    }

    /// Whether the file existed when opened.
    pub fn existed(&self) -> bool {
        self.read.is_some()
    }

    /// The current text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The current content (`{}` for a blank or missing file).
    pub fn value(&self) -> Value {
        match root_object(&self.path, &self.text) {
            Ok(Some(o)) => to_value(&ast::Value::Object(o)),
            _ => Value::Object(Default::default()),
        }
    }

    /// The value at top-level `key`.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.value().get(key).cloned()
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// No members at the top level (or a blank file).
    pub fn is_empty(&self) -> bool {
        self.value().as_object().is_none_or(|o| o.is_empty())
    }

    /// Makes `edit` (from one of the methods below) on the current text.
    pub fn apply(&mut self, edit: &Edit) {
        self.text = edit.apply(&self.text);
    }

    /// Replaces the current text (e.g. by an undone [`EditRecord`]).
    pub fn set_text(&mut self, text: String) {
        self.text = text;
    }

    /// The edit that sets `path` (keys from the top level down) to `value`, adding the objects
    /// on the way that are missing. `None` if it already holds that value. Errors if something
    /// on the way is not an object.
    pub fn set(&self, path: &[&str], value: &Value) -> Result<Option<Edit>, String> {
        let Some(root) = root_object(&self.path, &self.text)? else {
            return Ok(Some(self.fill_blank(&nest(path, value))));
        };
        let mut obj = &root;
        for (depth, key) in path.iter().enumerate() {
            let Some((_, prop)) = member(obj, key) else {
                let rest = nest(&path[depth + 1..], value);
                return Ok(Some(Layout::of(&self.text).append(
                    &self.text,
                    obj.range,
                    obj.properties.iter().map(|p| p.range).collect(),
                    Some(key),
                    &rest,
                )));
            };
            if depth + 1 == path.len() {
                if to_value(&prop.value) == *value {
                    return Ok(None);
                }
                let layout = Layout::of(&self.text);
                let range = prop.value.range();
                let inserted = if layout.is_inline(&self.text, obj.range) {
                    layout.inline(value)
                } else {
                    layout.pretty(value, line_indent(&self.text, prop.range.start))
                };
                return Ok(Some(Edit {
                    at: range.start,
                    removed: self.text[range.start..range.end].to_owned(),
                    inserted,
                }));
            }
            obj = match &prop.value {
                ast::Value::Object(o) => o,
                _ => return Err(self.not_a(&path[..=depth], "an object")),
            };
        }
        unreachable!("the loop returns at the last key")
    }

    /// The edit that appends `item` to the array at top-level `key` (created if missing);
    /// `None` if the array already holds it.
    pub fn push_unique(&self, key: &str, item: &Value) -> Result<Option<Edit>, String> {
        self.push_unique_at(&[key], item)
    }

    /// The edit that appends `item` to the array at `path` (keys from the top level down; the
    /// array and the objects on the way are made when missing); `None` if the array already
    /// holds it. Errors if something on the way is not an object, or the last is no array.
    pub fn push_unique_at(&self, path: &[&str], item: &Value) -> Result<Option<Edit>, String> {
        let one = Value::Array(vec![item.clone()]);
        let Some(root) = root_object(&self.path, &self.text)? else {
            return Ok(Some(self.fill_blank(&nest(path, &one))));
        };
        let layout = Layout::of(&self.text);
        let mut obj = &root;
        for (depth, key) in path.iter().enumerate() {
            let Some((_, prop)) = member(obj, key) else {
                return Ok(Some(layout.append(
                    &self.text,
                    obj.range,
                    obj.properties.iter().map(|p| p.range).collect(),
                    Some(key),
                    &nest(&path[depth + 1..], &one),
                )));
            };
            match &prop.value {
                ast::Value::Object(o) if depth + 1 < path.len() => obj = o,
                ast::Value::Array(a) if depth + 1 == path.len() => {
                    if a.elements.iter().any(|e| to_value(e) == *item) {
                        return Ok(None);
                    }
                    return Ok(Some(layout.append(
                        &self.text,
                        a.range,
                        a.elements.iter().map(|e| e.range()).collect(),
                        None,
                        item,
                    )));
                }
                _ if depth + 1 == path.len() => return Err(self.not_a(path, "an array")),
                _ => return Err(self.not_a(&path[..=depth], "an object")),
            }
        }
        Ok(None)
    }

    /// The edit that removes the member at `path`; `None` if there is none.
    pub fn remove_member(&self, path: &[&str]) -> Result<Option<Edit>, String> {
        let Some((last, parents)) = path.split_last() else {
            return Ok(None);
        };
        let Some(root) = root_object(&self.path, &self.text)? else {
            return Ok(None);
        };
        let mut obj = &root;
        for key in parents {
            match member(obj, key).map(|(_, p)| &p.value) {
                Some(ast::Value::Object(o)) => obj = o,
                _ => return Ok(None),
            }
        }
        Ok(member(obj, last).map(|(i, _)| {
            remove_item(
                &self.text,
                obj.range,
                &obj.properties.iter().map(|p| p.range).collect::<Vec<_>>(),
                i,
            )
        }))
    }

    /// The edit that removes the first element equal to `item` from the array at top-level
    /// `key`; `None` if there is none.
    pub fn remove_item(&self, key: &str, item: &Value) -> Result<Option<Edit>, String> {
        self.remove_item_at(&[key], item)
    }

    /// The edit that removes the first element equal to `item` from the array at `path`;
    /// `None` if there is none.
    pub fn remove_item_at(&self, path: &[&str], item: &Value) -> Result<Option<Edit>, String> {
        let Some((last, parents)) = path.split_last() else {
            return Ok(None);
        };
        let Some(root) = root_object(&self.path, &self.text)? else {
            return Ok(None);
        };
        let mut obj = &root;
        for key in parents {
            match member(obj, key).map(|(_, p)| &p.value) {
                Some(ast::Value::Object(o)) => obj = o,
                _ => return Ok(None),
            }
        }
        let Some((_, prop)) = member(obj, last) else {
            return Ok(None);
        };
        let ast::Value::Array(a) = &prop.value else {
            return Ok(None);
        };
        Ok(a.elements
            .iter()
            .position(|e| to_value(e) == *item)
            .map(|i| {
                remove_item(
                    &self.text,
                    a.range,
                    &a.elements.iter().map(|e| e.range()).collect::<Vec<_>>(),
                    i,
                )
            }))
    }

    /// The value at `path`, if every key on the way is there.
    pub fn get_at(&self, path: &[&str]) -> Option<Value> {
        let mut v = self.value();
        for key in path {
            v = v.get(key)?.clone();
        }
        Some(v)
    }

    /// Writes the current text atomically (temp file + rename), only if it differs from what
    /// was read; refuses if the file changed on disk since it was read.
    pub fn save(&self) -> Result<(), String> {
        if self.read.as_deref() == Some(self.text.as_str()) {
            return Ok(());
        }
        let now = Self::read_masked(&self.path)?.map(|(t, _)| t);
        if now != self.read {
            return Err(format!(
                "{} changed while elfiee was editing it; it was left as it is now. Run the command again.",
                self.path.display()
            ));
        }
        let text = match self.text.strip_prefix(BOM_MASK) {
            Some(rest) if self.bom => format!("{BOM}{rest}"),
            _ => self.text.clone(),
        };
        write_atomic(&self.path, text.as_bytes())
            .map_err(|e| format!("Failed to write {} ({e})", self.path.display()))
    }

    /// A blank (or missing) file becomes `value`, pretty-printed with two spaces and a final
    /// newline (as `JSON.stringify(v, null, 2)` writers do), keeping a CRLF the blank had.
    fn fill_blank(&self, value: &Value) -> Edit {
        let nl = if self.text.contains("\r\n") {
            "\r\n"
        } else {
            "\n"
        };
        let layout = Layout {
            nl,
            unit: "  ".into(),
            item_sep: ", ".into(),
            kv_sep: ": ".into(),
        };
        // A byte-order mark stays where it is.
        let at = if self.bom { BOM_MASK.len() } else { 0 };
        Edit {
            at,
            removed: self.text[at..].to_owned(),
            inserted: format!("{}{nl}", layout.pretty(value, "")),
        }
    }

    fn not_a(&self, path: &[&str], what: &str) -> String {
        format!(
            "'{}' in {} is not {what}, so elfiee cannot add its entry; the file was left unchanged.",
            path.join("."),
            self.path.display()
        )
    }
}

/// `{"a": {"b": value}}` for path `["a", "b"]`; `value` itself for an empty path.
fn nest(path: &[&str], value: &Value) -> Value {
    path.iter().rev().fold(value.clone(), |v, k| {
        let mut m = serde_json::Map::new();
        m.insert((*k).to_owned(), v);
        Value::Object(m)
    })
}

/// The whitespace at the start of the line holding byte `pos`.
fn line_indent(text: &str, pos: usize) -> &str {
    let start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// How a file writes its JSON, read from the file itself.
struct Layout {
    nl: &'static str,
    /// One level of indentation.
    unit: String,
    /// Between items of a one-line container (`", "` or `","`).
    item_sep: String,
    /// Between a key and its value (`": "` or `":"`).
    kv_sep: String,
}

impl Layout {
    fn of(text: &str) -> Layout {
        let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let unit = text
            .lines()
            .map(|l| &l[..l.len() - l.trim_start_matches([' ', '\t']).len()])
            .find(|ws| !ws.is_empty())
            .unwrap_or("  ")
            .to_owned();
        let mut layout = Layout {
            nl,
            unit,
            item_sep: ", ".into(),
            kv_sep: ": ".into(),
        };
        if let Ok(parsed) = jsonc_parser::parse_to_ast(text, &Default::default(), &strict()) {
            if let Some(v) = &parsed.value {
                let (mut kv, mut item) = (None, None);
                separators(text, v, &mut kv, &mut item);
                layout.kv_sep = kv.unwrap_or_else(|| ": ".into());
                layout.item_sep =
                    item.unwrap_or_else(|| if layout.kv_sep == ":" { "," } else { ", " }.into());
            }
        }
        layout
    }

    /// Whether the container spanning `range` is written on one line.
    fn is_inline(&self, text: &str, range: jsonc_parser::common::Range) -> bool {
        !text[range.start..range.end].contains('\n')
    }

    /// The edit that appends an item (`key: value` in an object, `value` in an array) to the
    /// container spanning `range` whose items span `items`.
    fn append(
        &self,
        text: &str,
        range: jsonc_parser::common::Range,
        items: Vec<jsonc_parser::common::Range>,
        key: Option<&str>,
        value: &Value,
    ) -> Edit {
        let key_text = |kv: &str| {
            key.map(|k| format!("{}{kv}", Value::String(k.to_owned())))
                .unwrap_or_default()
        };
        let inline = self.is_inline(text, range);
        match items.last() {
            Some(last) if inline => {
                let sep = match &items[..] {
                    [.., a, b] => text[a.end..b.start].to_owned(),
                    _ => self.item_sep.clone(),
                };
                Edit {
                    at: last.end,
                    removed: String::new(),
                    inserted: format!("{sep}{}{}", key_text(&self.kv_sep), self.inline(value)),
                }
            }
            Some(last) => {
                let indent = line_indent(text, last.start);
                Edit {
                    at: last.end,
                    removed: String::new(),
                    inserted: format!(
                        ",{}{indent}{}{}",
                        self.nl,
                        key_text(&self.kv_sep),
                        self.pretty(value, indent)
                    ),
                }
            }
            None => {
                let inner = &text[range.start + 1..range.end - 1];
                let inserted = if text.trim_end().contains('\n') {
                    let outer = line_indent(text, range.start);
                    let indent = format!("{outer}{}", self.unit);
                    format!(
                        "{}{indent}{}{}{}{outer}",
                        self.nl,
                        key_text(&self.kv_sep),
                        self.pretty(value, &indent),
                        self.nl
                    )
                } else {
                    format!("{}{}", key_text(&self.kv_sep), self.inline(value))
                };
                Edit {
                    at: range.start + 1,
                    removed: inner.to_owned(),
                    inserted,
                }
            }
        }
    }

    /// `value` on one line, with the file's separators.
    fn inline(&self, value: &Value) -> String {
        match value {
            Value::Object(m) if !m.is_empty() => format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, v)| format!(
                        "{}{}{}",
                        Value::String(k.clone()),
                        self.kv_sep,
                        self.inline(v)
                    ))
                    .collect::<Vec<_>>()
                    .join(&self.item_sep)
            ),
            Value::Array(a) if !a.is_empty() => format!(
                "[{}]",
                a.iter()
                    .map(|v| self.inline(v))
                    .collect::<Vec<_>>()
                    .join(&self.item_sep)
            ),
            other => other.to_string(),
        }
    }

    /// `value` over several lines, its first line continuing one indented by `indent`.
    fn pretty(&self, value: &Value, indent: &str) -> String {
        let inner = format!("{indent}{}", self.unit);
        let lines: Vec<String> = match value {
            Value::Object(m) if !m.is_empty() => m
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{inner}{}{}{}",
                        Value::String(k.clone()),
                        self.kv_sep,
                        self.pretty(v, &inner)
                    )
                })
                .collect(),
            Value::Array(a) if !a.is_empty() => a
                .iter()
                .map(|v| format!("{inner}{}", self.pretty(v, &inner)))
                .collect(),
            other => return other.to_string(),
        };
        let (open, close) = if value.is_object() {
            ("{", "}")
        } else {
            ("[", "]")
        };
        let nl = self.nl;
        format!(
            "{open}{nl}{}{nl}{indent}{close}",
            lines.join(&format!(",{nl}"))
        )
    }
}

/// The first key/value separator and the first one-line item separator found in `v`.
fn separators(text: &str, v: &ast::Value, kv: &mut Option<String>, item: &mut Option<String>) {
    let ranges: Vec<jsonc_parser::common::Range> = match v {
        ast::Value::Object(o) => {
            for p in &o.properties {
                let gap = &text[p.name.range().end..p.value.start()];
                if kv.is_none() && !gap.contains('\n') {
                    *kv = Some(gap.to_owned());
                }
                separators(text, &p.value, kv, item);
            }
            o.properties.iter().map(|p| p.range).collect()
        }
        ast::Value::Array(a) => {
            for e in &a.elements {
                separators(text, e, kv, item);
            }
            a.elements.iter().map(|e| e.range()).collect()
        }
        _ => return,
    };
    if item.is_none() {
        *item = ranges
            .windows(2)
            .map(|w| &text[w[0].end..w[1].start])
            .find(|gap| !gap.contains('\n'))
            .map(str::to_owned);
    }
}

/// The edit that removes item `i` of the container spanning `range` whose items span `items`:
/// with the separator before it (the last item), after it (the others), or the container's
/// whole inside (the only item). Removing what [`Layout::append`] added gives back the text as
/// it was before.
fn remove_item(
    text: &str,
    range: jsonc_parser::common::Range,
    items: &[jsonc_parser::common::Range],
    i: usize,
) -> Edit {
    let (from, to) = match items.len() {
        1 => (range.start + 1, range.end - 1),
        n if i + 1 == n => (items[i - 1].end, items[i].end),
        _ => (items[i].start, items[i + 1].start),
    };
    Edit {
        at: from,
        removed: text[from..to].to_owned(),
        inserted: String::new(),
    }
}

/// Writes `bytes` to `path` via a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.elfiee-tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename is durable only with its folder (a power cut would otherwise put the old
        // file back while the caller has recorded the new one; issue 39, P2).
        elfiee_engine::layout::sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn open(dir: &Path, text: Option<&str>) -> JsonFile {
        let p = dir.join("c.json");
        if let Some(t) = text {
            std::fs::write(&p, t).unwrap();
        }
        JsonFile::open(&p).unwrap()
    }

    /// Sets `mcpServers.elfiee` and returns the new text.
    fn with_server(text: &str) -> String {
        let d = tempfile::tempdir().unwrap();
        let f = open(d.path(), Some(text));
        let edit = f
            .set(&["mcpServers", "elfiee"], &json!({"command": "e"}))
            .unwrap()
            .unwrap();
        edit.apply(text)
    }

    #[test]
    fn an_insert_follows_the_container_it_goes_into() {
        assert_eq!(
            with_server("{\"a\": 1}\n"),
            "{\"a\": 1, \"mcpServers\": {\"elfiee\": {\"command\": \"e\"}}}\n",
            "one line stays one line"
        );
        assert_eq!(
            with_server("{\"a\":1,\"b\":2}"),
            "{\"a\":1,\"b\":2,\"mcpServers\":{\"elfiee\":{\"command\":\"e\"}}}",
            "compact separators kept"
        );
        assert_eq!(
            with_server("{\r\n\t\"a\": 1\r\n}"),
            "{\r\n\t\"a\": 1,\r\n\t\"mcpServers\": {\r\n\t\t\"elfiee\": {\r\n\t\t\t\"command\": \"e\"\r\n\t\t}\r\n\t}\r\n}",
            "tabs, CRLF, no final newline"
        );
        assert_eq!(
            with_server("{\n    \"mcpServers\": {\n        \"x\": {}\n    }\n}\n"),
            "{\n    \"mcpServers\": {\n        \"x\": {},\n        \"elfiee\": {\n            \"command\": \"e\"\n        }\n    }\n}\n",
            "four spaces, next to the other server"
        );
        assert_eq!(
            with_server("{\n  \"mcpServers\": {}\n}\n"),
            "{\n  \"mcpServers\": {\n    \"elfiee\": {\n      \"command\": \"e\"\n    }\n  }\n}\n"
        );
        assert_eq!(
            with_server(""),
            "{\n  \"mcpServers\": {\n    \"elfiee\": {\n      \"command\": \"e\"\n    }\n  }\n}\n"
        );
    }

    #[test]
    fn the_recorded_edit_gives_back_the_original_bytes_only_while_the_file_is_as_left() {
        for original in ["", "\r\n", "{ }", "{\n}\n", "{\"a\": \"caf\\u00e9\"}"] {
            let d = tempfile::tempdir().unwrap();
            let f = open(d.path(), Some(original));
            let edit = f.push_unique("list", &json!("elfiee")).unwrap().unwrap();
            let record = edit.record(original);
            let after = edit.apply(original);
            assert_eq!(record.undo(&after).as_deref(), Some(original));
            assert_eq!(record.undo(&format!("{after} ")), None, "changed since");
        }
    }

    #[test]
    fn removing_a_member_takes_its_separator_and_keeps_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let text = "{\"mcpServers\": {\"a\": 1, \"elfiee\": 2, \"b\": 3}}";
        let f = open(d.path(), Some(text));
        let edit = f.remove_member(&["mcpServers", "elfiee"]).unwrap().unwrap();
        assert_eq!(edit.apply(text), "{\"mcpServers\": {\"a\": 1, \"b\": 3}}");
        let text = "{\n  \"enabledMcpjsonServers\": [\n    \"x\",\n    \"elfiee\"\n  ]\n}\n";
        let f = open(d.path(), Some(text));
        let edit = f
            .remove_item("enabledMcpjsonServers", &json!("elfiee"))
            .unwrap()
            .unwrap();
        assert_eq!(
            edit.apply(text),
            "{\n  \"enabledMcpjsonServers\": [\n    \"x\"\n  ]\n}\n"
        );
        assert!(f.remove_member(&["nope", "elfiee"]).unwrap().is_none());
    }

    #[test]
    fn invalid_json_is_an_error_that_says_what_to_do_and_nothing_is_written() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.json");
        for bad in ["{ not json", "{\"a\": 1,}", "// c\n{}", "{\"a\": 1} x"] {
            std::fs::write(&p, bad).unwrap();
            let e = JsonFile::open(&p).unwrap_err();
            assert!(e.starts_with("Invalid JSON in "), "{e}");
            assert!(e.contains("left unchanged") && e.contains("fix it"), "{e}");
            assert_eq!(std::fs::read_to_string(&p).unwrap(), bad);
        }
        std::fs::write(&p, "[1, 2]").unwrap();
        let e = JsonFile::open(&p).unwrap_err();
        assert!(e.contains("not hold a JSON object"), "{e}");
        std::fs::write(&p, "{\"mcpServers\": [1]}").unwrap();
        let f = JsonFile::open(&p).unwrap();
        let e = f.set(&["mcpServers", "elfiee"], &json!(1)).unwrap_err();
        assert!(
            e.contains("'mcpServers'") && e.contains("not an object"),
            "{e}"
        );
    }

    #[test]
    fn missing_and_blank_files_are_empty_objects() {
        let d = tempfile::tempdir().unwrap();
        let f = open(d.path(), None);
        assert!(!f.existed() && f.is_empty());
        let f = open(d.path(), Some("  \n"));
        assert!(f.existed() && f.is_empty());
        assert_eq!(f.value(), json!({}));
    }

    #[test]
    fn an_entry_already_there_is_no_edit_and_a_different_one_is_replaced_in_place() {
        let d = tempfile::tempdir().unwrap();
        let text = "{\"mcpServers\": {\"elfiee\": {\"command\": \"old\"}, \"x\": 1}}";
        let f = open(d.path(), Some(text));
        assert!(f
            .set(&["mcpServers", "elfiee"], &json!({"command": "old"}))
            .unwrap()
            .is_none());
        let edit = f
            .set(&["mcpServers", "elfiee"], &json!({"command": "new"}))
            .unwrap()
            .unwrap();
        assert_eq!(
            edit.apply(text),
            "{\"mcpServers\": {\"elfiee\": {\"command\": \"new\"}, \"x\": 1}}"
        );
    }

    #[test]
    fn save_refuses_a_file_changed_since_it_was_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.json");
        std::fs::write(&p, "{}").unwrap();
        let mut f = JsonFile::open(&p).unwrap();
        let edit = f.push_unique("l", &json!(1)).unwrap().unwrap();
        f.apply(&edit);
        std::fs::write(&p, "{\"user\": 1}").unwrap();
        assert!(f.save().unwrap_err().contains("changed while"));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"user\": 1}");
    }
}
