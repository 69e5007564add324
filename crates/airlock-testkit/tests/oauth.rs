//! OAuth to a url source, through the real binary, against a test
//! authorization server and protected MCP server (`airlock-oauth-fixture`):
//! a person's login with `airlock auth login`, what the hub then does with
//! the tokens, and what a login link, a provider without S256, a rotated
//! refresh token and a logout get.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use airlock_testkit::{Scratch, bin, bytes_contain, call, first_text, secret_forms};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The fixture, running until dropped (its stdin closes).
struct Provider {
    base: String,
    _child: Child,
}

impl Provider {
    async fn start(env: &[(&str, &str)]) -> Provider {
        let mut child = Command::new(bin("airlock-oauth-fixture"))
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the OAuth fixture");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("the fixture says where it listens")
            .unwrap()
            .expect("a line");
        Provider {
            base,
            _child: child,
        }
    }

    async fn log(&self) -> Value {
        reqwest::get(format!("{}/log", self.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    fn config(&self, scratch: &Scratch) -> PathBuf {
        scratch.config(&format!(
            "[sources.web]\nurl = \"{}/mcp\"\nallow_private = true\nquote_output = false\n\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n",
            self.base
        ))
    }
}

/// airlock with the private-file secret store, so the test can see exactly
/// what was stored.
fn airlock(scratch: &Scratch, args: &[&str]) -> Command {
    let mut cmd = scratch.airlock(args);
    cmd.env("AIRLOCK_SECRET_STORE", "file");
    cmd
}

/// `airlock auth login web --no-browser`: the URL it prints.
fn start_login(scratch: &Scratch, config: &Path, extra: &[&str]) -> Child {
    let c = config.to_string_lossy().into_owned();
    let mut args = vec!["auth", "login", "web", "--no-browser", "--config", &c];
    args.extend_from_slice(extra);
    airlock(scratch, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn airlock auth login")
}

async fn printed_url(login: &mut Child) -> String {
    let mut lines = BufReader::new(login.stdout.take().unwrap()).lines();
    tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("the login prints its URL")
        .unwrap()
        .expect("a URL")
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The browser's part: the provider approves at once; its redirect is
/// where the browser goes next.
async fn approve(url: &str) -> String {
    let response = no_redirects().get(url).send().await.unwrap();
    assert_eq!(response.status(), 302, "the provider approved");
    response.headers()["location"].to_str().unwrap().to_string()
}

async fn finish(login: Child) -> (bool, String) {
    let out = tokio::time::timeout(Duration::from_secs(30), login.wait_with_output())
        .await
        .expect("the login ends")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A whole login, as a person does it.
async fn log_in(scratch: &Scratch, config: &Path) {
    let mut login = start_login(scratch, config, &[]);
    let url = printed_url(&mut login).await;
    let back = approve(&url).await;
    let page = reqwest::get(&back).await.unwrap();
    assert_eq!(page.status(), 200);
    let (ok, stderr) = finish(login).await;
    assert!(ok, "{stderr}");
}

async fn review(scratch: &Scratch, config: &Path) -> (bool, String) {
    let out = airlock(
        scratch,
        &[
            "tools",
            "review",
            "--approve-all",
            "--config",
            &config.to_string_lossy(),
        ],
    )
    .output()
    .await
    .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn stored(scratch: &Scratch) -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(scratch.home().join("secrets.json")).unwrap_or_default();
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
}

/// Calls `tool` through `airlock serve` on stdio, with the file store,
/// returning the result's text and everything airlock logged.
async fn call_through_hub(
    scratch: &Scratch,
    config: &Path,
    tools: &[&str],
) -> (Vec<String>, String) {
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    let log = scratch.dir.path().join("serve.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let mut cmd = airlock(scratch, &["serve", "--config", &config.to_string_lossy()]);
    cmd.env("AIRLOCK_LOG", "trace");
    let cmd = cmd.configure(|c| {
        c.stderr(log_file);
    });
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let mut texts = Vec::new();
    for tool in tools {
        let r = client
            .call_tool(call(tool, serde_json::json!({})))
            .await
            .unwrap();
        texts.push(first_text(&r));
    }
    client.cancel().await.unwrap();
    (texts, std::fs::read_to_string(&log).unwrap())
}

#[tokio::test]
async fn a_person_logs_in_once_and_the_tokens_stay_out_of_sight() {
    let provider = Provider::start(&[]).await;
    let scratch = Scratch::new();
    let config = provider.config(&scratch);

    // Before any login the source cannot start, and says what to run.
    let (ok, said) = review(&scratch, &config).await;
    assert!(!ok);
    assert!(said.contains("run `airlock auth login web`"), "{said}");

    log_in(&scratch, &config).await;
    let (ok, said) = review(&scratch, &config).await;
    assert!(ok, "{said}");

    let (texts, logged) = call_through_hub(&scratch, &config, &["web__whoami"]).await;
    assert_eq!(texts[0], "client=client-1 scopes=read", "{logged}");

    let log = provider.log().await;
    assert_eq!(log["registrations"], 1);
    let resource = format!("{}/mcp", provider.base);
    for t in log["token_requests"].as_array().unwrap() {
        assert_eq!(
            t["resource"],
            resource.as_str(),
            "RFC 8707 on every token request"
        );
    }
    assert_eq!(log["authorize"][0]["resource"], resource.as_str());

    // Where the tokens are: the secret store, and nowhere a person, the
    // model or a log reader sees.
    let secrets = stored(&scratch);
    let tokens: Vec<&str> = ["oauth_web_access", "oauth_web_refresh", "oauth_web_client"]
        .iter()
        .map(|k| secrets[*k].as_str().expect("stored"))
        .collect();
    assert!(tokens[0].starts_with("at-") && tokens[1].starts_with("rt-"));
    let stored = scratch.stored();
    assert!(!stored.is_empty(), "the store holds something");
    let record = secrets["oauth_web"].as_str().unwrap();
    for token in &tokens {
        for form in secret_forms(token) {
            for (place, bytes) in &stored {
                assert!(!bytes_contain(bytes, &form), "a token is in {place}");
            }
            assert!(!logged.contains(&form), "a token is in the trace log");
            assert!(!texts.iter().any(|t| t.contains(&form)));
            assert!(!record.contains(&form), "a token is in the login record");
        }
    }
    let status = airlock(
        &scratch,
        &["auth", "status", "--config", &config.to_string_lossy()],
    )
    .output()
    .await
    .unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("web: issuer"), "{status}");
    assert!(!tokens.iter().any(|t| status.contains(t)), "{status}");
}

#[tokio::test]
async fn a_login_link_is_answered_only_once_and_only_with_its_own_state() {
    let provider = Provider::start(&[]).await;
    let scratch = Scratch::new();
    let config = provider.config(&scratch);
    let mut login = start_login(&scratch, &config, &[]);
    let url = printed_url(&mut login).await;
    let back = approve(&url).await;
    let parsed = reqwest::Url::parse(&back).unwrap();
    let state = parsed
        .query_pairs()
        .find(|(k, _)| k == "state")
        .unwrap()
        .1
        .into_owned();
    assert!(state.len() >= 64, "a 256-bit state: {state}");
    let callback = format!(
        "{}://{}{}",
        parsed.scheme(),
        parsed.host_str().unwrap(),
        parsed.port().map(|p| format!(":{p}")).unwrap_or_default()
    ) + parsed.path();
    let code = parsed
        .query_pairs()
        .find(|(k, _)| k == "code")
        .unwrap()
        .1
        .into_owned();

    // A forged callback: another state, a state one character off, the
    // state twice, none at all, an error the attacker chose.
    let mut off = state.clone();
    off.replace_range(0..1, if state.starts_with('0') { "1" } else { "0" });
    for query in [
        format!("code={code}&state=attacker"),
        format!("code={code}&state={off}"),
        format!("code={code}&state={}", &state[..state.len() - 1]),
        format!("code={code}&state={state}&state=attacker"),
        format!("code={code}"),
        "error=access_denied&state=attacker".to_string(),
        format!("code=stolen&state={}", state.to_uppercase()),
    ] {
        let page = reqwest::get(format!("{callback}?{query}")).await.unwrap();
        assert_eq!(page.status(), 400, "{query}");
        let text = page.text().await.unwrap();
        assert!(
            text.contains("this login link is not valid"),
            "{query}: {text}"
        );
    }
    assert_eq!(
        provider.log().await["token_requests"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "no forged callback reached the token endpoint"
    );

    // The real one logs in; the same link a second time reaches nothing.
    assert_eq!(reqwest::get(&back).await.unwrap().status(), 200);
    let (ok, stderr) = finish(login).await;
    assert!(ok, "{stderr}");
    assert!(reqwest::get(&back).await.is_err(), "the listener is gone");
    assert_eq!(
        provider.log().await["token_requests"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_provider_without_s256_is_never_asked() {
    let provider = Provider::start(&[("OAUTH_NO_S256", "1")]).await;
    let scratch = Scratch::new();
    let config = provider.config(&scratch);
    let login = start_login(&scratch, &config, &[]);
    let (ok, stderr) = finish(login).await;
    assert!(!ok);
    assert!(stderr.contains("does not list PKCE with S256"), "{stderr}");
    let log = provider.log().await;
    assert_eq!(log["registrations"], 0, "nothing registered");
    assert_eq!(log["authorize"].as_array().unwrap().len(), 0);
    assert!(!stored(&scratch).keys().any(|k| k.starts_with("oauth_web_")));
}

#[tokio::test]
async fn expired_tokens_are_refreshed_and_rotated_once_across_two_hubs() {
    let provider = Provider::start(&[("OAUTH_EXPIRES_IN", "1")]).await;
    let scratch = Scratch::new();
    let config = provider.config(&scratch);
    log_in(&scratch, &config).await;
    let (ok, said) = review(&scratch, &config).await;
    assert!(ok, "{said}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Two hubs on one data directory, each needing a fresh token at once.
    let (a, b) = tokio::join!(
        call_through_hub(&scratch, &config, &["web__whoami"]),
        call_through_hub(&scratch, &config, &["web__whoami"]),
    );
    for (texts, logged) in [&a, &b] {
        assert!(
            texts[0].starts_with("client=client-1"),
            "{texts:?} {logged}"
        );
    }
    let log = provider.log().await;
    let refreshes = log["token_requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["grant_type"] == "refresh_token")
        .count();
    assert!(refreshes >= 1, "{log}");
    assert_eq!(
        log["refresh_reuse"], 0,
        "no refresh token was spent twice: {log}"
    );
}

#[tokio::test]
async fn a_call_wanting_more_scope_names_it_and_the_next_login_asks_for_both() {
    let provider = Provider::start(&[]).await;
    let scratch = Scratch::new();
    let config = provider.config(&scratch);
    log_in(&scratch, &config).await;
    assert!(review(&scratch, &config).await.0);
    let (texts, _) = call_through_hub(&scratch, &config, &["web__admin"]).await;
    assert!(
        texts[0].contains("needs you to log in (the server asks for more scope)"),
        "{texts:?}"
    );
    // The server's scope names are its words: the person sees them, the
    // model does not.
    assert!(!texts[0].contains("admin"), "{texts:?}");
    log_in(&scratch, &config).await;
    let log = provider.log().await;
    assert_eq!(log["authorize"][1]["scope"], "read admin", "{log}");
    let (texts, _) = call_through_hub(&scratch, &config, &["web__admin", "web__whoami"]).await;
    assert_eq!(texts, ["admin ok", "client=client-1 scopes=read admin"]);
}

#[tokio::test]
async fn logout_revokes_at_the_provider_before_forgetting() {
    for revocable in [true, false] {
        let env: &[(&str, &str)] = if revocable {
            &[]
        } else {
            &[("OAUTH_NO_REVOKE", "1")]
        };
        let provider = Provider::start(env).await;
        let scratch = Scratch::new();
        let config = provider.config(&scratch);
        log_in(&scratch, &config).await;
        let out = airlock(
            &scratch,
            &[
                "auth",
                "logout",
                "web",
                "--config",
                &config.to_string_lossy(),
            ],
        )
        .output()
        .await
        .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{said}");
        let kinds: Vec<Value> = provider.log().await["revocations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["kind"].clone())
            .collect();
        if revocable {
            assert_eq!(kinds, ["refresh", "access"], "{said}");
        } else {
            assert!(kinds.is_empty(), "no endpoint advertised, none guessed");
            assert!(said.contains("not revoked"), "{said}");
        }
        assert!(
            !stored(&scratch).keys().any(|k| k.starts_with("oauth_web")),
            "everything of the login is forgotten"
        );
        let status = airlock(
            &scratch,
            &[
                "auth",
                "status",
                "web",
                "--config",
                &config.to_string_lossy(),
            ],
        )
        .output()
        .await
        .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&status.stdout).trim(),
            "web: not logged in"
        );
    }
}

#[tokio::test]
async fn tokens_are_never_sent_to_a_url_they_were_not_issued_for() {
    let first = Provider::start(&[]).await;
    let scratch = Scratch::new();
    let config = first.config(&scratch);
    log_in(&scratch, &config).await;
    assert!(review(&scratch, &config).await.0);
    // The person points the source elsewhere: the tokens stay behind.
    let second = Provider::start(&[]).await;
    let config = second.config(&scratch);
    let (ok, said) = review(&scratch, &config).await;
    assert!(!ok, "{said}");
    assert!(said.contains("run `airlock auth login web`"), "{said}");
    assert_eq!(
        second.log().await["refused_bearers"],
        0,
        "a token went to the new URL"
    );
    assert_eq!(first.log().await["refused_bearers"], 0);
}

#[tokio::test]
async fn a_resource_cannot_send_the_login_to_a_forbidden_address() {
    // Cloud metadata addresses are refused even with allow_private; the
    // resource names one as its authorization server.
    for server in [
        "http://169.254.169.254",
        "http://[::ffff:169.254.169.254]",
        "http://0xa9fea9fe",
    ] {
        let provider = Provider::start(&[("OAUTH_AUTHORIZATION_SERVER", server)]).await;
        let scratch = Scratch::new();
        let config = provider.config(&scratch);
        let login = start_login(&scratch, &config, &[]);
        let (ok, stderr) = tokio::time::timeout(Duration::from_secs(40), finish(login))
            .await
            .expect("refused at once, not after a timeout");
        assert!(!ok, "{server}: {stderr}");
        assert!(stderr.contains("refuse"), "{server}: {stderr}");
        assert_eq!(provider.log().await["registrations"], 0);
    }
}
