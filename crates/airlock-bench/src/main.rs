//! `airlock-bench`: one run that calls the same Rust echo upstream
//! directly, through airlock, and through other proxies when they are
//! installed, and prints a Markdown report with ratios against the direct
//! baseline measured in the same run.
//!
//! Run it through `scripts/bench`, which builds in release mode and writes
//! the report to `docs/benchmarks.md`.

mod approvals;
mod code;
mod confine;
mod egress;
mod keepalive;
mod messages;
mod oauth;
mod policy;
mod scrub;
mod sessions;
mod startup;
mod team;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::process::{Child, Command};

type Client = RunningService<RoleClient, ()>;

struct Options {
    calls: usize,
    warmup: usize,
    concurrent_calls: usize,
    proxies_dir: Option<PathBuf>,
    /// Only the stdio latency rows, for a quick comparison.
    only_stdio: bool,
    /// An earlier airlock build, measured beside this one in the same run.
    before: Option<PathBuf>,
}

pub(crate) fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("bench executable");
    exe.parent().expect("target dir").join(name)
}

fn echo_call(i: usize) -> CallToolRequestParams {
    CallToolRequestParams::new("echo").with_arguments(
        serde_json::json!({"text": format!("hello {i}")})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

fn exposed_echo_call(name: &str, i: usize) -> CallToolRequestParams {
    let mut p = echo_call(i);
    p.name = name.to_string().into();
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn wait_port(port: u16) -> anyhow::Result<()> {
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("nothing listens on port {port}")
}

/// Peak and current resident memory of a process, in MiB (Linux).
pub(crate) fn rss_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

struct Row {
    name: String,
    p50_us: f64,
    p99_us: f64,
    throughput: Vec<f64>,
    rss: Option<(f64, f64)>,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// One way to reach the echo tool, connected and ready.
struct Route {
    name: &'static str,
    client: Arc<Client>,
    tool: &'static str,
    /// The process whose memory is reported (the proxy or the hub).
    pid: Option<u32>,
    /// Server processes this route needs, stopped when it is dropped.
    _processes: Vec<Child>,
}

/// How many slices the sequential calls are cut into; the routes of a
/// group take turns slice by slice, so whatever else the machine does
/// falls on all of them alike.
const ROUNDS: usize = 10;

/// The same for throughput: the calls at each concurrency, in this many
/// slices per path.
const THROUGHPUT_ROUNDS: usize = 4;

/// Latency and throughput (both interleaved across the group) of every
/// route in `group`.
async fn measure(group: &[Route], opts: &Options) -> anyhow::Result<Vec<Row>> {
    for r in group {
        for i in 0..opts.warmup {
            r.client.call_tool(exposed_echo_call(r.tool, i)).await?;
        }
    }
    let mut lat = vec![Vec::with_capacity(opts.calls); group.len()];
    let per_round = (opts.calls / ROUNDS).max(1);
    for round in 0..ROUNDS {
        for (k, r) in group.iter().enumerate() {
            for i in 0..per_round {
                let t = Instant::now();
                r.client
                    .call_tool(exposed_echo_call(r.tool, round * per_round + i))
                    .await?;
                lat[k].push(t.elapsed());
            }
        }
    }
    // Throughput in rounds too: each round gives every path of the group
    // a slice of the calls in turn, and each path's rate is its calls over
    // the time its own slices took.
    let mut spent = vec![[Duration::ZERO; 3]; group.len()];
    let mut made = vec![[0usize; 3]; group.len()];
    for _ in 0..THROUGHPUT_ROUNDS {
        for (k, r) in group.iter().enumerate() {
            for (c, concurrency) in [1usize, 16, 64].into_iter().enumerate() {
                let per_task = (opts.concurrent_calls / THROUGHPUT_ROUNDS / concurrency).max(1);
                let started = Instant::now();
                let tasks = (0..concurrency).map(|_| {
                    let client = r.client.clone();
                    let tool = r.tool;
                    tokio::spawn(async move {
                        for i in 0..per_task {
                            client.call_tool(exposed_echo_call(tool, i)).await?;
                        }
                        anyhow::Ok(())
                    })
                });
                for t in futures::future::join_all(tasks).await {
                    t??;
                }
                spent[k][c] += started.elapsed();
                made[k][c] += per_task * concurrency;
            }
        }
    }
    let mut rows = Vec::new();
    for (k, (r, mut lat)) in group.iter().zip(lat).enumerate() {
        lat.sort();
        let throughput = (0..3)
            .map(|c| made[k][c] as f64 / spent[k][c].as_secs_f64())
            .collect();
        rows.push(Row {
            name: r.name.to_string(),
            p50_us: percentile(&lat, 0.5),
            p99_us: percentile(&lat, 0.99),
            throughput,
            rss: r.pid.and_then(rss_mib),
        });
    }
    Ok(rows)
}

/// A route over stdio: `cmd` is what the client launches.
async fn stdio_route(
    name: &'static str,
    cmd: Command,
    tool: &'static str,
    reported: bool,
) -> anyhow::Result<Route> {
    let (client, pid) = stdio_client(cmd).await?;
    Ok(Route {
        name,
        client: Arc::new(client),
        tool,
        pid: pid.filter(|_| reported),
        _processes: Vec::new(),
    })
}

/// A route over Streamable HTTP to `port`, served by `process`; for an
/// airlock hub, `home` is its data directory, whose client token it sends.
async fn http_route(
    name: &'static str,
    port: u16,
    process: Child,
    tool: &'static str,
    reported: bool,
    home: Option<&Path>,
) -> anyhow::Result<Route> {
    wait_port(port).await?;
    let token = home
        .map(|h| std::fs::read_to_string(h.join("http-token")))
        .transpose()?;
    let client = http_client(
        &format!("http://127.0.0.1:{port}/mcp"),
        token.as_deref().map(str::trim),
    )
    .await?;
    Ok(Route {
        name,
        client: Arc::new(client),
        tool,
        pid: process.id().filter(|_| reported),
        _processes: vec![process],
    })
}

async fn stdio_client(mut cmd: Command) -> anyhow::Result<(Client, Option<u32>)> {
    cmd.stderr(Stdio::null());
    let transport = TokioChildProcess::new(cmd)?;
    let pid = transport.id();
    let client = ().serve(transport).await?;
    Ok((client, pid))
}

async fn http_client(url: &str, token: Option<&str>) -> anyhow::Result<Client> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    Ok(
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await?,
    )
}

fn write_config(dir: &Path, sources: usize) -> anyhow::Result<PathBuf> {
    write_config_with(dir, sources, "")
}

/// The same, with `extra` lines in each source's table.
fn write_config_with(dir: &Path, sources: usize, extra: &str) -> anyhow::Result<PathBuf> {
    let mut text = String::from(
        "[hub]\ncall_timeout = \"30s\"\n\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n",
    );
    for i in 0..sources {
        text.push_str(&format!(
            "\n[sources.echo{i}]\ncommand = \"{}\"\n{extra}",
            bin("bench-echo").display()
        ));
    }
    let tag = if extra.is_empty() { "" } else { "-pinned" };
    let path = dir.join(format!("bench-{sources}{tag}.toml"));
    std::fs::write(&path, text)?;
    // A person's review, once, so calls run (policy is on the measured path).
    review(&path, &dir.join("home"))?;
    Ok(path)
}

/// `airlock tools review --approve-all`, as a person would run it once.
pub(crate) fn review(config: &Path, home: &Path) -> anyhow::Result<()> {
    review_with(&bin("airlock"), config, home)
}

fn review_with(airlock: &Path, config: &Path, home: &Path) -> anyhow::Result<()> {
    let status = review_status(airlock, config, home)?;
    anyhow::ensure!(status.success(), "airlock tools review failed");
    Ok(())
}

/// The same for a config with a source meant not to start: the review
/// pins the rest and exits 3.
pub(crate) fn review_but_one(config: &Path, home: &Path) -> anyhow::Result<()> {
    let status = review_status(&bin("airlock"), config, home)?;
    anyhow::ensure!(
        status.code() == Some(3),
        "airlock tools review: {status}, expected 3 (a source did not start)"
    );
    Ok(())
}

fn review_status(
    airlock: &Path,
    config: &Path,
    home: &Path,
) -> anyhow::Result<std::process::ExitStatus> {
    Ok(std::process::Command::new(airlock)
        .args(["tools", "review", "--approve-all", "--config"])
        .arg(config)
        .env("AIRLOCK_HOME", home)
        .env("AIRLOCK_NO_BROWSER", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?)
}

fn airlock(home: &Path, args: &[&str]) -> Command {
    airlock_at(&bin("airlock"), home, args)
}

fn airlock_at(program: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("AIRLOCK_HOME", home)
        .env("AIRLOCK_NO_BROWSER", "1")
        .env("AIRLOCK_LOG", "error")
        .stderr(Stdio::null())
        .kill_on_drop(true);
    cmd
}

fn spawn(cmd: &mut Command) -> anyhow::Result<Child> {
    Ok(cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?)
}

/// Median time to have every source started, handshaken and listed.
async fn start_to_ready(dir: &Path, sources: usize, runs: usize) -> anyhow::Result<(f64, f64)> {
    let config = write_config(dir, sources)?;
    let mut direct = Vec::new();
    let mut hub = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let clients = futures::future::try_join_all((0..sources).map(|_| async {
            let (c, _) = stdio_client(Command::new(bin("bench-echo"))).await?;
            c.list_all_tools().await?;
            anyhow::Ok(c)
        }))
        .await?;
        direct.push(t.elapsed().as_secs_f64() * 1e3);
        for c in clients {
            c.cancel().await?;
        }

        let home = dir.join("home");
        let t = Instant::now();
        let (c, _) = stdio_client(airlock(
            &home,
            &["serve", "--config", &config.to_string_lossy()],
        ))
        .await?;
        let tools = c.list_all_tools().await?;
        hub.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            tools.len() == sources,
            "airlock listed {} tools, expected {sources}",
            tools.len()
        );
        c.cancel().await?;
    }
    direct.sort_by(f64::total_cmp);
    hub.sort_by(f64::total_cmp);
    Ok((direct[runs / 2], hub[runs / 2]))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut opts = Options {
        calls: 2000,
        warmup: 200,
        concurrent_calls: 4000,
        proxies_dir: None,
        only_stdio: false,
        before: None,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--calls" => opts.calls = args[i + 1].parse()?,
            "--proxies" => opts.proxies_dir = Some(PathBuf::from(&args[i + 1])),
            "--before" => opts.before = Some(PathBuf::from(&args[i + 1])),
            "--only" if args[i + 1] == "stdio" => opts.only_stdio = true,
            "--only" if args[i + 1] == "egress" => {
                report_egress(&egress::run(2000).await?);
                return Ok(());
            }
            "--only" if args[i + 1] == "scrub" => {
                report_scrub(&scrub::run());
                return Ok(());
            }
            "--only" if args[i + 1] == "messages" => {
                println!("{}", messages::render(&messages::run()));
                return Ok(());
            }
            "--only" if args[i + 1] == "keepalive" => {
                let dir = tempfile::tempdir()?;
                write_config(dir.path(), 1)?;
                report_keep_alive(&keep_alive_rows(dir.path()).await?);
                return Ok(());
            }
            "--only" if args[i + 1] == "sessions" => {
                let dir = tempfile::tempdir()?;
                let servers = sessions::servers(&bin("bench-echo"), Path::new(".tools"));
                println!(
                    "{}",
                    sessions::render(&sessions::run(dir.path(), &servers).await?)
                );
                return Ok(());
            }
            "--only" if args[i + 1] == "startup" => {
                let dir = tempfile::tempdir()?;
                println!("{}", startup::render(&startup::run(dir.path(), 5).await?));
                return Ok(());
            }
            "--only" if args[i + 1] == "approvals" => {
                let dir = tempfile::tempdir()?;
                report_approvals(&approvals::run(&dir.path().join("approvals"), 50, 1000).await?);
                return Ok(());
            }
            "--only" if args[i + 1] == "confine" => {
                let dir = tempfile::tempdir()?;
                println!(
                    "{}",
                    confine::render(&confine::run(dir.path(), 20, 2000).await?)
                );
                return Ok(());
            }
            "--only" if args[i + 1] == "code" => {
                let dir = tempfile::tempdir()?;
                println!("{}", code::render(&code::run(dir.path(), 200).await?));
                return Ok(());
            }
            "--only" if args[i + 1] == "oauth" => {
                let dir = tempfile::tempdir()?;
                println!("{}", oauth::render(&oauth::run(dir.path(), 2000).await?));
                return Ok(());
            }
            "--only" if args[i + 1] == "team" => {
                let dir = tempfile::tempdir()?;
                println!(
                    "{}",
                    team::render(&team::run(&dir.path().join("team"), 2000, 50, 10_000).await?)
                );
                return Ok(());
            }
            "--only" if args[i + 1] == "policy" => {
                report_policy(&policy::run());
                return Ok(());
            }
            other => anyhow::bail!(
                "unknown argument {other}; use --calls N, --proxies DIR, --before AIRLOCK_BINARY, --only stdio|scrub|messages|egress|oauth|code|confine|policy|approvals|team|keepalive|sessions|startup"
            ),
        }
        i += 2;
    }
    let dir = tempfile::tempdir()?;
    let one = write_config(dir.path(), 1)?;
    let mut rows = Vec::new();

    eprintln!("stdio: direct, raw relay, naive rmcp proxy, airlock");
    let mut relay = Command::new(bin("bench-raw-relay"));
    relay.arg(bin("bench-echo"));
    let mut naive = Command::new(bin("bench-naive-proxy"));
    naive.arg(bin("bench-echo"));
    let hub = airlock(
        &dir.path().join("home"),
        &["serve", "--config", &one.to_string_lossy()],
    );
    let before = match &opts.before {
        Some(program) => {
            // Its own data directory: an older build refuses a newer store.
            let home = dir.path().join("home-before");
            review_with(program, &one, &home)?;
            let cmd = airlock_at(
                program,
                &home,
                &["serve", "--config", &one.to_string_lossy()],
            );
            Some(
                stdio_route(
                    "stdio client → airlock before (stdio)",
                    cmd,
                    "echo0__echo",
                    true,
                )
                .await?,
            )
        }
        None => None,
    };
    // The same echo reached with the legacy handshake (airlock's default
    // reaches it on 2026-07-28, which it offers).
    let legacy = write_config_with(dir.path(), 1, "protocol = \"legacy\"\n")?;
    let hub_legacy = airlock(
        &dir.path().join("home"),
        &["serve", "--config", &legacy.to_string_lossy()],
    );
    let legacy_row = stdio_route(
        "stdio client → airlock → echo (stdio, source pinned to the legacy handshake)",
        hub_legacy,
        "echo0__echo",
        true,
    )
    .await?;
    let stdio: Vec<Route> = [
        stdio_route(
            "stdio client → echo (direct)",
            Command::new(bin("bench-echo")),
            "echo",
            false,
        )
        .await?,
        stdio_route(
            "stdio client → raw byte relay (no parsing) → echo (stdio)",
            relay,
            "echo",
            true,
        )
        .await?,
        stdio_route(
            "stdio client → naive rmcp proxy → echo (stdio)",
            naive,
            "echo",
            true,
        )
        .await?,
        stdio_route(
            "stdio client → airlock → echo (stdio)",
            hub,
            "echo0__echo",
            true,
        )
        .await?,
    ]
    .into_iter()
    .chain(before)
    .chain([legacy_row])
    .collect();
    rows.extend(measure(&stdio, &opts).await?);
    drop(stdio);
    if opts.only_stdio {
        for r in &rows {
            println!(
                "| {} | {:.0} | {:+.0} µs | {:.0} calls/s ×64 ({:.0} % of direct) |",
                r.name,
                r.p50_us,
                r.p50_us - rows[0].p50_us,
                r.throughput[2],
                100.0 * r.throughput[2] / rows[0].throughput[2]
            );
        }
        return Ok(());
    }

    eprintln!("http: direct, airlock, and the npm proxies");
    let mut http = Vec::new();
    let port = free_port();
    let echo_http =
        spawn(Command::new(bin("bench-echo")).args(["--http", &format!("127.0.0.1:{port}")]))?;
    http.push(
        http_route(
            "HTTP client → echo (direct, HTTP)",
            port,
            echo_http,
            "echo",
            false,
            None,
        )
        .await?,
    );
    let port = free_port();
    let hub = spawn(&mut airlock(
        &dir.path().join("home"),
        &[
            "serve",
            "--config",
            &one.to_string_lossy(),
            "--http",
            &format!("127.0.0.1:{port}"),
        ],
    ))?;
    http.push(
        http_route(
            "HTTP client → airlock → echo (stdio)",
            port,
            hub,
            "echo0__echo",
            true,
            Some(&dir.path().join("home")),
        )
        .await?,
    );
    if let Some(proxies) = &opts.proxies_dir {
        let bin_dir = proxies.join("node_modules").join(".bin");
        let echo = bin("bench-echo").display().to_string();
        let supergateway = bin_dir.join("supergateway");
        if supergateway.exists() {
            let port = free_port();
            let proc = spawn(Command::new(&supergateway).args([
                "--stdio",
                &echo,
                "--outputTransport",
                "streamableHttp",
                "--stateful",
                "--port",
                &port.to_string(),
                "--logLevel",
                "none",
            ]))?;
            http.push(
                http_route(
                    "HTTP client → supergateway (npm) → echo (stdio)",
                    port,
                    proc,
                    "echo",
                    true,
                    None,
                )
                .await?,
            );
        }
        let mcp_proxy = bin_dir.join("mcp-proxy");
        if mcp_proxy.exists() {
            let port = free_port();
            let proc =
                spawn(Command::new(&mcp_proxy).args(["--port", &port.to_string(), "--", &echo]))?;
            http.push(
                http_route(
                    "HTTP client → mcp-proxy (npm) → echo (stdio)",
                    port,
                    proc,
                    "echo",
                    true,
                    None,
                )
                .await?,
            );
        }
    }
    rows.extend(measure(&http, &opts).await?);
    drop(http);

    eprintln!("keep-alive raw HTTP client");
    let keep_alive = keep_alive_rows(dir.path()).await?;

    eprintln!("a connection per client session");
    let servers = sessions::servers(&bin("bench-echo"), Path::new(".tools"));
    let per_session = sessions::run(dir.path(), &servers).await?;

    eprintln!("start-to-ready with 10 sources");
    let (ready_direct, ready_hub) = start_to_ready(dir.path(), 10, 5).await?;

    eprintln!("first start with one source hanging");
    let first_start = startup::run(dir.path(), 5).await?;

    // CPU-bound measures before the approvals, whose thousand cancelled
    // calls keep the hub busy for a while after they are dropped.
    eprintln!("scrubbing");
    let scrubbing = scrub::run();

    eprintln!("whole messages, envelope, token");
    let whole = messages::run();

    eprintln!("policy");
    let deciding = policy::run();

    eprintln!("egress guard");
    let guard = egress::run(2000).await?;

    eprintln!("approvals");
    let approvals = approvals::run(&dir.path().join("approvals"), 50, 1000).await?;

    eprintln!("a login's cost per call");
    let login = oauth::run(dir.path(), 2000).await?;
    let code_mode = code::run(dir.path(), 200).await?;
    let confined = confine::run(dir.path(), 20, 2000).await?;
    eprintln!("team store");
    let team_store = team::run(&dir.path().join("team"), 2000, 50, 10_000).await?;

    report(&rows, &opts, ready_direct, ready_hub);
    report_keep_alive(&keep_alive);
    println!("{}", sessions::render(&per_session));
    println!("{}", startup::render(&first_start));
    report_approvals(&approvals);
    report_scrub(&scrubbing);
    println!("\n{}", messages::render(&whole));
    report_policy(&deciding);
    report_egress(&guard);
    println!("\n{}", oauth::render(&login));
    println!("\n{}", code::render(&code_mode));
    println!("\n{}", confine::render(&confined));
    println!("\n{}", team::render(&team_store));
    Ok(())
}

fn report(rows: &[Row], opts: &Options, ready_direct: f64, ready_hub: f64) {
    // Each group starts with its direct row, the base of the rows after it.
    let mut base = &rows[0];
    println!("### Latency and throughput\n");
    println!(
        "{} sequential calls per path after {} warm-up calls, in {ROUNDS} rounds in which the paths of a group (stdio, HTTP) take turns, so that the machine's other load falls on all of them alike; throughput is {} calls spread over 1, 16 and 64 concurrent callers on one session, taken the same way in {THROUGHPUT_ROUNDS} rounds.\n",
        opts.calls, opts.warmup, opts.concurrent_calls
    );
    println!(
        "| path | p50 µs | p99 µs | p50 added vs direct | p50 ratio | calls/s ×1 | ×16 | ×64 | RSS peak MiB |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        if r.name.contains("(direct") {
            base = r;
        }
        let added = r.p50_us - base.p50_us;
        let rss = r
            .rss
            .map(|(peak, _)| format!("{peak:.1}"))
            .unwrap_or_else(|| "—".into());
        println!(
            "| {} | {:.0} | {:.0} | {} | {:.2} | {:.0} | {:.0} | {:.0} | {} |",
            r.name,
            r.p50_us,
            r.p99_us,
            if std::ptr::eq(r, base) {
                "—".to_string()
            } else {
                format!("{added:+.0} µs")
            },
            r.p50_us / base.p50_us,
            r.throughput[0],
            r.throughput[1],
            r.throughput[2],
            rss
        );
    }
    println!("\n### Start-to-ready, 10 stdio sources\n");
    println!("Median of 5: time until every source is started, handshaken and its tools listed.\n");
    println!("| path | ms |");
    println!("| --- | ---: |");
    println!("| 10 echo servers started and listed directly, in parallel | {ready_direct:.0} |");
    println!(
        "| airlock with the same 10 as sources, until its tools/list answers | {ready_hub:.0} |"
    );
    println!(
        "| airlock's own share (difference) | {:.0} |",
        ready_hub - ready_direct
    );

    let stdio_base = &rows[0];
    let raw_added = rows[1].p50_us - stdio_base.p50_us;
    let naive_added = rows[2].p50_us - stdio_base.p50_us;
    let added = rows[3].p50_us - stdio_base.p50_us;
    let rss = rows
        .iter()
        .filter(|r| r.name.contains("airlock"))
        .filter_map(|r| r.rss.map(|(peak, _)| peak))
        .fold(0.0, f64::max);
    let verdict = |ok: bool, by: String| {
        if ok {
            "met".to_string()
        } else {
            format!("missed by {by}")
        }
    };
    let overhead = ready_hub - ready_direct;
    println!("\n### Targets\n");
    println!("| target | measured | |");
    println!("| --- | ---: | --- |");
    println!(
        "| added p50 per call over direct, stdio → stdio ≤ 60 µs | {added:.0} µs (naive rmcp proxy: {naive_added:.0} µs, airlock/naive {:.2}; raw byte relay, the floor of any hop: {raw_added:.0} µs) | {} |",
        added / naive_added,
        verdict(added <= 60.0, format!("{:.0} µs", added - 60.0))
    );
    let share = rows[3].throughput[2] / stdio_base.throughput[2];
    println!(
        "| calls/s at 64 concurrent callers through airlock ≥ 80 % of direct, stdio | {:.0} % (naive rmcp proxy: {:.0} %) | {} |",
        100.0 * share,
        100.0 * rows[2].throughput[2] / stdio_base.throughput[2],
        verdict(share >= 0.8, format!("{:.0} points", 100.0 * (0.8 - share)))
    );
    if let Some(before) = rows.iter().find(|r| r.name.contains("airlock before")) {
        println!(
            "| this build vs `--before`, same run: p50 added within noise or better; calls/s ×64 | {:+.0} µs added ({:.0} vs {:.0}); {:.0} vs {:.0} calls/s | {} |",
            rows[3].p50_us - before.p50_us,
            added,
            before.p50_us - stdio_base.p50_us,
            rows[3].throughput[2],
            before.throughput[2],
            if rows[3].p50_us <= before.p50_us * 1.05 {
                "met"
            } else {
                "missed"
            }
        );
    }
    println!(
        "| start-to-ready with 10 sources, beyond their own start ≤ 200 ms | {overhead:.0} ms | {} |",
        verdict(overhead <= 200.0, format!("{:.0} ms", overhead - 200.0))
    );
    println!(
        "| RSS ≤ 30 MB | {rss:.1} MiB peak | {} |",
        verdict(rss <= 30.0, format!("{:.1} MiB", rss - 30.0))
    );
}

/// Calls per path and round of the keep-alive client.
const KEEP_ALIVE_CALLS: usize = 200;

/// The keep-alive raw client against the echo directly (served by axum as
/// it comes, Nagle on) and through airlock's HTTP face, in alternating
/// rounds: (name, p50 µs, p99 µs).
async fn keep_alive_rows(dir: &Path) -> anyhow::Result<Vec<(String, f64, f64)>> {
    let one = dir.join("bench-1.toml");
    let echo_port = free_port();
    let _echo =
        spawn(Command::new(bin("bench-echo")).args(["--http", &format!("127.0.0.1:{echo_port}")]))?;
    let hub_port = free_port();
    let home = dir.join("home");
    let _hub = spawn(&mut airlock(
        &home,
        &[
            "serve",
            "--config",
            &one.to_string_lossy(),
            "--http",
            &format!("127.0.0.1:{hub_port}"),
        ],
    ))?;
    wait_port(echo_port).await?;
    wait_port(hub_port).await?;
    let token = std::fs::read_to_string(home.join("http-token"))?;
    let token = token.trim().to_string();
    let paths: [(&str, u16, Option<String>, &str); 2] = [
        (
            "keep-alive raw HTTP client → echo (direct, HTTP, Nagle on)",
            echo_port,
            None,
            "echo",
        ),
        (
            "keep-alive raw HTTP client → airlock → echo (stdio)",
            hub_port,
            Some(token),
            "echo0__echo",
        ),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    for _round in 0..ROUNDS {
        for (k, (_, port, token, tool)) in paths.iter().enumerate() {
            let (port, token, tool) = (*port, token.clone(), tool.to_string());
            let t = tokio::task::spawn_blocking(move || {
                keepalive::run(port, token.as_deref(), &tool, KEEP_ALIVE_CALLS)
            })
            .await??;
            times[k].extend(t);
        }
    }
    Ok(paths
        .iter()
        .zip(times)
        .map(|((name, ..), mut t)| {
            t.sort_by(f64::total_cmp);
            let at = |q: f64| t[((t.len() as f64 - 1.0) * q) as usize];
            (name.to_string(), at(0.5), at(0.99))
        })
        .collect())
}

fn report_keep_alive(rows: &[(String, f64, f64)]) {
    println!("\n### A keep-alive raw HTTP client\n");
    println!(
        "One connection per round, each response read to its end before the next request ({KEEP_ALIVE_CALLS} calls per path and round, {ROUNDS} rounds taking turns). The direct echo is served by axum as it comes, with Nagle on: its last chunk of each response waits for the client's delayed ACK. airlock's listeners set `TCP_NODELAY`.\n"
    );
    println!("| path | p50 µs | p99 µs | p50 ratio |");
    println!("| --- | ---: | ---: | ---: |");
    let base = rows[0].1;
    for (name, p50, p99) in rows {
        println!("| {name} | {p50:.0} | {p99:.0} | {:.2} |", p50 / base);
    }
}

fn report_approvals(a: &approvals::ApprovalReport) {
    println!("\n### Approvals\n");
    println!(
        "Decision recorded (the same code `airlock approve` runs) → the call's answer at the client, over {} approvals, with a second, idle hub on the same data directory (the decision is told to both); then {} calls waiting at once.\n",
        a.samples, a.waiting
    );
    println!("| measure | value | target | |");
    println!("| --- | ---: | ---: | --- |");
    let met = |ok: bool| if ok { "met" } else { "missed" };
    println!(
        "| decision → answer p50 | {:.2} ms | ≤ 5 ms | {} |",
        a.decision_to_answer_p50_ms,
        met(a.decision_to_answer_p50_ms <= 5.0)
    );
    println!(
        "| decision → answer p99 | {:.2} ms | | |",
        a.decision_to_answer_p99_ms
    );
    println!(
        "| hub CPU with {} calls waiting | {:.1} % | idle | |",
        a.waiting, a.cpu_percent_while_waiting
    );
    println!(
        "| hub RSS with {} calls waiting | {:.1} MiB | | |",
        a.waiting, a.rss_mib_while_waiting
    );
}

fn report_scrub(s: &scrub::ScrubReport) {
    println!("\n### Scrubbing\n");
    println!(
        "A 1 MiB tool result with 100 registered secrets ({} byte patterns: every encoding and alignment), scrubbed in one pass.\n",
        s.patterns
    );
    println!("| scrubber | GB/s | ratio | target | |");
    println!("| --- | ---: | ---: | ---: | --- |");
    println!(
        "| airlock (sampled 8-byte windows, a filter, then byte comparison) | {:.2} | {:.0}× | ≥ 1 GB/s | {} |",
        s.gb_per_s,
        s.gb_per_s / s.naive_gb_per_s,
        if s.gb_per_s >= 1.0 { "met" } else { "missed" }
    );
    println!(
        "| naive: one replace per secret per form (raw and base64 only) | {:.3} | 1× | | |",
        s.naive_gb_per_s
    );
}

fn report_policy(p: &policy::PolicyReport) {
    println!("\n### Policy decision\n");
    println!(
        "One call decided among {} rules (single tools, patterns over a source's tools and over every source, path conditions, whole sources), 64 tools in turn.\n",
        p.rules
    );
    println!("| evaluator | p50 µs | p99 µs | ratio | target | |");
    println!("| --- | ---: | ---: | ---: | ---: | --- |");
    println!(
        "| airlock (rules indexed by name and glob set; candidates matched in rule order) | {:.2} | {:.2} | {:.0}× | ≤ 2 µs | {} |",
        p.indexed_p50_us,
        p.indexed_p99_us,
        p.scan_p50_us / p.indexed_p50_us,
        if p.indexed_p50_us <= 2.0 {
            "met"
        } else {
            "missed"
        }
    );
    println!(
        "| a scan matching every rule | {:.1} | {:.1} | 1× | | |",
        p.scan_p50_us, p.scan_p99_us
    );
}

fn report_egress(e: &egress::EgressReport) {
    println!("\n### Egress guard\n");
    println!(
        "The same small JSON-RPC POST to a loopback server, 2,000 times on a kept-alive connection (median of three alternating runs of each).\n"
    );
    println!("| client | p50 µs | ratio |");
    println!("| --- | ---: | ---: |");
    println!("| plain reqwest client | {:.1} | 1.00× |", e.plain_p50_us);
    println!(
        "| the egress-guarded client every HTTP source uses | {:.1} | {:.2}× |",
        e.guarded_p50_us,
        e.guarded_p50_us / e.plain_p50_us
    );
    println!(
        "\nAdded per call: {:+.1} µs (within run-to-run noise when near zero). Checking a source URL (once per connection): {:.2} µs.",
        e.guarded_p50_us - e.plain_p50_us,
        e.check_target_us
    );
}
