//! `airlock pending`, `airlock approve`, `airlock deny`, `airlock page`: the
//! terminal as a human channel. Reaches the hub through the ledger and the control socket
//! in the data directory, which only this user can open; never over MCP.

use std::process::ExitCode;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_channels::Desk;
use airlock_common::now_ms;
use airlock_store::ledger::{self, Choice, LedgerState, Recorded};

use crate::home;
use crate::show;

pub fn pending(all: bool) -> anyhow::Result<ExitCode> {
    let store = crate::store::open_default()?.store();
    let rows = store.ledger_list(all)?;
    if rows.is_empty() {
        println!("No calls are waiting for approval.");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    for r in rows {
        let left = (r.expires_at_ms - now).max(0) / 1000;
        println!(
            "{}  {}  {} (connection {}), asked {}",
            r.id,
            r.state,
            r.call.tool,
            r.call.connection,
            show::local_time(r.created_at_ms)
        );
        if !r.call.description.is_empty() {
            println!("    what it does: {}", r.call.description);
        }
        println!("    why it asks:  {}", r.call.reason);
        println!(
            "    arguments:    {}",
            show::one_line(&ledger::shown(&r.call.arguments))
        );
        if r.state == LedgerState::Pending {
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
    let backend = crate::store::open_default()?;
    let principal = airlock_gateway::hub::principal();
    let woke = Arc::new(AtomicBool::new(false));
    let desk = {
        let (dir, woke) = (dir.clone(), woke.clone());
        Desk::new(
            backend.ledger(),
            principal,
            Box::new(move |id| {
                woke.store(
                    airlock_gateway::control::notify(&dir, id, None) > 0,
                    Ordering::SeqCst,
                );
            }),
        )
    };
    let recorded = desk.decide(id, choice, "cli")?;
    let woke = woke.load(Ordering::SeqCst);
    let (message, code) = match recorded {
        Recorded::Approved if choice == Choice::AllowForRun => (
            "approved: the call runs as shown, and this tool runs unasked for the rest of the client's session while it stays as it is now",
            0,
        ),
        Recorded::Approved if choice == Choice::AllowAlways => (
            "approved: the call runs as shown; its current definition is recorded as reviewed by you, and this tool on this connection runs unasked while that definition stays the same (`airlock rules list` / `rules revoke ID`)",
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
    let team = matches!(backend, crate::store::Backend::Team(_));
    if matches!(recorded, Recorded::Approved | Recorded::Denied) && !woke && !team {
        println!(
            "(no running hub answered on its control socket; the waiting call will see the decision when it next looks)"
        );
    }
    Ok(ExitCode::from(code))
}

/// `airlock page`: a fresh one-time link to the running hub's approval page,
/// opened in the browser (or printed).
pub fn page(print: bool) -> anyhow::Result<ExitCode> {
    let dir = home::data_dir()?;
    let Some(link) = airlock_gateway::control::page_link(&dir) else {
        println!(
            "no running hub with an approval page answered (is `airlock serve` running, with approval_page not \"off\"?)"
        );
        return Ok(ExitCode::from(3));
    };
    if print || crate::browser::open(&dir, &link).is_err() {
        println!("{link}");
    } else {
        println!("opened the approval page in your browser");
    }
    Ok(ExitCode::SUCCESS)
}
