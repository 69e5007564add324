//! Approval latency and the cost of waiting: how long from a person's
//! decision to the call's answer, and what 1,000 waiting calls cost the hub.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_channels::Desk;
use airlock_store::ledger::Choice;
use airlock_store::{SqliteStore, Store};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use crate::bin;

pub struct ApprovalReport {
    pub decision_to_answer_p50_ms: f64,
    pub decision_to_answer_p99_ms: f64,
    pub samples: usize,
    pub waiting: usize,
    pub cpu_percent_while_waiting: f64,
    pub rss_mib_while_waiting: f64,
}

fn config(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("approvals.toml");
    std::fs::write(
        &path,
        format!(
            "[hub]\napproval_wait = \"10m\"\napproval_ttl = \"11m\"\n\n[sources.echo0]\ncommand = \"{}\"\n\n[[rules]]\naction = \"ask\"\nsource = \"*\"\n",
            bin("bench-echo").display()
        ),
    )?;
    crate::review(&path, &dir.join("home"))?;
    Ok(path)
}

fn echo() -> CallToolRequestParams {
    CallToolRequestParams::new("echo0__echo").with_arguments(
        serde_json::json!({"text": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

async fn wait_pending(store: &SqliteStore, n: usize) -> anyhow::Result<Vec<String>> {
    for _ in 0..6000 {
        let rows = store.ledger_list(false)?;
        if rows.len() >= n {
            return Ok(rows.into_iter().map(|r| r.id).collect());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    anyhow::bail!("{n} approvals never appeared")
}

/// CPU ticks (user + system) of a process, from /proc.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

pub async fn run(dir: &Path, samples: usize, waiting: usize) -> anyhow::Result<ApprovalReport> {
    let config = config(dir)?;
    let home = dir.join("home");
    let store = SqliteStore::open_in(&home)?;
    let mut cmd = tokio::process::Command::new(bin("airlock"));
    cmd.args(["serve", "--config"])
        .arg(&config)
        .env("AIRLOCK_HOME", &home)
        .env("AIRLOCK_NO_BROWSER", "1")
        .env("AIRLOCK_LOG", "error")
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let transport = TokioChildProcess::new(cmd)?;
    let pid = transport.id();
    let client = Arc::new(().serve(transport).await?);
    // A second hub on the same data directory (another desktop client's),
    // idle: every decision is told to both, and only the first has the call.
    let mut neighbour = tokio::process::Command::new(bin("airlock"));
    neighbour
        .args(["serve", "--config"])
        .arg(&config)
        .env("AIRLOCK_HOME", &home)
        .env("AIRLOCK_NO_BROWSER", "1")
        .env("AIRLOCK_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let _neighbour = neighbour.spawn()?;
    let hubs = home.join("hubs");
    for _ in 0..200 {
        if std::fs::read_dir(&hubs).map(|d| d.count()).unwrap_or(0) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let desk = {
        let home = home.clone();
        Desk::new(
            airlock_channels::desk::Ledger::Sqlite(store.path().to_path_buf()),
            airlock_gateway::hub::principal(),
            Box::new(move |id| {
                airlock_gateway::control::notify(&home, id, None);
            }),
        )
    };

    // Decision → answer, one call at a time.
    let mut lat = Vec::new();
    for _ in 0..samples {
        let c = client.clone();
        let call = tokio::spawn(async move { c.call_tool(echo()).await });
        let ids = wait_pending(&store, 1).await?;
        let t = Instant::now();
        desk.decide(&ids[0], Choice::AllowOnce, "bench")?;
        call.await??;
        lat.push(t.elapsed());
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;

    // Many calls waiting at once: the hub should sit idle.
    let calls: Vec<_> = (0..waiting)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.call_tool(echo()).await })
        })
        .collect();
    wait_pending(&store, waiting).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu, rss) = match pid {
        Some(pid) => {
            let before = cpu_ticks(pid).unwrap_or(0);
            let t = Instant::now();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let ticks = cpu_ticks(pid).unwrap_or(0).saturating_sub(before);
            // Linux reports in clock ticks of 1/100 s.
            let cpu = ticks as f64 / 100.0 / t.elapsed().as_secs_f64() * 100.0;
            let rss = crate::rss_mib(pid).map(|(_, now)| now).unwrap_or(0.0);
            (cpu, rss)
        }
        None => (0.0, 0.0),
    };
    for c in calls {
        c.abort();
    }
    Ok(ApprovalReport {
        decision_to_answer_p50_ms: pct(0.5),
        decision_to_answer_p99_ms: pct(0.99),
        samples,
        waiting,
        cpu_percent_while_waiting: cpu,
        rss_mib_while_waiting: rss,
    })
}
