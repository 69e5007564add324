//! The last step: the outcome of a call that ran, appended to the audit
//! log after its decision (written off the hot path; see airlock-store).

use airlock_store::{AuditKind, AuditRecord};
use rmcp::model::CallToolResponse;

use super::{Outcome, Target, ToolCall};
use crate::hub::Hub;

pub(crate) fn call(hub: &Hub, call: &ToolCall, target: &Target, outcome: &Outcome) {
    let (outcome, detail) = match outcome {
        Outcome::Answered(CallToolResponse::Complete(r)) if r.is_error == Some(true) => {
            ("tool_error", String::new())
        }
        Outcome::Answered(CallToolResponse::InputRequired(_)) => ("input_required", String::new()),
        Outcome::Answered(_) => ("ok", String::new()),
        Outcome::Refused(e) => (
            "failed",
            format!("upstream error {}: {}", e.code.0, e.message),
        ),
        Outcome::Failed(why) => ("failed", why.clone()),
        Outcome::Blocked { .. } | Outcome::Declined(_) => return,
    };
    let source = hub.sources[target.source].name();
    let record = AuditRecord {
        source: source.to_string(),
        connection: hub.policy().connection(source).to_string(),
        tool: call.params.name.to_string(),
        outcome: outcome.into(),
        duration_us: call.started.elapsed().as_micros() as i64,
        detail,
        ..AuditRecord::new(AuditKind::Outcome, call.id.to_string(), call.started_at_ms)
    };
    if let Err(e) = hub.store.record_audit(record) {
        tracing::error!(error = %e, "cannot record the outcome");
    }
}
