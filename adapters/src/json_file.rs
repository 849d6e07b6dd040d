//! Editing JSON config files that belong to someone else (`.mcp.json`,
//! `.claude/settings.local.json`) without disturbing them.
//!
//! - Key order is kept, and every value we do not touch is written back byte for byte.
//! - A subtree whose content ends up equal to what was read is written back as it was read, so
//!   adding an entry and removing it again restores the original bytes.
//! - Invalid JSON is an error and the file is left untouched.
//! - Writes are atomic: a temporary file in the same directory, then `rename`.

use std::io::Write;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON value as read: untouched parts stay raw text.
#[derive(Debug, Clone)]
pub enum Node {
    Raw(Box<RawValue>),
    Object {
        entries: IndexMap<String, Node>,
        original: Option<Box<RawValue>>,
    },
    Array {
        items: Vec<Node>,
        original: Option<Box<RawValue>>,
    },
}

impl Node {
    fn value(&self) -> Value {
        match self {
            Node::Raw(r) => serde_json::from_str(r.get()).unwrap_or(Value::Null),
            Node::Object { entries, .. } => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value()))
                    .collect(),
            ),
            Node::Array { items, .. } => Value::Array(items.iter().map(Node::value).collect()),
        }
    }

    fn from_value(v: &Value) -> Node {
        match v {
            Value::Object(m) => Node::Object {
                entries: m
                    .iter()
                    .map(|(k, v)| (k.clone(), Node::from_value(v)))
                    .collect(),
                original: None,
            },
            Value::Array(a) => Node::Array {
                items: a.iter().map(Node::from_value).collect(),
                original: None,
            },
            other => {
                Node::Raw(serde_json::value::to_raw_value(other).unwrap_or_else(|_| raw("null")))
            }
        }
    }

    /// Opens a raw object or array one level so it can be edited.
    fn expand(&mut self) -> Result<(), String> {
        if let Node::Raw(r) = self {
            let text = r.get().trim_start();
            if text.starts_with('{') {
                let entries: IndexMap<String, Box<RawValue>> =
                    serde_json::from_str(r.get()).map_err(|e| e.to_string())?;
                *self = Node::Object {
                    entries: entries
                        .into_iter()
                        .map(|(k, v)| (k, Node::Raw(v)))
                        .collect(),
                    original: Some(r.clone()),
                };
            } else if text.starts_with('[') {
                let items: Vec<Box<RawValue>> =
                    serde_json::from_str(r.get()).map_err(|e| e.to_string())?;
                *self = Node::Array {
                    items: items.into_iter().map(Node::Raw).collect(),
                    original: Some(r.clone()),
                };
            }
        }
        Ok(())
    }

    fn unchanged_original(&self) -> Option<&RawValue> {
        let original = match self {
            Node::Object { original, .. } | Node::Array { original, .. } => original.as_deref()?,
            Node::Raw(_) => return None,
        };
        let before: Value = serde_json::from_str(original.get()).ok()?;
        (before == self.value()).then_some(original)
    }
}

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).expect("valid JSON literal")
}

/// Separators of a container that was written on one line (`", "` / `": "` or without spaces).
fn inline_style(original: &RawValue) -> Option<(&'static str, &'static str)> {
    let t = original.get();
    if t.contains('\n') {
        return None;
    }
    let item = if t.contains(", ") || !t.contains(',') {
        ", "
    } else {
        ","
    };
    let kv = if t.contains("\": ") || !t.contains("\":") {
        ": "
    } else {
        ":"
    };
    Some((item, kv))
}

impl Node {
    /// One-line rendering for a container whose original was on one line.
    fn inline_text(&self) -> Option<String> {
        let (original, is_obj) = match self {
            Node::Object {
                original: Some(o), ..
            } => (o, true),
            Node::Array {
                original: Some(o), ..
            } => (o, false),
            _ => return None,
        };
        let (item, kv) = inline_style(original)?;
        let text = |n: &Node| {
            n.inline_text()
                .unwrap_or_else(|| serde_json::to_string(n).unwrap_or_default())
        };
        let parts: Vec<String> = match self {
            Node::Object { entries, .. } => entries
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}{kv}{}",
                        serde_json::to_string(k).unwrap_or_default(),
                        text(v)
                    )
                })
                .collect(),
            Node::Array { items, .. } => items.iter().map(text).collect(),
            Node::Raw(_) => return None,
        };
        let (open, close) = if is_obj { ("{", "}") } else { ("[", "]") };
        Some(format!("{open}{}{close}", parts.join(item)))
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Some(orig) = self.unchanged_original() {
            return orig.serialize(s);
        }
        if let Some(t) = self.inline_text() {
            if let Ok(raw) = RawValue::from_string(t) {
                return raw.serialize(s);
            }
        }
        match self {
            Node::Raw(r) => r.serialize(s),
            Node::Object { entries, .. } => {
                let mut m = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            Node::Array { items, .. } => {
                let mut q = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    q.serialize_element(v)?;
                }
                q.end()
            }
        }
    }
}

/// A JSON object file opened for editing.
#[derive(Debug)]
pub struct JsonFile {
    pub path: PathBuf,
    /// Whether the file existed when opened.
    pub existed: bool,
    original_text: Option<String>,
    root: IndexMap<String, Node>,
    indent: String,
    trailing_newline: bool,
}

impl JsonFile {
    /// Reads `path` (a missing or empty file is an empty object). Invalid JSON, or a top level
    /// that is not an object, is an error naming the file.
    pub fn open(path: &Path) -> Result<JsonFile, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("Failed to read {}: {e}", path.display())),
        };
        let body = text.as_deref().unwrap_or("");
        let root: IndexMap<String, Box<RawValue>> = if body.trim().is_empty() {
            IndexMap::new()
        } else {
            serde_json::from_str(body)
                .map_err(|e| format!("Invalid JSON in {}: {e}", path.display()))?
        };
        let indent = body
            .lines()
            .nth(1)
            .map(|l| {
                l.chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .collect::<String>()
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "  ".into());
        Ok(JsonFile {
            path: path.to_owned(),
            existed: text.is_some(),
            trailing_newline: text.as_deref().map(|t| t.ends_with('\n')).unwrap_or(true),
            original_text: text,
            root: root.into_iter().map(|(k, v)| (k, Node::Raw(v))).collect(),
            indent,
        })
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.root.contains_key(key)
    }

    pub fn is_empty(&self) -> bool {
        self.root.is_empty()
    }

    /// The object at `key` opened for editing (created if absent). Errors if it is not an object.
    pub fn object_mut(&mut self, key: &str) -> Result<&mut IndexMap<String, Node>, String> {
        let path = self.path.display().to_string();
        let node = self
            .root
            .entry(key.to_owned())
            .or_insert_with(|| Node::Object {
                entries: IndexMap::new(),
                original: None,
            });
        node.expand()?;
        match node {
            Node::Object { entries, .. } => Ok(entries),
            _ => Err(format!("'{key}' in {path} is not an object")),
        }
    }

    /// The array at `key` opened for editing (created if absent). Errors if it is not an array.
    pub fn array_mut(&mut self, key: &str) -> Result<&mut Vec<Node>, String> {
        let path = self.path.display().to_string();
        let node = self
            .root
            .entry(key.to_owned())
            .or_insert_with(|| Node::Array {
                items: Vec::new(),
                original: None,
            });
        node.expand()?;
        match node {
            Node::Array { items, .. } => Ok(items),
            _ => Err(format!("'{key}' in {path} is not an array")),
        }
    }

    /// The value at `key`, parsed.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.root.get(key).map(Node::value)
    }

    pub fn remove(&mut self, key: &str) {
        self.root.shift_remove(key);
    }

    /// A node for a new value.
    pub fn node(v: &Value) -> Node {
        Node::from_value(v)
    }

    /// Parsed value of a node.
    pub fn value_of(n: &Node) -> Value {
        n.value()
    }

    /// The bytes this file would be written as: the original text when nothing changed.
    pub fn render(&self) -> String {
        if let Some(orig) = &self.original_text {
            let before: Option<Value> = if orig.trim().is_empty() {
                Some(Value::Object(Default::default()))
            } else {
                serde_json::from_str(orig).ok()
            };
            let now = Value::Object(
                self.root
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value()))
                    .collect(),
            );
            if before.as_ref() == Some(&now) {
                return orig.clone();
            }
        }
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(self.indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        let _ = self.root.serialize(&mut ser);
        let mut s = String::from_utf8(out).unwrap_or_default();
        if self.trailing_newline {
            s.push('\n');
        }
        s
    }

    /// Writes the file atomically (temp file + rename), only if its bytes change.
    pub fn save(&self) -> Result<(), String> {
        let text = self.render();
        if self.original_text.as_deref() == Some(text.as_str()) {
            return Ok(());
        }
        write_atomic(&self.path, text.as_bytes())
            .map_err(|e| format!("Failed to write MCP config: {} ({e})", self.path.display()))
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
        std::fs::rename(&tmp, path)
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

    fn file(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("c.json");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn adding_then_removing_restores_the_original_bytes() {
        let d = tempfile::tempdir().unwrap();
        let orig = "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\", \"args\": [\"--flag\"]}\n    },\n    \"alpha\": [1,2]\n}";
        let p = file(d.path(), orig);
        let mut f = JsonFile::open(&p).unwrap();
        f.object_mut("mcpServers").unwrap().insert(
            "elfiee".into(),
            JsonFile::node(&json!({"command": "/bin/elfiee", "args": ["mcp-server"]})),
        );
        f.save().unwrap();
        let mid = std::fs::read_to_string(&p).unwrap();
        assert!(
            mid.find("zeta").unwrap() < mid.find("alpha").unwrap(),
            "key order kept: {mid}"
        );
        assert!(
            mid.contains("\"other\": {\"command\": \"x\", \"args\": [\"--flag\"]}"),
            "untouched values byte for byte: {mid}"
        );
        let mut f = JsonFile::open(&p).unwrap();
        f.object_mut("mcpServers").unwrap().shift_remove("elfiee");
        f.save().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), orig);
    }

    #[test]
    fn one_line_containers_stay_on_one_line_across_separate_edits() {
        let d = tempfile::tempdir().unwrap();
        let orig = "{\n  \"allow\": [\"a\", \"b\"],\n  \"servers\": {\"x\": {\"c\": 1}}\n}\n";
        let p = file(d.path(), orig);
        let mut f = JsonFile::open(&p).unwrap();
        f.array_mut("allow")
            .unwrap()
            .push(JsonFile::node(&json!("elfiee")));
        f.object_mut("servers")
            .unwrap()
            .insert("e".into(), JsonFile::node(&json!({"k": [1, 2]})));
        f.save().unwrap();
        let mid = std::fs::read_to_string(&p).unwrap();
        assert!(mid.contains("[\"a\", \"b\", \"elfiee\"]"), "{mid}");
        let mut f = JsonFile::open(&p).unwrap();
        f.array_mut("allow")
            .unwrap()
            .retain(|n| JsonFile::value_of(n) != "elfiee");
        f.object_mut("servers").unwrap().shift_remove("e");
        f.save().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), orig);
    }

    #[test]
    fn invalid_json_is_an_error_and_the_file_is_untouched() {
        let d = tempfile::tempdir().unwrap();
        let p = file(d.path(), "{ not json");
        let e = JsonFile::open(&p).unwrap_err();
        assert!(e.starts_with("Invalid JSON in "), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{ not json");
        let p = file(d.path(), "[1, 2]");
        assert!(
            JsonFile::open(&p).is_err(),
            "a top level that is not an object is refused"
        );
    }

    #[test]
    fn missing_and_empty_files_are_empty_objects() {
        let d = tempfile::tempdir().unwrap();
        let f = JsonFile::open(&d.path().join("none.json")).unwrap();
        assert!(!f.existed && f.is_empty());
        let p = file(d.path(), "");
        let mut f = JsonFile::open(&p).unwrap();
        assert!(f.existed && f.is_empty());
        f.array_mut("enabledMcpjsonServers")
            .unwrap()
            .push(JsonFile::node(&json!("elfiee")));
        f.save().unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v, json!({"enabledMcpjsonServers": ["elfiee"]}));
    }

    #[test]
    fn a_non_object_where_an_object_is_needed_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let p = file(d.path(), "{\"mcpServers\": [1]}");
        let mut f = JsonFile::open(&p).unwrap();
        assert!(f.object_mut("mcpServers").is_err());
    }
}
