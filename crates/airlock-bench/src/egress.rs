//! What the egress guard adds to a call to an HTTP source: the same
//! request to a loopback server, through a plain HTTP client and through
//! the guarded client every HTTP source uses (pinned, checked resolution;
//! re-validated redirects), on kept-alive connections as sources use them.

use std::time::Instant;

pub struct EgressReport {
    pub plain_p50_us: f64,
    pub guarded_p50_us: f64,
    /// Checking a source's URL (parse, scheme, userinfo, address class),
    /// done once per connection.
    pub check_target_us: f64,
}

async fn p50(client: &reqwest::Client, url: &str, samples: usize) -> anyhow::Result<f64> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
    let mut lat = Vec::with_capacity(samples);
    for i in 0..samples + 50 {
        let t = Instant::now();
        let r = client.post(url).body(body).send().await?;
        r.bytes().await?;
        if i >= 50 {
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    lat.sort_by(f64::total_cmp);
    Ok(lat[lat.len() / 2])
}

pub async fn run(samples: usize) -> anyhow::Result<EgressReport> {
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(|| async {
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}"#
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let plain = reqwest::Client::new();
    let guarded = airlock_upstream::egress::client(true)
        .map_err(|e| anyhow::anyhow!("guarded client: {e}"))?;
    // Alternate to share whatever else the machine is doing.
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        a.push(p50(&plain, &url, samples).await?);
        b.push(p50(&guarded, &url, samples).await?);
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);

    let rounds = 10_000;
    let t = Instant::now();
    for _ in 0..rounds {
        airlock_upstream::egress::check_target(&url, true)
            .map_err(|e| anyhow::anyhow!("check_target: {e}"))?;
    }
    Ok(EgressReport {
        plain_p50_us: a[1],
        guarded_p50_us: b[1],
        check_target_us: t.elapsed().as_secs_f64() * 1e6 / rounds as f64,
    })
}
