//! The first human channel: the client's own prompt.
//!
//! A call that asks is put to the person through the client they are
//! using, as an elicitation form with the four choices:
//!
//! - a client on an older protocol that declared elicitation gets an
//!   `elicitation/create` request while the call waits (the page and the
//!   CLI stay open; the first decision wins);
//! - a client on 2026-07-28 cannot be asked mid-call, so the call ends with
//!   `input_required` carrying the same form and a sealed `requestState`
//!   (see [`super::seal`]); the retry brings the answer.
//!
//! The answer is recorded through the hub's attached [`HumanChannels`]
//! (crate::channels::HumanChannels), never by this crate, and the call
//! then goes on exactly as if the person had used the page or the CLI.

use std::collections::BTreeMap;
use std::sync::Arc;

use airlock_common::now_ms;
use airlock_policy::contract;
use airlock_store::ledger::{self, Choice, FrozenCall, Pending, Recorded};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, InputRequest, InputRequiredResult, ServerRequest,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::settle::{self, Desk, TIMED_OUT};
use super::{Admission, Audit, Outcome, Target, ToolCall};
use crate::seal::Bound;

/// The key of airlock's form in `inputRequests` / `inputResponses`.
pub(crate) const APPROVAL_KEY: &str = "airlock-approval";
/// The form's one field.
const FIELD: &str = "decision";

/// Whether the person can be asked through this client at all.
pub(crate) fn can_ask(desk: &Desk<'_>, call: &ToolCall) -> bool {
    desk.approvals.channels().is_some()
        && call
            .capabilities
            .as_ref()
            .is_some_and(|c| c.elicitation.is_some())
}

/// The four-choice form for a frozen call.
pub(crate) fn form(frozen: &FrozenCall, expires_at_ms: i64) -> ElicitRequestParams {
    let args = ledger::shown(&frozen.arguments);
    let seconds = ((expires_at_ms - now_ms()).max(0) + 999) / 1000;
    let mut message = format!(
        "airlock: may `{}` run? (connection {})\n",
        frozen.tool, frozen.connection
    );
    if !frozen.description.is_empty() {
        message.push_str(&format!("What it does: {}\n", frozen.description));
    }
    message.push_str(&format!(
        "Why it asks: {}\nArguments: {args}\nThis request expires in {seconds} s.",
        frozen.reason
    ));
    let choices: Vec<Value> = Choice::ALL
        .iter()
        .map(|c| json!({ "const": c.as_str(), "title": c.label() }))
        .collect();
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                FIELD: {
                    "type": "string",
                    "title": "Your decision",
                    "description": "Allow once runs this call only. Allow for this run also allows this tool for the rest of this session. Always allow creates a rule for this tool while its definition stays the same; a tool that is new or changed keeps asking until you review it (airlock tools review, or Always allow on the approval page).",
                    "oneOf": choices,
                }
            },
            "required": [FIELD],
        },
    }))
    .expect("the approval form is a valid elicitation")
}

/// What the person chose, from the client's answer to the form. Declining
/// or dismissing the form is a "deny".
fn choice_of(answer: ElicitResult) -> Result<Choice, String> {
    match answer.action {
        ElicitationAction::Accept => answer
            .content
            .as_ref()
            .and_then(|c| c.get(FIELD))
            .and_then(Value::as_str)
            .and_then(Choice::parse)
            .ok_or_else(|| {
                format!(
                    "the answer's `{FIELD}` is not one of {}",
                    Choice::ALL.map(Choice::as_str).join(", ")
                )
            }),
        _ => Ok(Choice::Deny),
    }
}

/// The form, open in an older client while the call waits.
pub(crate) struct InClient {
    withdrawn: CancellationToken,
}

impl InClient {
    /// The call was settled another way (the page, the CLI, the clock):
    /// take the form back, so the client stops showing it.
    pub(crate) fn withdraw(self) {
        self.withdrawn.cancel();
    }
}

/// Older clients: put the form to the person while the call waits. When
/// they answer, the answer is recorded and the waiting call woken.
pub(crate) fn ask_in_client(
    desk: &Desk<'_>,
    call: &ToolCall,
    id: &str,
    form: ElicitRequestParams,
    wake: Arc<tokio::sync::Notify>,
) -> InClient {
    let channels = desk.approvals.channels().cloned();
    let peer = call.peer.clone();
    let id = id.to_string();
    let withdrawn = CancellationToken::new();
    let stop = withdrawn.clone();
    tokio::spawn(async move {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(form));
        let Ok(mut handle) = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        else {
            return;
        };
        let answer = tokio::select! {
            a = &mut handle.rx => a,
            _ = stop.cancelled() => {
                let _ = handle.cancel(Some("decided another way".into())).await;
                return;
            }
        };
        let choice = match answer {
            Ok(Ok(ClientResult::ElicitResult(answer))) => match choice_of(answer) {
                Ok(c) => c,
                Err(why) => {
                    // An answer nobody can read is not a yes.
                    tracing::warn!(
                        "the client's approval answer was unusable ({why}); treated as deny"
                    );
                    Choice::Deny
                }
            },
            // The client could not put the form to the person; the page
            // and the CLI are still there.
            _ => return,
        };
        let Some(channels) = channels else {
            return;
        };
        match channels.answered_in_prompt(&id, choice) {
            Ok(_) => wake.notify_one(),
            Err(e) => tracing::error!(error = %e, "cannot record the answer given in the client"),
        }
    });
    InClient { withdrawn }
}

/// 2026-07-28 clients: end the call with the form and a sealed state.
pub(crate) fn input_required(
    desk: &Desk<'_>,
    frozen: &FrozenCall,
    pending: &Pending,
    form: ElicitRequestParams,
) -> CallToolResponse {
    let state = desk.approvals.seals.seal(
        pending.id(),
        Bound {
            principal: &frozen.principal,
            tool: &frozen.tool,
            digest: &frozen.args_digest,
            expires_at_ms: pending.expires_at_ms(),
        },
    );
    let requests = BTreeMap::from([(
        APPROVAL_KEY.to_string(),
        InputRequest::Elicitation(ElicitRequest::new(form)),
    )]);
    CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), Some(state)))
}

/// Whether a retry is the call its state was issued for: the same tool and
/// the same arguments.
pub(super) fn same_call(tool: &str, digest: &str, call: &ToolCall) -> Result<(), String> {
    if tool != call.params.name.as_ref() {
        return Err(format!(
            "this requestState belongs to a call of `{tool}`, not `{}`",
            call.params.name
        ));
    }
    if arguments_digest(call) != digest {
        return Err("the retry's arguments differ from the call that was allowed".into());
    }
    Ok(())
}

/// The digest of a call's canonical arguments.
pub(super) fn arguments_digest(call: &ToolCall) -> String {
    contract::digest_canonical(&contract::canonical(&Value::Object(
        call.params.arguments.clone().unwrap_or_default(),
    )))
}

/// 2026-07-28 clients: the retry that carries the person's answer and the
/// sealed state. Checks the seal, records the answer, and settles the call
/// like any other approval (policy again, claim once, stored arguments).
pub(crate) async fn resume(
    desk: &Desk<'_>,
    audit: &Audit,
    mut call: ToolCall,
    target: Target,
) -> Admission {
    let refuse = |why: String| {
        let _ = audit.approval("refused-state", "", &why);
        Admission::Refused(Outcome::Refused(ErrorData::invalid_params(
            format!("airlock: {why}; nothing ran"),
            None,
        )))
    };
    let failed = |why: String| Admission::Refused(Outcome::Failed(why));
    let state = call.params.request_state.as_deref().unwrap_or_default();
    let claims = match desk
        .approvals
        .seals
        .open(state, desk.approvals.principal(), now_ms())
    {
        Ok(c) => c,
        Err(why) => return refuse(why.to_string()),
    };
    if let Err(why) = same_call(claims.tool(), claims.digest(), &call) {
        return refuse(why);
    }
    let row = match desk.store.ledger_row(&claims.approval) {
        Ok(Some(row)) if row.call.args_digest == claims.digest() => row,
        Ok(_) => return refuse("no such approval".into()),
        Err(e) => return failed(format!("the approval could not be read: {e}")),
    };
    let answer = call
        .params
        .input_responses
        .as_ref()
        .and_then(|r| r.get(APPROVAL_KEY))
        .cloned()
        .ok_or_else(|| format!("inputResponses has no `{APPROVAL_KEY}` entry"))
        .and_then(|v| {
            serde_json::from_value::<ElicitResult>(v)
                .map_err(|e| format!("the answer is not an elicitation result: {e}"))
        })
        .and_then(choice_of);
    let choice = match answer {
        Ok(c) => c,
        Err(why) => return refuse(why),
    };
    let Some(channels) = desk.approvals.channels() else {
        return refuse("answers in the client are not accepted by this hub".into());
    };
    match channels.answered_in_prompt(&row.id, choice) {
        Ok(Recorded::Expired) => {
            let _ = audit.approval("expired", "", "answered after the approval expired");
            return Admission::Refused(Outcome::Declined(TIMED_OUT));
        }
        // Approved, denied, or already decided through another channel:
        // the ledger says which.
        Ok(_) => {}
        Err(e) => return failed(format!("the decision could not be recorded: {e}")),
    }
    // airlock's own form and answer are not the source's business.
    call.params.request_state = None;
    call.params.input_responses = None;
    match desk.store.ledger_waited(&row.id) {
        Ok(waited) => settle::settle(desk, audit, call, target, waited),
        Err(e) => failed(format!("the approval could not be read: {e}")),
    }
}
