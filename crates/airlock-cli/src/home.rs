//! Where airlock keeps its state, and which config it runs with.

use std::path::{Path, PathBuf};

use airlock_config::Config;
use anyhow::Context;

/// `AIRLOCK_HOME`, else the platform's data directory (e.g.
/// `~/.local/share/airlock`).
pub fn data_dir() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("AIRLOCK_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    dirs::data_dir()
        .map(|d| d.join("airlock"))
        .context("no data directory on this platform; set AIRLOCK_HOME")
}

/// The config to run with, and a line saying where it came from.
pub fn load_config(explicit: Option<&Path>) -> anyhow::Result<(Config, String)> {
    if let Some(path) = explicit {
        let config = airlock_config::load(path)?;
        return Ok((config, format!("config {}", path.display())));
    }
    let default = data_dir()?.join("airlock.toml");
    if default.exists() {
        let config = airlock_config::load(&default)?;
        return Ok((config, format!("config {}", default.display())));
    }
    let exe = std::env::current_exe().context("cannot find the airlock executable")?;
    Ok((
        Config::builtin_demo(exe),
        "the built-in demo config (one source: the demo notebook)".into(),
    ))
}

/// Where secrets are kept: the OS keychain when one answers, else a
/// private file in the data directory, said aloud wherever it is used.
pub fn secret_store() -> anyhow::Result<Box<dyn airlock_secrets::SecretStore>> {
    Ok(airlock_secrets::open_store(&data_dir()?))
}

/// The hub's secrets: references resolve from the secret store, and every
/// stored value is known to the scrubber from the start.
pub fn hub_secrets() -> anyhow::Result<std::sync::Arc<airlock_gateway::secrets::HubSecrets>> {
    let secrets = airlock_gateway::secrets::HubSecrets::new(secret_store()?, data_dir()?);
    secrets.learn_stored();
    Ok(secrets)
}
