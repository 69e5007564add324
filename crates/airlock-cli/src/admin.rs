//! The admin listener: `GET /metrics` in Prometheus text, on its own
//! address (loopback unless the config allows otherwise), apart from the
//! MCP face. It serves counts and states only (see `docs/metrics.md`);
//! nothing is pushed anywhere.

use std::net::SocketAddr;
use std::sync::Arc;

use airlock_gateway::Hub;
use airlock_metrics::Metrics;
use airlock_store::Store;

/// Binds `addr` and serves `/metrics` until the hub stops.
pub async fn serve(
    addr: SocketAddr,
    hub: &Arc<Hub>,
    metrics: Arc<Metrics>,
    store: Arc<dyn Store>,
) -> anyhow::Result<SocketAddr> {
    if !addr.ip().is_loopback() && !hub.settings().allow_non_loopback {
        anyhow::bail!(
            "--metrics {addr} is not a loopback address; set [hub] allow_non_loopback = true to serve metrics beyond this machine"
        );
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for metrics on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let weak = Arc::downgrade(hub);
    let router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let (weak, metrics, store) = (weak.clone(), metrics.clone(), store.clone());
            async move {
                let states: Vec<&'static str> = weak
                    .upgrade()
                    .map(|hub| hub.sources().iter().map(|s| s.state().label()).collect())
                    .unwrap_or_default();
                let pending = tokio::task::spawn_blocking(move || store.ledger_list(false))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|rows| rows.len());
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    metrics.render(pending, states),
                )
            }
        }),
    );
    tokio::spawn(airlock_http::serve(
        listener,
        router,
        hub.shutdown().child_token(),
    ));
    Ok(bound)
}
