//! `airlock audit`: read, filter and export the audit log; verify its chain.

use std::process::ExitCode;

use airlock_common::now_ms;
use airlock_store::{AuditCheck, AuditFilter, Store};

use crate::home;
use crate::show::{self, Table};

#[derive(clap::Args)]
pub struct FilterArgs {
    /// Only records of this exposed tool.
    #[arg(long)]
    tool: Option<String>,
    /// Only records of this source.
    #[arg(long)]
    source: Option<String>,
    /// Only decisions of this kind (allow, ask, deny).
    #[arg(long)]
    decision: Option<String>,
    /// Only records newer than this, e.g. 10m, 2h, 7d.
    #[arg(long)]
    since: Option<String>,
    /// At most this many records, newest first.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// One JSON object per line (seq, record and hashes), for export.
    #[arg(long)]
    jsonl: bool,
}

fn open() -> anyhow::Result<std::sync::Arc<dyn Store>> {
    let dir = home::data_dir()?;
    if !crate::store::default_is_team()? && !dir.join("airlock.db").exists() {
        anyhow::bail!("no hub has run with data directory {} yet", dir.display());
    }
    Ok(crate::store::open_default()?.store())
}

pub fn show(args: &FilterArgs) -> anyhow::Result<ExitCode> {
    let since_ms = args
        .since
        .as_deref()
        .map(|s| {
            humantime::parse_duration(s)
                .map(|d| now_ms() - d.as_millis() as i64)
                .map_err(|e| anyhow::anyhow!("--since {s}: {e} (write e.g. 10m, 2h, 7d)"))
        })
        .transpose()?;
    let filter = AuditFilter {
        tool: args.tool.clone(),
        source: args.source.clone(),
        decision: args.decision.clone(),
        since_ms,
    };
    let records = open()?.audit(&filter, args.limit)?;
    let mut table = Table::default();
    for a in &records {
        if args.jsonl {
            // The record as stored, with its time also written out.
            let mut line = serde_json::to_value(a)?;
            line["at"] = show::iso_time(a.record.at_ms).into();
            println!("{line}");
            continue;
        }
        let r = &a.record;
        table.row([
            format!("#{}", a.seq),
            show::local_time(r.at_ms),
            r.tool.clone(),
            describe(r),
        ]);
    }
    table.print("");
    Ok(ExitCode::SUCCESS)
}

/// One record in words: the decision and why, the outcome, or the gap.
pub fn describe(r: &airlock_store::AuditRecord) -> String {
    match r.kind {
        airlock_store::AuditKind::Decision => {
            let by: Vec<&str> = [r.layer.as_str(), r.rule.as_str()]
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect();
            let rule = if by.is_empty() {
                String::new()
            } else {
                format!(" [{}]", by.join(" "))
            };
            format!("decision {:<5}  {}{rule}", r.decision, r.reason)
        }
        airlock_store::AuditKind::Outcome => format!(
            "outcome  {:<5}  {:.1} ms {}",
            r.outcome,
            r.duration_us as f64 / 1000.0,
            r.detail
        )
        .trim_end()
        .to_string(),
        airlock_store::AuditKind::Gap => format!("GAP      {}", r.reason),
    }
}

pub fn verify() -> anyhow::Result<ExitCode> {
    match open()?.verify_audit()? {
        AuditCheck::Intact { records, head } => {
            println!("ok: {records} records, chain intact; head {head}");
            println!("(keep the head hash elsewhere to detect a truncated tail later)");
            Ok(ExitCode::SUCCESS)
        }
        AuditCheck::Broken { seq, why } => {
            println!("BROKEN at record #{seq}: {why}");
            Ok(ExitCode::from(3))
        }
    }
}
