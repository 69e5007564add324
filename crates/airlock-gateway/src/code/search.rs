//! `search_tools`: the tools a run may call, found by words in their names
//! and descriptions. It searches exactly what `tools/list` would show this
//! client (reviewed definitions; nothing policy denies or review withholds).

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{CallToolResponse, JsonObject};
use serde_json::{Value, json};

use crate::hub::{Hub, View};

const DEFAULT_LIMIT: usize = 10;
const MAX_LIMIT: usize = 50;

/// A tool as code reaches it: `tools[source][tool]`.
pub(crate) struct Callable {
    pub source: String,
    pub tool: String,
    pub exposed: String,
    pub definition: rmcp::model::Tool,
}

/// Every tool a run may call, as this client would be shown it.
pub(crate) fn callable(view: &View) -> Vec<Callable> {
    view.visible_tools()
        .into_iter()
        .filter_map(|t| {
            let route = view.catalog.tool(&t.name)?;
            Some(Callable {
                source: view.catalog.source_name(route.source).to_string(),
                tool: route.upstream_name.clone(),
                exposed: t.name.to_string(),
                definition: t,
            })
        })
        .collect()
}

/// `tools.a.b`, or `tools["a-b"]["c"]` where a name is not an identifier.
pub(crate) fn path(source: &str, tool: &str) -> String {
    let part = |name: &str| {
        let ident = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        if ident {
            format!(".{name}")
        } else {
            format!("[{}]", Value::String(name.to_string()))
        }
    };
    format!("tools{}{}", part(source), part(tool))
}

pub(super) fn call(hub: &Arc<Hub>, args: &JsonObject) -> Result<CallToolResponse, ErrorData> {
    let query = match args.get("query") {
        Some(Value::String(q)) => q.to_lowercase(),
        None => String::new(),
        Some(_) => return Err(ErrorData::invalid_params("`query` must be a string", None)),
    };
    let schemas = match args.get("schemas") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ErrorData::invalid_params(
                "`schemas` must be a boolean",
                None,
            ));
        }
    };
    let limit = match args.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_LIMIT as u64).contains(&n) => n as usize,
            _ => {
                return Err(ErrorData::invalid_params(
                    format!("`limit` must be an integer from 1 to {MAX_LIMIT}"),
                    None,
                ));
            }
        },
    };
    let view = hub.view();
    let found = ranked(callable(&view), &query);
    let total = found.len();
    let tools: Vec<Value> = found
        .into_iter()
        .take(limit)
        .map(|c| {
            let mut entry = json!({
                "call": path(&c.source, &c.tool),
                "description": first_sentence(c.definition.description.as_deref().unwrap_or("")),
            });
            if schemas {
                entry["inputSchema"] = Value::Object((*c.definition.input_schema).clone());
            }
            entry
        })
        .collect();
    Ok(super::answer(
        &json!({"tools": tools, "matches": total}),
        None,
        false,
    ))
}

/// Tools matching every word of `query`, best first: a word in the name
/// counts more than one in the description.
fn ranked(tools: Vec<Callable>, query: &str) -> Vec<Callable> {
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut scored: Vec<(usize, Callable)> = tools
        .into_iter()
        .filter_map(|c| {
            let name = format!("{} {}", c.source, c.tool).to_lowercase();
            let description = c
                .definition
                .description
                .as_deref()
                .unwrap_or("")
                .to_lowercase();
            let mut score = 0;
            for w in &words {
                match (name.contains(w), description.contains(w)) {
                    (true, _) => score += 3,
                    (false, true) => score += 1,
                    (false, false) => return None,
                }
            }
            Some((score, c))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.exposed.cmp(&b.1.exposed)));
    scored.into_iter().map(|(_, c)| c).collect()
}

fn first_sentence(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let end = line.find(". ").map(|i| i + 1).unwrap_or(line.len());
    airlock_common::text::prefix(&line[..end], 200).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_paths_are_javascript_for_every_name() {
        assert_eq!(path("fs", "read_file"), "tools.fs.read_file");
        assert_eq!(path("my-db", "run-query"), r#"tools["my-db"]["run-query"]"#);
        assert_eq!(path("a", "9lives"), r#"tools.a["9lives"]"#);
    }

    #[test]
    fn the_first_sentence_is_shown() {
        assert_eq!(
            first_sentence("Read a file. Then more.\nSecond line"),
            "Read a file."
        );
        assert_eq!(first_sentence("No stop"), "No stop");
        assert_eq!(first_sentence(""), "");
    }
}
