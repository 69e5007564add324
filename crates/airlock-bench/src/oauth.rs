//! What a login costs a call: one Streamable HTTP echo server reached
//! through airlock as two url sources, one sending a static header (its
//! token resolved from the secret store on every request) and one that has
//! logged in with OAuth (its access token from the login, checked for
//! expiry on every request). The calls alternate on one client session.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

pub struct OAuthReport {
    pub calls: usize,
    pub static_p50_us: f64,
    pub static_p99_us: f64,
    pub oauth_p50_us: f64,
    pub oauth_p99_us: f64,
}

/// The secret file as `airlock secret set` and a finished login leave it:
/// the static token, and a login record with its access token (valid for a
/// day, so no refresh falls in the measured calls).
fn seed_secrets(home: &Path, echo: &str) -> anyhow::Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let record = serde_json::json!({
        "issuer": echo,
        "client_id": "bench-client",
        "registration": "dynamic",
        "metadata": {
            "issuer": echo,
            "authorization_endpoint": format!("{echo}/authorize"),
            "token_endpoint": format!("{echo}/token"),
            "code_challenge_methods_supported": ["S256"],
        },
        "scopes": ["read"],
        "received_at": now,
        "expires_in": 86_400,
        "token_type": "Bearer",
        "has_access": true,
        "has_refresh": false,
        "server": format!("{echo}/mcp"),
    });
    let secrets = serde_json::json!({
        "bench-token": "bench-static-token-0123456789",
        "oauth_viaoauth": record.to_string(),
        "oauth_viaoauth_access": "bench-access-token-0123456789",
    });
    std::fs::create_dir_all(home)?;
    let path = home.join("secrets.json");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(&mut options.open(&path)?, secrets.to_string().as_bytes())?;
    Ok(())
}

pub async fn run(dir: &Path, calls: usize) -> anyhow::Result<OAuthReport> {
    let port = super::free_port();
    let _echo = super::spawn(
        Command::new(super::bin("bench-echo")).args(["--http", &format!("127.0.0.1:{port}")]),
    )?;
    super::wait_port(port).await?;
    let echo = format!("http://127.0.0.1:{port}");
    let home = dir.join("home-oauth");
    seed_secrets(&home, &echo)?;
    let config = dir.join("bench-oauth.toml");
    std::fs::write(
        &config,
        format!(
            "[[rules]]\naction = \"allow\"\nsource = \"*\"\n\n\
             [sources.viaheader]\nurl = \"{echo}/mcp\"\nallow_private = true\n\
             headers = {{ Authorization = \"Bearer ${{secret:bench-token}}\" }}\n\n\
             [sources.viaoauth]\nurl = \"{echo}/mcp\"\nallow_private = true\n"
        ),
    )?;
    let reviewed = std::process::Command::new(super::bin("airlock"))
        .args(["tools", "review", "--approve-all", "--config"])
        .arg(&config)
        .env("AIRLOCK_HOME", &home)
        .env("AIRLOCK_SECRET_STORE", "file")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(reviewed.success(), "airlock tools review failed");

    let mut hub = super::airlock(&home, &["serve", "--config", &config.to_string_lossy()]);
    hub.env("AIRLOCK_SECRET_STORE", "file");
    let (client, _) = super::stdio_client(hub).await?;
    let (mut header, mut oauth) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    let warmup = calls / 10;
    for i in 0..calls + warmup {
        for (tool, lat) in [
            ("viaheader__echo", &mut header),
            ("viaoauth__echo", &mut oauth),
        ] {
            let t = Instant::now();
            let r = client.call_tool(super::exposed_echo_call(tool, i)).await?;
            anyhow::ensure!(r.is_error != Some(true), "{tool} failed: {r:?}");
            if i >= warmup {
                lat.push(t.elapsed());
            }
        }
    }
    client.cancel().await?;
    let p = |v: &mut Vec<Duration>, q| {
        v.sort();
        super::percentile(v, q)
    };
    Ok(OAuthReport {
        calls,
        static_p50_us: p(&mut header, 0.5),
        static_p99_us: p(&mut header, 0.99),
        oauth_p50_us: p(&mut oauth, 0.5),
        oauth_p99_us: p(&mut oauth, 0.99),
    })
}

pub fn render(r: &OAuthReport) -> String {
    format!(
        "### A login's cost per call\n\n\
         {} calls each, alternating on one session after {} warm-up calls: the same Streamable HTTP echo as two url sources of one hub.\n\n\
         | source | p50 µs | p99 µs | p50 ratio |\n| --- | ---: | ---: | ---: |\n\
         | static `Authorization` header from the secret store | {:.0} | {:.0} | 1.00 |\n\
         | logged in with OAuth (token from the login, expiry checked) | {:.0} | {:.0} | {:.2} |\n",
        r.calls,
        r.calls / 10,
        r.static_p50_us,
        r.static_p99_us,
        r.oauth_p50_us,
        r.oauth_p99_us,
        r.oauth_p50_us / r.static_p50_us,
    )
}
