//! Step 2: policy. Exactly one decision per call, recorded before anything
//! else happens; only `allow` goes on to the source.

use airlock_config::Action;
use airlock_policy::{Decision, Step, ToolFacts, contract};
use airlock_store::{AuditKind, AuditRecord};
use serde_json::Value;

use super::{Target, ToolCall};
use crate::catalog::Catalog;
use crate::hub::Hub;

/// Arguments kept in the audit: a digest of all of them, and this much text.
const ARGS_EXCERPT_BYTES: usize = 1024;

/// The decision for one tool, for a call (`args`) or for listing (`None`).
pub(crate) fn evaluate(
    hub: &Hub,
    catalog: &Catalog,
    exposed: &str,
    source: usize,
    upstream_name: &str,
    args: Option<&Value>,
) -> Decision {
    let name = hub.sources[source].name();
    let Some(tool) = catalog.contract(exposed) else {
        return Decision {
            action: Action::Deny,
            step: Step::Error,
            rule: None,
            reason: "the tool has no contract in the catalog".into(),
            chain: vec!["the tool has no contract in the catalog; denied".into()],
        };
    };
    let reviewed = hub.reviewed_contracts();
    let policy = hub.policy();
    let facts = ToolFacts {
        source: name,
        connection: policy.connection(name),
        exposed,
        upstream: upstream_name,
        trusted: policy.trusted(name),
        definition: &tool.definition,
        digest: &tool.digest,
        reviewed: reviewed
            .get(&(name.to_string(), upstream_name.to_string()))
            .map(String::as_str),
    };
    if args.is_none() && policy.rules.hides(&facts) {
        return Decision {
            action: Action::Deny,
            step: Step::Deny,
            rule: None,
            reason: "denied by policy".into(),
            chain: Vec::new(),
        };
    }
    policy.rules.decide(&facts, args)
}

/// Decides the call and appends the decision to the audit log, committed
/// before this returns. A decision that cannot be recorded is an error:
/// the call must not run (it is refused, fail closed).
pub(crate) fn call(hub: &Hub, call: &ToolCall, target: &Target) -> Result<Decision, String> {
    let args = Value::Object(call.params.arguments.clone().unwrap_or_default());
    let decision = evaluate(
        hub,
        &hub.catalog(),
        &call.params.name,
        target.source,
        &target.upstream_name,
        Some(&args),
    );
    let source = hub.sources[target.source].name();
    let canonical = contract::canonical(&args);
    let record = AuditRecord {
        source: source.to_string(),
        connection: hub.policy().connection(source).to_string(),
        tool: call.params.name.to_string(),
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
        args_excerpt: excerpt(
            &airlock_upstream::Secrets::scrub(hub.secrets.as_ref(), &canonical),
            ARGS_EXCERPT_BYTES,
        ),
        ..AuditRecord::new(AuditKind::Decision, call.id.to_string(), call.started_at_ms)
    };
    if let Err(e) = hub.store.record_audit_committed(record) {
        tracing::error!(error = %e, "cannot record the decision; the call is refused");
        return Err(format!(
            "the decision could not be recorded ({e}), so the call did not run"
        ));
    }
    Ok(decision)
}

pub(crate) fn step_name(step: Step) -> &'static str {
    match step {
        Step::Deny => "deny",
        Step::Contract => "contract",
        Step::Rule => "rule",
        Step::Default => "default",
        Step::Error => "error",
    }
}

fn excerpt(text: &str, max: usize) -> String {
    airlock_common::text::shorten(text, max, |_| String::new())
}
