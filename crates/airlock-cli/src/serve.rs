//! `airlock serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use airlock_gateway::Hub;
use airlock_gateway::control::{self, Control, HubReport, SourceReport};
use airlock_gateway::faces::{http::HttpFace, stdio};
use airlock_store::Store;

use crate::home;

pub fn run(
    config: Option<PathBuf>,
    http: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
) -> anyhow::Result<ExitCode> {
    // stdout belongs to the MCP client on stdio; every log goes to stderr.
    // The SDK's own chatter (rmcp logs its message structs at info) only
    // when asked for with AIRLOCK_LOG.
    let default_level = if http.is_some() {
        "info,rmcp=warn"
    } else {
        "warn,rmcp=error"
    };
    let logs = crate::logging::init(default_level);

    let config_path = config;
    let (config, origin) = home::load_config(config_path.as_deref())?;
    let data_dir = home::data_dir()?;
    let backend = crate::store::open(&config.store)?;
    // With metrics, the hub's store is measured: every audit record it
    // writes is counted, every operation timed.
    let metrics = metrics_addr.map(|_| {
        Arc::new(airlock_metrics::Metrics::new(
            config.sources.iter().map(|s| s.name.clone()),
        ))
    });
    let store: Arc<dyn Store> = match &metrics {
        Some(m) => airlock_metrics::Metered::new(backend.store(), m.clone()),
        None => backend.store(),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let connect_timeout = config.hub.connect_timeout;
        let sources = config.sources.len();
        let secrets = home::hub_secrets()?;
        logs.attach(secrets.clone());
        let hub = Hub::start(config, store.clone(), secrets);
        // This hub's own control socket, beside those of other hubs on the
        // same data directory; then what hubs that stopped left in the
        // ledger is closed (never a running hub's).
        // Without its socket and lock this hub would be invisible to the
        // others, which would then close its calls: it does not serve.
        let control = Control::bind(&data_dir, hub.instance()).map_err(|e| {
            anyhow::anyhow!(
                "cannot open this hub's control socket in {}: {e}",
                airlock_gateway::control::hubs_dir(&data_dir).display()
            )
        })?;
        let (stopped, running) = control::stopped_and_running(&data_dir);
        if let crate::store::Backend::Team(pg) = &backend {
            // Hubs beside this one that were killed are known stopped now;
            // the other replicas learn this one is alive (and recover its
            // rows should it stop beating); it recovers theirs likewise.
            pg.forget_hubs(&stopped)?;
            pg.keep_alive(hub.instance());
        }
        hub.recover_ledger(&running);
        let own = Some(control.path().to_path_buf());
        if let crate::store::Backend::Team(pg) = &backend {
            listen_for_decisions(&hub, pg)?;
        }
        if let (Some(addr), Some(metrics)) = (metrics_addr, metrics) {
            let bound = crate::admin::serve(addr, &hub, metrics, store.clone()).await?;
            eprintln!("airlock: metrics at http://{bound}/metrics");
        }
        crate::channels::attach(&hub, backend.ledger(), data_dir.clone(), store, own).await?;
        tokio::spawn(stop_on_signal(hub.clone()));
        tokio::spawn(reload_on_hangup(hub.clone(), config_path));
        let face = match http {
            // The token exists before the port opens, so a client that sees
            // the port can read it.
            Some(addr) => Some((
                crate::token::load_or_create(&data_dir)?,
                HttpFace::bind(&hub, addr).await?,
            )),
            None => None,
        };
        let face_label = face
            .as_ref()
            .map_or("stdio".to_string(), |(_, f)| format!("http://{}/mcp", f.addr));
        let report = report(hub.clone(), face_label, origin.to_string());
        tokio::spawn(control.serve(hub.clone(), report));
        // The client is answered at once; sources come up meanwhile, and
        // what became of each is logged when all have had a first try.
        let reporting = hub.clone();
        tokio::spawn(async move {
            reporting.settled(connect_timeout).await;
            report_sources(&reporting);
        });
        // However the face ends (a client that left mid-answer ends it with
        // an error), the hub stops in order: calls whose client left tell
        // their sources, then the sources stop, then the store is flushed.
        let served = match face {
            Some((token, face)) => {
                eprintln!(
                    "airlock: serving Streamable HTTP at http://{}/mcp with {origin}; {sources} source(s) starting; data in {}\n\
                     airlock: clients must send `Authorization: Bearer <token>`; the token is in {} (`airlock token` prints it)",
                    face.addr,
                    data_dir.display(),
                    crate::token::path(&data_dir).display()
                );
                let token = Arc::new(crate::token::TokenFile::new(&data_dir, token));
                face.serve(hub.clone(), token).await.map_err(anyhow::Error::from)
            }
            None => stdio::serve(hub.clone()).await,
        };
        hub.stop().await;
        served?;
        Ok(ExitCode::SUCCESS)
    })
}

/// With a team's store, a decision recorded on any replica wakes the call
/// waiting here; each time the listener (re)connects, every waiting call
/// re-reads its row, so a decision announced while it was away is not
/// missed.
fn listen_for_decisions(hub: &Arc<Hub>, pg: &airlock_store::PgStore) -> anyhow::Result<()> {
    let (deciding, catching_up) = (Arc::downgrade(hub), Arc::downgrade(hub));
    pg.listen(
        move |id| {
            if let Some(hub) = deciding.upgrade() {
                hub.wake_approval(id);
            }
        },
        move || {
            if let Some(hub) = catching_up.upgrade() {
                hub.wake_all_approvals();
            }
        },
    )?;
    Ok(())
}

/// What this hub tells `airlock status` of itself, read afresh each time.
fn report(hub: Arc<Hub>, face: String, config: String) -> Arc<dyn Fn() -> HubReport + Send + Sync> {
    let started_at_ms = airlock_common::now_ms();
    Arc::new(move || HubReport {
        pid: std::process::id(),
        instance: hub.instance().to_string(),
        started_at_ms,
        face: face.clone(),
        config: config.clone(),
        sources: hub
            .sources()
            .iter()
            .map(|s| {
                let state = s.state();
                SourceReport {
                    name: s.name().to_string(),
                    state: state.label().to_string(),
                    detail: state.detail(),
                    protocol: s.protocol_version().unwrap_or_default(),
                }
            })
            .collect(),
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
