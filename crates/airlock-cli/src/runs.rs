//! `airlock runs`: code mode's runs and their journals, as a person reads
//! them. Everything shown was scrubbed before it was stored; long values
//! are cut.

use std::process::ExitCode;

use crate::show;

/// How much of a program or a reply is shown.
const SHOWN: usize = 400;

pub fn list() -> anyhow::Result<ExitCode> {
    let store = crate::store::open_default()?.store();
    let runs = store.runs_list(50)?;
    if runs.is_empty() {
        println!("No code-mode runs are on record.");
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = show::Table::default();
    table.row(["RUN", "STATE", "STARTED", "RESUMES", "DETAIL"].map(String::from));
    for r in runs {
        table.row([
            r.id,
            r.state.as_str().to_string(),
            show::local_time(r.created_at_ms),
            r.resumes.to_string(),
            cut(&r.detail),
        ]);
    }
    table.print("");
    Ok(ExitCode::SUCCESS)
}

pub fn show(id: &str) -> anyhow::Result<ExitCode> {
    let store = crate::store::open_default()?.store();
    let Some(run) = store.run_row(id)? else {
        println!("not found: no run `{}`", show::one_line(id));
        return Ok(ExitCode::from(5));
    };
    println!("{}  {}", run.id, run.state.as_str());
    println!("    started:  {}", show::local_time(run.created_at_ms));
    println!("    updated:  {}", show::local_time(run.updated_at_ms));
    println!("    resumes:  {}", run.resumes);
    if !run.detail.is_empty() {
        println!("    detail:   {}", show::one_line(&run.detail));
    }
    println!("    code:     {}", cut(&run.code));
    let journal = store.journal(id)?;
    if journal.is_empty() {
        println!("    journal:  no calls");
    } else {
        println!("    journal:");
        let mut table = show::Table::default();
        for e in journal {
            let what = match e.state {
                airlock_store::runs::EntryState::Paused => {
                    format!("waits for approval {}", e.approval)
                }
                _ => cut(&e.reply),
            };
            table.row([
                format!("#{}", e.seq),
                e.tool,
                e.state.as_str().to_string(),
                what,
            ]);
        }
        table.print("      ");
    }
    Ok(ExitCode::SUCCESS)
}

fn cut(text: &str) -> String {
    show::one_line(&airlock_common::text::shorten(text, SHOWN, |n| {
        format!(" ({n} bytes in all)")
    }))
}
