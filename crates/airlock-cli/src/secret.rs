//! `airlock secret`: values are entered by a person at a masked prompt (or
//! piped), never through MCP, and never printed back.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use airlock_secrets::{SecretStore, SecretValue, valid_name};

use crate::home;

fn warn_where(store: &dyn SecretStore) {
    let place = store.describe();
    if place.starts_with("the OS keychain") {
        eprintln!("secrets are kept in {place}");
    } else {
        eprintln!("warning: no OS keychain answered; secrets are kept in {place}");
    }
}

pub fn set(name: &str) -> anyhow::Result<ExitCode> {
    if !valid_name(name) {
        anyhow::bail!("`{name}` is not a secret name: use letters, digits, '_' and '-' (1 to 64)");
    }
    if airlock_common::is_reserved_secret_name(name) {
        anyhow::bail!(
            "`{name}` starts with `oauth_`, which airlock keeps for its own logins; choose another name (`airlock auth` manages logins)"
        );
    }
    let value = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("value for {name} (not shown): "))?
    } else {
        let mut v = String::new();
        std::io::stdin().read_to_string(&mut v)?;
        v.trim_end_matches(['\n', '\r']).to_string()
    };
    if value.is_empty() {
        anyhow::bail!("the value is empty; nothing stored");
    }
    let store = home::secret_store()?;
    warn_where(store.as_ref());
    store.set(name, &SecretValue::new(value))?;
    println!("stored {name}; refer to it in config as \"secret:{name}\" or \"${{secret:{name}}}\"");
    Ok(ExitCode::SUCCESS)
}

pub fn list() -> anyhow::Result<ExitCode> {
    let store = home::secret_store()?;
    warn_where(store.as_ref());
    for n in store.names()? {
        println!("{n}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn rm(name: &str) -> anyhow::Result<ExitCode> {
    let store = home::secret_store()?;
    warn_where(store.as_ref());
    if store.remove(name)? {
        println!("removed {name}");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("no secret named {name}");
        Ok(ExitCode::from(5))
    }
}
