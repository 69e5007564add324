//! OAuth 2.1 to url sources, as the MCP authorization spec asks.
//!
//! - [`login`]: a person's `airlock auth login`: discovery (RFC 9728, then
//!   RFC 8414 / OpenID metadata), registration (remembered, pre-registered,
//!   metadata document, dynamic), authorization code with PKCE S256, the
//!   loopback redirect and airlock's own single-use state;
//! - [`vault`]: tokens and registrations in the secret store, the refresh
//!   lock shared by every airlock process;
//! - [`http`]: every OAuth request, through the egress guard;
//! - [`revoke`]: logging out at the provider (RFC 7009) before forgetting.
//!
//! rmcp's `auth` module does the protocol; this wraps it where the spec or
//! a security review asks more (S256 refused when not offered, a 256-bit
//! state, the resource indicator's override, error bodies never shown).

mod http;
pub mod login;
pub mod revoke;
pub mod vault;
mod watch;

use std::sync::Arc;

use rmcp::transport::auth::{AuthClient, AuthorizationManager, OAuthClientConfig};

pub use login::{Callback, Granted, Login, REFUSED, Target};
pub use vault::{Record, Registration, TokenVault};
pub(crate) use watch::{Watch, Watched};

use crate::ports::Vault;
use airlock_config as config;

/// Whether a source logs in with OAuth: a url source that does not send
/// its own `Authorization` header (that header is its credential).
pub(crate) fn logs_in(config: &config::SourceConfig) -> bool {
    match &config.transport {
        config::Transport::Http { headers, .. } => !headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization")),
        config::Transport::Stdio { .. } => false,
    }
}

/// What a source that needs a login says instead of answering: why, and
/// the command that gives it one.
fn needs_login(source: &str, why: &str) -> String {
    format!(
        "`{source}` needs you to log in ({why}): run `{} {source}` in a terminal",
        airlock_common::LOGIN_COMMAND
    )
}

/// The authorized HTTP client for a source that has logged in, wrapping
/// `inner`; `None` when no login is stored (a server that then answers 401
/// makes the source wait for one).
pub(crate) async fn authorized<C>(
    target: &Target,
    secrets: Arc<dyn Vault>,
    inner: C,
) -> Result<Option<AuthClient<C>>, String> {
    let vault = TokenVault::new(&target.source, secrets);
    let record = vault.record()?;
    let (Some(client_id), Some(metadata), true) = (
        record.client_id.clone(),
        record.metadata.clone(),
        record.has_access,
    ) else {
        return Ok(None);
    };
    // Tokens issued for another URL (the config was changed since) are
    // not sent here: the server's 401 asks for a login of its own.
    if record.server.as_deref() != Some(target.url.as_str()) {
        return Ok(None);
    }
    let resource = match (&target.settings.resource, &record.resource) {
        (config::ResourceIndicator::Server, Some(named)) => {
            config::ResourceIndicator::Override(named.clone())
        }
        (setting, _) => setting.clone(),
    };
    let http = Arc::new(http::EgressOAuthHttp::new(target.allow_private, resource)?);
    let mut manager = AuthorizationManager::new_with_oauth_http_client(target.url.as_str(), http)
        .await
        .map_err(|e| {
            format!(
                "cannot prepare the OAuth client of `{}`: {e}",
                target.source
            )
        })?;
    manager.set_metadata(metadata);
    let mut config =
        OAuthClientConfig::new(client_id, target.url.clone()).with_scopes(record.scopes.clone());
    if let Some(secret) = vault.secret_of_client(record.registration, &target.settings)? {
        config = config.with_client_secret(secret);
    }
    manager.configure_client(config).map_err(|e| {
        format!(
            "cannot prepare the OAuth client of `{}`: {e}",
            target.source
        )
    })?;
    manager.set_credential_store(vault);
    Ok(Some(AuthClient::new(inner, manager)))
}

/// Why a failed request means a person must log in, if it does: the
/// server's 401 challenge, or its 403 asking for more scope (whose scopes
/// the next login asks for too). Looks through the error's causes.
pub(crate) fn login_needed(e: &(dyn std::error::Error + 'static)) -> Option<Needed> {
    use rmcp::transport::streamable_http_client::StreamableHttpError as E;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(http) = err.downcast_ref::<E<reqwest::Error>>() {
            return needed_by(http);
        }
        if let Some(init) = err.downcast_ref::<rmcp::service::ClientInitializeError>()
            && let rmcp::service::ClientInitializeError::TransportError { error, .. } = init
        {
            next = Some(error.error.as_ref());
            continue;
        }
        next = err.source();
    }
    None
}

/// [`login_needed`] for the transport's own error.
pub(crate) fn needed_by<E>(
    e: &rmcp::transport::streamable_http_client::StreamableHttpError<E>,
) -> Option<Needed>
where
    E: std::error::Error + Send + Sync + 'static,
{
    use rmcp::transport::auth::AuthError;
    use rmcp::transport::streamable_http_client::StreamableHttpError as E;
    match e {
        E::AuthRequired(a) => Some(Needed::Login(Some(a.www_authenticate_header.clone()))),
        E::Auth(AuthError::AuthorizationRequired) => Some(Needed::Login(None)),
        // The provider's words (its error description) stay out: only that
        // it would not refresh.
        E::Auth(AuthError::TokenRefreshFailed(_) | AuthError::TokenExpired) => {
            Some(Needed::Refresh)
        }
        E::InsufficientScope(s) => {
            let scope = s.required_scope.clone().or_else(|| {
                rmcp::transport::auth::WWWAuthenticateParams::parse(
                    &s.www_authenticate_header,
                    &url::Url::parse("http://localhost/").ok()?,
                )
                .scope
            });
            Some(Needed::Scope(
                scope.unwrap_or_default(),
                s.www_authenticate_header.clone(),
            ))
        }
        _ => None,
    }
}

/// What a source needs before it can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Needed {
    /// A login, with the server's challenge when it sent one.
    Login(Option<String>),
    /// More scope (space-separated), and the challenge that asked.
    Scope(String, String),
    /// A new login: the provider would not refresh the token.
    Refresh,
}

/// The scope tokens of a server's `scope` (RFC 6749 3.3: printable ASCII
/// without `"` or `\\`), at most 16 of at most 128 bytes; anything else in it
/// is not a scope and is dropped.
pub(crate) fn scope_tokens(scope: &str) -> impl Iterator<Item = &str> {
    scope
        .split(' ')
        .filter(|t| {
            (1..=128).contains(&t.len())
                && t.bytes()
                    .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
        })
        .take(16)
}

/// Notes in the source's record that it needs a person, and says so.
pub(crate) fn mark_needs_login(source: &str, secrets: Arc<dyn Vault>, needed: Needed) -> String {
    let vault = TokenVault::new(source, secrets);
    // The server's scope names are its words: kept (when they are scope
    // tokens) for the next login and `auth status`, never said to the model.
    let why = match &needed {
        Needed::Login(_) => "the server asks for authorization",
        Needed::Scope(..) => "the server asks for more scope",
        Needed::Refresh => "the provider would not refresh the token",
    }
    .to_string();
    let mut capped = false;
    let marked = vault.update(|r| {
        match &needed {
            Needed::Login(Some(c)) | Needed::Scope(_, c) => r.challenge = Some(c.clone()),
            Needed::Login(None) | Needed::Refresh => {}
        }
        if let Needed::Scope(s, _) = &needed {
            for scope in scope_tokens(s) {
                if !r.wanted_scopes.iter().any(|w| w == scope) {
                    r.wanted_scopes.push(scope.to_string());
                }
            }
            capped = r.step_ups >= login::MAX_STEP_UPS;
        }
        r.needs_login = Some(why.clone());
    });
    if let Err(e) = marked {
        tracing::warn!(%source, error = %e, "cannot record that the source needs a login");
    }
    if capped {
        return format!(
            "`{source}` still asks for more scope after {} logins; airlock stops asking for it. Check what the account may grant",
            login::MAX_STEP_UPS
        );
    }
    needs_login(source, &why)
}
