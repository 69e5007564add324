//! Streamable HTTP at `/mcp`, on loopback unless a person allows otherwise.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::auth::{ClientToken, require_token};
use crate::{Hub, Session};

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "refusing to serve on {0}: it is not a loopback address, so other machines could reach the hub. \
         Bind 127.0.0.1 or [::1], or set `allow_non_loopback = true` under [hub] if you mean it"
    )]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A bound listener, ready to serve.
pub struct HttpFace {
    listener: tokio::net::TcpListener,
    pub addr: SocketAddr,
}

impl HttpFace {
    pub async fn bind(hub: &Hub, addr: SocketAddr) -> Result<HttpFace, BindError> {
        if !addr.ip().is_loopback() && !hub.settings().allow_non_loopback {
            return Err(BindError::NotLoopback(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| BindError::Listen { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| BindError::Listen { addr, source })?;
        Ok(HttpFace { listener, addr })
    }

    /// Serves until the hub shuts down. Every request must carry `token`
    /// (see [`super::auth`]).
    pub async fn serve(self, hub: Arc<Hub>, token: Arc<dyn ClientToken>) -> std::io::Result<()> {
        let port = self.addr.port();
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(hub.shutdown().child_token())
            .with_max_request_body_bytes(hub.settings().max_message_bytes);
        if !hub.settings().allow_non_loopback {
            // DNS rebinding: only loopback names in Host, and a browser
            // page may only call from a loopback origin on this port.
            config = config
                .with_allowed_hosts([
                    format!("127.0.0.1:{port}"),
                    format!("localhost:{port}"),
                    format!("[::1]:{port}"),
                    "127.0.0.1".to_string(),
                    "localhost".to_string(),
                ])
                .with_allowed_origins([
                    format!("http://127.0.0.1:{port}"),
                    format!("http://localhost:{port}"),
                    format!("http://[::1]:{port}"),
                ]);
        } else {
            config = config.disable_allowed_hosts();
        }
        let factory_hub = hub.clone();
        // Sessions are a budget too: at most MAX_SESSIONS at once; one that
        // never initializes ends after INIT_TIMEOUT, an idle one after
        // IDLE_TIMEOUT (clients start a new one when told it is gone).
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.init_timeout = Some(INIT_TIMEOUT);
        sessions.session_config.keep_alive = Some(IDLE_TIMEOUT);
        let sessions = Arc::new(sessions);
        let service = StreamableHttpService::new(
            move || Ok(Session::new(factory_hub.clone())),
            sessions.clone(),
            config,
        );
        let limit = hub.settings().max_message_bytes;
        let router = axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn_with_state(limit, check_json_rpc))
            .layer(axum::middleware::from_fn_with_state(
                hub.clone(),
                end_on_delete,
            ))
            .layer(axum::middleware::from_fn_with_state(
                sessions,
                limit_sessions,
            ))
            // Outermost: nothing is parsed for a request without the token.
            .layer(axum::middleware::from_fn_with_state(token, require_token));
        // Connections with their own budgets (head timeout, a cap, no
        // Nagle): see airlock_http.
        airlock_http::serve(self.listener, router, hub.shutdown().clone()).await
    }
}

pub use airlock_http::{HEAD_TIMEOUT, MAX_CONNECTIONS};

/// Sessions one HTTP face holds at once.
pub const MAX_SESSIONS: usize = 256;
const INIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// A client that ends its session with `DELETE` is gone: its calls stop at
/// once (the SDK would let them run a few seconds more while it drains).
/// Only a request that got past the token check gets here.
async fn end_on_delete(
    axum::extract::State(hub): axum::extract::State<Arc<Hub>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let ends = (request.method() == axum::http::Method::DELETE)
        .then(|| request.headers().get("mcp-session-id"))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let response = next.run(request).await;
    // Only a DELETE the SDK accepted ends a session.
    if let Some(id) = ends
        && response.status().is_success()
    {
        hub.clients.ended(&id);
    }
    response
}

/// Refuses a request that would open a new session (no `Mcp-Session-Id`)
/// while MAX_SESSIONS are open, with 503 and a JSON-RPC error.
async fn limit_sessions(
    axum::extract::State(sessions): axum::extract::State<Arc<LocalSessionManager>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let opens = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if opens && sessions.sessions.read().await.len() >= MAX_SESSIONS {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000,
            "message": format!("airlock: {MAX_SESSIONS} sessions are open, the most this hub keeps; close one or retry later")}});
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(body),
        )
            .into_response();
    }
    next.run(request).await
}

/// Answers a POST body that is not JSON (`-32700`) or not a JSON-RPC
/// message (`-32600`) with a JSON-RPC error, as JSON-RPC asks, instead of
/// the SDK's plain-text 415; everything else passes through untouched.
async fn check_json_rpc(
    axum::extract::State(limit): axum::extract::State<usize>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode};
    use axum::response::IntoResponse;
    use serde_json::{Value, json};

    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let error = |status: StatusCode, id: Value, code: i64, message: String| {
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        (status, axum::Json(body)).into_response()
    };
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                -32600,
                format!("the request exceeds the limit of {limit} bytes (hub.max_message_bytes)"),
            );
        }
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                format!("parse error: {e}"),
            );
        }
        Ok(Value::Object(m)) => {
            let id = m.get("id").cloned().unwrap_or(Value::Null);
            let version_ok = m.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
            let kind_ok = m.get("method").is_some_and(Value::is_string)
                || m.contains_key("result")
                || m.contains_key("error");
            if !version_ok || !kind_ok {
                return error(
                    StatusCode::BAD_REQUEST,
                    id,
                    -32600,
                    "invalid request: a JSON-RPC 2.0 message needs \"jsonrpc\": \"2.0\" and a string \"method\" (or a result or error)".into(),
                );
            }
        }
        // Arrays and other shapes are the SDK's to judge.
        Ok(_) => {}
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}
