//! Reading fields of event payloads and tool arguments (JSON objects) the lenient way the
//! effects do: a missing or mistyped field reads as empty.

use serde_json::Value;

/// The string field `key` of `v`, or `""`.
pub(crate) fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The strings in the array field `key` of `v` (other items skipped), or none.
pub(crate) fn str_list(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_or_mistyped_fields_read_as_empty() {
        let v = json!({"s": "x", "n": 1, "l": ["a", 2, "b"], "o": "not a list"});
        assert_eq!(str_field(&v, "s"), "x");
        assert_eq!(str_field(&v, "n"), "");
        assert_eq!(str_field(&v, "missing"), "");
        assert_eq!(str_list(&v, "l"), ["a", "b"]);
        assert!(str_list(&v, "o").is_empty());
        assert!(str_list(&v, "missing").is_empty());
        assert_eq!(str_field(&json!("not an object"), "s"), "");
    }
}
