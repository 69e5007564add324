//! Step 3: the call log. Written off the hot path (see airlock-store).

use airlock_store::{CallOutcome, CallRecord};
use rmcp::model::CallToolResponse;

use super::{Outcome, Target, ToolCall};
use crate::hub::Hub;

pub(crate) fn call(hub: &Hub, call: &ToolCall, target: &Target, outcome: &Outcome) {
    let (outcome, detail) = match outcome {
        Outcome::Answered(CallToolResponse::Complete(r)) if r.is_error == Some(true) => {
            (CallOutcome::ToolError, String::new())
        }
        Outcome::Answered(_) => (CallOutcome::Ok, String::new()),
        Outcome::Refused(e) => (
            CallOutcome::Failed,
            format!("upstream error {}: {}", e.code.0, e.message),
        ),
        Outcome::Failed(why) => (CallOutcome::Failed, why.clone()),
    };
    let record = CallRecord {
        started_at_ms: call.started_at_ms,
        duration_us: call.started.elapsed().as_micros() as i64,
        tool: call.params.name.to_string(),
        source: target.source_name.clone(),
        outcome,
        detail,
    };
    if let Err(e) = hub.store.record_call(record) {
        tracing::error!(error = %e, "cannot record the call");
    }
}
