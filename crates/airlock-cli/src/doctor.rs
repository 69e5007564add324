//! `airlock doctor`: checks everything a hub needs, says what is wrong and
//! how to fix it. Starts each source itself, so it works with no hub running.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use airlock_gateway::Hub;
use airlock_store::Store;

use crate::home;

pub fn run(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let mut problems = 0;
    let (config, _) = match home::load_config(config.as_deref()) {
        Ok(c) => {
            println!("ok    {}", c.1);
            c
        }
        Err(e) => {
            println!("FAIL  config: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let store: Arc<dyn Store> = match crate::store::open(&config.store) {
        Ok(s) => {
            println!("ok    store: {}", s.describe());
            s.store()
        }
        Err(e) => {
            println!("FAIL  store: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let secrets = home::hub_secrets()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let timeout = config.hub.connect_timeout;
        let hub = Hub::probe(config, store, secrets);
        crate::show::sources_settled(&hub, timeout).await;
        // What confines the sources that ask for it, once for all of them.
        let mut layers = None;
        for s in hub.sources() {
            if let Some(c) = &s.config.confine {
                let layers = layers.get_or_insert_with(crate::confine::layers);
                println!(
                    "info  source {}: confined (network {}, {} read, {} write paths) by: {layers}",
                    s.name(),
                    c.network.as_str(),
                    c.read.len(),
                    c.write.len()
                );
            }
            let state = s.state();
            if state.label() == "ready" {
                let snap = s.snapshot();
                println!(
                    "ok    source {}: protocol {}, {} tools, {} resources, {} prompts",
                    s.name(),
                    s.protocol_version().unwrap_or_default(),
                    snap.tools.len(),
                    snap.resources.len(),
                    snap.prompts.len()
                );
            } else {
                problems += 1;
                let reason = match state.reason() {
                    r if r.is_empty() => format!(
                        "it had not finished starting after {}s",
                        timeout.as_secs()
                    ),
                    r => r,
                };
                println!("FAIL  source {}: {} — {reason}", s.name(), state.label());
            }
        }
        for w in &hub.catalog().withheld {
            println!(
                "warn  source {}: `{}` is not exposed: {}",
                w.source, w.name, w.reason
            );
        }
        for (what, findings) in hub.view().withheld_for_review() {
            println!(
                "warn  {what} is not shown to clients until it is reviewed (`airlock tools review`): {}",
                findings.join("; ")
            );
        }
        hub.stop().await;
    });
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
