//! The one place a call's audit records are built: every record of a call
//! names the same call id, source, connection and tool, taken from the
//! resolved target once.

use std::sync::Arc;

use airlock_common::now_ms;
use airlock_store::{AuditKind, AuditRecord, Store, StoreError};
use rmcp::model::CallToolResponse;

use super::{Outcome, Target, ToolCall};

pub(crate) struct Audit {
    store: Arc<dyn Store>,
    call: String,
    source: String,
    connection: String,
    tool: String,
}

impl Audit {
    pub(crate) fn new(store: Arc<dyn Store>, call: &ToolCall, target: &Target) -> Audit {
        Audit {
            store,
            // A run's calls are known by run and position.
            call: match &call.code {
                Some(c) => format!("{}#{}", c.run, c.seq),
                None => call.id.to_string(),
            },
            source: target.source_name.clone(),
            connection: target.connection.clone(),
            tool: call.params.name.to_string(),
        }
    }

    /// A record of this call, to be completed by the caller.
    pub(crate) fn record(&self, kind: AuditKind, at_ms: i64) -> AuditRecord {
        AuditRecord {
            source: self.source.clone(),
            connection: self.connection.clone(),
            tool: self.tool.clone(),
            ..AuditRecord::new(kind, self.call.clone(), at_ms)
        }
    }

    /// Commits `record` before returning; an error means it is not on
    /// record, and the call must not go on.
    pub(crate) fn commit(&self, record: AuditRecord) -> Result<(), StoreError> {
        self.store.record_audit_committed(record)
    }

    /// What happened at the approval step (`what`), through `channel`,
    /// committed before this returns.
    pub(crate) fn approval(
        &self,
        what: &str,
        channel: &str,
        detail: &str,
    ) -> Result<(), StoreError> {
        let record = AuditRecord {
            decision: what.into(),
            step: "approval".into(),
            rule: channel.into(),
            reason: detail.into(),
            ..self.record(AuditKind::Decision, now_ms())
        };
        self.commit(record).inspect_err(|e| {
            tracing::error!(error = %e, "cannot record the approval step");
        })
    }

    /// How a call that reached the source ended (written off the hot
    /// path). Calls that never ran have their decision on record already.
    pub(crate) fn outcome(&self, outcome: &Outcome, call: &ToolCall) {
        let (word, detail) = match outcome {
            Outcome::Answered(CallToolResponse::Complete(r)) if r.is_error == Some(true) => {
                ("tool_error", String::new())
            }
            Outcome::Answered(CallToolResponse::InputRequired(_)) => {
                ("input_required", String::new())
            }
            Outcome::Answered(_) => ("ok", String::new()),
            Outcome::Refused(e) => (
                "failed",
                format!("upstream error {}: {}", e.code.0, e.message),
            ),
            Outcome::Failed(why) => ("failed", why.clone()),
            Outcome::Blocked { .. } | Outcome::Declined(_) => return,
        };
        let record = AuditRecord {
            outcome: word.into(),
            duration_us: call.started.elapsed().as_micros() as i64,
            detail,
            ..self.record(AuditKind::Outcome, call.started_at_ms)
        };
        if let Err(e) = self.store.record_audit(record) {
            tracing::error!(error = %e, "cannot record the outcome");
        }
    }
}
