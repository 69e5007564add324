//! Streamable HTTP at `/mcp`, on loopback unless a person allows otherwise.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

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
        if !addr.ip().is_loopback() && !hub.config.hub.allow_non_loopback {
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

    /// Serves until the hub shuts down.
    pub async fn serve(self, hub: Arc<Hub>) -> std::io::Result<()> {
        let port = self.addr.port();
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(hub.shutdown.child_token())
            .with_max_request_body_bytes(hub.config.hub.max_message_bytes);
        if !hub.config.hub.allow_non_loopback {
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
        let service = StreamableHttpService::new(
            move || Ok(Session::new(factory_hub.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let shutdown = hub.shutdown.clone();
        axum::serve(self.listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
    }
}
