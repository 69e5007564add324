//! Helpers for end-to-end tests: every test runs the real `airlock` binary
//! in a scratch data directory and talks to it as a client would.
//!
//! The binaries are found next to the test executable's target directory;
//! the project's test script builds them (`cargo build --workspace --bins`)
//! before running tests.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::service::{RoleClient, RunningService, Service};
use rmcp::transport::TokioChildProcess;
use rmcp::{ServiceExt, transport::ConfigureCommandExt};
use tokio::process::Command;

/// Path of a workspace binary (`airlock`, `airlock-fixture`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// A scratch data directory and config for one test.
///
/// With `AIRLOCK_TEST_STORE=postgres` every scratch keeps its state in a
/// fresh PostgreSQL database of its own (a team store, tenant `test`)
/// instead of the embedded file: each command the scratch runs is given
/// `AIRLOCK_STORE`, so the whole suite runs against that backend.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    /// Run airlock as this user (through `setpriv`), for limits the kernel
    /// does not hold root to.
    user: Option<u32>,
    team_store: Option<airlock_pgtest::Database>,
}

/// Which backend the suite runs against.
fn team_store() -> Option<airlock_pgtest::Database> {
    match std::env::var("AIRLOCK_TEST_STORE").as_deref() {
        Ok("postgres") => {}
        Ok("sqlite") | Err(_) => return None,
        Ok(other) => panic!("AIRLOCK_TEST_STORE is `{other}`; it must be sqlite or postgres"),
    }
    let db = airlock_pgtest::Server::shared().database();
    let out = std::process::Command::new(bin("airlock"))
        .args(["store", "migrate", "--owner", &db.admin_url()])
        .args([
            "--hub-role",
            airlock_pgtest::HUB_ROLE,
            "--for-tenant",
            "test",
        ])
        .output()
        .expect("run airlock store migrate");
    assert!(
        out.status.success(),
        "airlock store migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(db)
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("temp dir"),
            user: None,
            team_store: team_store(),
        }
    }

    /// A scratch on the embedded store whatever `AIRLOCK_TEST_STORE` says:
    /// for tests about the embedded file itself (its faults, its bytes), and
    /// for tests that set up team stores of their own.
    pub fn embedded() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("temp dir"),
            user: None,
            team_store: None,
        }
    }

    /// The environment that points a command at this scratch's store
    /// (empty for the embedded one, which `AIRLOCK_HOME` names).
    pub fn store_env(&self) -> Vec<(&'static str, String)> {
        match &self.team_store {
            Some(db) => vec![
                ("AIRLOCK_STORE", db.hub_url()),
                ("AIRLOCK_TENANT", "test".into()),
            ],
            None => Vec::new(),
        }
    }

    /// Everything the store holds at rest, by where: the embedded
    /// store's files, or a dump of the team store's database.
    pub fn stored(&self) -> Vec<(String, Vec<u8>)> {
        match &self.team_store {
            Some(db) => vec![("the team store".into(), db.dump())],
            None => ["airlock.db", "airlock.db-wal"]
                .iter()
                .filter_map(|f| {
                    std::fs::read(self.home().join(f))
                        .ok()
                        .map(|b| (f.to_string(), b))
                })
                .collect(),
        }
    }

    /// Runs `sql` (values written inline) on the store as someone with raw
    /// access would: the embedded file, or the team store as its superuser.
    pub fn raw_sql(&self, sql: &str) {
        match &self.team_store {
            Some(db) => {
                db.sql(sql);
            }
            None => rusqlite::Connection::open(self.home().join("airlock.db"))
                .and_then(|c| c.execute_batch(sql))
                .expect("raw SQL on the embedded store"),
        }
    }

    /// A scratch whose airlock runs as `nobody` when the tests run as root
    /// (as CI does), and as the current user otherwise.
    pub fn unprivileged() -> Scratch {
        let mut scratch = Scratch::new();
        if running_as_root() {
            const NOBODY: u32 = 65534;
            std::os::unix::fs::chown(scratch.dir.path(), Some(NOBODY), Some(NOBODY))
                .expect("give the scratch directory to nobody");
            scratch.user = Some(NOBODY);
        }
        scratch
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Writes `airlock.toml` with `body`; `{fixture}`, `{hostile}`,
    /// `{conformance}` and `{airlock}` are replaced with binary paths.
    pub fn config(&self, body: &str) -> PathBuf {
        let text = body
            .replace("{fixture}", &toml_str(&bin("airlock-fixture")))
            .replace("{hostile}", &toml_str(&bin("airlock-hostile")))
            .replace(
                "{conformance}",
                &toml_str(&bin("airlock-conformance-fixture")),
            )
            .replace("{airlock}", &toml_str(&bin("airlock")));
        let path = self.dir.path().join("airlock.toml");
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// Writes the config with a rule allowing every source appended, and
    /// has a person's review pin every tool's contract (what a user does
    /// once with `airlock tools review`), so calls run.
    pub async fn reviewed_config(&self, body: &str) -> PathBuf {
        self.reviewed_config_with_failing(body, &[]).await
    }

    /// The same for a config in which exactly the sources `failing` cannot
    /// start (see [`Scratch::review_with_failing`]).
    pub async fn reviewed_config_with_failing(&self, body: &str, failing: &[&str]) -> PathBuf {
        let config = self.config(&format!(
            "{body}\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n"
        ));
        self.review_with_failing(&config, failing).await;
        config
    }

    /// Approves only the commands of these stdio sources (their tools stay
    /// unreviewed), as `airlock tools review --approve NAME` does.
    pub async fn approve_commands(&self, config: &Path, sources: &[&str]) {
        let mut args = vec!["tools", "review", "--config"];
        let c = config.to_string_lossy().into_owned();
        args.push(&c);
        args.push("--approve");
        args.extend_from_slice(sources);
        let out = self
            .airlock(&args)
            .output()
            .await
            .expect("run airlock tools review");
        // Exit 3: a source did not start (some of these tests are about
        // sources that cannot); its command is approved all the same.
        assert!(
            out.status.success() || out.status.code() == Some(3),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// What `airlock doctor --config <config>` prints.
    pub async fn doctor(&self, config: &Path) -> String {
        let out = self
            .airlock(&["doctor", "--config", &config.to_string_lossy()])
            .output()
            .await
            .expect("run airlock doctor");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `airlock tools review --approve-all` for `config`; every source must
    /// start, so that everything is reviewed (a source that did not is
    /// named in the failure, with why).
    pub async fn review(&self, config: &Path) {
        self.review_with_failing(config, &[]).await;
    }

    /// The same, where exactly the sources `failing` cannot start: the
    /// review pins the rest and exits 3, naming each of them.
    pub async fn review_with_failing(&self, config: &Path, failing: &[&str]) {
        let out = self
            .airlock(&[
                "tools",
                "review",
                "--config",
                &config.to_string_lossy(),
                "--approve-all",
            ])
            .output()
            .await
            .expect("run airlock tools review");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let said = || format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let not_started: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("warning: source "))
            .filter_map(|l| l.split(':').next())
            .collect();
        assert_eq!(
            not_started,
            failing,
            "sources that did not start: {}",
            said()
        );
        let expected = if failing.is_empty() { 0 } else { 3 };
        assert_eq!(out.status.code(), Some(expected), "review: {}", said());
    }

    /// The id of the first pending approval, once one appears (as a person
    /// would read it from `airlock pending`).
    pub async fn pending_id(&self) -> String {
        for _ in 0..200 {
            let out = self
                .airlock(&["pending"])
                .output()
                .await
                .expect("airlock pending");
            let text = String::from_utf8_lossy(&out.stdout);
            if let Some(line) = text.lines().find(|l| l.contains(" pending ")) {
                return line
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no approval appeared");
    }

    /// `airlock secret set NAME` with `value` piped on stdin, as a person
    /// storing a secret would.
    pub async fn store_secret(&self, name: &str, value: &str) {
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .airlock(&["secret", "set", name])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn airlock secret set");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(value.as_bytes()).await.expect("write");
        drop(stdin);
        assert!(child.wait().await.expect("wait").success());
    }

    /// The HTTP face's client token (`http-token` in the data directory,
    /// written by `serve --http` before its port opens).
    pub fn http_token(&self) -> String {
        std::fs::read_to_string(self.home().join("http-token"))
            .expect("serve --http writes http-token")
            .trim()
            .to_string()
    }

    /// A Streamable HTTP client transport to `url` that sends the token.
    pub fn http_transport(
        &self,
        url: &str,
    ) -> rmcp::transport::StreamableHttpClientTransport<reqwest::Client> {
        rmcp::transport::StreamableHttpClientTransport::from_config(
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url,
            )
            .auth_header(self.http_token()),
        )
    }

    /// `airlock serve --config <config>` as a command, with this data dir.
    pub fn airlock(&self, args: &[&str]) -> Command {
        let mut cmd = match self.user {
            Some(uid) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .arg("--clear-groups")
                    .arg(bin("airlock"));
                c
            }
            None => Command::new(bin("airlock")),
        };
        cmd.envs(self.store_env());
        cmd.args(args)
            .env("AIRLOCK_HOME", self.home())
            .env("AIRLOCK_NO_BROWSER", "1")
            .env("AIRLOCK_LOG", "warn,rmcp=error")
            .kill_on_drop(true);
        cmd
    }

    /// Starts `airlock serve --http` with `config` on a free loopback port;
    /// returns the process (killed when dropped) and its `/mcp` URL once
    /// it listens.
    pub async fn serve_http(&self, config: &Path) -> (tokio::process::Child, String) {
        let addr = free_addr();
        let child = self
            .airlock(&[
                "serve",
                "--config",
                &config.to_string_lossy(),
                "--http",
                &addr.to_string(),
            ])
            .spawn()
            .expect("spawn airlock");
        wait_for_port(addr).await;
        (child, format!("http://{addr}/mcp"))
    }

    /// Starts airlock on stdio with `config` and connects `handler` to it.
    pub async fn stdio_client<H: Service<RoleClient>>(
        &self,
        config: &Path,
        handler: H,
    ) -> RunningService<RoleClient, H> {
        let cmd = self
            .airlock(&["serve", "--config", &config.to_string_lossy()])
            .configure(|c| {
                c.stderr(Stdio::inherit());
            });
        let transport = TokioChildProcess::new(cmd).expect("spawn airlock");
        tokio::time::timeout(Duration::from_secs(30), handler.serve(transport))
            .await
            .expect("airlock answered initialize in time")
            .expect("handshake with airlock")
    }
}

/// Whether this process runs as root, read from `/proc` (no `unsafe`).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}

fn toml_str(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "\\\\")
}

/// A `tools/call` with JSON arguments.
pub fn call(name: &str, args: serde_json::Value) -> rmcp::model::CallToolRequestParams {
    rmcp::model::CallToolRequestParams::new(name.to_string())
        .with_arguments(args.as_object().cloned().unwrap_or_default())
}

/// A loopback address with a port that was free a moment ago.
pub fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr")
}

/// Text of the first content block of a tool result: for output of a
/// source that is not trusted, the quoted body inside airlock's envelope
/// (see [`unquote`]); airlock's own messages as they are.
pub fn first_text(result: &rmcp::model::CallToolResult) -> String {
    unquote(&first_raw_text(result))
}

/// Text of the first content block exactly as the client received it.
pub fn first_raw_text(result: &rmcp::model::CallToolResult) -> String {
    let v = serde_json::to_value(result).expect("result serializes");
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The body of airlock's untrusted-content envelope (`[airlock] What
/// follows … «quoted-NONCE»\nBODY\n«quoted-NONCE»`); text that is not
/// wrapped comes back unchanged. Panics on a malformed envelope.
pub fn unquote(text: &str) -> String {
    if !text.starts_with("[airlock] What follows") {
        return text.to_string();
    }
    let (_, rest) = text.split_once('\n').expect("envelope header line");
    let (open, rest) = rest.split_once('\n').expect("envelope opening marker");
    assert!(open.starts_with("«quoted-"), "malformed envelope: {text}");
    let body = rest
        .strip_suffix(open)
        .and_then(|b| b.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("the envelope does not close with its own marker: {text}"));
    body.to_string()
}

/// Waits until `url` accepts TCP connections.
pub async fn wait_for_port(addr: SocketAddr) {
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nothing listens on {addr}");
}

/// airlock on stdio driven with raw JSON lines, for what an SDK client
/// would never send (malformed input) or would rewrite (progress tokens).
pub struct RawStdio {
    pub child: tokio::process::Child,
    /// Every line airlock wrote to the client so far.
    pub seen: String,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl RawStdio {
    pub fn start(scratch: &Scratch, config: &Path) -> RawStdio {
        Self::start_with_stderr(scratch, config, Stdio::inherit())
    }

    /// Like `start`, with airlock's stderr (its logs, at the most verbose
    /// level, protocol dumps included) sent to `stderr`.
    pub fn start_with_stderr(scratch: &Scratch, config: &Path, stderr: Stdio) -> RawStdio {
        use tokio::io::AsyncBufReadExt;
        let mut child = scratch
            .airlock(&["serve", "--config", &config.to_string_lossy()])
            .env("AIRLOCK_LOG", "trace")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn airlock");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        RawStdio {
            child,
            seen: String::new(),
            stdin,
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    pub async fn send_line(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        self.stdin.write_all(b"\n").await.expect("write");
        self.stdin.flush().await.expect("flush");
    }

    pub async fn send(&mut self, v: serde_json::Value) {
        self.send_line(&v.to_string()).await;
    }

    /// The next message from airlock, within 20 s. Every line read is also
    /// kept in `seen`, for tests about what left airlock.
    pub async fn recv(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .expect("airlock answered in time")
            .expect("read stdout")
            .expect("airlock closed stdout");
        self.seen.push_str(&line);
        self.seen.push('\n');
        serde_json::from_str(&line).expect("airlock writes JSON")
    }

    /// Reads messages until the response with `id`, returning it and
    /// everything that came before.
    pub async fn response(&mut self, id: i64) -> (serde_json::Value, Vec<serde_json::Value>) {
        let mut before = Vec::new();
        loop {
            let m = self.recv().await;
            if m.get("id") == Some(&serde_json::json!(id)) && m.get("method").is_none() {
                return (m, before);
            }
            before.push(m);
        }
    }

    /// Sends `initialize` (legacy handshake) and `initialized`.
    pub async fn handshake(&mut self, version: &str) -> serde_json::Value {
        self.send(serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}
        }}))
        .await;
        let (init, _) = self.response(0).await;
        self.send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        init
    }
}

/// Forms a leaked secret is searched for: raw, base64 (standard, unpadded),
/// URL-safe base64, hex and percent-encoded byte by byte.
pub fn secret_forms(v: &str) -> Vec<String> {
    use base64::Engine;
    let e = base64::engine::general_purpose::STANDARD.encode(v);
    let u = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let hex: String = v.bytes().map(|b| format!("{b:02x}")).collect();
    let percent: String = v.bytes().map(|b| format!("%{b:02X}")).collect();
    vec![
        v.to_string(),
        e.trim_end_matches('=').to_string(),
        u,
        hex,
        percent,
    ]
}

/// Whether `needle` occurs in `hay`.
pub fn bytes_contain(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The workspace's root directory (for tests that read the source tree).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the testkit lives in <root>/crates/airlock-testkit")
        .canonicalize()
        .expect("the workspace root exists")
}

/// Every `.rs` file under `dir`, canonical paths, sorted.
pub fn rust_sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)
            .expect("a readable source tree")
            .flatten()
        {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p.canonicalize().expect("a listed file exists"));
            }
        }
    }
    out.sort();
    out
}

/// Fills the listener at `addr` (host:port) with idle connections, the
/// first with half a request head, up to its cap; asserts that one more is
/// closed at once and that every idle one is closed by the head timeout.
pub async fn half_open_connections_are_closed_and_capped(addr: &str) {
    use airlock_http::{HEAD_TIMEOUT, MAX_CONNECTIONS};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // Closed when it reads EOF or a reset within `limit`.
    async fn closed_within(s: &mut tokio::net::TcpStream, limit: Duration) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(limit, s.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
    let started = std::time::Instant::now();
    let mut idle = Vec::new();
    for i in 0..MAX_CONNECTIONS {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        if i == 0 {
            // Half a head, then silence.
            s.write_all(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await
                .unwrap();
        }
        idle.push(s);
    }
    let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_secs(3)).await,
        "a connection past the cap is closed at once"
    );
    let deadline = HEAD_TIMEOUT + Duration::from_secs(10);
    for (i, s) in idle.iter_mut().enumerate() {
        let left = deadline.saturating_sub(started.elapsed());
        assert!(
            closed_within(s, left).await,
            "idle connection {i} still open"
        );
    }
}
