//! A person logging airlock in to a source: discovery, registration, the
//! authorization URL, and the redirect that ends it.
//!
//! Only the `airlock auth login` command (a person's action) starts one;
//! nothing an MCP client sends can. The authorization code flow always
//! uses PKCE with S256, and an authorization server whose metadata does not
//! offer S256 is refused. The `state` airlock sends is its own, 256 random
//! bits, good once and for [`STATE_TTL`]; a callback with any other state
//! gets [`Callback::Refused`]'s one answer and makes no request at all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_config::{OAuthSettings, ResourceIndicator, SourceConfig, Transport};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadataSource, AuthorizationRequest,
    AuthorizationSession,
};

use super::http::EgressOAuthHttp;
use super::vault::{Record, Registration, TokenVault};
use crate::ports::Vault;

/// How long a login's state is good for.
pub const STATE_TTL: Duration = Duration::from_secs(300);
/// Logins in a row that may ask for more scope before airlock stops.
pub const MAX_STEP_UPS: u32 = 3;

/// A url source that may need a login.
#[derive(Debug, Clone)]
pub struct Target {
    pub source: String,
    pub url: String,
    pub allow_private: bool,
    pub settings: OAuthSettings,
}

impl Target {
    pub fn of(config: &SourceConfig) -> Result<Target, String> {
        match &config.transport {
            Transport::Http { url, .. } => Ok(Target {
                source: config.name.clone(),
                url: url.clone(),
                allow_private: config.allow_private,
                settings: config.oauth.clone(),
            }),
            Transport::Stdio { .. } => Err(format!(
                "`{}` is a command source; only url sources log in with OAuth",
                config.name
            )),
        }
    }
}

/// A login waiting for its redirect.
pub struct Login {
    session: AuthorizationSession,
    http: Arc<EgressOAuthHttp>,
    vault: TokenVault,
    secrets: Arc<dyn Vault>,
    /// The state sent in the authorization URL, and rmcp's own, which it
    /// stands for.
    state: String,
    inner_state: String,
    started: Instant,
    spent: bool,
    url: String,
    redirect_uri: String,
    record: Record,
    client_secret: Option<String>,
    stepping_up: bool,
}

/// What the redirect brought.
#[derive(Debug)]
pub enum Callback {
    /// Tokens are stored.
    Done(Granted),
    /// The state is not this login's (unknown, used, or expired): the one
    /// answer every such callback gets. Nothing was sent anywhere.
    Refused,
    /// The state was this login's, and the login failed: the reason.
    Failed(String),
}

/// What a finished login holds, without any value.
#[derive(Debug, Clone)]
pub struct Granted {
    pub scopes: Vec<String>,
    pub expires_in: Option<u64>,
    pub has_refresh: bool,
    pub issuer: Option<String>,
    pub registration: Registration,
}

/// The one message every callback that is not this login's gets.
pub const REFUSED: &str = "this login link is not valid: it is unknown, already used, or expired. Start again with `airlock auth login`.";

impl Login {
    /// Discovers how `target` authorizes, registers airlock with its
    /// authorization server if it must, and prepares the URL a person
    /// opens. `redirect_uri` is the loopback listener's exact address.
    pub async fn begin(
        target: &Target,
        secrets: Arc<dyn Vault>,
        redirect_uri: &str,
        extra_scopes: &[String],
    ) -> Result<Login, String> {
        let source = &target.source;
        crate::egress::check_target(&target.url, target.allow_private)?;
        let vault = TokenVault::new(source, secrets.clone());
        let mut record = vault.record()?;
        let stepping_up = !record.wanted_scopes.is_empty();
        if stepping_up && record.step_ups >= MAX_STEP_UPS {
            return Err(format!(
                "`{source}` has asked for more scope ({}) after {MAX_STEP_UPS} logins in a row; airlock stops asking. Check what the account may grant, then `airlock auth logout {source}` and log in again",
                record.wanted_scopes.join(" ")
            ));
        }
        // The server's challenge now, or the last one the hub saw (a server
        // may answer the handshake and ask only when a tool is called).
        let challenge = probe(target).await?.or(record.challenge.clone());
        let http = Arc::new(EgressOAuthHttp::new(
            target.allow_private,
            target.settings.resource.clone(),
        )?);
        let mut manager =
            AuthorizationManager::new_with_oauth_http_client(target.url.as_str(), http.clone())
                .await
                .map_err(|e| describe(&e, &http, "preparing the login"))?;
        manager.set_credential_store(vault.clone());
        let resolution = manager
            .resolve_metadata_from_challenge(challenge.as_deref())
            .await
            .map_err(|e| describe(&e, &http, "discovering the authorization server"))?;
        let metadata = resolution.metadata;
        // PKCE with S256, always. A server that publishes metadata must
        // say it offers S256; only one that publishes none at all (the
        // 2025-03-26 fallback endpoints) is asked without that promise.
        if resolution.source != AuthorizationMetadataSource::LegacyEndpointFallback
            && !metadata
                .code_challenge_methods_supported
                .as_ref()
                .is_some_and(|m| m.iter().any(|m| m == "S256"))
        {
            return Err(format!(
                "the authorization server of `{source}` ({}) does not list PKCE with S256 in its metadata; airlock does not log in without it",
                metadata
                    .issuer
                    .as_deref()
                    .unwrap_or(&metadata.authorization_endpoint)
            ));
        }
        manager.set_metadata(metadata.clone());

        // The scopes, least first: on a step-up what was granted and what
        // the server asked for since (their union); what the config and the
        // person ask for; what the server's challenge names. Only with none
        // of these does rmcp choose (the resource's published scopes); a
        // refresh token is asked for where the server offers one.
        let mut scopes: Vec<String> = Vec::new();
        if stepping_up {
            scopes.extend(record.scopes.iter().cloned());
            scopes.extend(record.wanted_scopes.iter().cloned());
        }
        scopes.extend(target.settings.scopes.iter().cloned());
        scopes.extend(extra_scopes.iter().cloned());
        if let Some(named) = challenge.as_deref().and_then(challenged_scope) {
            scopes.extend(super::scope_tokens(&named).map(str::to_string));
        }
        if !scopes.is_empty()
            && metadata
                .scopes_supported
                .as_ref()
                .is_some_and(|s| s.iter().any(|s| s == "offline_access"))
        {
            scopes.push("offline_access".into());
        }
        let mut seen = std::collections::HashSet::new();
        scopes.retain(|s| seen.insert(s.clone()));

        // Registration, in the spec's order: remembered for this issuer,
        // pre-registered, a metadata document, dynamic.
        let issuer = metadata.issuer.clone();
        let same_issuer = record.issuer == issuer;
        let remembered = match (&record.client_id, record.registration, same_issuer) {
            (Some(id), Some(kind), true)
                if kind_matches(kind, id, &target.settings)
                    && (kind != Registration::Dynamic
                        || record.redirect_uri.as_deref() == Some(redirect_uri)) =>
            {
                Some((
                    id.clone(),
                    kind,
                    vault.secret_of_client(Some(kind), &target.settings)?,
                ))
            }
            _ => None,
        };
        if record.server.as_ref().is_some_and(|s| *s != target.url) && record.has_access {
            tracing::info!(%source, "the source's URL changed; its tokens are not sent there");
            vault.forget_tokens(Some("the source's URL changed"))?;
        }
        if !same_issuer && record.client_id.is_some() {
            tracing::info!(%source, "the authorization server changed; registering again");
            vault.forget_tokens(Some("the source moved to another authorization server"))?;
            vault.set_client_secret(None)?;
        }
        let cimd_supported = metadata
            .additional_fields
            .get("client_id_metadata_document_supported")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let mut request = AuthorizationRequest::new(redirect_uri)
            .with_client_name("airlock")
            .with_scopes(scopes.iter().map(String::as_str));
        let (kind, client_secret) = if let Some((id, kind, secret)) = remembered {
            request = request.with_preregistered_client(id);
            if let Some(s) = &secret {
                request = request.with_client_secret(s.clone());
            }
            (kind, secret)
        } else if let Some(id) = &target.settings.client_id {
            let secret = match &target.settings.client_secret {
                Some(name) => Some(vault.configured_secret(name)?),
                None => None,
            };
            request = request.with_preregistered_client(id.clone());
            if let Some(s) = &secret {
                request = request.with_client_secret(s.clone());
            }
            (Registration::PreRegistered, None)
        } else if let (Some(url), true) = (&target.settings.client_metadata_url, cimd_supported) {
            request = request.with_client_metadata_url(url.clone());
            (Registration::MetadataDocument, None)
        } else {
            let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
            let config = manager
                .register_client("airlock", redirect_uri, &scope_refs)
                .await
                .map_err(|e| {
                    describe(
                        &e,
                        &http,
                        "registering airlock with the authorization server",
                    )
                })?;
            if let Some(s) = &config.client_secret {
                secrets.learn(s);
            }
            request = request.with_preregistered_client(config.client_id.clone());
            if let Some(s) = &config.client_secret {
                request = request.with_client_secret(s.clone());
            }
            (Registration::Dynamic, config.client_secret)
        };
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| describe(&e, &http, "preparing the authorization request"))?;
        let (client_id, _) = session
            .get_credentials()
            .await
            .map_err(|e| describe(&e, &http, "preparing the authorization request"))?;

        let mut url = url::Url::parse(session.get_authorization_url())
            .map_err(|_| "the authorization URL is not valid".to_string())?;
        let inner_state = url
            .query_pairs()
            .find(|(k, _)| k == "state")
            .map(|(_, v)| v.into_owned())
            .ok_or("the authorization URL has no state")?;
        // 256 random bits, as hex.
        let state = airlock_common::random::hex::<32>();
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .into_owned()
            .filter(|(k, _)| k != "state" && k != "resource")
            .collect();
        let resource = url
            .query_pairs()
            .find(|(k, _)| k == "resource")
            .map(|(_, v)| v.into_owned());
        {
            let mut q = url.query_pairs_mut();
            q.clear();
            for (k, v) in &pairs {
                q.append_pair(k, v);
            }
            let named = match (&target.settings.resource, resource) {
                (ResourceIndicator::Omit, _) => None,
                (ResourceIndicator::Override(v), _) => Some(v.clone()),
                (ResourceIndicator::Server, r) => r,
            };
            if let Some(r) = &named {
                q.append_pair("resource", r);
            }
            // The refreshes name the same resource as the login did.
            record.resource = named;
            q.append_pair("state", &state);
        }
        record.issuer = issuer;
        record.client_id = Some(client_id);
        record.registration = Some(kind);
        record.metadata = Some(metadata);
        record.redirect_uri = Some(redirect_uri.to_string());
        record.server = Some(target.url.clone());
        Ok(Login {
            session,
            http,
            vault,
            secrets,
            state,
            inner_state,
            started: Instant::now(),
            spent: false,
            url: url.to_string(),
            redirect_uri: redirect_uri.to_string(),
            record,
            client_secret,
            stepping_up,
        })
    }

    /// The URL the person opens (it carries no secret: PKCE's verifier
    /// stays here, and a client secret never goes into a URL).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// How many requests have been sent on this login's behalf.
    pub fn requests_sent(&self) -> usize {
        self.http.sent()
    }

    /// Handles one request to the redirect URI, given its query string.
    /// Only the first callback with this login's state, within
    /// [`STATE_TTL`], goes on; every other gets [`Callback::Refused`].
    pub async fn callback(&mut self, query: &str) -> Callback {
        // Each parameter once: a second `state` or `code` is a callback
        // someone composed, whichever of them a reader would take.
        let (mut state, mut code, mut iss, mut error) = (None, None, None, None);
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            let slot = match k.as_ref() {
                "state" => &mut state,
                "code" => &mut code,
                "iss" => &mut iss,
                "error" => &mut error,
                _ => continue,
            };
            if slot.replace(v.into_owned()).is_some() {
                return Callback::Refused;
            }
        }
        let matches = state.as_deref().is_some_and(|s| same(s, &self.state));
        if !answerable(matches, self.spent, self.started.elapsed()) {
            return Callback::Refused;
        }
        self.spent = true;
        if let Some(error) = error {
            let code = if error
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && error.len() <= 64
            {
                error
            } else {
                "an error".into()
            };
            return Callback::Failed(format!(
                "the authorization server ended the login with {code}"
            ));
        }
        let Some(code) = code else {
            return Callback::Failed("the redirect carried no authorization code".into());
        };
        self.secrets.learn(&code);
        if let Err(e) = self
            .session
            .handle_callback_with_issuer(&code, &self.inner_state, iss.as_deref())
            .await
        {
            return Callback::Failed(describe(&e, &self.http, "exchanging the code for tokens"));
        }
        match self.settle() {
            Ok(granted) => Callback::Done(granted),
            Err(e) => Callback::Failed(e),
        }
    }

    /// Records what the login established, beside the tokens rmcp saved.
    fn settle(&self) -> Result<Granted, String> {
        let kind = self.record.registration.unwrap_or(Registration::Dynamic);
        if kind == Registration::Dynamic || self.client_secret.is_none() {
            self.vault
                .set_client_secret(self.client_secret.as_deref())?;
        }
        let stepping_up = self.stepping_up;
        let base = self.record.clone();
        let record = self.vault.update(|r| {
            r.issuer = base.issuer.clone();
            r.client_id = base.client_id.clone();
            r.registration = base.registration;
            r.metadata = base.metadata.clone();
            r.redirect_uri = base.redirect_uri.clone();
            r.server = base.server.clone();
            r.resource = base.resource.clone();
            r.needs_login = None;
            r.challenge = None;
            if stepping_up {
                r.step_ups += 1;
            } else {
                r.step_ups = 0;
            }
            let granted = r.scopes.clone();
            r.wanted_scopes.retain(|w| !granted.contains(w));
            if !stepping_up {
                r.wanted_scopes.clear();
            }
        })?;
        Ok(Granted {
            scopes: record.scopes,
            expires_in: record.expires_in,
            has_refresh: record.has_refresh,
            issuer: record.issuer,
            registration: kind,
        })
    }
}

/// Whether a remembered registration still fits the config (a client id
/// put in the config later wins over one registered before).
fn kind_matches(kind: Registration, id: &str, settings: &OAuthSettings) -> bool {
    match (&settings.client_id, kind) {
        (Some(configured), Registration::PreRegistered) => configured == id,
        (Some(_), _) => false,
        (None, Registration::PreRegistered) => false,
        (None, Registration::MetadataDocument) => {
            settings.client_metadata_url.as_deref() == Some(id)
        }
        (None, Registration::Dynamic) => true,
    }
}

/// The scope a `WWW-Authenticate` challenge names, if it names one.
fn challenged_scope(challenge: &str) -> Option<String> {
    let base = url::Url::parse("http://localhost/").ok()?;
    rmcp::transport::auth::WWWAuthenticateParams::parse(challenge, &base)
        .scope
        .filter(|s| !s.trim().is_empty())
}

/// Constant-time equality of two states.
/// Whether a callback may go on: it carries this login's state, the state
/// was not used, and it is younger than [`STATE_TTL`].
fn answerable(matches: bool, spent: bool, age: Duration) -> bool {
    matches && !spent && age <= STATE_TTL
}

fn same(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Asks the server without credentials and returns its challenge: the
/// `WWW-Authenticate` of a 401 (or of a 403 asking for more scope). First
/// as a client before 2026-07-28 starts (`initialize`), then, where that is
/// refused outright, as a 2026-07-28 client does (`server/discover`).
async fn probe(target: &Target) -> Result<Option<String>, String> {
    let client = crate::egress::client(target.allow_private)?;
    let client_info = serde_json::json!({"name": "airlock", "version": env!("CARGO_PKG_VERSION")});
    let legacy = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}
    });
    let modern = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/clientInfo": client_info}}
    });
    for (body, version) in [(legacy, None), (modern, Some("2026-07-28"))] {
        let mut request = client
            .post(&target.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(v) = version {
            request = request.header("mcp-protocol-version", v);
        }
        let response = tokio::time::timeout(super::http::TIMEOUT, request.send())
            .await
            .map_err(|_| {
                format!(
                    "`{}` did not answer within {}s",
                    target.source,
                    super::http::TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| {
                let host = url::Url::parse(&target.url)
                    .ok()
                    .and_then(|u| u.host_str().map(str::to_string))
                    .unwrap_or_default();
                format!(
                    "cannot reach `{}`: {}",
                    target.source,
                    super::http::reach_error(&host, &e)
                )
            })?;
        let status = response.status().as_u16();
        if status == 401 || status == 403 {
            return Ok(response
                .headers()
                .get_all(http::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find(|v| v.trim_start().to_ascii_lowercase().starts_with("bearer"))
                .map(str::to_string));
        }
        if (200..300).contains(&status) {
            break;
        }
    }
    // It lets a request through (and may ask only when a tool is called),
    // or refuses both without a challenge: discovery goes by the
    // well-known paths.
    Ok(None)
}

/// An OAuth failure in airlock's words. What the provider wrote is never
/// shown: only its status and error code, or why it could not be reached.
pub(crate) fn describe(e: &AuthError, http: &EgressOAuthHttp, stage: &str) -> String {
    use AuthError as E;
    let fact = http
        .last_failure()
        .map(|f| f.to_string())
        .unwrap_or_else(|| "no usable answer came back".into());
    match e {
        E::PkceUnsupported => {
            "the authorization server does not offer PKCE with S256; airlock does not log in without it".into()
        }
        E::AuthorizationServerMismatch {
            expected_issuer,
            received_issuer,
        } => format!(
            "{stage}: the authorization server is named {received_issuer}, not {expected_issuer}: refused (a mix-up attack looks like this)"
        ),
        E::AuthorizationServerMissingIssuer { expected_issuer } => format!(
            "{stage}: the authorization server did not name itself where it must (its issuer {expected_issuer}): refused"
        ),
        E::ProtectedResourceMetadataInvalid { url, reason } => {
            format!("the protected resource metadata at {url} is unusable: {reason}")
        }
        E::AuthorizationServersUnavailable {
            resource_metadata_url,
            ..
        } => match http.last_failure() {
            Some(f) => format!(
                "none of the authorization servers named at {resource_metadata_url} published usable metadata ({f})"
            ),
            // No request failed: what they answered was unusable, or no
            // request was made (an address refused before asking: a
            // private or cloud metadata one).
            None => format!(
                "no authorization server named at {resource_metadata_url} is usable: what they published cannot be used, or they are at addresses airlock refuses to reach"
            ),
        },
        E::DiscoveryRequestFailed { url, .. } => {
            format!("discovery failed at {url}: {fact}")
        }
        E::MetadataError(_) => format!("{stage} failed: the metadata was not usable ({fact})"),
        E::NoAuthorizationSupport => "the server does not say how to authorize".into(),
        E::CredentialStoreError(why) => format!("the secret store failed: {why}"),
        _ => format!("{stage} failed: {fact}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_state_is_good_once_and_for_five_minutes() {
        let second = Duration::from_secs(1);
        assert_eq!(STATE_TTL, Duration::from_secs(300));
        assert!(answerable(true, false, Duration::ZERO));
        assert!(answerable(true, false, STATE_TTL - second));
        assert!(answerable(true, false, STATE_TTL));
        // Late, used, or another state: the one uniform refusal.
        assert!(!answerable(true, false, STATE_TTL + second));
        assert!(!answerable(true, true, second));
        assert!(!answerable(false, false, second));
    }

    #[test]
    fn states_are_compared_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        assert!(!same("", "a"));
    }
}
