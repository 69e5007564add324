//! `airlock pending`, `airlock approve`, `airlock deny`: the terminal as a
//! human channel. Reaches the hub through the ledger and the control socket
//! in the data directory, which only this user can open; never over MCP.

use std::process::ExitCode;

use airlock_decision::{Choice, Recorded, record_decision};
use airlock_store::{SqliteStore, Store, now_ms};

use crate::home;

const ARGS_SHOWN: usize = 4096;

pub fn pending(all: bool) -> anyhow::Result<ExitCode> {
    let dir = home::data_dir()?;
    let store = SqliteStore::open_in(&dir)?;
    let rows = store.ledger_list(all)?;
    if rows.is_empty() {
        println!("No calls are waiting for approval.");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    for r in rows {
        let left = (r.expires_at_ms - now).max(0) / 1000;
        println!(
            "{}  {}  {} (connection {})",
            r.id, r.state, r.call.tool, r.call.connection
        );
        if !r.call.description.is_empty() {
            println!("    what it does: {}", r.call.description);
        }
        println!("    why it asks:  {}", r.call.reason);
        let mut args = r.call.arguments.clone();
        if args.len() > ARGS_SHOWN {
            let mut end = ARGS_SHOWN;
            while !args.is_char_boundary(end) {
                end -= 1;
            }
            args = format!(
                "{}… ({} bytes in all)",
                &args[..end],
                r.call.arguments.len()
            );
        }
        println!("    arguments:    {}", args.escape_default());
        if r.state == "pending" {
            println!(
                "    expires in {left}s — `airlock approve {}` or `airlock deny {}`",
                r.id, r.id
            );
        } else if !r.detail.is_empty() {
            println!("    {}", r.detail);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn decide(id: &str, choice: Choice) -> anyhow::Result<ExitCode> {
    let dir = home::data_dir()?;
    let store = SqliteStore::open_in(&dir)?;
    let principal = airlock_gateway::hub::principal();
    let recorded = record_decision(store.path(), id, &principal, choice, "cli")?;
    let woke = airlock_gateway::control::notify(&dir, id);
    let (message, code) = match recorded {
        Recorded::Approved if choice == Choice::AllowForRun => (
            "approved: the call runs as shown, and this tool runs unasked for the rest of the client's session",
            0,
        ),
        Recorded::Approved if choice == Choice::AllowAlways => (
            "approved: the call runs as shown, and this tool on this connection runs unasked while its contract stays the same",
            0,
        ),
        Recorded::Approved => ("approved: the call runs once, as shown", 0),
        Recorded::Denied => ("declined: the call will not run", 0),
        Recorded::Expired => (
            "too late: this approval expired and the call did not run",
            4,
        ),
        Recorded::NotFound => (
            "not found: no call with this id is waiting for you (already decided, or not yours)",
            5,
        ),
    };
    println!("{message}");
    if matches!(recorded, Recorded::Approved | Recorded::Denied) && !woke {
        println!(
            "(no running hub answered on its control socket; the waiting call will see the decision when it next looks)"
        );
    }
    Ok(ExitCode::from(code))
}
