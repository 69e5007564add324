//! `airlock serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use airlock_gateway::Hub;
use airlock_gateway::faces::{http::HttpFace, stdio};
use airlock_store::{SqliteStore, Store};

use crate::home;

pub fn run(config: Option<PathBuf>, http: Option<SocketAddr>) -> anyhow::Result<ExitCode> {
    // stdout belongs to the MCP client on stdio; every log goes to stderr.
    let default_level = if http.is_some() {
        "info"
    } else {
        "warn,rmcp=error"
    };
    let logs = crate::logging::init(default_level);

    let config_path = config;
    let (config, origin) = home::load_config(config_path.as_deref())?;
    let data_dir = home::data_dir()?;
    let sqlite = SqliteStore::open_in(&data_dir)?;
    let database = sqlite.path().to_path_buf();
    let store: Arc<dyn Store> = sqlite;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let connect_timeout = config.hub.connect_timeout;
        let sources = config.sources.len();
        let secrets = home::hub_secrets()?;
        logs.attach(secrets.clone());
        let hub = Hub::start(config, store.clone(), secrets);
        crate::channels::attach(&hub, database, store).await?;
        tokio::spawn(stop_on_signal(hub.clone()));
        tokio::spawn(reload_on_hangup(hub.clone(), config_path));
        let control = airlock_gateway::control::socket_path(&data_dir);
        let control_hub = hub.clone();
        tokio::spawn(async move {
            if let Err(e) = airlock_gateway::control::listen(control_hub, control).await {
                tracing::error!(error = %e, "cannot open the control socket; approvals will only be seen when calls time out");
            }
        });
        match http {
            Some(addr) => {
                // Before the port opens, so a client that sees it can read the token.
                let token = crate::token::load_or_create(&data_dir)?;
                let face = HttpFace::bind(&hub, addr).await?;
                eprintln!(
                    "airlock: serving Streamable HTTP at http://{}/mcp with {origin}; {sources} source(s) starting; data in {}\n\
                     airlock: clients must send `Authorization: Bearer <token>`; the token is in {} (`airlock token` prints it)",
                    face.addr,
                    data_dir.display(),
                    crate::token::path(&data_dir).display()
                );
                let token = Arc::new(crate::token::TokenFile::new(&data_dir, token));
                hub.settled(connect_timeout).await;
                report_sources(&hub);
                face.serve(hub.clone(), token).await?;
            }
            None => {
                // Let sources finish their first attempt so the client's
                // first tools/list is complete.
                hub.settled(connect_timeout).await;
                report_sources(&hub);
                stdio::serve(hub.clone()).await?;
            }
        }
        hub.stop().await;
        Ok(ExitCode::SUCCESS)
    })
}

fn report_sources(hub: &Hub) {
    for s in hub.sources() {
        let state = s.state();
        match state.label() {
            "ready" => tracing::info!(
                source = s.name(),
                tools = s.snapshot().tools.len(),
                "source ready"
            ),
            _ => {
                tracing::warn!(source = s.name(), state = state.label(), detail = %state.detail(), "source not ready")
            }
        }
    }
}

async fn stop_on_signal(hub: Arc<Hub>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return,
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("stopping");
    hub.shutdown().cancel();
}

/// SIGHUP re-reads the config and the managed policy file. A file that no
/// longer loads changes nothing: the last good policy stays, and says so.
async fn reload_on_hangup(hub: Arc<Hub>, config_path: Option<std::path::PathBuf>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            match home::load_config(config_path.as_deref()) {
                Ok((config, origin)) => {
                    for note in hub.reload_policy(&config) {
                        tracing::warn!("{note}");
                    }
                    tracing::info!(
                        rules = config.all_rules().count(),
                        "policy reloaded from {origin}"
                    );
                }
                Err(e) => {
                    tracing::error!("policy reload FAILED; keeping the last good policy: {e:#}");
                    eprintln!(
                        "airlock: policy reload FAILED; the last good policy stays in force.\n{e:#}"
                    );
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (hub, config_path);
}
