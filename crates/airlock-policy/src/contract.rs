//! Tool contracts: what a person approved when they reviewed a tool.
//!
//! The digest is SHA-256 over a canonical JSON form (object keys sorted,
//! no insignificant whitespace) of the tool's name, title, description,
//! input schema, output schema and annotations. Anything else a server
//! sends (icons, `_meta`) does not change what the tool may do and is left
//! out, so it cannot force needless re-reviews.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The fields a contract covers, in their wire names.
pub const FIELDS: &[&str] = &[
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// The contract part of a tool definition.
pub fn contract_of(tool: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for f in FIELDS {
        if let Some(v) = tool.get(*f).filter(|v| !v.is_null()) {
            out.insert((*f).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// `sha256:<hex>` of the tool's contract.
pub fn digest(tool: &Value) -> String {
    digest_canonical(&canonical(&contract_of(tool)))
}

/// The fields of a prompt, resource or resource template that a model
/// reads (its text), in their wire names: what a person reviews of it.
pub const TEXT_FIELDS: &[&str] = &["name", "title", "description", "arguments", "mimeType"];

/// The reviewed part of a prompt, resource or template.
pub fn text_of(item: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for f in TEXT_FIELDS {
        if let Some(v) = item.get(*f).filter(|v| !v.is_null()) {
            out.insert((*f).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// `sha256:<hex>` of a prompt's, resource's or template's text.
pub fn text_digest(item: &Value) -> String {
    digest_canonical(&canonical(&text_of(item)))
}

/// `sha256:<hex>` of text already in canonical form (see [`canonical`]).
pub fn digest_canonical(canonical: &str) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    )
}

/// Canonical JSON: keys sorted at every depth, whatever order the map
/// implementation keeps.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_extra_fields_do_not_change_the_digest() {
        let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"a": {}, "b": {}}}});
        let b = json!({"inputSchema": {"properties": {"b": {}, "a": {}}, "type": "object"}, "description": "d", "name": "t", "icons": [], "_meta": {"x": 1}});
        assert_eq!(digest(&a), digest(&b));
    }

    #[test]
    fn every_contract_field_changes_the_digest() {
        let base = json!({"name": "t", "title": "T", "description": "d", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}});
        for field in FIELDS {
            let mut changed = base.clone();
            changed[*field] = json!("something else");
            assert_ne!(digest(&base), digest(&changed), "{field}");
        }
    }

    #[test]
    fn what_a_model_reads_of_an_item_changes_its_text_digest_and_nothing_else_does() {
        let base = json!({"name": "p", "title": "P", "description": "d", "arguments": [{"name": "a"}], "mimeType": "text/plain", "uri": "x://1"});
        for field in TEXT_FIELDS {
            let mut changed = base.clone();
            changed[*field] = json!("something else");
            assert_ne!(text_digest(&base), text_digest(&changed), "{field}");
        }
        let mut outside = base.clone();
        outside["uri"] = json!("x://2");
        outside["_meta"] = json!({"k": 1});
        assert_eq!(text_digest(&base), text_digest(&outside));
        // A null is no text: the same as the field left out.
        let mut nulled = base.clone();
        nulled["title"] = Value::Null;
        let mut left_out = base.clone();
        left_out.as_object_mut().unwrap().remove("title");
        assert_eq!(text_of(&nulled), text_of(&left_out));
        assert_eq!(text_of(&base)["description"], "d");
        assert!(text_digest(&base).starts_with("sha256:"));
    }
}
