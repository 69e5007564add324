//! What a person deciding about a tool is shown, and what the model may
//! read of a tool nobody has reviewed yet.

use airlock_policy::lint::Linter;
use serde_json::Value;

use crate::catalog::Catalog;

/// The poisoning lint's findings for `definition` (the tool `exposed`),
/// against every other tool in the catalog, one line each.
pub(crate) fn lint_new(catalog: &Catalog, exposed: &str, definition: &Value) -> Vec<String> {
    let others: Vec<String> = catalog
        .tool_names()
        .filter(|n| *n != exposed)
        .map(String::from)
        .collect();
    Linter::new(others)
        .check(definition)
        .into_iter()
        .map(|f| format!("{}: {}", f.field, f.message))
        .collect()
}

/// Where this much text is shown to a person, the rest is one flag away.
const SHOWN: usize = 1200; // bytes

/// What a person sees about the tool when a call to it waits: its
/// description (whole, up to a cap), and, for a tool that changed since its
/// review, what changed, with the lint's findings on the new text.
pub(crate) fn summary(
    catalog: &Catalog,
    exposed: &str,
    current: &Value,
    reviewed: Option<&Value>,
) -> String {
    let description = |v: &Value| {
        v.get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let now = description(current);
    let mut out = String::new();
    match reviewed {
        Some(before) if before != current => {
            out.push_str("CHANGED since it was reviewed.\n");
            let was = description(before);
            if was != now {
                out.push_str(&format!("Description was: {}\n", cap(&was)));
                out.push_str(&format!("Description now: {}\n", cap(&now)));
            }
            for field in ["inputSchema", "outputSchema", "annotations", "title"] {
                if before.get(field) != current.get(field) {
                    out.push_str(&format!("{field} changed\n"));
                }
            }
        }
        _ => out.push_str(&cap(&now)),
    }
    let findings = lint_new(catalog, exposed, current);
    if !findings.is_empty() {
        out.push_str("\nSigns of tool poisoning:\n");
        for f in findings {
            out.push_str(&format!("- {f}\n"));
        }
    }
    out.trim_end().to_string()
}

fn cap(text: &str) -> String {
    airlock_common::text::shorten(text, SHOWN, |n| {
        format!(" ({n} bytes in all; `airlock tools review --list` shows all)")
    })
}
