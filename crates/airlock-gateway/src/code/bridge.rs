//! One call a run made: it becomes a [`ToolCall`] that goes through the
//! pipeline like a client's, and its end becomes what the code gets, with
//! every string scrubbed on the way in (I1).

use std::sync::Arc;
use std::time::Instant;

use airlock_common::now_ms;
use airlock_config::Action;
use airlock_sandbox::Reply;
use airlock_upstream::Secrets;
use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::hub::{Hub, RunKey};
use crate::pipeline::{self, CodeCall, DECLINED, Ending, Outcome, TIMED_OUT, ToolCall};

/// How a bridge call ended.
pub(super) enum Settled {
    Reply(Reply),
    /// Still waiting for a person: approval id.
    Paused(String),
}

/// Sends call `seq` of run `run` through the pipeline, on behalf of the
/// client that started the run; with `rejoin`, the approval it paused on.
pub(super) async fn call(
    hub: &Arc<Hub>,
    outer: &ToolCall,
    cancelled: &tokio_util::sync::CancellationToken,
    run: &str,
    call: airlock_sandbox::Call,
    rejoin: Option<String>,
) -> Settled {
    let tool_call = ToolCall {
        id: hub.clients.new_id(),
        params: CallToolRequestParams::new(call.exposed).with_arguments(call.arguments),
        session: outer.session,
        // "Allow for this run" covers the rest of this run.
        run: Some(RunKey::Code(run.to_string())),
        lane: outer.lane,
        peer: outer.peer.clone(),
        // The run keeps its client's request alive itself (one rising
        // count for the whole run); a call's own progress would restart it.
        progress: None,
        capabilities: outer.capabilities.clone(),
        modern: outer.modern,
        cancelled: cancelled.clone(),
        gone: outer.gone.clone(),
        started: Instant::now(),
        started_at_ms: now_ms(),
        code: Some(CodeCall {
            run: run.to_string(),
            seq: call.seq,
        }),
    };
    let secrets = hub.secrets.as_ref();
    match pipeline::bridged(hub, tool_call, rejoin.as_deref()).await {
        Ok(Ending::Paused(approval)) => Settled::Paused(approval),
        Ok(Ending::Outcome(outcome)) => Settled::Reply(reply(outcome, secrets)),
        Ok(Ending::AskClient(_)) => Settled::Reply(error(
            "failed",
            "the call asked the client, which a run cannot do",
        )),
        Err(e) => Settled::Reply(refused(&e, secrets)),
    }
}

fn error(code: &str, message: &str) -> Reply {
    Reply::Error {
        code: code.into(),
        message: message.into(),
    }
}

/// A JSON-RPC error from the pipeline (an unknown tool, bad arguments).
fn refused(e: &ErrorData, secrets: &dyn Secrets) -> Reply {
    let message = secrets.scrub(&e.message);
    let code = if message.starts_with("unknown tool") {
        "unknown_tool"
    } else {
        "invalid_request"
    };
    error(code, &message)
}

/// What the code gets for a call's outcome, scrubbed (I1): the tool's
/// structured result, else its text; a refusal as an error code the code
/// can branch on.
pub(super) fn reply(outcome: Outcome, secrets: &dyn Secrets) -> Reply {
    let scrubbed = |text: &str| secrets.scrub(text);
    match outcome {
        Outcome::Answered(CallToolResponse::Complete(result)) => {
            if result.is_error == Some(true) {
                error("tool_error", &scrubbed(&text_of(&result)))
            } else {
                let mut value = match result.structured_content {
                    Some(v) => v,
                    None => Value::String(text_of(&result)),
                };
                secrets.scrub_json(&mut value);
                Reply::Value(value)
            }
        }
        Outcome::Answered(CallToolResponse::InputRequired(_)) => error(
            "failed",
            "the tool asked for the user's input, which code mode cannot give; call it directly",
        ),
        Outcome::Answered(_) => error(
            "failed",
            "the tool answered with a task to poll, which code mode cannot follow; call it directly",
        ),
        Outcome::Refused(e) => error("tool_error", &scrubbed(&e.message)),
        Outcome::Failed(why) => error("failed", &scrubbed(&why)),
        Outcome::Blocked {
            action: Action::Deny,
            reason,
        } => error("policy_denied", &format!("denied by policy: {reason}")),
        Outcome::Blocked { reason, .. } => error(
            "approval_required",
            &format!("needs the user's approval, and no one can be asked: {reason}"),
        ),
        Outcome::Declined(text) if text == DECLINED => error("approval_denied", text),
        Outcome::Declined(text) if text == TIMED_OUT => error("approval_timeout", text),
        Outcome::Declined(text) => error("approval_denied", text),
    }
}

/// The text blocks of a result, joined; other blocks named by kind.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .map(|c| match c {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(_) => "[image]".into(),
            ContentBlock::Audio(_) => "[audio]".into(),
            ContentBlock::Resource(_) => "[resource]".into(),
            ContentBlock::ResourceLink(l) => format!("[resource link {}]", l.uri),
            _ => "[content]".into(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A reply scrubbed again: one read back from the journal, for a secret
/// learned since it was written.
pub(super) fn scrubbed(reply: Reply, secrets: &dyn Secrets) -> Reply {
    match reply {
        Reply::Value(mut v) => {
            secrets.scrub_json(&mut v);
            Reply::Value(v)
        }
        Reply::Error { code, message } => Reply::Error {
            code,
            message: secrets.scrub(&message),
        },
        Reply::Pause => Reply::Pause,
    }
}

/// A reply as the journal keeps it, and back.
pub(super) fn to_journal(reply: &Reply) -> String {
    match reply {
        Reply::Value(v) => json!({"value": v}).to_string(),
        Reply::Error { code, message } => {
            json!({"error": {"code": code, "message": message}}).to_string()
        }
        Reply::Pause => json!({"pause": true}).to_string(),
    }
}

pub(super) fn from_journal(text: &str) -> Option<Reply> {
    let v: Value = serde_json::from_str(text).ok()?;
    if let Some(value) = v.get("value") {
        return Some(Reply::Value(value.clone()));
    }
    let e = v.get("error")?;
    Some(Reply::Error {
        code: e.get("code")?.as_str()?.to_string(),
        message: e.get("message")?.as_str()?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_secrets::SecretStore;

    const SECRET: &str = "sk-live-0123456789abcdef";

    fn secrets(dir: &std::path::Path) -> Arc<crate::secrets::HubSecrets> {
        let store = airlock_secrets::FileStore::in_dir(dir);
        store
            .set("api", &airlock_secrets::SecretValue::new(SECRET.into()))
            .unwrap();
        let secrets = crate::secrets::HubSecrets::new(Box::new(store), dir.to_path_buf());
        secrets.learn_stored();
        secrets
    }

    #[test]
    fn a_secret_in_any_part_of_a_reply_is_scrubbed_before_the_code_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = secrets(dir.path());
        let mut structured = CallToolResult::success(vec![]);
        structured.structured_content = Some(json!({"token": SECRET, SECRET: [SECRET]}));
        let answered = |r: CallToolResult| Outcome::Answered(CallToolResponse::Complete(r));
        let replies = [
            reply(answered(structured), secrets.as_ref()),
            reply(
                answered(CallToolResult::success(vec![ContentBlock::text(format!(
                    "the key is {SECRET}"
                ))])),
                secrets.as_ref(),
            ),
            reply(
                answered(CallToolResult::error(vec![ContentBlock::text(SECRET)])),
                secrets.as_ref(),
            ),
            reply(
                Outcome::Failed(format!("upstream said {SECRET}")),
                secrets.as_ref(),
            ),
            reply(
                Outcome::Refused(ErrorData::internal_error(SECRET.to_string(), None)),
                secrets.as_ref(),
            ),
        ];
        for r in &replies {
            let text = to_journal(r);
            assert!(!text.contains(SECRET), "{text}");
            assert!(text.contains("[secret]"), "{text}");
        }
    }

    #[test]
    fn refusals_become_codes_the_code_can_branch_on() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = secrets(dir.path());
        let code = |o: Outcome| match reply(o, secrets.as_ref()) {
            Reply::Error { code, .. } => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            code(Outcome::Blocked {
                action: Action::Deny,
                reason: "rule".into()
            }),
            "policy_denied"
        );
        assert_eq!(code(Outcome::Declined(DECLINED)), "approval_denied");
        assert_eq!(code(Outcome::Declined(TIMED_OUT)), "approval_timeout");
        assert_eq!(code(Outcome::Failed("gone".into())), "failed");
        assert_eq!(
            match refused(
                &ErrorData::invalid_params("unknown tool `x__y`", None),
                secrets.as_ref()
            ) {
                Reply::Error { code, .. } => code,
                other => panic!("{other:?}"),
            },
            "unknown_tool"
        );
    }

    #[test]
    fn journal_replies_round_trip() {
        for r in [
            Reply::Value(json!({"a": [1, "two"]})),
            Reply::Value(Value::Null),
            error("policy_denied", "no"),
        ] {
            assert_eq!(from_journal(&to_journal(&r)), Some(r));
        }
        assert_eq!(from_journal("not json"), None);
    }
}
