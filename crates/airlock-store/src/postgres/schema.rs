//! The PostgreSQL schema: forward-only migrations applied by the schema's
//! owner, and the checks a hub makes before it uses the database.
//!
//! Every table but [`EXEMPT`] holds one tenant's rows: a `tenant` column
//! filled from the transaction's `airlock.tenant` setting, row-level
//! security enabled and forced (so even the tables' owner is held by it),
//! and one policy that shows and accepts a row only when its tenant is the
//! setting's **and** the tenant the connecting role is mapped to in
//! `tenant_roles` (written by the owner only). Each tenant's hubs connect
//! as a role of their own: a hub that sets another tenant's name sees
//! nothing, and without the setting a row's tenant is NULL, which the
//! column refuses and no policy matches.
//!
//! The hub connects as a role that owns no table and cannot bypass
//! row-level security; [`check_role`] refuses any other.

use tokio_postgres::Client;

use crate::{Result, StoreError};

/// The schema every airlock table lives in.
pub const SCHEMA: &str = "airlock";

/// Tables without row-level security, each with the reason. The gate test
/// fails for any other table that lacks it.
pub const EXEMPT: &[(&str, &str)] = &[(
    "schema_version",
    "one row, the schema's version; no tenant's data",
)];

/// The tenant a transaction acts for.
pub(crate) const TENANT_SETTING: &str = "airlock.tenant";

const TENANT_COLUMN: &str =
    "tenant TEXT NOT NULL DEFAULT current_setting('airlock.tenant', true) CHECK (tenant <> '')";

/// Tenant-scoped tables as `(name, columns after tenant, constraints)`,
/// created by migration 1.
const TABLES_V1: &[(&str, &str)] = &[
    (
        "catalog",
        "source TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, definition TEXT NOT NULL,
         seen_at_ms BIGINT NOT NULL, PRIMARY KEY (tenant, source, kind, name)",
    ),
    (
        "source_status",
        "source TEXT NOT NULL, state TEXT NOT NULL, detail TEXT NOT NULL,
         updated_at_ms BIGINT NOT NULL, PRIMARY KEY (tenant, source)",
    ),
    (
        "contracts",
        "source TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL, definition TEXT NOT NULL,
         reviewed_at_ms BIGINT NOT NULL, reviewer TEXT NOT NULL, PRIMARY KEY (tenant, source, tool)",
    ),
    (
        "generations",
        "contracts BIGINT NOT NULL, PRIMARY KEY (tenant)",
    ),
    // One chain per tenant: a record names the hash before it, and no two
    // records of a tenant may name the same one (no forks, whatever the
    // writers do).
    (
        "audit",
        "seq BIGSERIAL PRIMARY KEY, record TEXT NOT NULL, at_ms BIGINT NOT NULL, kind TEXT NOT NULL,
         tool TEXT NOT NULL, source TEXT NOT NULL, decision TEXT NOT NULL, prev_hash TEXT NOT NULL,
         hash TEXT NOT NULL, UNIQUE (tenant, prev_hash)",
    ),
    (
        "approvals",
        "id TEXT NOT NULL, state TEXT NOT NULL, principal TEXT NOT NULL, session TEXT NOT NULL,
         source TEXT NOT NULL, connection TEXT NOT NULL, tool TEXT NOT NULL, upstream TEXT NOT NULL,
         arguments TEXT, args_digest TEXT NOT NULL, reason TEXT NOT NULL, description TEXT NOT NULL,
         created_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL, decided_at_ms BIGINT,
         decided_by TEXT, channel TEXT, detail TEXT NOT NULL DEFAULT '',
         choice TEXT NOT NULL DEFAULT '', contract_digest TEXT NOT NULL DEFAULT '',
         PRIMARY KEY (tenant, id)",
    ),
    (
        "standing_rules",
        "id BIGSERIAL PRIMARY KEY, tool TEXT NOT NULL, connection TEXT NOT NULL,
         digest TEXT NOT NULL, created_at_ms BIGINT NOT NULL, created_by TEXT NOT NULL,
         approval TEXT NOT NULL",
    ),
    (
        "commands",
        "source TEXT NOT NULL, fingerprint TEXT NOT NULL, reviewed_at_ms BIGINT NOT NULL,
         reviewer TEXT NOT NULL, PRIMARY KEY (tenant, source)",
    ),
    (
        "runs",
        "id TEXT NOT NULL, principal TEXT NOT NULL, code TEXT NOT NULL, seed BIGINT NOT NULL,
         clock_ms BIGINT NOT NULL, state TEXT NOT NULL, detail TEXT NOT NULL,
         created_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL, resumes BIGINT NOT NULL,
         PRIMARY KEY (tenant, id)",
    ),
    (
        "journal",
        "run TEXT NOT NULL, seq BIGINT NOT NULL, tool TEXT NOT NULL, args_digest TEXT NOT NULL,
         state TEXT NOT NULL, reply TEXT NOT NULL, approval TEXT NOT NULL, at_ms BIGINT NOT NULL,
         PRIMARY KEY (tenant, run, seq), FOREIGN KEY (tenant, run) REFERENCES airlock.runs (tenant, id)",
    ),
    // The hubs using this database, each with when it last said it was
    // alive: rows of a hub that stopped saying so are recovered by
    // whichever replica notices first.
    (
        "hubs",
        "instance TEXT NOT NULL, seen_at_ms BIGINT NOT NULL, PRIMARY KEY (tenant, instance)",
    ),
];

/// Which role acts for which tenant: written by the owner (`migrate`),
/// read by each hub role for its own row only.
const TENANT_ROLES: &str = "CREATE TABLE airlock.tenant_roles (
        role TEXT PRIMARY KEY, tenant TEXT NOT NULL CHECK (tenant <> ''));
     ALTER TABLE airlock.tenant_roles ENABLE ROW LEVEL SECURITY;
     ALTER TABLE airlock.tenant_roles FORCE ROW LEVEL SECURITY;
     CREATE POLICY own_role ON airlock.tenant_roles USING (role = current_user);\n";

/// The tenant the connecting role acts for (NULL for a role mapped to
/// none): evaluated once per statement.
const ROLE_TENANT: &str =
    "(SELECT r.tenant FROM airlock.tenant_roles r WHERE r.role = current_user)";

/// One migration: the SQL that moves the schema from its index to the
/// next version. Never edit a shipped one; append.
fn migrations() -> Vec<String> {
    let mut v1 = TENANT_ROLES.to_string();
    for (table, columns) in TABLES_V1 {
        v1.push_str(&tenant_table(table, columns));
    }
    v1.push_str(
        "CREATE INDEX audit_tenant_seq ON airlock.audit (tenant, seq);
         CREATE INDEX approvals_state ON airlock.approvals (tenant, state, expires_at_ms);",
    );
    vec![v1]
}

/// The SQL creating one tenant-scoped table with its policy.
fn tenant_table(table: &str, columns: &str) -> String {
    format!(
        "CREATE TABLE {SCHEMA}.{table} ({TENANT_COLUMN}, {columns});
         ALTER TABLE {SCHEMA}.{table} ENABLE ROW LEVEL SECURITY;
         ALTER TABLE {SCHEMA}.{table} FORCE ROW LEVEL SECURITY;
         CREATE POLICY tenant_rows ON {SCHEMA}.{table}
             USING (tenant = current_setting('airlock.tenant', true) AND tenant = {ROLE_TENANT})
             WITH CHECK (tenant = current_setting('airlock.tenant', true) AND tenant = {ROLE_TENANT});\n"
    )
}

/// The version this airlock writes and reads.
pub fn supported() -> i64 {
    migrations().len() as i64
}

async fn version(client: &Client) -> Result<Option<i64>> {
    let exists = client
        .query_one(
            "SELECT to_regclass('airlock.schema_version') IS NOT NULL",
            &[],
        )
        .await?
        .get::<_, bool>(0);
    if !exists {
        return Ok(None);
    }
    let row = client
        .query_opt("SELECT version FROM airlock.schema_version", &[])
        .await?;
    Ok(Some(row.map(|r| r.get(0)).unwrap_or(0)))
}

/// Applies every migration this airlock knows and that the database lacks,
/// as the schema's owner, and grants `hub_role` what a hub needs (rows,
/// never the tables). Refuses a newer schema.
pub(crate) async fn migrate(
    client: &mut Client,
    url: &str,
    hub_role: &str,
    tenant: &str,
) -> Result<i64> {
    let reserved = ["public", "current_user", "session_user", "current_role"];
    if !is_identifier(hub_role)
        || reserved.contains(&hub_role.to_ascii_lowercase().as_str())
        || hub_role.to_ascii_lowercase().starts_with("pg_")
    {
        return Err(StoreError::Refused(format!(
            "`{hub_role}` is not a role a hub can be: a plain name (letters, digits and _), not PUBLIC or a pg_ role"
        )));
    }
    let tx = client.transaction().await?;
    let exists = tx
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1",
            &[&hub_role],
        )
        .await?
        .is_some();
    if !exists {
        return Err(StoreError::Refused(format!(
            "there is no role `{hub_role}`; create it first (CREATE ROLE {hub_role} LOGIN, see docs/team.md)"
        )));
    }
    let schema_owner = tx
        .query_opt(
            "SELECT pg_catalog.pg_get_userbyid(nspowner)::text = current_user::text
               FROM pg_catalog.pg_namespace WHERE nspname = 'airlock'",
            &[],
        )
        .await?
        .map(|r| r.get::<_, bool>(0));
    if schema_owner == Some(false) {
        return Err(StoreError::Refused(
            "schema `airlock` exists and belongs to another role; migrate as its owner".into(),
        ));
    }
    // One migrator at a time, whichever replica or operator runs it.
    tx.execute("SELECT pg_advisory_xact_lock(727170)", &[])
        .await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {SCHEMA};
         CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version (
             one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one), version BIGINT NOT NULL);
         INSERT INTO {SCHEMA}.schema_version (version) VALUES (0) ON CONFLICT DO NOTHING;"
    ))
    .await?;
    let found: i64 = tx
        .query_one("SELECT version FROM airlock.schema_version", &[])
        .await?
        .get(0);
    let all = migrations();
    let supported = all.len() as i64;
    if found > supported {
        return Err(StoreError::TooNew {
            path: redacted(url),
            found,
            supported,
        });
    }
    for (i, sql) in all.iter().enumerate().skip(found as usize) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "UPDATE airlock.schema_version SET version = $1",
            &[&(i as i64 + 1)],
        )
        .await?;
    }
    // Rows, never tables; the audit log is append-only for hubs, and the
    // version and the role map are the owner's.
    tx.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA {SCHEMA} TO \"{hub_role}\";
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {SCHEMA} TO \"{hub_role}\";
         REVOKE INSERT, UPDATE, DELETE ON {SCHEMA}.schema_version, {SCHEMA}.tenant_roles FROM \"{hub_role}\";
         REVOKE UPDATE, DELETE ON {SCHEMA}.audit FROM \"{hub_role}\";
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO \"{hub_role}\";"
    ))
    .await?;
    let mapped = tx
        .query_opt(
            "SELECT tenant FROM airlock.tenant_roles WHERE role = $1",
            &[&hub_role],
        )
        .await?
        .map(|r| r.get::<_, String>(0));
    match mapped {
        Some(t) if t != tenant => {
            return Err(StoreError::Refused(format!(
                "the role `{hub_role}` already acts for tenant `{t}`; each tenant's hubs need a role of their own"
            )));
        }
        Some(_) => {}
        None => {
            tx.execute(
                "INSERT INTO airlock.tenant_roles (role, tenant) VALUES ($1, $2)",
                &[&hub_role, &tenant],
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(supported)
}

/// Before a hub uses the database: the schema is the version it knows,
/// and its role is held by row-level security.
pub(crate) async fn check(client: &Client, url: &str, tenant: &str) -> Result<()> {
    check_role(client).await?;
    let supported = supported();
    match version(client).await? {
        None | Some(0) => Err(StoreError::Refused(format!(
            "the database at {} has no airlock schema yet; its owner creates it with `airlock store migrate`",
            redacted(url)
        ))),
        Some(found) if found > supported => Err(StoreError::TooNew {
            path: redacted(url),
            found,
            supported,
        }),
        Some(found) if found < supported => Err(StoreError::Refused(format!(
            "the database at {} has airlock schema version {found}, older than this airlock's {supported}; its owner upgrades it with `airlock store migrate`",
            redacted(url)
        ))),
        Some(_) => check_tenant_role(client, tenant).await,
    }
}

/// The role must be the one mapped to `tenant`.
async fn check_tenant_role(client: &Client, tenant: &str) -> Result<()> {
    let row = client
        .query_one(
            "SELECT current_user::text,
                    (SELECT r.tenant FROM airlock.tenant_roles r WHERE r.role = current_user)",
            &[],
        )
        .await?;
    let (user, mapped): (String, Option<String>) = (row.get(0), row.get(1));
    match mapped {
        Some(t) if t == tenant => Ok(()),
        Some(t) => Err(StoreError::Refused(format!(
            "the role `{user}` acts for tenant `{t}`, not `{tenant}`; connect as `{tenant}`'s role"
        ))),
        None => Err(StoreError::Refused(format!(
            "the role `{user}` acts for no tenant; the owner maps it with `airlock store migrate --hub-role {user} --tenant {tenant}`"
        ))),
    }
}

/// The hub's role must not be a superuser, bypass row-level security or
/// own any of airlock's tables (an owner could turn the policies off).
pub(crate) async fn check_role(client: &Client) -> Result<()> {
    let row = client
        .query_one(
            "SELECT current_user::text, r.rolsuper OR r.rolcreaterole, r.rolbypassrls,
                    (SELECT count(*) FROM pg_catalog.pg_class c
                       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = 'airlock' AND pg_catalog.pg_has_role(c.relowner, 'MEMBER'))
                  + (SELECT count(*) FROM pg_catalog.pg_namespace n
                      WHERE n.nspname = 'airlock' AND pg_catalog.pg_has_role(n.nspowner, 'MEMBER'))
               FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await?;
    let (user, superuser, bypass, owned): (String, bool, bool, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let why = if superuser {
        "is a superuser or may create roles"
    } else if bypass {
        "has BYPASSRLS"
    } else if owned > 0 {
        "owns (or is a member of the owner of) airlock's schema or tables"
    } else {
        return Ok(());
    };
    Err(StoreError::Refused(format!(
        "the hub connects as `{user}`, which {why}: it could read every tenant's rows. Connect as a role made for the hub (see docs/team.md)"
    )))
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// `url` without its password, to name the database in messages.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_of_the_first_migration_is_tenant_scoped_and_forced() {
        let sql = &migrations()[0];
        for (table, _) in TABLES_V1 {
            for needle in [
                format!("CREATE TABLE airlock.{table} (tenant TEXT NOT NULL"),
                format!(
                    "USING (tenant = current_setting('airlock.tenant', true) AND tenant = {ROLE_TENANT})"
                ),
                format!("ALTER TABLE airlock.{table} ENABLE ROW LEVEL SECURITY"),
                format!("ALTER TABLE airlock.{table} FORCE ROW LEVEL SECURITY"),
                format!("CREATE POLICY tenant_rows ON airlock.{table}"),
            ] {
                assert!(sql.contains(&needle), "{needle}");
            }
        }
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redacted("postgres://hub:hunter2@db.example:5432/airlock?sslmode=disable"),
            "postgres://hub@db.example:5432/airlock?sslmode=disable"
        );
        assert_eq!(
            redacted("postgres://hub@127.0.0.1/airlock"),
            "postgres://hub@127.0.0.1/airlock"
        );
        assert_eq!(redacted("postgresql://a:b:c@h/d"), "postgresql://a@h/d");
    }

    #[test]
    fn role_names_are_plain_identifiers() {
        assert!(is_identifier("airlock_hub"));
        for bad in ["", "a;drop", "hub role", "1hub", "\"x\""] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }
}
