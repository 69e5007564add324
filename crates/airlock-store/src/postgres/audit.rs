//! The audit chain in PostgreSQL: one chain per tenant, appended under
//! the tenant's transaction lock, verified in order.

use tokio_postgres::Transaction;

use crate::audit_chain::{check_record, hash, kind_str};
use crate::{AuditCheck, AuditFilter, AuditRecord, Result, StoredAudit};

/// Appends `record` after the tenant's head. The lock makes concurrent
/// appends (from any replica) take turns; the table's unique
/// `(tenant, prev_hash)` refuses a fork should anything get past it.
pub(super) async fn append(tx: &Transaction<'_>, record: &AuditRecord) -> Result<()> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('airlock.audit/' || current_setting('airlock.tenant'), 0))",
        &[],
    )
    .await?;
    let head: String = tx
        .query_opt(
            "SELECT hash FROM airlock.audit ORDER BY seq DESC LIMIT 1",
            &[],
        )
        .await?
        .map(|r| r.get(0))
        .unwrap_or_default();
    let text = serde_json::to_string(record).unwrap_or_default();
    let hash = hash(&head, &text);
    tx.execute(
        "INSERT INTO airlock.audit (record, at_ms, kind, tool, source, decision, prev_hash, hash)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &text,
            &record.at_ms,
            &kind_str(record.kind),
            &record.tool,
            &record.source,
            &record.decision,
            &head,
            &hash,
        ],
    )
    .await?;
    Ok(())
}

pub(super) async fn read(
    tx: &Transaction<'_>,
    filter: &AuditFilter,
    limit: usize,
) -> Result<Vec<StoredAudit>> {
    let rows = tx
        .query(
            "SELECT seq, record, prev_hash, hash FROM airlock.audit
             WHERE ($1::text IS NULL OR tool = $1) AND ($2::text IS NULL OR source = $2)
               AND ($3::text IS NULL OR decision = $3) AND ($4::bigint IS NULL OR at_ms >= $4)
             ORDER BY seq DESC LIMIT $5",
            &[
                &filter.tool,
                &filter.source,
                &filter.decision,
                &filter.since_ms,
                &(limit as i64),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let record = serde_json::from_str(r.get(1)).ok()?;
            Some(StoredAudit {
                seq: r.get(0),
                record,
                prev_hash: r.get(2),
                hash: r.get(3),
            })
        })
        .collect())
}

pub(super) async fn verify(tx: &Transaction<'_>) -> Result<AuditCheck> {
    let rows = tx
        .query(
            "SELECT seq, record, prev_hash, hash, kind, tool, source, decision, at_ms
             FROM airlock.audit ORDER BY seq",
            &[],
        )
        .await?;
    let mut head = String::new();
    let mut count = 0u64;
    for r in &rows {
        let seq: i64 = r.get(0);
        let columns = (
            r.get::<_, String>(4),
            r.get::<_, String>(5),
            r.get::<_, String>(6),
            r.get::<_, String>(7),
            r.get::<_, i64>(8),
        );
        if let Err(why) = check_record(&head, count, r.get(1), r.get(2), r.get(3), columns) {
            return Ok(AuditCheck::Broken { seq, why });
        }
        head = r.get(3);
        count += 1;
    }
    Ok(AuditCheck::Intact {
        records: count,
        head,
    })
}
