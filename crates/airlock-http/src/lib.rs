//! HTTP/1.1 connections of airlock's listeners (the Streamable HTTP face
//! and the approval page), served with budgets a peer cannot stretch: the
//! request head must arrive within [`HEAD_TIMEOUT`] (a connection that
//! opens and sends nothing, or sends half a head, is closed), a request
//! body may not pause for more than [`BODY_TIMEOUT`], at most
//! [`MAX_CONNECTIONS`] are open at once (one beyond is closed on accept),
//! and Nagle is off so the last chunk of each response leaves at once.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How long a client has to send a request's head, from when the server
/// starts reading it (at connect, and between keep-alive requests).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request body may go without sending anything.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once on one listener.
pub const MAX_CONNECTIONS: usize = 512;
/// How long open connections get to finish when the listener stops.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    stop: CancellationToken,
) -> std::io::Result<()> {
    // A body that stops arriving fails the request, so a peer cannot hold
    // a connection (and a handler) by sending its body slowly.
    let router = router.layer(axum::middleware::map_request(
        |request: axum::extract::Request| async move {
            request.map(|body| {
                axum::body::Body::new(tower_http::timeout::TimeoutBody::new(BODY_TIMEOUT, body))
            })
        },
    ));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut open = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.cancelled() => break,
            // Reap finished connections as we go.
            Some(_) = open.join_next(), if !open.is_empty() => continue,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: back off, do not spin.
                tracing::warn!(error = %e, "accepting an HTTP connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(
                "{MAX_CONNECTIONS} HTTP connections are open, the most one listener keeps; closing a new one"
            );
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on a client connection");
        }
        let service = TowerToHyperService::new(router.clone());
        let stop = stop.clone();
        open.spawn(async move {
            let _slot = slot;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    let _ = tokio::time::timeout(DRAIN, async { while open.join_next().await.is_some() {} }).await;
    Ok(())
}
