//! Code mode: what the sandbox costs, what a bridge call adds to a call,
//! and what `only` saves a model's context.
//!
//! - Sandbox start: a run of `return 1` on a thread, and in its own
//!   process as the hub runs it (`airlock __sandbox`), against starting and
//!   joining a bare thread and starting a bare process (`true`).
//! - A bridge call: the hub with `code_mode = "beside"` and the echo
//!   upstream; a client calls `bench__echo` directly, then runs code making
//!   50 sequential calls of it, and a run making none. The added cost per
//!   bridge call is (run of 50 − empty run) / 50, against the direct call.
//! - Calls per second inside one run, sequential and 50 at once.
//! - Context: the bytes of `tools/list` for a catalog of 4 × 50 typical
//!   tools (plus echo), against the three meta tools plus one typical
//!   search with schemas; tokens estimated at 4 bytes each.

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;

pub struct CodeReport {
    pub runs: usize,
    pub thread_p50_us: f64,
    pub start_p50_us: f64,
    pub process_p50_us: f64,
    pub isolated_p50_us: f64,
    pub direct_p50_us: f64,
    pub empty_run_p50_us: f64,
    pub fifty_run_p50_us: f64,
    pub sequential_per_s: f64,
    pub concurrent_per_s: f64,
    pub catalog_tools: usize,
    pub catalog_bytes: usize,
    pub meta_bytes: usize,
    pub search_bytes: usize,
}

fn p50(mut v: Vec<Duration>) -> f64 {
    v.sort();
    super::percentile(&v, 0.5)
}

fn run_code(code: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("run_code").with_arguments(
        serde_json::json!({ "code": code })
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

async fn sandbox_start(runs: usize) -> (f64, f64, f64, f64) {
    let mut thread = Vec::with_capacity(runs);
    let mut start = Vec::with_capacity(runs);
    let mut process = Vec::with_capacity(runs);
    let mut isolated = Vec::with_capacity(runs);
    let program = || airlock_sandbox::Program {
        code: "return 1;".into(),
        seed: 1,
        clock_ms: 0,
        tools: Vec::new(),
    };
    let airlock = super::bin("airlock");
    for _ in 0..runs {
        let t = Instant::now();
        let status = tokio::process::Command::new("true").status().await;
        assert!(status.is_ok_and(|s| s.success()), "a bare process");
        process.push(t.elapsed());
        let t = Instant::now();
        let running = airlock_sandbox::process::start(
            &airlock,
            program(),
            airlock_sandbox::Limits::default(),
        );
        returned_one(running).await;
        isolated.push(t.elapsed());
        let t = Instant::now();
        std::thread::spawn(|| ()).join().expect("a bare thread");
        thread.push(t.elapsed());
        let t = Instant::now();
        let running = airlock_sandbox::start(program(), airlock_sandbox::Limits::default());
        returned_one(running).await;
        start.push(t.elapsed());
    }
    (p50(thread), p50(start), p50(process), p50(isolated))
}

/// Waits for a run of `return 1;` to end with its result.
async fn returned_one(mut running: airlock_sandbox::Running) {
    match running.next().await {
        airlock_sandbox::Next::Ended(r) => {
            assert_eq!(
                r.ended,
                airlock_sandbox::Ended::Finished(serde_json::json!(1))
            )
        }
        airlock_sandbox::Next::Call(_) => unreachable!("the program makes no call"),
    }
}

async fn listed_bytes(client: &super::Client) -> anyhow::Result<(usize, usize)> {
    let tools = client.list_all_tools().await?;
    Ok((tools.len(), serde_json::to_vec(&tools)?.len()))
}

async fn hub(
    dir: &Path,
    name: &str,
    mode: &str,
    sources: usize,
    tools_each: usize,
) -> anyhow::Result<super::Client> {
    let home = dir.join(format!("home-code-{name}"));
    let config = dir.join(format!("bench-code-{name}.toml"));
    let echo = format!("{:?}", super::bin("bench-echo").to_string_lossy());
    let mut text =
        format!("[hub]\ncode_mode = \"{mode}\"\n\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n");
    for i in 0..sources {
        let name = if i == 0 {
            "bench".to_string()
        } else {
            format!("bench{i}")
        };
        text.push_str(&format!(
            "\n[sources.{name}]\ncommand = {echo}\nenv = {{ BENCH_ECHO_TOOLS = \"{tools_each}\" }}\n"
        ));
    }
    std::fs::write(&config, text)?;
    super::review(&config, &home)?;
    let (client, _) = super::stdio_client(super::airlock(
        &home,
        &["serve", "--config", &config.to_string_lossy()],
    ))
    .await?;
    Ok(client)
}

pub async fn run(dir: &Path, runs: usize) -> anyhow::Result<CodeReport> {
    let (thread_p50_us, start_p50_us, process_p50_us, isolated_p50_us) = sandbox_start(runs).await;

    let client = hub(dir, "calls", "beside", 1, 0).await?;
    let mut direct = Vec::with_capacity(runs);
    let mut empty = Vec::with_capacity(runs / 10);
    let mut fifty = Vec::with_capacity(runs / 10);
    for i in 0..runs + runs / 10 {
        let t = Instant::now();
        let r = client
            .call_tool(super::exposed_echo_call("bench__echo", i))
            .await?;
        anyhow::ensure!(r.is_error != Some(true), "the direct call failed: {r:?}");
        if i >= runs / 10 {
            direct.push(t.elapsed());
        }
    }
    let sequential =
        "for (let i = 0; i < 50; i++) await tools.bench.echo({ text: 'hello ' + i }); return 50;";
    let concurrent = "await Promise.all(Array.from({ length: 50 }, (_, i) => tools.bench.echo({ text: 'hello ' + i }))); return 50;";
    for i in 0..runs / 10 + 2 {
        for (code, lat) in [("return 0;", &mut empty), (sequential, &mut fifty)] {
            let t = Instant::now();
            let r = client.call_tool(run_code(code)).await?;
            anyhow::ensure!(r.is_error != Some(true), "the run failed: {r:?}");
            if i >= 2 {
                lat.push(t.elapsed());
            }
        }
    }
    let mut at_once = Vec::new();
    for _ in 0..runs / 10 {
        let t = Instant::now();
        let r = client.call_tool(run_code(concurrent)).await?;
        anyhow::ensure!(r.is_error != Some(true), "the run failed: {r:?}");
        at_once.push(t.elapsed());
    }
    client.cancel().await?;
    let (empty_run_p50_us, fifty_run_p50_us) = (p50(empty), p50(fifty));
    let concurrent_p50 = p50(at_once);

    let catalog = hub(dir, "off", "off", 4, 50).await?;
    let (catalog_tools, catalog_bytes) = listed_bytes(&catalog).await?;
    catalog.cancel().await?;
    let only = hub(dir, "only", "only", 4, 50).await?;
    let (_, meta_bytes) = listed_bytes(&only).await?;
    let search = only
        .call_tool(
            CallToolRequestParams::new("search_tools").with_arguments(
                serde_json::json!({"query": "records 17", "schemas": true, "limit": 5})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await?;
    let search_bytes = serde_json::to_vec(&search)?.len();
    only.cancel().await?;
    Ok(CodeReport {
        runs,
        thread_p50_us,
        start_p50_us,
        process_p50_us,
        isolated_p50_us,
        direct_p50_us: p50(direct),
        empty_run_p50_us,
        fifty_run_p50_us,
        sequential_per_s: 50.0 / ((fifty_run_p50_us - empty_run_p50_us) / 1e6),
        concurrent_per_s: 50.0 / ((concurrent_p50 - empty_run_p50_us) / 1e6),
        catalog_tools,
        catalog_bytes,
        meta_bytes,
        search_bytes,
    })
}

pub fn render(r: &CodeReport) -> String {
    let per_call = (r.fifty_run_p50_us - r.empty_run_p50_us) / 50.0;
    let with_search = r.meta_bytes + r.search_bytes;
    format!(
        "### Code mode\n\n\
         Sandbox start, {runs} runs of `return 1;` (p50), on a thread against a bare thread, and in a process of its own (how the hub runs code) against a bare process (`true`):\n\n\
         | what | p50 µs | ratio |\n| --- | ---: | ---: |\n\
         | a bare thread | {:.0} | 1.00 |\n\
         | a run on a thread, start to result | {:.0} | {:.1} |\n\
         | a bare process | {:.0} | 1.00 |\n\
         | a run in its own process (`airlock __sandbox`), start to result | {:.0} | {:.1} |\n\n\
         A bridge call against the same tool called directly by the client (one hub, `code_mode = \"beside\"`, the echo upstream over stdio):\n\n\
         | what | p50 µs | ratio |\n| --- | ---: | ---: |\n\
         | the client calls `bench__echo` | {:.0} | 1.00 |\n\
         | one call from inside a run ((run of 50 calls − empty run) / 50) | {:.0} | {:.2} |\n\
         | an empty run (`return 0;`) | {:.0} | |\n\n\
         Calls per second inside one run: {:.0} one after another, {:.0} with 50 at once (`Promise.all`).\n\n\
         What a model reads before its first call, for {} tools (4 sources of 50 typical tools and an echo), tokens estimated at 4 bytes each:\n\n\
         | `tools/list` | bytes | ≈ tokens | ratio |\n| --- | ---: | ---: | ---: |\n\
         | every tool (`code_mode = \"off\"`) | {} | {} | 1.00 |\n\
         | the three meta tools (`\"only\"`) | {} | {} | {:.3} |\n\
         | the meta tools and one search with schemas (5 matches) | {} | {} | {:.3} |\n",
        r.thread_p50_us,
        r.start_p50_us,
        r.start_p50_us / r.thread_p50_us,
        r.process_p50_us,
        r.isolated_p50_us,
        r.isolated_p50_us / r.process_p50_us,
        r.direct_p50_us,
        per_call,
        per_call / r.direct_p50_us,
        r.empty_run_p50_us,
        r.sequential_per_s,
        r.concurrent_per_s,
        r.catalog_tools,
        r.catalog_bytes,
        r.catalog_bytes / 4,
        r.meta_bytes,
        r.meta_bytes / 4,
        r.meta_bytes as f64 / r.catalog_bytes as f64,
        with_search,
        with_search / 4,
        with_search as f64 / r.catalog_bytes as f64,
        runs = r.runs,
    )
}
