//! Opening a connection to a source: spawning a stdio child or reaching a
//! Streamable HTTP endpoint, then the MCP handshake, all within one timeout.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_config::{Protocol, SourceConfig, Transport};
use rmcp::ClientServiceExt;
use rmcp::model::ProtocolVersion;
use rmcp::service::ClientLifecycleMode;
use std::future::Future;
use std::pin::Pin;

use rmcp::service::{Peer, RoleClient, RunningService, RunningServiceCancellationToken};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::client::UpstreamClient;
use crate::ports::Secrets;

const STDERR_TAIL_LINES: usize = 20;

/// Variables a stdio source inherits from airlock's environment: what
/// programs need to find themselves and their files, nothing else.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TZ",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    // Windows needs these to start most programs at all.
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "APPDATA",
    "LOCALAPPDATA",
    "USERPROFILE",
    "PROGRAMDATA",
    "PROGRAMFILES",
];

pub(crate) struct Connection {
    pub(crate) peer: Peer<RoleClient>,
    cancel: Option<RunningServiceCancellationToken>,
    ended: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    child: Option<Child>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

impl Connection {
    fn new(
        service: RunningService<RoleClient, UpstreamClient>,
        child: Option<Child>,
        stderr_tail: Arc<Mutex<VecDeque<String>>>,
    ) -> Self {
        let peer = service.peer().clone();
        let cancel = Some(service.cancellation_token());
        let ended = Some(Box::pin(async move {
            let _ = service.waiting().await;
        }) as Pin<Box<dyn Future<Output = ()> + Send>>);
        Connection {
            peer,
            cancel,
            ended,
            child,
            stderr_tail,
        }
    }

    /// Waits for the connection to end and says why, in a person's words.
    pub(crate) async fn wait(&mut self) -> String {
        let ended = self.ended.as_mut();
        let reason = match (&mut self.child, ended) {
            (Some(child), Some(ended)) => {
                let status = tokio::select! {
                    status = child.wait() => Some(status),
                    _ = ended => None,
                };
                match status {
                    Some(Ok(s)) => format!("the process exited ({s})"),
                    Some(Err(e)) => format!("waiting for the process failed: {e}"),
                    None => "the process closed its stdio connection".to_string(),
                }
            }
            (None, Some(ended)) => {
                ended.await;
                "the HTTP connection closed".to_string()
            }
            (_, None) => "the connection was closed".to_string(),
        };
        self.ended = None;
        self.with_stderr(reason)
    }

    fn with_stderr(&self, reason: String) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        match tail.back() {
            Some(last) => format!("{reason}; last stderr line: {last}"),
            None => reason,
        }
    }

    pub(crate) async fn close(mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
        if let Some(ended) = self.ended.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), ended).await;
        }
        if let Some(mut child) = self.child.take() {
            // Its stdin has ended: a well-behaved server handles what it
            // was sent last (a cancellation, say) and exits. One that does
            // not is stopped.
            let exited = tokio::time::timeout(Duration::from_millis(500), child.wait()).await;
            if exited.is_err() {
                let _ = child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
            }
        }
    }
}

pub(crate) async fn connect(
    config: &SourceConfig,
    handler: UpstreamClient,
    timeout: Duration,
    max_message_bytes: usize,
    secrets: &Arc<dyn Secrets>,
    login: &crate::oauth::Watch,
) -> Result<Connection, String> {
    match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            // Secrets are resolved here, at spawn: the process holds them
            // for its lifetime (see docs/secrets.md).
            let mut resolved_env = Vec::with_capacity(env.len());
            for (k, v) in env {
                let value = secrets.resolve(v).map_err(|e| format!("env `{k}`: {e}"))?;
                // What the loader reads would load into the confiner first.
                let k = match &config.confine {
                    Some(_) if crate::confine::read_by_the_loader(k) => {
                        format!("{}{k}", crate::confine::LOADER_PREFIX)
                    }
                    _ => k.clone(),
                };
                resolved_env.push((k, value));
            }
            // Spawned by the absolute path review judged (resolved with the
            // child's own PATH and directory), never looked up again.
            let program = crate::command::CommandIdentity::of(config)
                .map(|c| c.program)
                .unwrap_or_else(|| command.into());
            // A confined source is started by airlock's confiner, which
            // becomes the program once it can reach only what was reviewed.
            let (program, args): (std::path::PathBuf, Vec<std::ffi::OsString>) =
                match &config.confine {
                    Some(c) => crate::confine::wrap(&program, args, c)?,
                    None => (program, args.iter().map(Into::into).collect()),
                };
            let mut cmd = Command::new(&program);
            // A child sees a minimal environment plus what the config gives
            // it, never the rest of airlock's (which may hold credentials).
            cmd.env_clear()
                .envs(
                    INHERITED_ENV
                        .iter()
                        // A confined source is not told where the user's
                        // session sockets (D-Bus, the keyring) are.
                        .filter(|k| config.confine.is_none() || **k != "XDG_RUNTIME_DIR")
                        .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
                )
                .args(args)
                .envs(resolved_env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            die_with_parent(&mut cmd);
            let mut child = cmd.spawn().map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => format!(
                    "cannot start `{command}`: program not found (is it installed and on PATH?)"
                ),
                _ => format!("cannot start `{command}`: {e}"),
            })?;
            let stdout = child.stdout.take().ok_or("the child has no stdout")?;
            let stdin = child.stdin.take().ok_or("the child has no stdin")?;
            let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
            let mut stderr_reader = None;
            if let Some(stderr) = child.stderr.take() {
                let secrets = secrets.clone();
                let tail = stderr_tail.clone();
                let source = config.name.clone();
                stderr_reader = Some(tokio::spawn(async move {
                    let mut lines = BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        // A server may print its own credentials.
                        let line = secrets.scrub(&line);
                        tracing::debug!(%source, "stderr: {line}");
                        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                        if t.len() == STDERR_TAIL_LINES {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                }));
            }
            let transport =
                AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(max_message_bytes);
            let service = match tokio::time::timeout(
                timeout,
                handler.serve_with_lifecycle(transport, lifecycle(config.protocol)),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    // Why it ended is often its last words (a confiner
                    // that refused, a missing module): wait for them.
                    let _ = child.start_kill();
                    let settle = Duration::from_millis(500);
                    let exited = tokio::time::timeout(settle, child.wait())
                        .await
                        .ok()
                        .and_then(Result::ok);
                    if let Some(reader) = stderr_reader {
                        let _ = tokio::time::timeout(settle, reader).await;
                    }
                    let tail = stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
                    let mut msg = format!("the MCP handshake failed: {}", handshake_failure(&e));
                    if let Some(s) = exited {
                        msg.push_str(&format!("; the process exited ({s})"));
                    }
                    if let Some(last) = tail.back() {
                        msg.push_str(&format!("; last stderr line: {last}"));
                    }
                    return Err(msg);
                }
                Err(_) => {
                    let _ = child.start_kill();
                    return Err(format!(
                        "no MCP handshake within {}s (is `{command}` an MCP server speaking stdio?)",
                        timeout.as_secs()
                    ));
                }
            };
            Ok(Connection::new(service, Some(child), stderr_tail))
        }
        Transport::Http { url, headers } => {
            // Every outbound request goes through the egress guard, and
            // resolves the source's credentials when it is sent.
            let target = crate::egress::check_target(url, config.allow_private)?;
            let client = crate::credentials::Credentialed::new(
                crate::egress::client(config.allow_private)?,
                headers,
                secrets.clone(),
            )?;
            let http = StreamableHttpClientTransportConfig::with_uri(target.as_str())
                .max_json_response_size(max_message_bytes)
                .max_sse_event_size(max_message_bytes);
            // A source with its own Authorization header does not log in;
            // one that has logged in sends its token (refreshed ahead of
            // expiry) on every request.
            let static_auth = !crate::oauth::logs_in(config);
            let oauth = crate::oauth::Target::of(config)?;
            let vault: Arc<dyn crate::ports::Vault> = secrets.clone();
            let authorized = if static_auth {
                None
            } else {
                crate::oauth::authorized(&oauth, vault.clone(), client.clone()).await?
            };
            // A refusal after the handshake ends rmcp's connection; the
            // watch keeps why, for the call that was refused.
            let watching = (!static_auth).then_some(vault);
            let name = config.name.as_str();
            let service = match authorized {
                Some(client) => {
                    let client = crate::oauth::Watched::new(client, name, watching, login.clone());
                    handshake_http(client, http, config, handler, timeout, secrets).await?
                }
                None => {
                    let client = crate::oauth::Watched::new(client, name, watching, login.clone());
                    handshake_http(client, http, config, handler, timeout, secrets).await?
                }
            };
            Ok(Connection::new(
                service,
                None,
                Arc::new(Mutex::new(VecDeque::new())),
            ))
        }
    }
}

/// The MCP handshake over Streamable HTTP, within `timeout`. A server that
/// asks for a login (401) fails the source with the command that gives it
/// one; the source's record says so, for `status` and `doctor`.
async fn handshake_http<C>(
    client: C,
    http: StreamableHttpClientTransportConfig,
    config: &SourceConfig,
    handler: UpstreamClient,
    timeout: Duration,
    secrets: &Arc<dyn Secrets>,
) -> Result<RunningService<RoleClient, UpstreamClient>, String>
where
    C: rmcp::transport::streamable_http_client::StreamableHttpClient + Send + Sync + 'static,
{
    let url = match &config.transport {
        Transport::Http { url, .. } => url.as_str(),
        Transport::Stdio { .. } => "",
    };
    match tokio::time::timeout(
        timeout,
        handler.serve_with_lifecycle(
            StreamableHttpClientTransport::with_client(client, http),
            lifecycle(config.protocol),
        ),
    )
    .await
    {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => {
            if crate::oauth::logs_in(config)
                && let Some(why) =
                    crate::oauth::login_needed(&e as &(dyn std::error::Error + 'static))
            {
                let vault: Arc<dyn crate::ports::Vault> = secrets.clone();
                return Err(crate::oauth::mark_needs_login(&config.name, vault, why));
            }
            Err(format!(
                "the MCP handshake with {url} failed: {}",
                handshake_failure(&e)
            ))
        }
        Err(_) => Err(format!(
            "no MCP handshake from {url} within {}s",
            timeout.as_secs()
        )),
    }
}

/// The lifecycle for a source's `protocol` setting. `auto` asks with
/// `server/discover` first: a legacy server answers it with an error (or,
/// if it says nothing, rmcp gives up on it after 10 s) and is then greeted
/// with `initialize`.
fn lifecycle(protocol: Protocol) -> ClientLifecycleMode {
    let modern = vec![ProtocolVersion::V_2026_07_28];
    match protocol {
        Protocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: modern,
            legacy_version: Some(crate::client::LEGACY),
        },
        Protocol::Legacy => ClientLifecycleMode::Initialize,
        Protocol::Modern => ClientLifecycleMode::Discover {
            preferred_versions: modern,
        },
    }
}

/// Ask the kernel to kill the child when airlock dies, however it dies
/// (including SIGKILL, where no destructor runs). `kill_on_drop` covers the
/// orderly paths.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and calls
    // only prctl and getppid, both async-signal-safe. If the parent already
    // died between fork and prctl, exit at once rather than run orphaned.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// Why a handshake failed, in a person's terms: the transport's own error
/// and its causes, without the SDK's type names or debug dumps.
fn handshake_failure(e: &rmcp::service::ClientInitializeError) -> String {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::TransportError { error, context } => {
            format!(
                "{} (when it tried to {context})",
                causes(error.error.as_ref())
            )
        }
        E::ExpectedInitResponse(_) => {
            "it answered with something other than its initialize response".into()
        }
        E::ExpectedInitResult(_) => "its answer to initialize was not an initialize result".into(),
        E::JsonRpcError(error) => format!("it refused initialize: {}", error.message),
        other => other.to_string(),
    }
}

/// An error and each cause under it, joined by `: `, a cause that its
/// parent already quotes left out.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
    }
    parts.join(": ")
}
