//! Which store a command uses: the embedded one in the data directory, or
//! a team's PostgreSQL database as one tenant.
//!
//! The first that says: `--store URL` (or `AIRLOCK_STORE`) with
//! `--tenant` (or `AIRLOCK_TENANT`), then the `[store]` table of the
//! config the command runs with (for commands without `--config`, the
//! default `$AIRLOCK_HOME/airlock.toml` when it exists), then the
//! embedded store.

use std::sync::{Arc, OnceLock};

use airlock_channels::desk::Ledger;
use airlock_config::{PostgresSettings, StoreSettings};
use airlock_store::{PgStore, PgTarget, Reviews, SqliteStore, Store};
use anyhow::Context;

use crate::home;

/// What the command line said (`--store`, `--tenant`), set once by main.
static CHOSEN: OnceLock<Option<PostgresSettings>> = OnceLock::new();

/// Records `--store` and `--tenant`; a bad URL or tenant is refused here,
/// before any command runs.
pub fn choose(url: Option<String>, tenant: Option<String>) -> anyhow::Result<()> {
    let chosen = match url {
        Some(url) => {
            airlock_config::check_url(&url)
                .map_err(|(m, fix)| anyhow::anyhow!("--store: {m}; {fix}"))?;
            let tenant = tenant.unwrap_or_else(|| airlock_config::DEFAULT_TENANT.into());
            airlock_config::check_tenant(&tenant)
                .map_err(|(m, fix)| anyhow::anyhow!("--tenant: {m}; {fix}"))?;
            Some(PostgresSettings {
                url,
                tenant,
                password_secret: None,
            })
        }
        None if tenant.is_some() => {
            anyhow::bail!("--tenant names a tenant of a PostgreSQL store; give --store URL too")
        }
        None => None,
    };
    let _ = CHOSEN.set(chosen);
    Ok(())
}

/// An open store of either kind.
#[derive(Clone)]
pub enum Backend {
    Embedded(Arc<SqliteStore>),
    Team(Arc<PgStore>),
}

impl Backend {
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Backend::Embedded(s) => s.clone(),
            Backend::Team(s) => s.clone(),
        }
    }

    pub fn reviews(&self) -> &dyn Reviews {
        match self {
            Backend::Embedded(s) => s.as_ref(),
            Backend::Team(s) => s.as_ref(),
        }
    }

    /// Where decisions are recorded.
    pub fn ledger(&self) -> Ledger {
        match self {
            Backend::Embedded(s) => Ledger::Sqlite(s.path().to_path_buf()),
            Backend::Team(s) => Ledger::Postgres(s.clone()),
        }
    }

    /// In words, for messages (never a password).
    pub fn describe(&self) -> String {
        match self {
            Backend::Embedded(s) => format!("the embedded store {}", s.path().display()),
            Backend::Team(s) => format!(
                "the PostgreSQL store {} as tenant `{}`",
                s.describe(),
                s.tenant()
            ),
        }
    }
}

/// The store for a command that runs with `config`'s settings.
pub fn open(settings: &StoreSettings) -> anyhow::Result<Backend> {
    let chosen = CHOSEN.get().cloned().flatten();
    let team = match (chosen, settings) {
        (Some(c), _) => Some(c),
        (None, StoreSettings::Postgres(p)) => Some(p.clone()),
        (None, StoreSettings::Embedded) => None,
    };
    match team {
        None => Ok(Backend::Embedded(SqliteStore::open_in(&home::data_dir()?)?)),
        Some(p) => {
            let password = match &p.password_secret {
                Some(name) => Some(
                    home::secret_store()?
                        .get(name)
                        .with_context(|| format!("the store's password (secret `{name}`)"))?
                        .expose()
                        .to_string(),
                ),
                None => None,
            };
            let pg = PgStore::open(PgTarget {
                url: p.url.clone(),
                password,
                tenant: p.tenant.clone(),
            })?;
            Ok(Backend::Team(pg))
        }
    }
}

/// The store for a command without `--config`: the default config's
/// `[store]`, if that file exists.
pub fn open_default() -> anyhow::Result<Backend> {
    open(&default_settings()?)
}

/// Whether a command without `--config` uses a team's store.
pub fn default_is_team() -> anyhow::Result<bool> {
    Ok(CHOSEN.get().is_some_and(Option::is_some)
        || matches!(default_settings()?, StoreSettings::Postgres(_)))
}

fn default_settings() -> anyhow::Result<StoreSettings> {
    if CHOSEN.get().is_some_and(Option::is_some) {
        return Ok(StoreSettings::Embedded);
    }
    let default = home::data_dir()?.join("airlock.toml");
    Ok(if default.exists() {
        airlock_config::load(&default)?.store
    } else {
        StoreSettings::Embedded
    })
}

/// `airlock store migrate`: as the schema's owner.
pub fn migrate(
    owner_url: &str,
    password_secret: Option<&str>,
    hub_role: &str,
    tenant: &str,
) -> anyhow::Result<std::process::ExitCode> {
    airlock_config::check_url(owner_url)
        .map_err(|(m, fix)| anyhow::anyhow!("--owner: {m}; {fix}"))?;
    let password = match password_secret {
        Some(name) => Some(home::secret_store()?.get(name)?.expose().to_string()),
        None => None,
    };
    let version = PgStore::migrate(owner_url, password.as_deref(), hub_role, tenant)?;
    println!(
        "airlock's schema in {} is at version {version}; `{hub_role}` acts for tenant `{tenant}` and sees only its rows",
        airlock_store::postgres::schema::redacted(owner_url)
    );
    Ok(std::process::ExitCode::SUCCESS)
}
