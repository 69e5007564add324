//! One client on stdin/stdout: what desktop clients launch.

use std::sync::Arc;

use rmcp::ServiceExt;

use super::lines::LineTransport;
use crate::{Hub, Session};

/// Serves one client on this process's stdio until it disconnects or the
/// hub shuts down.
pub async fn serve(hub: Arc<Hub>) -> anyhow::Result<()> {
    let transport = LineTransport::new(
        tokio::io::BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
        hub.config.hub.max_message_bytes,
    );
    let running = Session::new(hub.clone())
        .serve_with_ct(transport, hub.shutdown.child_token())
        .await?;
    running.waiting().await?;
    Ok(())
}
