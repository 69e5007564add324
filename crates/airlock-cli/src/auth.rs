//! `airlock auth`: a person logs airlock in to a url source that asks for
//! OAuth, sees where each login stands, and logs out.
//!
//! The login listens for the redirect on 127.0.0.1 at a fresh port (RFC
//! 8252), opens the browser through a private forwarding file (so the
//! authorization URL is on no command line another user can read), or
//! with `--no-browser` prints the URL alone on stdout. Nothing an MCP
//! client sends can start or finish a login.

use std::process::ExitCode;
use std::sync::Arc;

use airlock_upstream::Vault;
use airlock_upstream::oauth::{self, Callback, Login, Record, Target};
use anyhow::Context;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Html;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::home;

fn target(config: Option<&std::path::Path>, source: &str) -> anyhow::Result<(Target, bool)> {
    let (config, _) = home::load_config(config)?;
    let Some(found) = config.source(source) else {
        let names: Vec<&str> = config.sources.iter().map(|s| s.name.as_str()).collect();
        let hint = match airlock_common::closest(source, names.iter().copied()).first() {
            Some(n) => format!("; did you mean `{n}`?"),
            None => format!(" (sources: {})", names.join(", ")),
        };
        anyhow::bail!("no source named `{source}` in the config{hint}");
    };
    let static_auth = match &found.transport {
        airlock_config::Transport::Http { headers, .. } => headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization")),
        airlock_config::Transport::Stdio { .. } => false,
    };
    Ok((Target::of(found).map_err(anyhow::Error::msg)?, static_auth))
}

fn vault() -> anyhow::Result<Arc<dyn Vault>> {
    let secrets = home::hub_secrets()?;
    let place = Vault::describe(secrets.as_ref());
    if !place.starts_with("the OS keychain") {
        eprintln!("warning: no OS keychain answered; tokens are kept in {place}");
    }
    Ok(secrets)
}

type Outcome = Result<oauth::Granted, String>;

struct Waiting {
    login: Mutex<Login>,
    done: mpsc::Sender<Outcome>,
}

pub fn login(
    config: Option<&std::path::Path>,
    source: &str,
    no_browser: bool,
    scopes: &[String],
) -> anyhow::Result<ExitCode> {
    let (target, static_auth) = target(config, source)?;
    if static_auth {
        anyhow::bail!(
            "`{source}` sends its own Authorization header (from its config); it does not log in with OAuth"
        );
    }
    let vault = vault()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        // The port the last login listened on where it is free, so a
        // provider that registered that exact redirect accepts it again.
        let last_port = oauth::TokenVault::new(source, vault.clone())
            .record()
            .ok()
            .and_then(|r| r.redirect_uri)
            .and_then(|u| {
                let rest = u.strip_prefix("http://127.0.0.1:")?;
                rest.split('/').next()?.parse::<u16>().ok()
            });
        let fresh = || async {
            tokio::net::TcpListener::bind(("127.0.0.1", 0))
                .await
                .context("cannot listen on 127.0.0.1 for the login's redirect")
        };
        let listener = match last_port {
            Some(port) => match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => l,
                Err(_) => fresh().await?,
            },
            None => fresh().await?,
        };
        let redirect_uri = format!("http://127.0.0.1:{}/callback", listener.local_addr()?.port());
        let login = Login::begin(&target, vault, &redirect_uri, scopes)
            .await
            .map_err(anyhow::Error::msg)?;
        if no_browser {
            println!("{}", login.url());
            eprintln!(
                "open the URL above to log in to `{source}`; waiting for the redirect to {redirect_uri} (for {}s)",
                oauth::login::STATE_TTL.as_secs()
            );
        } else {
            crate::browser::open_url(&home::data_dir()?, login.url())?;
            eprintln!("log in to `{source}` in the browser window airlock opened; waiting…");
        }
        let (done, mut finished) = mpsc::channel(1);
        let waiting = Arc::new(Waiting {
            login: Mutex::new(login),
            done,
        });
        let router = axum::Router::new()
            .route("/callback", axum::routing::get(callback))
            .with_state(waiting);
        let stop = CancellationToken::new();
        let serving = tokio::spawn(airlock_http::serve(listener, router, stop.clone()));
        let outcome = tokio::time::timeout(oauth::login::STATE_TTL, finished.recv()).await;
        stop.cancel();
        let _ = serving.await;
        match outcome {
            Ok(Some(Ok(granted))) => {
                eprintln!(
                    "logged in to `{source}`: {}, scopes {}, {}, {}",
                    granted.registration.as_str(),
                    if granted.scopes.is_empty() {
                        "(none named)".to_string()
                    } else {
                        granted.scopes.join(" ")
                    },
                    match granted.expires_in {
                        Some(s) => format!("the access token is good for {s}s"),
                        None => "the access token has no stated expiry".into(),
                    },
                    if granted.has_refresh {
                        "with a refresh token"
                    } else {
                        "without a refresh token (log in again when it expires)"
                    }
                );
                Ok(ExitCode::SUCCESS)
            }
            Ok(Some(Err(why))) => anyhow::bail!("the login to `{source}` failed: {why}"),
            _ => anyhow::bail!(
                "no redirect arrived within {}s; start again with `airlock auth login {source}`",
                oauth::login::STATE_TTL.as_secs()
            ),
        }
    })
}

async fn callback(
    State(waiting): State<Arc<Waiting>>,
    RawQuery(query): RawQuery,
) -> (StatusCode, Html<String>) {
    let outcome = waiting
        .login
        .lock()
        .await
        .callback(query.as_deref().unwrap_or(""))
        .await;
    let page = |status, text: &str| {
        (
            status,
            Html(format!(
                "<!doctype html><meta charset=\"utf-8\"><title>airlock</title><p>{}</p>\n",
                escape(text)
            )),
        )
    };
    match outcome {
        Callback::Refused => page(StatusCode::BAD_REQUEST, oauth::REFUSED),
        Callback::Done(granted) => {
            let _ = waiting.done.send(Ok(granted)).await;
            page(
                StatusCode::OK,
                "airlock is logged in. You can close this window.",
            )
        }
        Callback::Failed(why) => {
            let text = format!("The login failed: {why}");
            let _ = waiting.done.send(Err(why)).await;
            page(StatusCode::BAD_REQUEST, &text)
        }
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn status(config: Option<&std::path::Path>, source: Option<&str>) -> anyhow::Result<ExitCode> {
    let (config, _) = home::load_config(config)?;
    let vault = vault()?;
    let now = airlock_upstream::oauth::vault::now_secs();
    let mut shown = 0;
    for s in &config.sources {
        if source.is_some_and(|n| n != s.name) {
            continue;
        }
        if !matches!(s.transport, airlock_config::Transport::Http { .. }) {
            if source.is_some() {
                anyhow::bail!("`{}` is a command source; it does not log in", s.name);
            }
            continue;
        }
        shown += 1;
        let tokens = oauth::TokenVault::new(&s.name, vault.clone());
        if !tokens.exists().map_err(anyhow::Error::msg)? {
            println!("{}: not logged in", s.name);
            continue;
        }
        let r = tokens.record().map_err(anyhow::Error::msg)?;
        println!("{}: {}", s.name, describe(&r, now));
    }
    if let Some(name) = source
        && shown == 0
    {
        anyhow::bail!("no source named `{name}` in the config");
    }
    Ok(ExitCode::SUCCESS)
}

/// One login's state, without any value.
fn describe(r: &Record, now: u64) -> String {
    let mut parts = vec![
        format!("issuer {}", r.issuer.as_deref().unwrap_or("(not named)")),
        r.registration
            .map_or("no registration".into(), |k| k.as_str().to_string()),
        format!(
            "scopes {}",
            if r.scopes.is_empty() {
                "(none named)".to_string()
            } else {
                r.scopes.join(" ")
            }
        ),
    ];
    parts.push(match (r.has_access, r.expires_in_secs(now)) {
        (false, _) => "no access token".into(),
        (true, Some(s)) if s <= 0 => "access token expired".into(),
        (true, Some(s)) => format!("access token expires in {s}s"),
        (true, None) => "access token with no stated expiry".into(),
    });
    parts.push(if r.has_refresh {
        "refresh token: yes".into()
    } else {
        "refresh token: no".into()
    });
    parts.push(if r.revocation_endpoint().is_some() {
        "revocation endpoint: yes".into()
    } else {
        "revocation endpoint: none".into()
    });
    let mut line = parts.join(", ");
    if let Some(why) = &r.needs_login {
        line.push_str(&format!("; NEEDS LOGIN: {why}"));
    }
    line
}

pub fn logout(config: Option<&std::path::Path>, source: &str) -> anyhow::Result<ExitCode> {
    let (target, _) = target(config, source)?;
    let vault = vault()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let out = runtime
        .block_on(oauth::revoke::logout(&target, vault))
        .map_err(anyhow::Error::msg)?;
    if !out.forgot {
        println!("`{source}` was not logged in; nothing to do");
        return Ok(ExitCode::SUCCESS);
    }
    for r in &out.revoked {
        println!("revoked the {r} at the provider");
    }
    for n in &out.not_revoked {
        println!("not revoked: {n}");
    }
    println!("deleted the tokens and registration of `{source}` from this machine");
    Ok(ExitCode::SUCCESS)
}
