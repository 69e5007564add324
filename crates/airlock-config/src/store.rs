//! The `[store]` table: where the hub keeps its state. Absent, the
//! embedded store in the data directory; with `url`, a PostgreSQL database
//! shared by a team's replicas, each hub acting for one tenant.

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::ConfigError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoreSettings {
    /// SQLite in the data directory (the default).
    #[default]
    Embedded,
    Postgres(PostgresSettings),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresSettings {
    /// `postgres://ROLE@HOST:PORT/DATABASE`, never with a password.
    pub url: String,
    /// Whose rows this hub reads and writes.
    pub tenant: String,
    /// The stored secret holding the role's password, if it needs one.
    pub password_secret: Option<String>,
}

/// The tenant when the config names none.
pub const DEFAULT_TENANT: &str = "default";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    url: Option<Spanned<String>>,
    tenant: Option<Spanned<String>>,
    password: Option<Spanned<String>>,
}

pub(crate) fn parse(path: &Path, text: &str, raw: RawStore) -> Result<StoreSettings, ConfigError> {
    let err = |at: usize, key: &str, msg: String, fix: String| {
        ConfigError::at(path, text, Some(at), Some(format!("store.{key}")), msg, fix)
    };
    let Some(url) = raw.url else {
        if let Some(t) = raw.tenant.as_ref().or(raw.password.as_ref()) {
            return Err(err(
                t.span().start,
                "url",
                "`tenant` and `password` belong to a PostgreSQL store, and no `url` names one".into(),
                "add url = \"postgres://ROLE@HOST:PORT/DATABASE\", or remove the [store] table to keep the embedded store".into(),
            ));
        }
        return Ok(StoreSettings::Embedded);
    };
    let at = url.span().start;
    let url = url.into_inner();
    check_url(&url).map_err(|(m, f)| err(at, "url", m, f))?;
    let tenant = match raw.tenant {
        Some(t) => {
            let at = t.span().start;
            let t = t.into_inner();
            check_tenant(&t).map_err(|(m, f)| err(at, "tenant", m, f))?;
            t
        }
        None => DEFAULT_TENANT.to_string(),
    };
    let password_secret = match raw.password {
        Some(p) => {
            let at = p.span().start;
            match p.into_inner().strip_prefix("secret:") {
                Some(name) if crate::credentials::is_secret_name(name) => Some(name.to_string()),
                _ => {
                    return Err(err(
                        at,
                        "password",
                        "`password` must name a stored secret, never hold the value".into(),
                        "store it with `airlock secret set NAME` and write password = \"secret:NAME\"".into(),
                    ));
                }
            }
        }
        None => None,
    };
    Ok(StoreSettings::Postgres(PostgresSettings {
        url,
        tenant,
        password_secret,
    }))
}

/// A PostgreSQL URL without a password in it; also for `--store`.
pub fn check_url(url: &str) -> Result<(), (String, String)> {
    let Some(rest) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    else {
        return Err((
            "the store's url must start with postgres:// or postgresql://".into(),
            "write url = \"postgres://ROLE@HOST:PORT/DATABASE\"".into(),
        ));
    };
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let has_password = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
        || url.to_ascii_lowercase().contains("password=");
    if has_password {
        return Err((
            "the store's url holds a password; passwords never go in config".into(),
            "store it with `airlock secret set NAME`, remove it from the url and add password = \"secret:NAME\" to [store]".into(),
        ));
    }
    if !authority.contains('@') {
        return Err((
            "the store's url names no role: the hub must connect as the role made for it".into(),
            "write url = \"postgres://ROLE@HOST:PORT/DATABASE\" (see docs/team.md for the role)"
                .into(),
        ));
    }
    Ok(())
}

/// A tenant is 1 to 64 letters, digits, `-`, `_` or `.`.
pub fn check_tenant(tenant: &str) -> Result<(), (String, String)> {
    if airlock_common::is_tenant_name(tenant) {
        Ok(())
    } else {
        Err((
            format!("the tenant `{tenant}` is not a plain name"),
            "use 1 to 64 letters, digits, `-`, `_` or `.`, e.g. tenant = \"team-a\"".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_role_and_never_hold_a_password() {
        assert!(check_url("postgres://airlock_hub@127.0.0.1:5432/airlock").is_ok());
        assert!(check_url("postgresql://hub@db/airlock?sslmode=disable").is_ok());
        for bad in [
            "mysql://hub@db/x",
            "postgres://hub:pw@db/airlock",
            "postgres://hub@db/airlock?password=pw",
            "postgres://hub@db/airlock?PassWord=pw",
            "postgres://db/airlock",
            "",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tenants_are_plain_names() {
        assert!(check_tenant("team-a").is_ok());
        for bad in ["", "a b", "x';--", &"t".repeat(65)] {
            assert!(check_tenant(bad).is_err(), "{bad}");
        }
    }
}
