//! What confinement costs a stdio source: the same echo upstream through
//! one hub, unconfined and confined (`network = "none"`: user and network
//! namespaces, limits, Landlock, the seccomp filter).
//!
//! - Start: `airlock serve` with one source, from spawning the hub to the
//!   source's tool listed to the client, median of runs.
//! - A call: the two sources in one hub, calls alternating on one session.

use std::path::Path;
use std::time::{Duration, Instant};

pub struct ConfineReport {
    pub runs: usize,
    pub calls: usize,
    pub plain_start_ms: f64,
    pub confined_start_ms: f64,
    pub plain_p50_us: f64,
    pub confined_p50_us: f64,
}

const CONFINE: &str = "[sources.{name}.confine]\nnetwork = \"none\"\n";

fn source(name: &str, confined: bool) -> String {
    let echo = format!("{:?}", super::bin("bench-echo").to_string_lossy());
    let mut s = format!("\n[sources.{name}]\ncommand = {echo}\n");
    if confined {
        s.push_str(&CONFINE.replace("{name}", name));
    }
    s
}

fn write(dir: &Path, name: &str, body: &str) -> anyhow::Result<std::path::PathBuf> {
    let config = dir.join(format!("bench-confine-{name}.toml"));
    std::fs::write(
        &config,
        format!("[[rules]]\naction = \"allow\"\nsource = \"*\"\n{body}"),
    )?;
    Ok(config)
}

async fn start(dir: &Path, name: &str, confined: bool, runs: usize) -> anyhow::Result<f64> {
    let home = dir.join(format!("home-confine-{name}"));
    let config = write(dir, name, &source("bench", confined))?;
    super::review(&config, &home)?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let (c, _) = super::stdio_client(super::airlock(
            &home,
            &["serve", "--config", &config.to_string_lossy()],
        ))
        .await?;
        let tools = c.list_all_tools().await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            tools.len() == 1,
            "the {name} source listed {} tools",
            tools.len()
        );
        c.cancel().await?;
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

pub async fn run(dir: &Path, runs: usize, calls: usize) -> anyhow::Result<ConfineReport> {
    let plain_start_ms = start(dir, "plain", false, runs).await?;
    let confined_start_ms = start(dir, "confined", true, runs).await?;
    let home = dir.join("home-confine-calls");
    let config = write(
        dir,
        "calls",
        &format!("{}{}", source("plain", false), source("boxed", true)),
    )?;
    super::review(&config, &home)?;
    let (client, _) = super::stdio_client(super::airlock(
        &home,
        &["serve", "--config", &config.to_string_lossy()],
    ))
    .await?;
    let (mut plain, mut boxed) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    let warmup = calls / 10;
    for i in 0..calls + warmup {
        for (tool, lat) in [("plain__echo", &mut plain), ("boxed__echo", &mut boxed)] {
            let t = Instant::now();
            let r = client.call_tool(super::exposed_echo_call(tool, i)).await?;
            anyhow::ensure!(r.is_error != Some(true), "{tool} failed: {r:?}");
            if i >= warmup {
                lat.push(t.elapsed());
            }
        }
    }
    client.cancel().await?;
    let p50 = |v: &mut Vec<Duration>| {
        v.sort();
        super::percentile(v, 0.5)
    };
    Ok(ConfineReport {
        runs,
        calls,
        plain_start_ms,
        confined_start_ms,
        plain_p50_us: p50(&mut plain),
        confined_p50_us: p50(&mut boxed),
    })
}

pub fn render(r: &ConfineReport) -> String {
    format!(
        "### A confined source\n\n\
         The echo upstream over stdio, unconfined and confined (`network = \"none\"`: namespaces, limits, Landlock, seccomp). Start: spawning `airlock serve` with the one source until its tool is listed, median of {} runs. A call: {} calls each, alternating on one session of one hub serving both.\n\n\
         | source | start ms | ratio | call p50 µs | ratio |\n| --- | ---: | ---: | ---: | ---: |\n\
         | unconfined | {:.1} | 1.00 | {:.0} | 1.00 |\n\
         | confined | {:.1} | {:.2} | {:.0} | {:.2} |\n",
        r.runs,
        r.calls,
        r.plain_start_ms,
        r.plain_p50_us,
        r.confined_start_ms,
        r.confined_start_ms / r.plain_start_ms,
        r.confined_p50_us,
        r.confined_p50_us / r.plain_p50_us,
    )
}
