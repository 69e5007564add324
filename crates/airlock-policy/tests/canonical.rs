//! Canonical JSON and contract digests against generated values: the form
//! does not depend on how a value was built, reads back as the same value,
//! and two values share a form (so a digest) only when they are equal.

use airlock_policy::contract::{canonical, digest};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        // Fractions serde_json reads back exactly (its default float parser
        // is not exact to the last bit; the digest prints each f64 one way).
        any::<i16>().prop_map(|n| Value::from(f64::from(n) / 8.0)),
        "\\PC{0,8}".prop_map(Value::String),
        // Keys and strings that JSON escapes.
        prop_oneof![Just("\""), Just("\\"), Just("\n"), Just("\u{0}"), Just("é")]
            .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(("[a-z\"\\\\]{0,4}", inner), 0..6).prop_map(|pairs| {
                Value::Object(pairs.into_iter().collect::<Map<String, Value>>())
            }),
        ]
    })
}

/// The same object built with its keys in the reverse order, at every depth.
fn rebuilt(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m.iter().rev() {
                out.insert(k.clone(), rebuilt(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(rebuilt).collect()),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_canonical_form_reads_back_as_the_value_whatever_order_it_was_built_in(v in value()) {
        let form = canonical(&v);
        prop_assert_eq!(&form, &canonical(&rebuilt(&v)));
        let back: Value = serde_json::from_str(&form).unwrap();
        prop_assert_eq!(back, v);
    }

    #[test]
    fn two_schemas_share_a_digest_only_when_they_are_equal(a in value(), b in value()) {
        let tool = |schema: &Value| json!({"name": "t", "inputSchema": schema});
        prop_assert_eq!(digest(&tool(&a)) == digest(&tool(&b)), a == b);
    }
}
