use elfiee_model::CapError;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Deepest JSON nesting a payload may have (deeper values could not be stored and read back
/// safely: decoders recurse).
pub const MAX_PAYLOAD_DEPTH: usize = 128;

/// Largest accepted command payload, in bytes of its JSON encoding (16 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;

/// Parses a command payload into its typed form; `null` counts as `{}`.
pub(crate) fn parse<T: DeserializeOwned>(cap: &str, payload: &Value) -> Result<T, CapError> {
    let empty = Value::Object(Default::default());
    let v = if payload.is_null() { &empty } else { payload };
    if !v.is_object() {
        return Err(CapError::payload(cap, "the payload must be a JSON object"));
    }
    T::deserialize(v).map_err(|e| {
        CapError::payload(
            cap,
            format!("{e}; see docs/EVENTS.md for the payload of '{cap}'"),
        )
    })
}

/// Payload of a capability that takes none: `{}` or `null`.
pub(crate) fn expect_empty(cap: &str, payload: &Value) -> Result<(), CapError> {
    match payload {
        Value::Null => Ok(()),
        Value::Object(m) if m.is_empty() => Ok(()),
        _ => Err(CapError::payload(
            cap,
            "this capability takes no payload; send {}",
        )),
    }
}

/// The refusal of a payload nested `depth` levels deep (over [`MAX_PAYLOAD_DEPTH`]).
pub fn too_deep(cap: &str, depth: usize) -> CapError {
    CapError::payload(
        cap,
        format!("the payload is nested {depth} levels deep; the limit is {MAX_PAYLOAD_DEPTH}"),
    )
}

/// Deepest nesting of arrays/objects in `v`, counted without recursion.
pub fn json_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

/// A display name: not empty, at most 1024 bytes, no control characters.
pub(crate) fn check_name(cap: &str, field: &str, name: &str) -> Result<(), CapError> {
    if name.trim().is_empty() {
        return Err(CapError::payload(
            cap,
            format!("'{field}' must not be empty"),
        ));
    }
    if name.len() > 1024 {
        return Err(CapError::payload(
            cap,
            format!("'{field}' is {} bytes; the limit is 1024", name.len()),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(CapError::payload(
            cap,
            format!("'{field}' must not contain control characters"),
        ));
    }
    Ok(())
}

/// An identifier: 1–128 characters of `[A-Za-z0-9._:-]`.
pub(crate) fn check_id(cap: &str, field: &str, id: &str) -> Result<(), CapError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if ok {
        Ok(())
    } else {
        Err(CapError::payload(cap, format!("'{field}' must be 1-128 characters of letters, digits, '.', '_', ':' or '-' (got {id:?})")))
    }
}
