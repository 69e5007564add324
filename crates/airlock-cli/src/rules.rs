//! `airlock rules list` / `airlock rules revoke ID`: the standing rules
//! people created with "always allow".

use std::process::ExitCode;

pub fn list() -> anyhow::Result<ExitCode> {
    let store = crate::store::open_default()?.store();
    let rules = store.standing_rules()?;
    if rules.is_empty() {
        println!("No standing rules. \"Always allow\" on a waiting call creates one.");
        return Ok(ExitCode::SUCCESS);
    }
    for r in rules {
        println!(
            "#{}  allow {} on connection {}  (contract {})",
            r.id,
            r.tool,
            r.connection,
            short(&r.digest)
        );
        println!(
            "     by {} at {} from approval {}",
            r.created_by,
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.created_at_ms as u64)
            ),
            r.approval
        );
    }
    println!("`airlock rules revoke ID` removes one; running hubs stop using it within a second.");
    Ok(ExitCode::SUCCESS)
}

pub fn revoke(id: i64) -> anyhow::Result<ExitCode> {
    let backend = crate::store::open_default()?;
    if airlock_channels::desk::revoke_standing_rule(&backend.ledger(), id)? {
        println!("revoked standing rule #{id}: calls it allowed ask again");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("there is no standing rule #{id} (`airlock rules list` shows them)");
        Ok(ExitCode::from(3))
    }
}

fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}
