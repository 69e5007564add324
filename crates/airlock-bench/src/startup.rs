//! A first start with many sources, one of which never answers: how long
//! a client waits for `initialize` and for its first `tools/list`.
//!
//! The baseline is the same ten echo servers started directly, in
//! parallel, each initialized and listed by its own client: the time a
//! client would need without airlock. airlock is timed from its launch to
//! the answer of `initialize`, then to the answer of the first
//! `tools/list`, with ten healthy sources and with nine healthy and one
//! (`sleep`) that starts but never speaks MCP.

use std::path::Path;
use std::time::Instant;

use tokio::process::Command;

use crate::{airlock, bin, review, review_but_one, stdio_client};

pub(crate) const SOURCES: usize = 10;

pub(crate) struct Row {
    pub label: &'static str,
    /// Median time to the answer of `initialize`, ms.
    pub initialize_ms: f64,
    /// Median time to the answer of the first `tools/list`, ms.
    pub first_list_ms: f64,
    /// Tools the first `tools/list` held (in the last run).
    pub tools: usize,
}

pub(crate) async fn run(dir: &Path, runs: usize) -> anyhow::Result<Vec<Row>> {
    let healthy = config(dir, "healthy", false)?;
    let hanging = config(dir, "hanging", true)?;
    let mut direct = Samples::default();
    let mut all = Samples::default();
    let mut one_hangs = Samples::default();
    for _ in 0..runs {
        direct.push(directly().await?);
        all.push(through(dir, &healthy).await?);
        one_hangs.push(through(dir, &hanging).await?);
    }
    Ok(vec![
        direct.row("10 echo servers started directly, in parallel (baseline)"),
        all.row("airlock, 10 echo sources"),
        one_hangs.row("airlock, 9 echo sources and 1 that never answers"),
    ])
}

#[derive(Default)]
struct Samples {
    initialize: Vec<f64>,
    first_list: Vec<f64>,
    tools: usize,
}

impl Samples {
    fn push(&mut self, (initialize, first_list, tools): (f64, f64, usize)) {
        self.initialize.push(initialize);
        self.first_list.push(first_list);
        self.tools = tools;
    }

    fn row(mut self, label: &'static str) -> Row {
        Row {
            label,
            initialize_ms: median(&mut self.initialize),
            first_list_ms: median(&mut self.first_list),
            tools: self.tools,
        }
    }
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Ten echo servers, each with its own client: the slowest one's
/// `initialize`, then the slowest one's list.
async fn directly() -> anyhow::Result<(f64, f64, usize)> {
    let t = Instant::now();
    let clients = futures::future::try_join_all((0..SOURCES).map(|_| async {
        Ok::<_, anyhow::Error>(stdio_client(Command::new(bin("bench-echo"))).await?.0)
    }))
    .await?;
    let initialize = ms(t);
    let lists = futures::future::try_join_all(clients.iter().map(|c| c.list_all_tools())).await?;
    let first_list = ms(t);
    for c in clients {
        c.cancel().await?;
    }
    Ok((initialize, first_list, lists.iter().map(Vec::len).sum()))
}

async fn through(dir: &Path, config: &Path) -> anyhow::Result<(f64, f64, usize)> {
    let home = dir.join("home-startup");
    let t = Instant::now();
    let (client, _) = stdio_client(airlock(
        &home,
        &["serve", "--config", &config.to_string_lossy()],
    ))
    .await?;
    let initialize = ms(t);
    let tools = client.list_all_tools().await?;
    let first_list = ms(t);
    client.cancel().await?;
    Ok((initialize, first_list, tools.len()))
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// A reviewed config of echo sources, the last of them a process that
/// never answers when `one_hangs`. The review gives up on that one after
/// two seconds; the hub itself would wait a minute for it.
fn config(dir: &Path, name: &str, one_hangs: bool) -> anyhow::Result<std::path::PathBuf> {
    let mut sources = String::new();
    for i in 0..SOURCES {
        if one_hangs && i == SOURCES - 1 {
            sources.push_str(&format!(
                "\n[sources.silent{i}]\ncommand = \"sleep\"\nargs = [\"600\"]\n"
            ));
        } else {
            sources.push_str(&format!(
                "\n[sources.echo{i}]\ncommand = {:?}\n",
                bin("bench-echo").display().to_string()
            ));
        }
    }
    let rules = "\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n";
    let path = dir.join(format!("startup-{name}.toml"));
    std::fs::write(
        &path,
        format!("[hub]\nconnect_timeout = \"2s\"\n{rules}{sources}"),
    )?;
    let home = dir.join("home-startup");
    if one_hangs {
        review_but_one(&path, &home)?;
    } else {
        review(&path, &home)?;
    }
    std::fs::write(
        &path,
        format!("[hub]\nconnect_timeout = \"60s\"\n{rules}{sources}"),
    )?;
    Ok(path)
}

pub(crate) fn render(rows: &[Row]) -> String {
    let base = &rows[0];
    let mut out = format!(
        "\n### First start with {SOURCES} sources, one of which hangs\n\nFrom launch to the answer of `initialize`, and to the answer of the first `tools/list`, as a stdio client sees it; median of 5 starts. The baseline starts the same servers directly, each with its own client.\n\n| start | `initialize` (ms) | ratio | first `tools/list` (ms) | ratio | tools in it |\n|---|---|---|---|---|---|\n"
    );
    for row in rows {
        out.push_str(&format!(
            "| {} | {:.0} | {:.1}× | {:.0} | {:.1}× | {} |\n",
            row.label,
            row.initialize_ms,
            row.initialize_ms / base.initialize_ms,
            row.first_list_ms,
            row.first_list_ms / base.first_list_ms,
            row.tools
        ));
    }
    out
}
