//! The team store against the embedded one, in one run: calls per second
//! and latency through a hub on each; decision → answer across replicas
//! (the person on a third machine, only the database between them); and
//! what 10,000 pending approvals over two idle replicas cost.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_channels::Desk;
use airlock_channels::desk::Ledger;
use airlock_pgtest::{Database, HUB_ROLE, Server};
use airlock_store::ledger::Choice;
use airlock_store::{PgStore, PgTarget, Store};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use crate::bin;

const TENANT: &str = "bench";

pub struct Throughput {
    pub store: &'static str,
    pub calls_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

pub struct TeamReport {
    pub throughput: Vec<Throughput>,
    pub calls: usize,
    pub decision_p50_ms: f64,
    pub decision_p99_ms: f64,
    pub samples: usize,
    pub waiting: usize,
    pub fill_s: f64,
    /// CPU % and RSS MiB of each idle replica while they wait.
    pub replicas: Vec<(f64, f64)>,
}

fn write_config(
    dir: &Path,
    name: &str,
    store: Option<&Database>,
    action: &str,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let store = store
        .map(|db| {
            format!(
                "[store]\nurl = \"{}\"\ntenant = \"{TENANT}\"\n\n",
                db.hub_url()
            )
        })
        .unwrap_or_default();
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[hub]\napproval_wait = \"10m\"\napproval_ttl = \"11m\"\n\n{store}[sources.echo0]\ncommand = \"{}\"\n\n[[rules]]\naction = \"{action}\"\nsource = \"*\"\n",
            bin("bench-echo").display()
        ),
    )?;
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

type Client = Arc<rmcp::service::RunningService<rmcp::RoleClient, ()>>;

/// `airlock serve` on stdio with `config` and data directory `home`.
async fn hub(config: &Path, home: &Path) -> anyhow::Result<(Client, u32)> {
    let mut cmd = tokio::process::Command::new(bin("airlock"));
    cmd.args(["serve", "--config"])
        .arg(config)
        .env("AIRLOCK_HOME", home)
        .env("AIRLOCK_NO_BROWSER", "1")
        .env("AIRLOCK_LOG", "error")
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let transport = TokioChildProcess::new(cmd)?;
    let pid = transport.id().unwrap_or(0);
    Ok((Arc::new(().serve(transport).await?), pid))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

async fn throughput(
    store: &'static str,
    client: &Client,
    calls: usize,
) -> anyhow::Result<Throughput> {
    for _ in 0..50 {
        client.call_tool(echo()).await?;
    }
    let mut lat = Vec::with_capacity(calls);
    let start = Instant::now();
    for _ in 0..calls {
        let t = Instant::now();
        client.call_tool(echo()).await?;
        lat.push(t.elapsed());
    }
    let elapsed = start.elapsed().as_secs_f64();
    lat.sort();
    Ok(Throughput {
        store,
        calls_per_s: calls as f64 / elapsed,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
    })
}

async fn wait_pending(store: &PgStore, n: usize) -> anyhow::Result<Vec<String>> {
    for _ in 0..12_000 {
        let rows = store.ledger_list(false)?;
        if rows.len() >= n {
            return Ok(rows.into_iter().map(|r| r.id).collect());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("{n} approvals never appeared")
}

async fn idle_cost(pid: u32) -> (f64, f64) {
    let before = crate::approvals::cpu_ticks(pid).unwrap_or(0);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ticks = crate::approvals::cpu_ticks(pid)
        .unwrap_or(0)
        .saturating_sub(before);
    let cpu = ticks as f64 / 100.0 / t.elapsed().as_secs_f64() * 100.0;
    let rss = crate::rss_mib(pid).map(|(_, now)| now).unwrap_or(0.0);
    (cpu, rss)
}

pub async fn run(
    dir: &Path,
    calls: usize,
    samples: usize,
    waiting: usize,
) -> anyhow::Result<TeamReport> {
    let db = Server::shared().database();
    PgStore::migrate(&db.admin_url(), None, HUB_ROLE, TENANT)?;

    // Calls through one hub on each store, allowed by policy.
    let mut rows = Vec::new();
    for (label, store) in [("embedded SQLite", None), ("PostgreSQL", Some(&db))] {
        let home = dir.join(format!("home-{}", rows.len()));
        let config = write_config(dir, &format!("allow-{}.toml", rows.len()), store, "allow")?;
        crate::review(&config, &home)?;
        let (client, _) = hub(&config, &home).await?;
        rows.push(throughput(label, &client, calls).await?);
    }

    // Two replicas of one tenant asking; decisions from a third machine.
    let ask = write_config(dir, "ask.toml", Some(&db), "ask")?;
    crate::review(&ask, &dir.join("replica-a"))?;
    let (a, pid_a) = hub(&ask, &dir.join("replica-a")).await?;
    let (b, pid_b) = hub(&ask, &dir.join("replica-b")).await?;
    let pg = PgStore::open(PgTarget {
        url: db.hub_url(),
        password: None,
        tenant: TENANT.into(),
    })?;
    let desk = Desk::new(
        Ledger::Postgres(pg.clone()),
        airlock_gateway::hub::principal(),
        Box::new(|_| {}),
    );
    let mut lat = Vec::new();
    for i in 0..samples {
        let c = if i % 2 == 0 { a.clone() } else { b.clone() };
        let call = tokio::spawn(async move { c.call_tool(echo()).await });
        let ids = wait_pending(&pg, 1).await?;
        let t = Instant::now();
        desk.decide(&ids[0], Choice::AllowOnce, "bench")?;
        call.await??;
        lat.push(t.elapsed());
    }
    lat.sort();

    // Many pending approvals over both replicas, the hubs idle.
    let started = Instant::now();
    let calls_waiting: Vec<_> = (0..waiting)
        .map(|i| {
            let c = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { c.call_tool(echo()).await })
        })
        .collect();
    wait_pending(&pg, waiting).await?;
    let fill_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let replicas = vec![idle_cost(pid_a).await, idle_cost(pid_b).await];
    for c in calls_waiting {
        c.abort();
    }
    Ok(TeamReport {
        throughput: rows,
        calls,
        decision_p50_ms: percentile(&lat, 0.5),
        decision_p99_ms: percentile(&lat, 0.99),
        samples,
        waiting,
        fill_s,
        replicas,
    })
}

pub fn render(r: &TeamReport) -> String {
    let base = r.throughput[0].calls_per_s;
    let mut out = format!(
        "### Team store\n\nOne client, {} sequential calls of an allowed echo through a hub on each store (the store is on the path: the decision is committed to the audit log before the call runs); PostgreSQL is a local server on loopback.\n\n| store | calls/s | ratio | p50 | p99 |\n| --- | ---: | ---: | ---: | ---: |\n",
        r.calls
    );
    for t in &r.throughput {
        out.push_str(&format!(
            "| {} | {:.0} | {:.2}× | {:.2} ms | {:.2} ms |\n",
            t.store,
            t.calls_per_s,
            t.calls_per_s / base,
            t.p50_ms,
            t.p99_ms
        ));
    }
    out.push_str(&format!(
        "\nTwo replicas of one tenant, a person deciding from a third process with only the database between them ({} approvals, alternating replicas), then {} calls waiting at once over both.\n\n| measure | value | target | |\n| --- | ---: | ---: | --- |\n| decision → answer across replicas, p50 | {:.2} ms | ≤ 50 ms | {} |\n| decision → answer across replicas, p99 | {:.2} ms | | |\n| time to have {} approvals pending | {:.1} s | | |\n",
        r.samples,
        r.waiting,
        r.decision_p50_ms,
        if r.decision_p50_ms <= 50.0 { "met" } else { "missed" },
        r.decision_p99_ms,
        r.waiting,
        r.fill_s,
    ));
    for (i, (cpu, rss)) in r.replicas.iter().enumerate() {
        out.push_str(&format!(
            "| replica {} with {} waiting: CPU, RSS | {:.1} %, {:.1} MiB | idle | |\n",
            i + 1,
            r.waiting / 2,
            cpu,
            rss
        ));
    }
    out
}
