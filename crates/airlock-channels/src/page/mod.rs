//! The approval page: an inbox of pending calls on loopback.
//!
//! A person opens it with a one-time link (`/open/TOKEN`) that airlock opens
//! in their browser or prints; the model never sees it. Following the link
//! spends it and sets a session cookie (HttpOnly, SameSite=Strict), so a
//! reload keeps the inbox. The page lists each waiting call (tool,
//! connection, the tool's description or what changed since its review,
//! why it asks,
//! the arguments redacted and capped at 4 KB, a countdown to expiry) with
//! the four choices. A decision is a POST that must carry the session's
//! CSRF token and this page's own Origin; every request must name this
//! page's Host, so a DNS-rebinding site cannot reach it. Decisions go
//! through the [`Desk`], like every other channel. Beside the inbox, the
//! sources that wait for a person to log in, with the command to run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_common::now_ms;
use airlock_store::Store;
use airlock_store::ledger::{self, Choice, LedgerState, Recorded};
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Desk;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// How long a link may wait to be opened, and how long a page session lasts.
const LINK_TTL: Duration = Duration::from_secs(600);
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
const COOKIE: &str = "airlock_page";
/// The header a decision carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-airlock-csrf";

/// Removes known secret values from text shown on the page.
pub type Scrub = Arc<dyn Fn(&str) -> String + Send + Sync>;

pub struct ApprovalPage {
    inner: Arc<Inner>,
    listener: Mutex<Option<tokio::net::TcpListener>>,
}

struct Inner {
    addr: SocketAddr,
    store: Arc<dyn Store>,
    desk: Arc<Desk>,
    scrub: Scrub,
    /// Unopened one-time link tokens, until they lapse.
    links: Mutex<HashMap<String, Instant>>,
    /// Page sessions: cookie value → CSRF token and end.
    sessions: Mutex<HashMap<String, PageSession>>,
    /// When a page last asked for the inbox.
    last_seen: Mutex<Option<Instant>>,
}

struct PageSession {
    csrf: String,
    until: Instant,
}

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("the approval page must listen on loopback, not {0}")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

fn token() -> String {
    airlock_common::random::hex::<32>()
}

impl ApprovalPage {
    /// Listens on `addr` (loopback only; port 0 picks a free one).
    pub async fn bind(
        addr: SocketAddr,
        store: Arc<dyn Store>,
        desk: Arc<Desk>,
        scrub: Scrub,
    ) -> Result<ApprovalPage, PageError> {
        if !addr.ip().is_loopback() {
            return Err(PageError::NotLoopback(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| PageError::Bind(addr, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| PageError::Bind(addr, e))?;
        Ok(ApprovalPage {
            inner: Arc::new(Inner {
                addr,
                store,
                desk,
                scrub,
                links: Mutex::new(HashMap::new()),
                sessions: Mutex::new(HashMap::new()),
                last_seen: Mutex::new(None),
            }),
            listener: Mutex::new(Some(listener)),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Serves until `stop` is cancelled. Call once.
    pub fn serve(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let app = router(self.inner.clone());
        tokio::spawn(async move {
            let Some(listener) = listener else { return };
            // The face's budgets: a head timeout, a cap on connections, no
            // Nagle (see airlock_http).
            let served = airlock_http::serve(listener, app, stop).await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the approval page stopped");
            }
        })
    }

    /// A fresh one-time link to the page.
    pub fn link(&self) -> String {
        let t = token();
        let mut links = self.inner.links.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        links.retain(|_, until| *until > now);
        links.insert(t.clone(), now + LINK_TTL);
        format!("http://{}/open/{t}", self.inner.addr)
    }

    /// Whether a page asked for the inbox within `within`: someone is
    /// already looking, so there is no need to open another.
    pub fn in_view(&self, within: Duration) -> bool {
        self.inner
            .last_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() < within)
    }
}

fn router(inner: Arc<Inner>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/open/{token}", get(open))
        .route(
            "/app.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/app.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route("/api/pending", get(pending))
        .route("/api/arguments/{id}", get(arguments))
        .route("/api/decide", post(decide))
        .layer(DefaultBodyLimit::max(16 * 1024))
        .layer(middleware::from_fn_with_state(inner.clone(), guard))
        .with_state(inner)
}

/// Every request must be addressed to this page by name (Host), and every
/// response tells the browser to keep it to itself.
async fn guard(State(inner): State<Arc<Inner>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let mut response = if inner.own_host(host) {
        next.run(request).await
    } else {
        refuse(
            StatusCode::FORBIDDEN,
            "this page answers only to its own address",
        )
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

impl Inner {
    fn own_host(&self, host: &str) -> bool {
        let port = self.addr.port();
        host == format!("127.0.0.1:{port}")
            || host == format!("localhost:{port}")
            || host == format!("[::1]:{port}")
    }

    /// The page session a request's cookie names, still valid.
    fn session(&self, headers: &HeaderMap) -> Option<String> {
        let id = cookie(headers, COOKIE)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.until > now);
        sessions.get(&id).map(|s| s.csrf.clone())
    }
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(json!({ "error": why }))).into_response()
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

const NO_SESSION: &str = "<!doctype html><meta charset=utf-8><title>airlock</title><p>This approval page opens only from a one-time link. Run <code>airlock page</code> for a new one.</p>";

/// Spends a one-time link and starts a page session.
async fn open(State(inner): State<Arc<Inner>>, Path(t): Path<String>) -> Response {
    let valid = {
        let mut links = inner.links.lock().unwrap_or_else(|p| p.into_inner());
        links.remove(&t).is_some_and(|until| until > Instant::now())
    };
    if !valid {
        return html(
            StatusCode::FORBIDDEN,
            NO_SESSION.replace(
                "opens only from a one-time link",
                "link was already used or has expired; each link opens once",
            ),
        );
    }
    let id = token();
    inner
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            id.clone(),
            PageSession {
                csrf: token(),
                until: Instant::now() + SESSION_TTL,
            },
        );
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, "/")
        .header(
            header::SET_COOKIE,
            format!(
                "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
                SESSION_TTL.as_secs()
            ),
        )
        .body(Body::empty())
        .expect("a valid response")
}

async fn index(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    match inner.session(&headers) {
        Some(csrf) => html(StatusCode::OK, INDEX.replace("{{csrf}}", &csrf)),
        None => html(StatusCode::UNAUTHORIZED, NO_SESSION.to_string()),
    }
}

/// One waiting call as the page shows it.
#[derive(Serialize)]
struct Waiting {
    id: String,
    tool: String,
    connection: String,
    description: String,
    reason: String,
    /// Capped at [`ledger::ARGS_SHOWN`]; `arguments_bytes` says how long
    /// they are in all, and `/api/arguments/ID` gives them whole.
    arguments: String,
    arguments_bytes: usize,
    arguments_cut: bool,
    expires_in_ms: i64,
}

async fn pending(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    if inner.session(&headers).is_none() {
        return refuse(StatusCode::UNAUTHORIZED, "no page session; open a new link");
    }
    *inner.last_seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    let rows = match waiting_rows(&inner).await {
        Ok(rows) => rows,
        Err(refused) => return refused,
    };
    let now = now_ms();
    let list: Vec<Waiting> = rows
        .into_iter()
        .map(|r| {
            let whole = whole_arguments(&inner.scrub, &r.call.arguments);
            let shown = ledger::shown(&whole);
            (r, whole.len(), shown)
        })
        .map(|(r, bytes, shown)| Waiting {
            arguments_bytes: bytes,
            arguments_cut: shown.len() != bytes,
            arguments: shown,
            id: r.id,
            tool: r.call.tool,
            connection: r.call.connection,
            description: r.call.description,
            reason: r.call.reason,
            expires_in_ms: (r.expires_at_ms - now).max(0),
        })
        .collect();
    axum::Json(json!({ "pending": list, "logins": logins(&inner) })).into_response()
}

/// Sources waiting for a person to log in, with what the hub said (it
/// names the command): a person's action, shown beside the inbox. The
/// page never starts a login itself.
fn logins(inner: &Inner) -> Vec<serde_json::Value> {
    let statuses = match inner.store.source_statuses() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the sources' states for the page");
            return Vec::new();
        }
    };
    statuses
        .into_iter()
        .filter(|s| s.state != "ready" && s.detail.contains(airlock_common::LOGIN_COMMAND))
        .map(|s| json!({"source": s.source, "detail": (inner.scrub)(&s.detail)}))
        .collect()
}

/// Pretty-printed and scrubbed, whole.
fn whole_arguments(scrub: &Scrub, canonical: &str) -> String {
    let pretty = serde_json::from_str::<serde_json::Value>(canonical)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| canonical.to_string());
    scrub(&pretty)
}

/// The calls waiting for this page's person: pending rows of its principal.
async fn waiting_rows(inner: &Inner) -> Result<Vec<ledger::ApprovalRow>, Response> {
    let store = inner.store.clone();
    let rows = match tokio::task::spawn_blocking(move || store.ledger_list(false)).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => return Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())),
        Err(e) => return Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())),
    };
    let principal = inner.desk.principal();
    Ok(rows
        .into_iter()
        .filter(|r| r.state == LedgerState::Pending && r.call.principal == principal)
        .collect())
}

/// One waiting call's arguments whole, for the person who asks to see
/// more than the first 4 KB: same session, same owner, same scrubbing.
async fn arguments(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if inner.session(&headers).is_none() {
        return refuse(StatusCode::UNAUTHORIZED, "no page session; open a new link");
    }
    let rows = match waiting_rows(&inner).await {
        Ok(rows) => rows,
        Err(refused) => return refused,
    };
    match rows.into_iter().find(|r| r.id == id) {
        Some(r) => axum::Json(json!({
            "id": r.id,
            "arguments": whole_arguments(&inner.scrub, &r.call.arguments),
        }))
        .into_response(),
        None => refuse(StatusCode::NOT_FOUND, "no such waiting call"),
    }
}

#[derive(Deserialize)]
struct DecideBody {
    id: String,
    choice: String,
}

async fn decide(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: String) -> Response {
    let Some(csrf) = inner.session(&headers) else {
        return refuse(StatusCode::UNAUTHORIZED, "no page session; open a new link");
    };
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .and_then(|o| o.strip_prefix("http://"));
    if !origin.is_some_and(|o| inner.own_host(o)) {
        return refuse(
            StatusCode::FORBIDDEN,
            "a decision must come from this page (Origin)",
        );
    }
    let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    if !sent.is_some_and(|s| constant_time_eq(s.as_bytes(), csrf.as_bytes())) {
        return refuse(StatusCode::FORBIDDEN, "missing or wrong CSRF token");
    }
    let body: DecideBody = match serde_json::from_str(&body) {
        Ok(b) => b,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &format!("bad decision: {e}")),
    };
    let Some(choice) = Choice::parse(&body.choice) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            &format!(
                "unknown choice `{}`; one of {}",
                body.choice,
                Choice::ALL.map(Choice::as_str).join(", ")
            ),
        );
    };
    let desk = inner.desk.clone();
    let recorded = tokio::task::spawn_blocking(move || desk.decide(&body.id, choice, "page")).await;
    let (status, result, message) = match recorded {
        Ok(Ok(Recorded::Approved)) => (
            StatusCode::OK,
            "approved",
            "approved: the call runs as shown",
        ),
        Ok(Ok(Recorded::Denied)) => (StatusCode::OK, "denied", "declined: the call will not run"),
        Ok(Ok(Recorded::Expired)) => (
            StatusCode::GONE,
            "expired",
            "too late: this approval expired and the call did not run",
        ),
        Ok(Ok(Recorded::NotFound)) => (
            StatusCode::NOT_FOUND,
            "not found",
            "not found: no call with this id is waiting (already decided, or not yours)",
        ),
        Ok(Err(e)) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    (
        status,
        axum::Json(json!({ "result": result, "message": message })),
    )
        .into_response()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
