//! Block bodies kept out of the state (DESIGN §3, "content is not state").
//!
//! A large body — the `markdown` of a markdown block, the `text` of a code block — is written
//! by the engine into the document's content store, and the event that sets it carries a
//! reference instead of the bytes: `{"$content": "<blake3 hex>", "len": N}` at the body's key
//! under `value.contents`. The folds move such references into
//! [`Block::content_refs`], so the state (and every snapshot) grows with the number of blocks,
//! not with their bytes. Small bodies stay inline in the event and the state, as before.
//!
//! Everything here is pure; fetching the bytes is the engine's job (it passes a closure).

use elfiee_model::{Block, CapError, ContentRef, Event, EventHash};
use serde_json::{Map, Value};

/// The key of a reference object in an event value.
pub const CONTENT_KEY: &str = "$content";

/// Bodies shorter than this many bytes stay inline in the event and the state.
pub const INLINE_MAX: usize = 256;

/// The `contents` keys that hold the body of a block type.
pub fn body_keys(block_type: &str) -> &'static [&'static str] {
    match block_type {
        "markdown" => &["markdown"],
        "code" => &["text"],
        _ => &[],
    }
}

/// Moves the large bodies an event sets into a content store (`put` stores a text and returns
/// its reference) and puts references in their place: the body keys `folds` declares for the
/// event's kind, at `value.contents`, of [`INLINE_MAX`] bytes or more. A value that already
/// holds something shaped like a reference is refused: only the engine writes references.
/// The engine runs this on every event before sealing it; `elfiee::testkit` runs it with a
/// store in memory, so both commit the same events.
pub fn externalize<E: From<CapError>>(
    folds: &crate::fold::Folds,
    e: &mut Event,
    mut put: impl FnMut(&str) -> Result<ContentRef, E>,
) -> Result<(), E> {
    let kind = e.cap_id().to_owned();
    let keys = folds.body_keys(&kind, &e.value).to_vec();
    let Some(Value::Object(contents)) = e.value.get_mut("contents") else {
        return Ok(());
    };
    if let Some((k, _)) = contents.iter().find(|(_, v)| looks_like_ref(v)) {
        return Err(CapError::payload(
            &kind,
            format!("'contents.{k}' is an object with a '$content' key, which is reserved for the engine's content references; send the text itself"),
        )
        .into());
    }
    for key in keys {
        if let Some(Value::String(text)) = contents.get(&key) {
            if text.len() >= INLINE_MAX {
                let r = put(text)?;
                contents.insert(key, ref_value(&r));
            }
        }
    }
    Ok(())
}

/// The reference of `text` in a content store: its blake3 hash and length.
pub fn ref_for(text: &str) -> ContentRef {
    ContentRef {
        hash: EventHash(*blake3::hash(text.as_bytes()).as_bytes()),
        len: text.len() as u64,
    }
}

/// The reference a value holds, if it is a reference object.
pub fn ref_of(v: &Value) -> Option<ContentRef> {
    let obj = v.as_object()?;
    let hash = EventHash::from_hex(obj.get(CONTENT_KEY)?.as_str()?)?;
    let len = obj.get("len")?.as_u64()?;
    (obj.len() == 2).then_some(ContentRef { hash, len })
}

/// Whether a value is shaped like a reference object (even a malformed one): handlers' output
/// with such a value is refused, so only the engine ever writes references.
pub fn looks_like_ref(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.contains_key(CONTENT_KEY))
}

/// The reference object for `r`, as stored in an event.
pub fn ref_value(r: &ContentRef) -> Value {
    let mut m = Map::new();
    m.insert(CONTENT_KEY.into(), Value::String(r.hash.to_hex()));
    m.insert("len".into(), Value::from(r.len));
    Value::Object(m)
}

/// blake3 of `bytes` as a [`ContentRef`].
pub fn content_ref(bytes: &[u8]) -> ContentRef {
    ContentRef {
        hash: EventHash(*blake3::hash(bytes).as_bytes()),
        len: bytes.len() as u64,
    }
}

/// The hash of a block's body at `key`, wherever it is (reference or inline string).
pub fn body_hash(block: &Block, key: &str) -> Option<String> {
    if let Some(r) = block.content_refs.get(key) {
        return Some(r.hash.to_hex());
    }
    block
        .contents
        .get(key)
        .and_then(Value::as_str)
        .map(|s| blake3::hash(s.as_bytes()).to_hex().to_string())
}

/// Moves reference objects found among the top-level `contents` of `block` into
/// `content_refs` (used when a block is created from an event, as `core.create` folds).
pub fn take_refs(block: &mut Block) {
    let Value::Object(obj) = &mut block.contents else {
        return;
    };
    let keys: Vec<String> = obj
        .iter()
        .filter(|(_, v)| ref_of(v).is_some())
        .map(|(k, _)| k.clone())
        .collect();
    for k in keys {
        if let Some(r) = obj.remove(&k).as_ref().and_then(ref_of) {
            block.content_refs.insert(k, r);
        }
    }
}

/// `block` with every reference replaced by its body, fetched with `fetch`.
pub fn resolve<E>(
    block: &Block,
    mut fetch: impl FnMut(&ContentRef) -> Result<String, E>,
) -> Result<Block, E> {
    let mut out = block.clone();
    if out.content_refs.is_empty() {
        return Ok(out);
    }
    if !out.contents.is_object() {
        out.contents = Value::Object(Map::new());
    }
    for (k, r) in std::mem::take(&mut out.content_refs) {
        let text = fetch(&r)?;
        if let Value::Object(obj) = &mut out.contents {
            obj.insert(k, Value::String(text));
        }
    }
    Ok(out)
}

/// Every reference an event value carries under `contents` (what `verify` checks).
pub fn event_refs(value: &Value) -> Vec<ContentRef> {
    value
        .get("contents")
        .and_then(Value::as_object)
        .map(|o| o.values().filter_map(ref_of).collect())
        .unwrap_or_default()
}

/// `value` with every reference under `contents` replaced by its body (for showing history).
pub fn resolve_value<E>(
    value: &Value,
    mut fetch: impl FnMut(&ContentRef) -> Result<String, E>,
) -> Result<Value, E> {
    let mut out = value.clone();
    if let Some(Value::Object(obj)) = out.get_mut("contents") {
        for v in obj.values_mut() {
            if let Some(r) = ref_of(v) {
                *v = Value::String(fetch(&r)?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reference_round_trips_and_only_its_exact_shape_counts() {
        let r = content_ref(b"hello");
        assert_eq!(ref_of(&ref_value(&r)), Some(r.clone()));
        assert!(ref_of(&json!({"$content": r.hash.to_hex(), "len": 5, "x": 1})).is_none());
        assert!(ref_of(&json!({"$content": "zz", "len": 5})).is_none());
        assert!(ref_of(&json!("text")).is_none());
        assert!(looks_like_ref(&json!({"$content": 3})));
    }
}
