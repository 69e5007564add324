//! `airlock status`: each hub running on the data directory and its sources,
//! as the hubs themselves report them (or, with none running, what the
//! last one recorded), then the recent audit records.

use std::process::ExitCode;

use airlock_common::now_ms;
use airlock_store::AuditFilter;

use crate::home;
use crate::show::{self, Table};

pub fn run(calls: usize) -> anyhow::Result<ExitCode> {
    let dir = home::data_dir()?;
    if !crate::store::default_is_team()? && !dir.join("airlock.db").exists() {
        println!("No hub has run with data directory {} yet.", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let store = crate::store::open_default()?.store();
    let now = now_ms();
    let hubs = airlock_gateway::control::reports(&dir);
    let mut unhealthy = false;
    if hubs.is_empty() {
        // No hub to ask: what the last one recorded, said to be that.
        println!(
            "No hub is running on data directory {}. Sources as last recorded:",
            dir.display()
        );
        let statuses = store.source_statuses()?;
        if statuses.is_empty() {
            println!("  none recorded");
        }
        for s in &statuses {
            unhealthy |= s.state == "failed";
            let age = (now - s.updated_at_ms).max(0) / 1000;
            print_source(
                &s.source,
                &s.state,
                &s.detail,
                &format!(" (since {age}s ago)"),
            );
        }
    } else {
        println!(
            "{} hub(s) running on data directory {}:",
            hubs.len(),
            dir.display()
        );
    }
    for hub in &hubs {
        let age = (now - hub.started_at_ms).max(0) / 1000;
        println!(
            "  hub pid {} ({}), {}, {} (up {age}s)",
            hub.pid, hub.instance, hub.face, hub.config
        );
        for s in &hub.sources {
            unhealthy |= s.state == "failed";
            let detail = match (s.protocol.as_str(), s.detail.as_str()) {
                ("", detail) => detail.to_string(),
                (version, "") => format!("protocol {version}"),
                (version, detail) => format!("protocol {version}; {detail}"),
            };
            print_source(&s.name, &s.state, &detail, "");
        }
    }
    let token = crate::token::path(&dir);
    if token.exists() {
        println!(
            "\nHTTP clients send `Authorization: Bearer <token>`; the token is in {} (`airlock token` prints it, `--rotate` replaces it).",
            token.display()
        );
    }
    // Up to `calls` calls: each call's records (decision, outcome) together.
    let records = store.audit(&AuditFilter::default(), calls.saturating_mul(4).max(16))?;
    let mut shown: Vec<(&str, Vec<&airlock_store::AuditRecord>)> = Vec::new();
    for a in &records {
        let r = &a.record;
        let known = shown
            .iter()
            .position(|(id, _)| !id.is_empty() && *id == r.call_id);
        match known {
            Some(k) => shown[k].1.push(r),
            None if shown.len() < calls => shown.push((r.call_id.as_str(), vec![r])),
            None => {}
        }
    }
    if !shown.is_empty() {
        println!(
            "\nThe last {} call(s), newest first (`airlock audit` for more):",
            shown.len()
        );
        let mut table = Table::default();
        for (_, of_call) in &shown {
            // Newest first within the call too: show them in the order they happened.
            for (k, r) in of_call.iter().rev().enumerate() {
                let (when, tool) = match k {
                    0 => (show::local_time(r.at_ms), r.tool.clone()),
                    _ => (String::new(), String::new()),
                };
                table.row([when, tool, crate::audit::describe(r)]);
            }
        }
        table.print("  ");
    }
    Ok(if unhealthy {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_source(name: &str, state: &str, detail: &str, when: &str) {
    if detail.is_empty() {
        println!("    {name:<20} {state:<10}{when}");
    } else {
        println!("    {name:<20} {state:<10} {detail}{when}");
    }
}
