//! `airlock status`: what the running (or last) hub recorded.

use std::process::ExitCode;

use airlock_common::now_ms;
use airlock_store::{AuditFilter, AuditKind, SqliteStore, Store};

use crate::home;

pub fn run(calls: usize) -> anyhow::Result<ExitCode> {
    let dir = home::data_dir()?;
    if !dir.join("airlock.db").exists() {
        println!("No hub has run with data directory {} yet.", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let store = SqliteStore::open_in(&dir)?;
    let statuses = store.source_statuses()?;
    let now = now_ms();
    println!("Sources (data directory {}):", dir.display());
    if statuses.is_empty() {
        println!("  none recorded");
    }
    let mut unhealthy = false;
    for s in &statuses {
        let age = (now - s.updated_at_ms).max(0) / 1000;
        unhealthy |= s.state == "failed";
        if s.detail.is_empty() {
            println!("  {:<20} {:<10} (since {age}s ago)", s.source, s.state);
        } else {
            println!(
                "  {:<20} {:<10} {} (since {age}s ago)",
                s.source, s.state, s.detail
            );
        }
    }
    let token = crate::token::path(&dir);
    if token.exists() {
        println!(
            "\nHTTP clients send `Authorization: Bearer <token>`; the token is in {} (`airlock token` prints it, `--rotate` replaces it).",
            token.display()
        );
    }
    let recent = store.audit(&AuditFilter::default(), calls)?;
    if !recent.is_empty() {
        println!("\nRecent audit records (newest first; `airlock audit` for more):");
        for a in recent {
            let r = &a.record;
            let age = (now - r.at_ms).max(0) / 1000;
            let what = match r.kind {
                AuditKind::Decision => format!("{:<10} {}", r.decision, r.reason),
                AuditKind::Outcome => format!(
                    "{:<10} {:.1} ms {}",
                    r.outcome,
                    r.duration_us as f64 / 1000.0,
                    r.detail
                ),
                AuditKind::Gap => format!("GAP        {}", r.reason),
            };
            println!("  {age:>5}s ago  {:<32} {what}", r.tool);
        }
    }
    Ok(if unhealthy {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
