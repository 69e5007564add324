//! `airlock-oauth-fixture`: an OAuth 2.1 authorization server and an MCP
//! protected resource in one process, so tests can take the real airlock
//! binary through discovery, dynamic client registration, PKCE, refresh
//! token rotation and revocation against a server they control.
//!
//! It binds 127.0.0.1 on a free port, prints one line (`http://127.0.0.1:PORT`)
//! and serves until killed or until stdin closes. `/authorize` approves at
//! once (no login page) but checks what a strict server checks; `/mcp` runs
//! `whoami` and `admin` (which needs the `admin` scope) for a live bearer
//! token; `GET /log` tells what it was asked (and how many bearer tokens it
//! refused), never a token's value.
//! `OAUTH_NO_S256=1` offers only `plain` PKCE; `OAUTH_EXPIRES_IN=N` sets the
//! access tokens' lifetime in seconds (default 3600); `OAUTH_NO_REVOKE=1`
//! leaves the revocation endpoint out of the metadata;
//! `OAUTH_AUTHORIZATION_SERVER=URL` names another authorization server in
//! the resource metadata.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Form, Query, State as Ext};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2025-11-25"];

type Shared = Arc<Mutex<State>>;
type Params = HashMap<String, String>;

#[derive(Default)]
struct Config {
    no_s256: bool,
    no_revoke: bool,
    expires_in: u32,
    /// `OAUTH_AUTHORIZATION_SERVER`: the authorization server the resource
    /// metadata names instead of this one (a hostile resource's choice).
    authorization_server: Option<String>,
}

impl Config {
    fn from_env() -> Self {
        let on = |key| std::env::var(key).is_ok_and(|v| v == "1");
        let expires_in = std::env::var("OAUTH_EXPIRES_IN")
            .ok()
            .and_then(|v| v.parse().ok());
        Config {
            no_s256: on("OAUTH_NO_S256"),
            no_revoke: on("OAUTH_NO_REVOKE"),
            expires_in: expires_in.unwrap_or(3600),
            authorization_server: std::env::var("OAUTH_AUTHORIZATION_SERVER").ok(),
        }
    }
}

struct Client {
    secret: String,
    auth_method: String,
    redirect_uris: Vec<String>,
}

/// An authorization code; `used` once redeemed.
struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    method: String,
    scope: String,
    used: bool,
}

/// An access or refresh token. `n` is its sequence number (what the log
/// names an access token by); `rotated` marks a refresh token already
/// exchanged for a new one; only access tokens expire.
struct Token {
    refresh: bool,
    n: u64,
    client_id: String,
    scope: String,
    expires: Instant,
    revoked: bool,
    rotated: bool,
}

#[derive(Default, serde::Serialize)]
struct Log {
    token_requests: Vec<Value>,
    revocations: Vec<Value>,
    refresh_reuse: u64,
    mcp: Vec<Value>,
    /// Requests whose bearer token was refused (unknown, expired, revoked).
    refused_bearers: u64,
    authorize: Vec<Value>,
    registrations: u64,
}

#[derive(Default)]
struct State {
    base: String,
    config: Config,
    counters: HashMap<&'static str, u64>,
    clients: HashMap<String, Client>,
    codes: HashMap<String, Code>,
    tokens: HashMap<String, Token>,
    log: Log,
}

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn next(&mut self, prefix: &'static str) -> u64 {
        let n = self.counters.entry(prefix).or_default();
        *n += 1;
        *n
    }

    /// A fresh value `prefix-N-nanos`, and its N.
    fn fresh(&mut self, prefix: &'static str) -> (u64, String) {
        let n = self.next(prefix);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        (n, format!("{prefix}-{n}-{nanos}"))
    }

    /// Issues an access and a refresh token: the token endpoint's answer.
    fn issue(&mut self, client_id: &str, scope: &str) -> Value {
        let (n, at) = self.fresh("at");
        let (m, rt) = self.fresh("rt");
        let expires = Instant::now() + Duration::from_secs(self.config.expires_in.into());
        let token = |refresh, n| Token {
            refresh,
            n,
            client_id: client_id.to_string(),
            scope: scope.to_string(),
            expires,
            revoked: false,
            rotated: false,
        };
        self.tokens.insert(at.clone(), token(false, n));
        self.tokens.insert(rt.clone(), token(true, m));
        json!({"access_token": at, "token_type": "Bearer", "expires_in": self.config.expires_in,
               "refresh_token": rt, "scope": scope})
    }

    /// The access token `token`, if issued, not revoked and not expired.
    fn live(&self, token: &str) -> Option<&Token> {
        let t = self.tokens.get(token)?;
        (!t.refresh && !t.revoked && Instant::now() < t.expires).then_some(t)
    }

    /// Checks an authorization request and records its code: the redirect target.
    fn authorize(&mut self, q: &Params) -> Result<String, &'static str> {
        let p = |key: &str| q.get(key).map(String::as_str);
        let client = p("client_id")
            .and_then(|id| self.clients.get(id))
            .ok_or("unknown client_id")?;
        let redirect_uri = p("redirect_uri")
            .filter(|u| client.redirect_uris.iter().any(|r| r == u))
            .ok_or("redirect_uri is not one registered for this client")?;
        if p("response_type") != Some("code") {
            return Err("response_type must be code");
        }
        let challenge = p("code_challenge")
            .filter(|c| !c.is_empty())
            .ok_or("code_challenge is required")?;
        let method = p("code_challenge_method").unwrap_or("plain");
        if method != "S256" && !(method == "plain" && self.config.no_s256) {
            return Err("code_challenge_method must be S256");
        }
        let state = p("state").ok_or("state is required")?;
        let (_, code) = self.fresh("code");
        self.codes.insert(
            code.clone(),
            Code {
                client_id: p("client_id").unwrap_or_default().to_string(),
                redirect_uri: redirect_uri.to_string(),
                challenge: challenge.to_string(),
                method: method.to_string(),
                scope: p("scope").unwrap_or_default().to_string(),
                used: false,
            },
        );
        let sep = if redirect_uri.contains('?') { '&' } else { '?' };
        let (code, state, iss) = (enc(&code), enc(state), enc(&self.base));
        Ok(format!(
            "{redirect_uri}{sep}code={code}&state={state}&iss={iss}"
        ))
    }

    /// The client a token request authenticates as (HTTP Basic or form fields).
    fn client_auth(&self, headers: &HeaderMap, f: &Params) -> Option<String> {
        let basic = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()?.strip_prefix("Basic ").map(str::to_string))
            .and_then(|b| String::from_utf8(STANDARD.decode(b.trim()).ok()?).ok())
            .and_then(|s| {
                s.split_once(':')
                    .map(|(i, p)| (i.to_string(), Some(p.to_string())))
            });
        let form = || {
            f.get("client_id")
                .map(|id| (id.clone(), f.get("client_secret").cloned()))
        };
        let (id, secret) = basic.or_else(form)?;
        let client = self.clients.get(&id)?;
        let ok = match secret {
            Some(secret) => secret == client.secret,
            None => client.auth_method == "none",
        };
        ok.then_some(id)
    }

    fn redeem_code(&mut self, client_id: &str, f: &Params) -> Result<Value, &'static str> {
        let code = f
            .get("code")
            .and_then(|c| self.codes.get_mut(c))
            .ok_or("invalid_grant")?;
        let verifier = f.get("code_verifier").map_or("", String::as_str);
        if code.used
            || code.client_id != client_id
            || f.get("redirect_uri") != Some(&code.redirect_uri)
            || !pkce_ok(&code.method, &code.challenge, verifier)
        {
            return Err("invalid_grant");
        }
        code.used = true;
        let scope = code.scope.clone();
        Ok(self.issue(client_id, &scope))
    }

    /// Refresh with rotation: an already rotated token presented again is reuse.
    fn rotate(&mut self, client_id: &str, f: &Params) -> Result<Value, &'static str> {
        let rt = f
            .get("refresh_token")
            .and_then(|t| self.tokens.get_mut(t))
            .filter(|t| t.refresh)
            .ok_or("invalid_grant")?;
        if rt.client_id != client_id || rt.revoked {
            return Err("invalid_grant");
        }
        if rt.rotated {
            self.log.refresh_reuse += 1;
            return Err("invalid_grant");
        }
        rt.rotated = true;
        let scope = rt.scope.clone();
        Ok(self.issue(client_id, &scope))
    }
}

fn pkce_ok(method: &str, challenge: &str, verifier: &str) -> bool {
    match method {
        "plain" => verifier == challenge,
        _ => URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())) == challenge,
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn oauth_error(code: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": code}))).into_response()
}

async fn protected_resource(Ext(s): Ext<Shared>) -> Json<Value> {
    let s = lock(&s);
    let resource = format!("{}/mcp", s.base);
    let server = s
        .config
        .authorization_server
        .clone()
        .unwrap_or(s.base.clone());
    let scopes = ["read", "admin"];
    Json(
        json!({"resource": resource, "authorization_servers": [server], "scopes_supported": scopes}),
    )
}

async fn as_metadata(Ext(s): Ext<Shared>) -> Json<Value> {
    let s = lock(&s);
    let b = &s.base;
    let pkce = if s.config.no_s256 { "plain" } else { "S256" };
    let mut m = json!({
        "issuer": b,
        "authorization_endpoint": format!("{b}/authorize"),
        "token_endpoint": format!("{b}/token"),
        "registration_endpoint": format!("{b}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": [pkce],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "scopes_supported": ["read", "admin"],
    });
    if !s.config.no_revoke {
        m["revocation_endpoint"] = json!(format!("{b}/revoke"));
    }
    Json(m)
}

async fn register(Ext(s): Ext<Shared>, Json(mut body): Json<Value>) -> Response {
    let uris = body
        .get("redirect_uris")
        .and_then(|v| serde_json::from_value::<Vec<String>>(v.clone()).ok());
    let Some(redirect_uris) = uris.filter(|u| !u.is_empty()) else {
        return oauth_error("invalid_redirect_uri");
    };
    let auth_method = body["token_endpoint_auth_method"]
        .as_str()
        .unwrap_or("client_secret_basic")
        .to_string();
    let mut s = lock(&s);
    s.log.registrations += 1;
    let n = s.next("client");
    let (client_id, secret) = (format!("client-{n}"), format!("csecret-{n}"));
    body["client_id"] = json!(client_id);
    body["client_secret"] = json!(secret);
    body["token_endpoint_auth_method"] = json!(auth_method);
    s.clients.insert(
        client_id,
        Client {
            secret,
            auth_method,
            redirect_uris,
        },
    );
    (StatusCode::CREATED, Json(body)).into_response()
}

async fn authorize(Ext(s): Ext<Shared>, Query(q): Query<Params>) -> Response {
    let mut s = lock(&s);
    s.log
        .authorize
        .push(json!({"scope": q.get("scope"), "resource": q.get("resource")}));
    match s.authorize(&q) {
        Ok(location) => (StatusCode::FOUND, [(header::LOCATION, location)]).into_response(),
        Err(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
    }
}

async fn token(Ext(s): Ext<Shared>, headers: HeaderMap, Form(f): Form<Params>) -> Response {
    let mut s = lock(&s);
    let grant_type = f.get("grant_type").cloned();
    s.log
        .token_requests
        .push(json!({"grant_type": grant_type, "resource": f.get("resource")}));
    let Some(client_id) = s.client_auth(&headers, &f) else {
        return oauth_error("invalid_client");
    };
    let answer = match grant_type.as_deref() {
        Some("authorization_code") => s.redeem_code(&client_id, &f),
        Some("refresh_token") => s.rotate(&client_id, &f),
        _ => Err("unsupported_grant_type"),
    };
    match answer {
        Ok(v) => ([(header::CACHE_CONTROL, "no-store")], Json(v)).into_response(),
        Err(e) => oauth_error(e),
    }
}

async fn revoke(Ext(s): Ext<Shared>, Form(f): Form<Params>) -> StatusCode {
    let mut s = lock(&s);
    let kind = match f.get("token").and_then(|t| s.tokens.get_mut(t)) {
        Some(t) => {
            t.revoked = true;
            if t.refresh { "refresh" } else { "access" }
        }
        None => "unknown",
    };
    s.log
        .revocations
        .push(json!({"hint": f.get("token_type_hint"), "kind": kind}));
    StatusCode::OK
}

fn challenge(base: &str, status: StatusCode, params: &str) -> Response {
    let metadata = format!("resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    let value = match status {
        StatusCode::FORBIDDEN => format!("Bearer {params}, {metadata}"),
        _ => format!("Bearer {metadata}, {params}"),
    };
    (status, [(header::WWW_AUTHENTICATE, value)]).into_response()
}

fn tools() -> Value {
    let schema = json!({"type": "object", "properties": {}});
    json!({"tools": [
        {"name": "whoami", "description": "Say which client and scopes the token carries.", "inputSchema": schema},
        {"name": "admin", "description": "Needs the admin scope.", "inputSchema": schema},
    ]})
}

/// The `initialize` result: the client's protocol version if known, else ours.
fn initialize(params: &Value) -> Value {
    let asked = params["protocolVersion"].as_str().unwrap_or_default();
    let version = VERSIONS
        .iter()
        .find(|v| **v == asked)
        .unwrap_or(&VERSIONS[0]);
    let info = json!({"name": "oauth-fixture", "version": "1"});
    json!({"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info})
}

fn text(t: String) -> Result<Value, (i64, &'static str)> {
    Ok(json!({"content": [{"type": "text", "text": t}]}))
}

async fn mcp(Ext(s): Ext<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut guard = lock(&s);
    let s = &mut *guard;
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok()?.strip_prefix("Bearer "));
    let Some(access) = bearer.and_then(|t| s.live(t)) else {
        if bearer.is_some() {
            s.log.refused_bearers += 1;
        }
        return challenge(&s.base, StatusCode::UNAUTHORIZED, "scope=\"read\"");
    };
    let (n, client_id, scope) = (access.n, access.client_id.clone(), access.scope.clone());
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    };
    s.log.mcp.push(json!({"method": msg["method"], "token": n}));
    let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
        return StatusCode::ACCEPTED.into_response(); // a notification or a response
    };
    let result = match method {
        "initialize" => Ok(initialize(&msg["params"])),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(tools()),
        "tools/call" => match msg["params"]["name"].as_str() {
            Some("whoami") => text(format!("client={client_id} scopes={scope}")),
            Some("admin") if scope.split_whitespace().any(|s| s == "admin") => {
                text("admin ok".into())
            }
            Some("admin") => {
                let params = "error=\"insufficient_scope\", scope=\"read admin\"";
                return challenge(&s.base, StatusCode::FORBIDDEN, params);
            }
            _ => Err((-32602, "unknown tool")),
        },
        _ => Err((-32601, "method not found")),
    };
    let reply = match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    };
    let mut response = Json(reply).into_response();
    if method == "initialize" {
        response
            .headers_mut()
            .insert("mcp-session-id", HeaderValue::from_static("s-1"));
    }
    response
}

async fn log(Ext(s): Ext<Shared>) -> Json<Value> {
    Json(serde_json::to_value(&lock(&s).log).unwrap_or_default())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let state = State {
        base: base.clone(),
        config: Config::from_env(),
        ..State::default()
    };
    let prm = "/.well-known/oauth-protected-resource";
    let app = Router::new()
        .route(prm, get(protected_resource))
        .route(&format!("{prm}/mcp"), get(protected_resource))
        .route("/.well-known/oauth-authorization-server", get(as_metadata))
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/revoke", post(revoke))
        .route(
            "/mcp",
            post(mcp)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .route("/log", get(log))
        .with_state(Arc::new(Mutex::new(state)));
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{base}")?;
        out.flush()?;
    }
    // Exit when stdin closes, so a test that dies leaves no orphan behind.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    axum::serve(listener, app).await
}
