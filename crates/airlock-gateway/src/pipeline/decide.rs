//! Step 2: policy. Exactly one decision per call, recorded before anything
//! else happens; only `allow` goes on to the source, as a [`PolicyAllows`]
//! that nothing but this module can make.

use airlock_config::Action;
use airlock_policy::{Decision, Step, contract};
use airlock_store::{AuditKind, AuditRecord};
use serde_json::Value;

use super::{Audit, Outcome, ToolCall};
use crate::hub::View;
use crate::secrets::HubSecrets;

/// Arguments kept in the audit: a digest of all of them, and this much text.
const ARGS_EXCERPT_BYTES: usize = 1024;

/// Policy's allow for one call. The private field keeps its making here.
pub(crate) struct PolicyAllows(());

pub(crate) enum Verdict {
    Allow(PolicyAllows),
    /// A person decides.
    Ask(Decision),
    /// Denied, or the decision could not be recorded: it does not run.
    Refuse(Outcome),
}

/// Decides the call and appends the decision to the audit log, committed
/// before this returns. A decision that cannot be recorded refuses the
/// call (fail closed).
pub(crate) fn call(view: &View, audit: &Audit, secrets: &HubSecrets, call: &ToolCall) -> Verdict {
    let args = Value::Object(call.params.arguments.clone().unwrap_or_default());
    let decision = view.evaluate(&call.params.name, Some(&args));
    let canonical = contract::canonical(&args);
    let record = AuditRecord {
        decision: decision.action.as_str().into(),
        step: step_name(decision.step).into(),
        layer: decision
            .rule
            .as_ref()
            .map(|(_, l)| l.as_str().to_string())
            .unwrap_or_default(),
        rule: decision
            .rule
            .as_ref()
            .map(|(o, _)| o.clone())
            .unwrap_or_default(),
        reason: decision.reason.clone(),
        args_digest: contract::digest_canonical(&canonical),
        args_excerpt: airlock_common::text::shorten(
            &airlock_upstream::Secrets::scrub(secrets, &canonical),
            ARGS_EXCERPT_BYTES,
            |_| String::new(),
        ),
        ..audit.record(AuditKind::Decision, call.started_at_ms)
    };
    if let Err(e) = audit.commit(record) {
        tracing::error!(error = %e, "cannot record the decision; the call is refused");
        return Verdict::Refuse(Outcome::Failed(format!(
            "the decision could not be recorded ({e}), so the call did not run"
        )));
    }
    match decision.action {
        Action::Allow => Verdict::Allow(PolicyAllows(())),
        Action::Ask => Verdict::Ask(decision),
        Action::Deny => Verdict::Refuse(Outcome::Blocked {
            action: Action::Deny,
            reason: decision.reason,
        }),
    }
}

fn step_name(step: Step) -> &'static str {
    match step {
        Step::Deny => "deny",
        Step::Contract => "contract",
        Step::Rule => "rule",
        Step::Default => "default",
        Step::Error => "error",
    }
}
