//! Where a source's OAuth state lives: in the secret store (the keychain,
//! or the private fallback file that says so), never in the database, the
//! logs or the audit.
//!
//! Per source, three entries: `oauth_NAME` holds what is not secret (the
//! issuer, the registration, scopes, expiry, whether a login is needed),
//! and the access and refresh tokens each have an entry of their own, so
//! that the scrubber, which learns every stored value, knows each token by
//! itself. A client secret a provider issued at registration has a fourth.
//!
//! Refreshing takes a lock file in the data directory first and reads the
//! tokens again under it, so two airlock processes never spend one refresh
//! token: the second finds the first's new tokens.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::transport::auth::{
    AuthError, AuthorizationMetadata, CredentialRefreshGuard, CredentialStore, OAuthTokenResponse,
    StoredCredentials,
};
use serde::{Deserialize, Serialize};

use crate::ports::Vault;

/// How airlock's client came to be known to the authorization server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Registration {
    /// A `client_id` from the config.
    PreRegistered,
    /// airlock's Client ID Metadata Document URL is the client id.
    MetadataDocument,
    /// Registered at the server's registration endpoint.
    Dynamic,
}

impl Registration {
    pub fn as_str(self) -> &'static str {
        match self {
            Registration::PreRegistered => "pre-registered",
            Registration::MetadataDocument => "client metadata document",
            Registration::Dynamic => "dynamic registration",
        }
    }
}

/// What is kept about a source's login that is not secret.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    /// The authorization server's issuer the registration and tokens
    /// belong to.
    pub issuer: Option<String>,
    pub client_id: Option<String>,
    pub registration: Option<Registration>,
    /// The authorization server's metadata as discovered at login, so a
    /// running hub refreshes without discovering again.
    pub metadata: Option<AuthorizationMetadata>,
    /// What was granted.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// When the access token was received (seconds since the epoch) and
    /// for how long it is good.
    pub received_at: Option<u64>,
    pub expires_in: Option<u64>,
    pub token_type: Option<String>,
    #[serde(default)]
    pub has_access: bool,
    #[serde(default)]
    pub has_refresh: bool,
    /// Why the next call cannot be made without a person logging in.
    pub needs_login: Option<String>,
    /// Scopes a server asked for beyond the grant (403
    /// `insufficient_scope`): the next login asks for them too.
    #[serde(default)]
    pub wanted_scopes: Vec<String>,
    /// The server's last `WWW-Authenticate` challenge (its discovery
    /// hints), for a login begun when the server no longer sends one.
    pub challenge: Option<String>,
    /// Logins in a row that asked for more scope; capped.
    #[serde(default)]
    pub step_ups: u32,
    /// The loopback redirect a dynamic registration was made for: a login
    /// listening elsewhere registers again (not every provider lets a
    /// loopback redirect change its port, as RFC 8252 asks).
    #[serde(default)]
    pub redirect_uri: Option<String>,
    /// The source URL the tokens were issued for: never sent elsewhere.
    #[serde(default)]
    pub server: Option<String>,
    /// The resource indicator the login named, named again on refresh.
    #[serde(default)]
    pub resource: Option<String>,
}

impl Record {
    pub fn revocation_endpoint(&self) -> Option<&str> {
        self.metadata
            .as_ref()?
            .additional_fields
            .get("revocation_endpoint")?
            .as_str()
    }

    /// Seconds until the access token expires (negative when it has).
    pub fn expires_in_secs(&self, now: u64) -> Option<i64> {
        let (at, for_) = (self.received_at?, self.expires_in?);
        Some(at as i64 + for_ as i64 - now as i64)
    }
}

/// The secret-store names of one source's entries.
pub(crate) struct Names {
    pub record: String,
    pub access: String,
    pub refresh: String,
    pub client_secret: String,
}

impl Names {
    pub(crate) fn of(source: &str) -> Names {
        Names {
            record: format!("oauth_{source}"),
            access: format!("oauth_{source}_access"),
            refresh: format!("oauth_{source}_refresh"),
            client_secret: format!("oauth_{source}_client"),
        }
    }
}

/// One source's OAuth state over the secret store; rmcp's credential store.
#[derive(Clone)]
pub struct TokenVault {
    source: String,
    vault: Arc<dyn Vault>,
    /// The last credentials read or written, served while no refresh is
    /// under way (each request needs the access token).
    cache: Arc<Mutex<Option<StoredCredentials>>>,
    /// Refreshes holding the lock: while one does, reads go to the store.
    guarded: Arc<AtomicUsize>,
}

fn store_error(e: String) -> AuthError {
    AuthError::CredentialStoreError(e)
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl TokenVault {
    pub fn new(source: &str, vault: Arc<dyn Vault>) -> TokenVault {
        TokenVault {
            source: source.to_string(),
            vault,
            cache: Arc::new(Mutex::new(None)),
            guarded: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn names(&self) -> Names {
        Names::of(&self.source)
    }

    /// The source's record, or an empty one.
    pub fn record(&self) -> Result<Record, String> {
        match self.vault.get_note(&self.names().record)? {
            None => Ok(Record::default()),
            Some(text) => serde_json::from_str(&text).map_err(|_| {
                format!(
                    "the stored OAuth record of `{}` is not readable; run `airlock auth logout {}` and log in again",
                    self.source, self.source
                )
            }),
        }
    }

    pub fn write_record(&self, record: &Record) -> Result<(), String> {
        let text = serde_json::to_string(record).map_err(|e| e.to_string())?;
        self.vault.set_note(&self.names().record, &text)
    }

    /// Changes the record in place.
    pub fn update(&self, change: impl FnOnce(&mut Record)) -> Result<Record, String> {
        self.with_record_lock(|| {
            let mut record = self.record()?;
            change(&mut record);
            self.write_record(&record)?;
            Ok(record)
        })
    }

    /// Runs `f` holding the record's lock file, so a hub noting "needs
    /// login" and a login or refresh saving tokens never write over each
    /// other's change. Waits at most [`LOCK_WAIT`].
    fn with_record_lock<T>(&self, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        let path = self
            .vault
            .lock_dir()
            .join(format!("oauth-{}.record.lock", self.source));
        let _held =
            hold(&path).map_err(|e| format!("cannot take the lock {}: {e}", path.display()))?;
        f()
    }

    /// Whether anything is stored for the source.
    pub fn exists(&self) -> Result<bool, String> {
        Ok(self.vault.get_note(&self.names().record)?.is_some())
    }

    pub fn access_token(&self) -> Result<Option<String>, String> {
        self.vault.get(&self.names().access)
    }

    pub fn refresh_token(&self) -> Result<Option<String>, String> {
        self.vault.get(&self.names().refresh)
    }

    /// The secret of the client a login registered as `kind`: the one the
    /// provider issued at registration, or a pre-registered client's, which
    /// the person stored under the name the config gives.
    pub(crate) fn secret_of_client(
        &self,
        kind: Option<Registration>,
        settings: &airlock_config::OAuthSettings,
    ) -> Result<Option<String>, String> {
        match (kind, &settings.client_secret) {
            (Some(Registration::PreRegistered), Some(name)) => {
                self.configured_secret(name).map(Some)
            }
            _ => self.client_secret(),
        }
    }

    /// The pre-registered client's secret, stored under the name the
    /// config gives.
    pub(crate) fn configured_secret(&self, name: &str) -> Result<String, String> {
        self.vault.get(name)?.ok_or_else(|| {
            format!(
                "no secret named `{name}` (the client secret of `{}`); store it with `airlock secret set {name}`",
                self.source
            )
        })
    }

    pub fn client_secret(&self) -> Result<Option<String>, String> {
        self.vault.get(&self.names().client_secret)
    }

    pub fn set_client_secret(&self, secret: Option<&str>) -> Result<(), String> {
        match secret {
            Some(s) => self.vault.set(&self.names().client_secret, s),
            None => self.vault.remove(&self.names().client_secret).map(|_| ()),
        }
    }

    /// Drops the tokens (not the registration), saying why a login is
    /// needed, or everything when `why` is `None`.
    pub fn forget_tokens(&self, why: Option<&str>) -> Result<(), String> {
        let names = self.names();
        self.vault.remove(&names.access)?;
        self.vault.remove(&names.refresh)?;
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
        match why {
            Some(why) => {
                self.update(|r| {
                    r.has_access = false;
                    r.has_refresh = false;
                    r.received_at = None;
                    r.expires_in = None;
                    r.needs_login = Some(why.to_string());
                })?;
            }
            None => {
                self.vault.remove(&names.client_secret)?;
                self.vault.remove(&names.record)?;
            }
        }
        Ok(())
    }

    fn read_credentials(&self) -> Result<Option<StoredCredentials>, String> {
        let record = self.record()?;
        let Some(client_id) = record.client_id.clone() else {
            return Ok(None);
        };
        let access = self.access_token()?;
        let refresh = self.refresh_token()?;
        let token = match access {
            Some(access) => {
                let mut response = serde_json::json!({
                    "access_token": access,
                    "token_type": record.token_type.clone().unwrap_or_else(|| "Bearer".into()),
                });
                if let Some(e) = record.expires_in {
                    response["expires_in"] = e.into();
                }
                if let Some(r) = refresh {
                    response["refresh_token"] = r.into();
                }
                if !record.scopes.is_empty() {
                    response["scope"] = record.scopes.join(" ").into();
                }
                Some(
                    serde_json::from_value::<OAuthTokenResponse>(response)
                        .map_err(|_| "the stored tokens are not readable".to_string())?,
                )
            }
            None => None,
        };
        Ok(Some(
            StoredCredentials::new(client_id, token, record.scopes.clone(), record.received_at)
                .with_issuer(record.issuer.clone()),
        ))
    }

    fn write_credentials(&self, creds: &StoredCredentials) -> Result<(), String> {
        self.with_record_lock(|| self.write_credentials_held(creds))
    }

    fn write_credentials_held(&self, creds: &StoredCredentials) -> Result<(), String> {
        use oauth2::TokenResponse;
        let names = self.names();
        let mut record = self.record()?;
        record.client_id = Some(creds.client_id.clone());
        if creds.issuer.is_some() {
            record.issuer = creds.issuer.clone();
        }
        // What the provider says it granted, as scope tokens only (it is
        // printed to a person's terminal).
        record.scopes = creds
            .granted_scopes
            .iter()
            .flat_map(|s| super::scope_tokens(s))
            .map(str::to_string)
            .collect();
        record.received_at = creds.token_received_at;
        match &creds.token_response {
            Some(token) => {
                self.vault
                    .set(&names.access, token.access_token().secret())?;
                match token.refresh_token() {
                    Some(r) => self.vault.set(&names.refresh, r.secret())?,
                    None => {
                        self.vault.remove(&names.refresh)?;
                    }
                }
                record.expires_in = token.expires_in().map(|d| d.as_secs());
                record.token_type = Some("Bearer".into());
                record.has_access = true;
                record.has_refresh = token.refresh_token().is_some();
                record.needs_login = None;
            }
            None => {
                self.vault.remove(&names.access)?;
                self.vault.remove(&names.refresh)?;
                record.has_access = false;
                record.has_refresh = false;
            }
        }
        self.write_record(&record)
    }

    fn lock_path(&self) -> PathBuf {
        self.vault
            .lock_dir()
            .join(format!("oauth-{}.lock", self.source))
    }
}

#[async_trait::async_trait]
impl CredentialStore for TokenVault {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        if self.guarded.load(Ordering::SeqCst) == 0
            && let Some(cached) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).clone()
        {
            return Ok(Some(cached));
        }
        let creds = self.read_credentials().map_err(store_error)?;
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = creds.clone();
        Ok(creds)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.write_credentials(&credentials).map_err(store_error)?;
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(credentials);
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.forget_tokens(Some("the stored tokens were cleared"))
            .map_err(store_error)
    }

    async fn on_refresh_token_rejected(
        &self,
        _credentials: &StoredCredentials,
    ) -> Result<(), AuthError> {
        tracing::warn!(source = %self.source, "the provider refused the refresh token; a login is needed");
        self.forget_tokens(Some(
            "the provider no longer accepts the refresh token (invalid_grant)",
        ))
        .map_err(store_error)
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let path = self.lock_path();
        let file = tokio::task::spawn_blocking(move || hold(&path))
            .await
            .map_err(|e| store_error(e.to_string()))?
            .map_err(|e| store_error(format!("cannot take the refresh lock: {e}")))?;
        self.guarded.fetch_add(1, Ordering::SeqCst);
        Ok(Some(CredentialRefreshGuard::new(Held {
            _file: file,
            guarded: self.guarded.clone(),
        })))
    }
}

/// How long a process waits for another's lock before it gives up (a
/// process stopped while holding one must not wedge the rest).
pub(crate) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Takes the lock file at `path`, waiting at most [`LOCK_WAIT`].
fn hold(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(std::io::Error::other(format!(
                    "another airlock process has held it for {}s",
                    LOCK_WAIT.as_secs()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// The refresh lock; released (and reads served from the cache again)
/// when dropped.
struct Held {
    _file: std::fs::File,
    guarded: Arc<AtomicUsize>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.guarded.fetch_sub(1, Ordering::SeqCst);
    }
}
