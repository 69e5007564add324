//! A tool call's rounds of input from a 2026-07-28 source (see
//! [`crate::input`] for what is shared with prompts and resources). The
//! seal of a tool call also binds the tool as it was allowed, and its
//! retry continues that call: it is not decided again, and it cannot
//! become another call (same tool, same arguments, same principal, once,
//! in time, no deny rule since).

use std::time::Duration;

use rmcp::model::{CallToolResponse, InputRequiredResult};

use super::{Outcome, Target, ToolCall};
use crate::hub::View;
use crate::input::{Asker, refused, sealed};
use crate::seal::{Continuation, Sealer};
use airlock_config::Action;

/// What a continuation is bound to besides its tool name: the call's
/// arguments, and the tool as it was when the call was allowed (source,
/// upstream name, contract), one per line, arguments first.
fn bound_to(call: &ToolCall, target: &Target) -> String {
    format!(
        "{}\n{}\n{}\n{}",
        super::prompt::arguments_digest(call),
        target.source_name,
        target.upstream_name,
        target.contract_digest
    )
}

/// For a 2026-07-28 client: the source's requests, under a sealed state
/// that continues this call. `round` is the round this is (1 for the
/// call's first `input_required`).
pub(crate) fn wrap(
    seals: &Sealer,
    principal: &str,
    (call, target): (&ToolCall, &Target),
    asked: InputRequiredResult,
    round: u32,
    ttl: Duration,
) -> Outcome {
    if let Some(no) = refused(&asked, round) {
        return Outcome::Failed(no);
    }
    let digest = bound_to(call, target);
    let bound = (call.params.name.as_ref(), digest.as_str());
    let asked = sealed(seals, principal, bound, asked, round, ttl);
    Outcome::Answered(CallToolResponse::InputRequired(asked))
}

/// A 2026-07-28 client's retry under a continuation seal: opened (once),
/// and checked to be the same call, of the same tool as it was when it
/// was allowed, that no rule has come to deny since.
pub(crate) fn continued(
    seals: &Sealer,
    principal: &str,
    view: &View,
    (call, target): (&ToolCall, &Target),
) -> Result<Continuation, String> {
    let state = call.params.request_state.as_deref().unwrap_or_default();
    let continuation = seals
        .open_continuation(state, principal, airlock_common::now_ms())
        .map_err(|e| e.to_string())?;
    let sealed = continuation.digest();
    let arguments = sealed.split('\n').next().unwrap_or_default();
    super::prompt::same_call(continuation.tool(), arguments, call)?;
    if sealed != bound_to(call, target) {
        return Err(
            "the tool changed since this call was allowed (its source, name or definition); call it afresh".into(),
        );
    }
    let args = serde_json::Value::Object(call.params.arguments.clone().unwrap_or_default());
    let now = view.evaluate(&call.params.name, Some(&args));
    if now.action == Action::Deny {
        return Err(format!("policy now denies this call ({})", now.reason));
    }
    Ok(continuation)
}

/// Who answers for a call: its client.
pub(crate) fn asker(call: &ToolCall) -> Asker<'_> {
    Asker {
        peer: &call.peer,
        capabilities: call.capabilities.as_ref(),
        cancelled: &call.cancelled,
        gone: &call.gone,
    }
}
