//! `airlock-demo`: the demo MCP server on stdio.

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    airlock_demo::serve_stdio().await
}
