//! `airlock-register`: prints the security register with its checklist of
//! guards, and exits 1 when something in it no longer holds (an acceptance
//! past its date, a named test or file that is not there).
//!
//! Usage: `airlock-register [REGISTER] [--today YYYY-MM-DD]`; REGISTER is
//! `docs/security/register.toml` by default, and the tree it describes is
//! the one holding its `docs/`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

fn main() -> anyhow::Result<ExitCode> {
    let mut path = PathBuf::from("docs/security/register.toml");
    let mut today = chrono::Local::now().date_naive();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--today" => {
                let date = args.next().context("--today needs a date, YYYY-MM-DD")?;
                today = date
                    .parse()
                    .with_context(|| format!("--today {date}: not a date, YYYY-MM-DD"))?;
            }
            other if other.starts_with('-') => {
                anyhow::bail!(
                    "unknown option {other}; usage: airlock-register [REGISTER] [--today YYYY-MM-DD]"
                )
            }
            other => path = PathBuf::from(other),
        }
    }
    let register = airlock_register::Register::load(&path)?;
    let root = path
        .parent()
        .and_then(|p| p.parent())
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    print!("{}", airlock_register::render(&register));
    let problems = airlock_register::review(&register, &root, today);
    if problems.is_empty() {
        println!(
            "\nreview: every finding and guard holds ({} findings, {} guards)",
            register.findings.len(),
            register.guards.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("\nreview: {} problem(s):", problems.len());
    for p in &problems {
        eprintln!("- {p}");
    }
    Ok(ExitCode::FAILURE)
}
