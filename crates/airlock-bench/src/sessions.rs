//! What a connection per client session costs, against sharing one.
//!
//! airlock serves HTTP with one stdio source, pinned to the legacy
//! handshake (the only kind that gets per-client connections), first with
//! `sessions = "shared"` and then `"per-client"`. `SESSIONS` clients connect
//! one after another and each makes one call; the first call of a session
//! is timed from the client's `initialize` (with per-client it starts the
//! session's own process). Memory is the proportional set size (PSS, so
//! pages the processes share are counted once) of airlock and everything
//! it runs, after every session has called, less the same before the first.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use rmcp::model::CallToolRequestParams;

use crate::{Client, airlock, free_port, http_client, review, spawn, wait_port};

pub(crate) const SESSIONS: usize = 10;

/// A stdio MCP server to measure with.
pub(crate) struct Server {
    pub label: String,
    pub command: String,
    pub args: Vec<String>,
    pub tool: &'static str,
    pub arguments: serde_json::Value,
}

pub(crate) struct Row {
    pub server: String,
    pub mode: &'static str,
    /// Median time from a new session's `initialize` to its first answer.
    pub first_call_ms: f64,
    /// Memory added per session, MiB.
    pub mib_per_session: f64,
    /// Processes airlock runs once every session has called.
    pub processes: usize,
}

pub(crate) async fn run(dir: &Path, servers: &[Server]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        for mode in ["shared", "per-client"] {
            rows.push(measure(dir, i, server, mode).await?);
        }
    }
    Ok(rows)
}

async fn measure(
    dir: &Path,
    index: usize,
    server: &Server,
    mode: &'static str,
) -> anyhow::Result<Row> {
    let home = dir.join(format!("home-sessions-{index}-{mode}"));
    let config = dir.join(format!("sessions-{index}-{mode}.toml"));
    let args: Vec<String> = server.args.iter().map(|a| format!("{a:?}")).collect();
    std::fs::write(
        &config,
        format!(
            "[hub]\ncall_timeout = \"60s\"\n\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n\n[sources.s]\ncommand = {:?}\nargs = [{}]\nprotocol = \"legacy\"\nsessions = \"{mode}\"\n",
            server.command,
            args.join(", ")
        ),
    )?;
    review(&config, &home)?;
    let port = free_port();
    let hub = spawn(&mut airlock(
        &home,
        &[
            "serve",
            "--config",
            &config.to_string_lossy(),
            "--http",
            &format!("127.0.0.1:{port}"),
        ],
    ))?;
    let pid = hub
        .id()
        .ok_or_else(|| anyhow::anyhow!("airlock has no pid"))?;
    wait_port(port).await?;
    let token = std::fs::read_to_string(home.join("http-token"))?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    // The shared connection is up once a first session lists the tool.
    let probe = http_client(&url, Some(token.trim())).await?;
    for _ in 0..600 {
        let tools = probe.list_all_tools().await?;
        if tools
            .iter()
            .any(|t| t.name == format!("s__{}", server.tool))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    probe.cancel().await?;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let before = tree_pss_mib(pid);
    let mut clients: Vec<Client> = Vec::new();
    let mut firsts = Vec::new();
    for _ in 0..SESSIONS {
        let started = Instant::now();
        let client = http_client(&url, Some(token.trim())).await?;
        let call = CallToolRequestParams::new(format!("s__{}", server.tool))
            .with_arguments(server.arguments.as_object().cloned().unwrap_or_default());
        let r = client.call_tool(call).await?;
        anyhow::ensure!(
            !r.is_error.unwrap_or(false),
            "the call failed through airlock: {r:?}"
        );
        firsts.push(started.elapsed().as_secs_f64() * 1e3);
        clients.push(client);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let after = tree_pss_mib(pid);
    let processes = descendants(pid).len();
    for client in clients {
        let _ = client.cancel().await;
    }
    drop(hub);
    firsts.sort_by(f64::total_cmp);
    Ok(Row {
        server: server.label.clone(),
        mode,
        first_call_ms: firsts[firsts.len() / 2],
        mib_per_session: (after - before).max(0.0) / SESSIONS as f64,
        processes,
    })
}

/// Every process under `pid` (Linux; empty elsewhere).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`, comm may hold spaces.
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parent_of.insert(child, ppid);
            }
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (child, parent) in &parent_of {
            if *parent == p {
                found.push(*child);
                frontier.push(*child);
            }
        }
    }
    found
}

/// PSS of `pid` and everything under it, MiB.
fn tree_pss_mib(pid: u32) -> f64 {
    std::iter::once(pid)
        .chain(descendants(pid))
        .filter_map(pss_mib)
        .sum()
}

fn pss_mib(pid: u32) -> Option<f64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
}

/// The servers to measure: the Rust echo always; the official everything
/// server when `scripts/install-peers` has put it in `.tools`.
pub(crate) fn servers(echo: &Path, tools: &Path) -> Vec<Server> {
    let mut servers = vec![Server {
        label: "Rust echo (bench-echo)".into(),
        command: echo.to_string_lossy().into_owned(),
        args: Vec::new(),
        tool: "echo",
        arguments: serde_json::json!({"text": "hello"}),
    }];
    let everything =
        tools.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if everything.exists() {
        servers.push(Server {
            label: "Node: @modelcontextprotocol/server-everything".into(),
            command: "node".into(),
            args: vec![everything.to_string_lossy().into_owned(), "stdio".into()],
            tool: "echo",
            arguments: serde_json::json!({"message": "hello"}),
        });
    }
    servers
}

pub(crate) fn render(rows: &[Row]) -> String {
    let mut out = format!(
        "\n### A connection per client session\n\nairlock on HTTP with one stdio source (legacy handshake), {SESSIONS} client sessions one after another, one call each. First call: median time from a session's `initialize` to its first answer. Memory: PSS added per session (airlock and the processes it runs), so shared pages count once.\n\n| server | `sessions` | first call (ms, p50) | ratio | MiB per session | processes |\n|---|---|---|---|---|---|\n"
    );
    for pair in rows.chunks(2) {
        let base = pair[0].first_call_ms;
        for row in pair {
            out.push_str(&format!(
                "| {} | `{}` | {:.1} | {:.1}× | {:.2} | {} |\n",
                row.server,
                row.mode,
                row.first_call_ms,
                row.first_call_ms / base,
                row.mib_per_session,
                row.processes
            ));
        }
    }
    out
}
