//! What an operator can scrape: Prometheus text for the admin listener.
//!
//! The catalog is closed (`docs/metrics.md`): every metric name is one of
//! [`NAMES`], and every label value is one of a fixed vocabulary or a
//! source name from the config — never a tool name, an argument, a reason,
//! a principal or anything an upstream or a client wrote. Calls are
//! counted from the audit records as the hub writes them ([`Metered`]
//! wraps the store), so the numbers say what the audit log says; the
//! pending approvals and the sources' states are read when scraped.

mod metered;

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use metered::Metered;

/// Every metric this hub exports, as scraped (counters end in `_total`).
pub const NAMES: &[&str] = &[
    "airlock_calls_total",
    "airlock_call_outcomes_total",
    "airlock_call_duration_seconds",
    "airlock_approval_steps_total",
    "airlock_approvals_pending",
    "airlock_sources",
    "airlock_store_operation_seconds",
    "airlock_store_errors_total",
];

/// The label value for anything outside a closed vocabulary.
const OTHER: &str = "other";

type Labels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Registry,
    /// Source names the config knows; any other becomes [`OTHER`].
    sources: BTreeSet<String>,
    calls: Family<Labels, Counter>,
    outcomes: Family<Labels, Counter>,
    duration: Family<Labels, Histogram>,
    approvals: Family<Labels, Counter>,
    pending: Gauge<i64, std::sync::atomic::AtomicI64>,
    source_states: Family<Labels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    store_seconds: Family<Labels, Histogram>,
    store_errors: Family<Labels, Counter<u64, AtomicU64>>,
    /// Two scrapes at once take turns: each resets the gauges it sets.
    scraping: std::sync::Mutex<()>,
}

fn histogram_family() -> Family<Labels, Histogram> {
    // 100 µs … ~52 s, doubling.
    Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 20)))
}

/// Where a source stands, in the words `airlock status` uses.
pub const SOURCE_STATES: &[&str] = &["starting", "ready", "failed", "stopped"];

impl Metrics {
    /// Metrics for a hub whose config names `sources`.
    pub fn new(sources: impl IntoIterator<Item = String>) -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            sources: sources.into_iter().collect(),
            calls: Family::default(),
            outcomes: Family::default(),
            duration: histogram_family(),
            approvals: Family::default(),
            pending: Gauge::default(),
            source_states: Family::default(),
            store_seconds: histogram_family(),
            store_errors: Family::default(),
            scraping: std::sync::Mutex::new(()),
        };
        let r = &mut m.registry;
        r.register(
            "airlock_calls",
            "Tool calls decided, by source and policy decision (allow, ask, deny)",
            m.calls.clone(),
        );
        r.register(
            "airlock_call_outcomes",
            "Tool calls that ran, by source and how they ended (ok, tool_error, input_required, failed)",
            m.outcomes.clone(),
        );
        r.register(
            "airlock_call_duration_seconds",
            "How long calls that ran took at their source, by source",
            m.duration.clone(),
        );
        r.register(
            "airlock_approval_steps",
            "Steps of calls that asked a person, by result",
            m.approvals.clone(),
        );
        r.register(
            "airlock_approvals_pending",
            "Approvals waiting for a person now",
            m.pending.clone(),
        );
        r.register(
            "airlock_sources",
            "Sources of this hub, by state",
            m.source_states.clone(),
        );
        r.register(
            "airlock_store_operation_seconds",
            "How long store operations took, by operation",
            m.store_seconds.clone(),
        );
        r.register(
            "airlock_store_errors",
            "Store operations that failed, by operation",
            m.store_errors.clone(),
        );
        m
    }

    fn source(&self, name: &str) -> String {
        if self.sources.contains(name) {
            name.to_string()
        } else {
            OTHER.to_string()
        }
    }

    /// Counts what one audit record says.
    pub(crate) fn audit(&self, r: &airlock_store::AuditRecord) {
        use airlock_store::AuditKind;
        let source = self.source(&r.source);
        match r.kind {
            AuditKind::Decision if r.step == "approval" => {
                self.approvals
                    .get_or_create(&vec![("result", approval_result(&r.decision).into())])
                    .inc();
            }
            AuditKind::Decision => {
                let decision = closed(&r.decision, &["allow", "ask", "deny"]);
                self.calls
                    .get_or_create(&vec![("source", source), ("decision", decision.into())])
                    .inc();
            }
            AuditKind::Outcome => {
                let outcome = closed(
                    &r.outcome,
                    &["ok", "tool_error", "input_required", "failed"],
                );
                self.outcomes
                    .get_or_create(&vec![
                        ("source", source.clone()),
                        ("outcome", outcome.into()),
                    ])
                    .inc();
                self.duration
                    .get_or_create(&vec![("source", source)])
                    .observe(r.duration_us.max(0) as f64 / 1e6);
            }
            AuditKind::Gap => {}
        }
    }

    pub(crate) fn store_op(&self, operation: &'static str, seconds: f64, failed: bool) {
        let labels = vec![("operation", operation.to_string())];
        self.store_seconds.get_or_create(&labels).observe(seconds);
        if failed {
            self.store_errors.get_or_create(&labels).inc();
        }
    }

    /// The scrape: Prometheus text, with the gauges set from `pending`
    /// (approvals waiting now, if the store could say) and `states` (each
    /// source's state word).
    pub fn render<'a>(
        &self,
        pending: Option<usize>,
        states: impl IntoIterator<Item = &'a str>,
    ) -> String {
        let _turn = self.scraping.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = pending {
            self.pending.set(n as i64);
        }
        self.source_states.clear();
        for state in SOURCE_STATES {
            self.source_states
                .get_or_create(&vec![("state", state.to_string())])
                .set(0);
        }
        for state in states {
            self.source_states
                .get_or_create(&vec![("state", closed(state, SOURCE_STATES).into())])
                .inc();
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// `word` if it is one of `known`, else [`OTHER`].
fn closed(word: &str, known: &[&'static str]) -> &'static str {
    known.iter().copied().find(|k| *k == word).unwrap_or(OTHER)
}

/// An approval step's record in one of a few words.
fn approval_result(what: &str) -> &'static str {
    if what.starts_with("approved") || what == "allowed for this run" {
        "approved"
    } else if what == "declined" || what == "denied-at-approval" {
        "declined"
    } else if what == "expired" {
        "expired"
    } else if what == "paused" {
        "paused"
    } else if what == "asked in the client" {
        "asked"
    } else {
        OTHER
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_store::{AuditKind, AuditRecord};

    fn decision(source: &str, decision: &str) -> AuditRecord {
        AuditRecord {
            source: source.into(),
            decision: decision.into(),
            tool: "fs__read_secret_token".into(),
            reason: "because of sk-live-123".into(),
            ..AuditRecord::new(AuditKind::Decision, "c1", 0)
        }
    }

    #[test]
    fn only_closed_words_and_configured_sources_become_labels() {
        let m = Metrics::new(["fs".to_string()]);
        m.audit(&decision("fs", "allow"));
        m.audit(&decision("evil\"} 1\nairlock_x{", "allow"));
        m.audit(&decision("fs", "sk-live-123"));
        let text = m.render(Some(2), ["ready", "<script>"]);
        assert!(
            text.contains(r#"airlock_calls_total{source="fs",decision="allow"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"airlock_calls_total{source="other",decision="allow"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"airlock_calls_total{source="fs",decision="other"} 1"#),
            "{text}"
        );
        assert!(text.contains("airlock_approvals_pending 2"), "{text}");
        assert!(
            text.contains(r#"airlock_sources{state="ready"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"airlock_sources{state="other"} 1"#),
            "{text}"
        );
        for leak in ["sk-live", "evil", "read_secret", "script"] {
            assert!(!text.contains(leak), "{leak} in {text}");
        }
        // Every metric is in the catalog.
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let name = line.split(['{', ' ']).next().unwrap();
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(NAMES.contains(&base), "{name} is not in the catalog");
        }
    }

    #[test]
    fn approval_steps_read_as_a_few_words() {
        for (what, word) in [
            ("approved", "approved"),
            ("approved always", "approved"),
            ("allowed for this run", "approved"),
            ("declined", "declined"),
            ("expired", "expired"),
            ("paused", "paused"),
            ("by mallory", "other"),
        ] {
            assert_eq!(approval_result(what), word, "{what}");
        }
    }
}
