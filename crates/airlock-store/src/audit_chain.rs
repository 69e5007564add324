//! The audit chain's rules, the same for every backend: how a record's
//! hash is made and what makes a stored record check out.

use sha2::{Digest, Sha256};

use crate::{AuditKind, AuditRecord};

/// `sha256:` over the previous hash and this record's JSON text.
pub(crate) fn hash(prev: &str, record: &str) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(b"\n");
    h.update(record.as_bytes());
    format!("sha256:{}", hex::encode(h.finalize()))
}

pub(crate) fn kind_str(kind: AuditKind) -> &'static str {
    match kind {
        AuditKind::Decision => "decision",
        AuditKind::Outcome => "outcome",
        AuditKind::Gap => "gap",
    }
}

/// The indexed columns stored beside a record: kind, tool, source,
/// decision, time.
pub(crate) type Columns = (String, String, String, String, i64);

/// Whether one stored record follows `head` (the hash of the `count`
/// records before it) and matches its hash and columns; why not if not.
pub(crate) fn check_record(
    head: &str,
    count: u64,
    text: &str,
    prev: &str,
    stored_hash: &str,
    columns: Columns,
) -> Result<(), String> {
    if prev != head {
        return Err(if count == 0 {
            "the first record does not start the chain: records before it were deleted".into()
        } else {
            "it does not follow the record before it: a record was deleted or reordered".into()
        });
    }
    if hash(prev, text) != stored_hash {
        return Err("its content does not match its hash: the record was edited".into());
    }
    let Ok(record) = serde_json::from_str::<AuditRecord>(text) else {
        return Err("its content is not a valid record".into());
    };
    let expected = (
        kind_str(record.kind).to_string(),
        record.tool.clone(),
        record.source.clone(),
        record.decision.clone(),
        record.at_ms,
    );
    if columns != expected {
        return Err("its indexed columns disagree with its content: the record was edited".into());
    }
    if record.kind == AuditKind::Gap {
        return Err(format!("records are missing: {}", record.reason));
    }
    Ok(())
}
