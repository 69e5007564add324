//! `airlock status`: what the running (or last) hub recorded.

use std::process::ExitCode;

use airlock_store::{SqliteStore, Store, now_ms};

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
    let recent = store.recent_calls(calls)?;
    if !recent.is_empty() {
        println!("\nRecent calls (newest first):");
        for c in recent {
            let age = (now - c.started_at_ms).max(0) / 1000;
            let detail = if c.detail.is_empty() {
                String::new()
            } else {
                format!("  {}", c.detail)
            };
            println!(
                "  {:>5}s ago  {:<32} {:<10} {:>8.1} ms{detail}",
                age,
                c.tool,
                c.outcome.as_str(),
                c.duration_us as f64 / 1000.0
            );
        }
    }
    Ok(if unhealthy {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
