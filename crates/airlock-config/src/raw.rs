//! The TOML file as written, with positions, and its validation into [`Config`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::error::ConfigError;
use crate::model::{
    ApprovalPage, CodeMode, Config, Confinement, HubSettings, Layer, NetworkAccess, OAuthSettings,
    Protocol, ResourceIndicator, Sessions, SourceConfig, Transport,
};
use crate::names::validate_source_name;
use crate::rules::RawRule;
use crate::syntax::toml_error;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    hub: Option<RawHub>,
    store: Option<crate::store::RawStore>,
    #[serde(default)]
    sources: BTreeMap<Spanned<String>, Spanned<RawSource>>,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHub {
    call_timeout: Option<Spanned<String>>,
    connect_timeout: Option<Spanned<String>>,
    max_message_bytes: Option<Spanned<i64>>,
    allow_non_loopback: Option<bool>,
    managed_policy: Option<String>,
    approval_wait: Option<Spanned<String>>,
    approval_ttl: Option<Spanned<String>>,
    approval_retention: Option<Spanned<String>>,
    allowed_programs: Option<Vec<String>>,
    approval_page: Option<Spanned<String>>,
    code_mode: Option<Spanned<String>>,
    code_memory_mib: Option<Spanned<i64>>,
    code_cpu: Option<Spanned<String>>,
    code_output_kib: Option<Spanned<i64>>,
    code_calls: Option<Spanned<i64>>,
    code_runs: Option<Spanned<i64>>,
    code_time: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    command: Option<Spanned<String>>,
    #[serde(default)]
    args: Vec<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<String, Spanned<String>>,
    cwd: Option<String>,
    url: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    call_timeout: Option<Spanned<String>>,
    prefix: Option<bool>,
    trusted: Option<bool>,
    connection: Option<Spanned<String>>,
    allow_private: Option<bool>,
    quote_output: Option<bool>,
    protocol: Option<Spanned<String>>,
    sessions: Option<Spanned<String>>,
    oauth: Option<Spanned<RawOAuth>>,
    confine: Option<Spanned<RawConfine>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfine {
    #[serde(default)]
    read: Vec<Spanned<String>>,
    #[serde(default)]
    write: Vec<Spanned<String>>,
    network: Option<Spanned<String>>,
    memory_mib: Option<Spanned<u64>>,
    processes: Option<Spanned<u64>>,
    open_files: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOAuth {
    client_id: Option<Spanned<String>>,
    client_secret: Option<Spanned<String>>,
    client_metadata_url: Option<Spanned<String>>,
    #[serde(default)]
    scopes: Vec<Spanned<String>>,
    resource: Option<Spanned<RawResource>>,
}

/// `resource = "https://…"` or `resource = false`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawResource {
    Value(String),
    Flag(bool),
}

pub(crate) fn parse_toml(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| toml_error(path, text, &e))?;
    let hub = match raw.hub {
        Some(h) => parse_hub(path, text, h)?,
        None => HubSettings::default(),
    };
    let store = match raw.store {
        Some(s) => crate::store::parse(path, text, s)?,
        None => Default::default(),
    };
    let sources = raw
        .sources
        .into_iter()
        .map(|(name, source)| parse_source(path, text, name, source))
        .collect::<Result<Vec<_>, _>>()?;
    check_unique(path, text, &sources)?;
    let rules = crate::rules::validate(path, text, Layer::User, raw.rules)?;
    Ok(Config {
        origin: Some(path.to_path_buf()),
        hub,
        sources: sources.into_iter().map(|(_, s)| s).collect(),
        rules,
        managed_rules: Vec::new(),
        store,
    })
}

/// A config error at `offset` in `text`, under `key`.
fn error_at(
    path: &Path,
    text: &str,
    offset: usize,
    key: String,
    msg: String,
    fix: String,
) -> ConfigError {
    ConfigError::at(path, text, Some(offset), Some(key), msg, fix)
}

/// How a source is reached: `command` (stdio) or `url` (Streamable HTTP),
/// with the keys that belong to each, and nothing secret in the clear.
fn parse_transport(
    path: &Path,
    text: &str,
    key: &str,
    start: usize,
    base: &Path,
    s: &mut RawSource,
) -> Result<Transport, ConfigError> {
    let err = |offset, key, msg, fix| error_at(path, text, offset, key, msg, fix);
    Ok(match (s.command.take(), s.url.take()) {
        (Some(_), Some(url)) => {
            return Err(err(
                url.span().start,
                format!("{key}.url"),
                "a source has either `command` (stdio) or `url` (Streamable HTTP), not both".into(),
                "split it into two sources, or remove one of the keys".into(),
            ));
        }
        (None, None) => {
            return Err(err(
                start,
                key.to_string(),
                "a source needs `command` (stdio) or `url` (Streamable HTTP)".into(),
                "add e.g. command = \"npx\" or url = \"https://example.com/mcp\"".into(),
            ));
        }
        (Some(command), None) => {
            if !s.headers.is_empty() {
                return Err(err(
                    start,
                    format!("{key}.headers"),
                    "`headers` applies only to url sources".into(),
                    "remove `headers`, or pass values through `env`".into(),
                ));
            }
            if command.get_ref().trim().is_empty() {
                return Err(err(
                    command.span().start,
                    format!("{key}.command"),
                    "`command` is empty".into(),
                    "name the program to run, e.g. command = \"npx\"".into(),
                ));
            }
            for (k, v) in &s.env {
                // A name is shown in the review as it is: one that is not
                // a plain variable name could pass for something else.
                let plain = k
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !plain {
                    return Err(err(
                        v.span().start,
                        format!("{key}.env.{}", k.escape_debug()),
                        format!(
                            "`{}` is not an environment variable name (letters, digits and `_`, not starting with a digit)",
                            k.escape_debug()
                        ),
                        "rename it, e.g. API_TOKEN".into(),
                    ));
                }
                crate::credentials::check(k, v.get_ref())
                    .map_err(|(m, f)| err(v.span().start, format!("{key}.env.{k}"), m, f))?;
            }
            for (i, a) in s.args.iter().enumerate() {
                let at = format!("{key}.args[{i}]");
                crate::credentials::check_arg(&at, a.get_ref())
                    .map_err(|(m, f)| err(a.span().start, at.clone(), m, f))?;
            }
            Transport::Stdio {
                command: command.into_inner(),
                args: unspan(std::mem::take(&mut s.args)),
                env: unspan_map(std::mem::take(&mut s.env)),
                cwd: s.cwd.take().map(|c| base.join(c)),
            }
        }
        (None, Some(url)) => {
            if !s.args.is_empty() || !s.env.is_empty() || s.cwd.is_some() {
                return Err(err(
                    start,
                    key.to_string(),
                    "`args`, `env` and `cwd` apply only to command sources".into(),
                    "remove them from this url source".into(),
                ));
            }
            check_url(url.get_ref())
                .map_err(|(m, f)| err(url.span().start, format!("{key}.url"), m, f))?;
            for (k, v) in &s.headers {
                crate::credentials::check(k, v.get_ref())
                    .map_err(|(m, f)| err(v.span().start, format!("{key}.headers.{k}"), m, f))?;
            }
            Transport::Http {
                url: url.into_inner(),
                headers: unspan_map(std::mem::take(&mut s.headers)),
            }
        }
    })
}

fn unspan(values: Vec<Spanned<String>>) -> Vec<String> {
    values.into_iter().map(Spanned::into_inner).collect()
}

fn unspan_map(values: BTreeMap<String, Spanned<String>>) -> BTreeMap<String, String> {
    values
        .into_iter()
        .map(|(k, v)| (k, v.into_inner()))
        .collect()
}

/// With only `approval_wait` given, `approval_ttl` is at least this much
/// longer.
const TTL_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The `[hub]` table.
fn parse_hub(path: &Path, text: &str, h: RawHub) -> Result<HubSettings, ConfigError> {
    let err = |offset, key, msg, fix| error_at(path, text, offset, key, msg, fix);
    let mut hub = HubSettings::default();
    if let Some(t) = h.call_timeout {
        hub.call_timeout = duration(path, text, "hub.call_timeout", &t)?;
    }
    if let Some(t) = h.connect_timeout {
        hub.connect_timeout = duration(path, text, "hub.connect_timeout", &t)?;
    }
    if let Some(n) = h.max_message_bytes {
        let v = *n.get_ref();
        if !(1024..=(1 << 30)).contains(&v) {
            return Err(err(
                n.span().start,
                "hub.max_message_bytes".into(),
                format!("{v} is outside the accepted range"),
                "use a byte count between 1024 and 1073741824 (1 GiB)".into(),
            ));
        }
        hub.max_message_bytes = v as usize;
    }
    if let Some(b) = h.allow_non_loopback {
        hub.allow_non_loopback = b;
    }
    let base = path.parent().unwrap_or(Path::new("."));
    hub.managed_policy = h.managed_policy.map(|p| base.join(p));
    if let Some(t) = &h.approval_wait {
        hub.approval_wait = duration(path, text, "hub.approval_wait", t)?;
    }
    match &h.approval_ttl {
        Some(t) => {
            hub.approval_ttl = duration(path, text, "hub.approval_ttl", t)?;
            if hub.approval_ttl <= hub.approval_wait {
                return Err(err(
                    t.span().start,
                    "hub.approval_ttl".into(),
                    format!(
                        "approval_ttl ({}) must be longer than approval_wait ({}), or a call could still wait on an approval nobody can give",
                        t.get_ref(),
                        h.approval_wait.as_ref().map_or("90s, the default", |w| w.get_ref().as_str())
                    ),
                    "set approval_ttl above approval_wait, or leave it out: it then follows approval_wait with 30s to spare".into(),
                ));
            }
        }
        // Only the wait given: a person gets as long, and a little more.
        None => hub.approval_ttl = hub.approval_ttl.max(hub.approval_wait + TTL_MARGIN),
    }
    hub.allowed_programs = h.allowed_programs;
    if let Some(p) = h.approval_page {
        hub.approval_page = match p.get_ref().as_str() {
            "open" => ApprovalPage::Open,
            "print" => ApprovalPage::Print,
            "off" => ApprovalPage::Off,
            other => {
                return Err(err(
                    p.span().start,
                    "hub.approval_page".into(),
                    format!("`{other}` is not a way to show the approval page"),
                    "use \"open\" (open it in the browser), \"print\" (print its link) or \"off\""
                        .into(),
                ));
            }
        };
    }
    if let Some(t) = h.approval_retention {
        hub.approval_retention = duration(path, text, "hub.approval_retention", &t)?;
    }
    if let Some(m) = h.code_mode {
        hub.code_mode = match m.get_ref().as_str() {
            "off" => CodeMode::Off,
            "beside" => CodeMode::Beside,
            "only" => CodeMode::Only,
            other => {
                return Err(err(
                    m.span().start,
                    "hub.code_mode".into(),
                    format!("`{other}` is not a code mode"),
                    "use \"off\", \"beside\" (the meta tools beside every tool) or \"only\" (the meta tools instead)".into(),
                ));
            }
        };
    }
    let bounded =
        |v: &Option<Spanned<i64>>, name: &str, range: std::ops::RangeInclusive<i64>| match v {
            Some(v) if !range.contains(v.get_ref()) => Err(err(
                v.span().start,
                format!("hub.{name}"),
                format!(
                    "{} is outside {}..={}",
                    v.get_ref(),
                    range.start(),
                    range.end()
                ),
                format!(
                    "give a value from {} to {}, or remove `{name}`",
                    range.start(),
                    range.end()
                ),
            )),
            v => Ok(v.as_ref().map(|v| *v.get_ref())),
        };
    if let Some(m) = bounded(&h.code_memory_mib, "code_memory_mib", 8..=4096)? {
        hub.code.memory_mib = m as u64;
    }
    if let Some(k) = bounded(&h.code_output_kib, "code_output_kib", 1..=16384)? {
        hub.code.output_kib = k as u64;
    }
    if let Some(c) = bounded(&h.code_calls, "code_calls", 1..=10000)? {
        hub.code.calls = c as u32;
    }
    if let Some(r) = bounded(&h.code_runs, "code_runs", 1..=64)? {
        hub.code.runs = r as u32;
    }
    if let Some(t) = &h.code_cpu {
        hub.code.cpu = duration(path, text, "hub.code_cpu", t)?;
    }
    if let Some(t) = &h.code_time {
        hub.code.time = duration(path, text, "hub.code_time", t)?;
    }
    Ok(hub)
}

/// One `[sources.NAME]` table, with where its name is (for duplicate checks).
fn parse_source(
    path: &Path,
    text: &str,
    name: Spanned<String>,
    source: Spanned<RawSource>,
) -> Result<(usize, SourceConfig), ConfigError> {
    let err = |offset, key, msg, fix| error_at(path, text, offset, key, msg, fix);
    let base = path.parent().unwrap_or(Path::new("."));
    let key = format!("sources.{}", name.get_ref());
    validate_source_name(name.get_ref()).map_err(|m| {
        err(
            name.span().start,
            key.clone(),
            m,
            format!(
                "rename the table, e.g. [sources.{}]",
                crate::names::sanitize(name.get_ref())
            ),
        )
    })?;
    let span = source.span();
    let mut s = source.into_inner();
    let transport = parse_transport(path, text, &key, span.start, base, &mut s)?;
    let call_timeout = s
        .call_timeout
        .map(|t| duration(path, text, &format!("{key}.call_timeout"), &t))
        .transpose()?;
    let protocol = match s.protocol {
        None => Protocol::Auto,
        Some(p) => match p.get_ref().as_str() {
            "auto" => Protocol::Auto,
            "legacy" => Protocol::Legacy,
            "2026-07-28" => Protocol::Modern,
            other => {
                return Err(err(
                    p.span().start,
                    format!("{key}.protocol"),
                    format!("`{other}` is not a protocol airlock can speak to a source"),
                    "use \"auto\" (the newest the source offers), \"legacy\" (the initialize handshake) or \"2026-07-28\"".into(),
                ));
            }
        },
    };
    let sessions = match s.sessions {
        None => Sessions::default(),
        Some(p) => match p.get_ref().as_str() {
            "shared" => Sessions::Shared,
            "per-client" => Sessions::PerClient,
            other => {
                return Err(err(
                    p.span().start,
                    format!("{key}.sessions"),
                    format!("`{other}` is not a way to connect client sessions to a source"),
                    "use \"shared\" (one connection for every client) or \"per-client\" (each client session its own)".into(),
                ));
            }
        },
    };
    let oauth = match s.oauth.take() {
        None => OAuthSettings::default(),
        Some(o) if !matches!(transport, Transport::Http { .. }) => {
            return Err(err(
                o.span().start,
                format!("{key}.oauth"),
                "`oauth` applies only to url sources".into(),
                "remove the [oauth] table from this command source".into(),
            ));
        }
        Some(o) => parse_oauth(path, text, &key, o.into_inner())?,
    };
    let confine = match s.confine.take() {
        None => None,
        Some(c) if !matches!(transport, Transport::Stdio { .. }) => {
            return Err(err(
                c.span().start,
                format!("{key}.confine"),
                "`confine` applies only to command sources".into(),
                "remove the [confine] table from this url source (its traffic goes through airlock's egress guard)".into(),
            ));
        }
        Some(c) => Some(parse_confine(path, text, &key, c.into_inner())?),
    };
    let connection = match s.connection {
        Some(c) if c.get_ref().is_empty() => {
            return Err(err(
                c.span().start,
                format!("{key}.connection"),
                "`connection` is empty".into(),
                "name the account, e.g. connection = \"work\", or remove the key".into(),
            ));
        }
        Some(c) => c.into_inner(),
        None => name.get_ref().clone(),
    };
    Ok((
        name.span().start,
        SourceConfig {
            name: name.into_inner(),
            transport,
            call_timeout,
            prefix: s.prefix.unwrap_or(true),
            trusted: s.trusted.unwrap_or(false),
            connection,
            allow_private: s.allow_private.unwrap_or(false),
            quote_output: s.quote_output.unwrap_or(!s.trusted.unwrap_or(false)),
            protocol,
            sessions,
            oauth,
            confine,
        },
    ))
}

/// `[sources.NAME.confine]`: paths made absolute against the config's
/// directory, a network mode, limits that can be met.
fn parse_confine(
    path: &Path,
    text: &str,
    key: &str,
    c: RawConfine,
) -> Result<Confinement, ConfigError> {
    let err = |offset, key, msg, fix| error_at(path, text, offset, key, msg, fix);
    let key = format!("{key}.confine");
    let base = path.parent().unwrap_or(Path::new("."));
    let paths = |list: Vec<Spanned<String>>, name: &str| {
        list.into_iter()
            .map(|p| {
                if p.get_ref().trim().is_empty() {
                    return Err(err(
                        p.span().start,
                        format!("{key}.{name}"),
                        "an empty path".into(),
                        "name a directory or file, e.g. \"~/notes\" or \"./data\"".into(),
                    ));
                }
                let raw = p.get_ref();
                let expanded = match raw.strip_prefix("~/") {
                    Some(rest) => match dirs_home() {
                        Some(home) => home.join(rest),
                        None => {
                            return Err(err(
                                p.span().start,
                                format!("{key}.{name}"),
                                format!("`{raw}` starts with ~ but there is no home directory"),
                                "write the absolute path".into(),
                            ));
                        }
                    },
                    None => base.join(raw),
                };
                // Absolute now, so the confiner never reads it against
                // the source's own directory.
                std::path::absolute(&expanded).map_err(|e| {
                    err(
                        p.span().start,
                        format!("{key}.{name}"),
                        format!("`{raw}` cannot be made absolute: {e}"),
                        "write the absolute path".into(),
                    )
                })
            })
            .collect::<Result<Vec<PathBuf>, ConfigError>>()
    };
    let read = paths(c.read, "read")?;
    let write = paths(c.write, "write")?;
    let network = match c.network {
        None => NetworkAccess::None,
        Some(n) => match n.get_ref().as_str() {
            "none" => NetworkAccess::None,
            "host" => NetworkAccess::Host,
            other => {
                return Err(err(
                    n.span().start,
                    format!("{key}.network"),
                    format!("`{other}` is not a network mode"),
                    "use \"none\" (no network at all) or \"host\" (the machine's network)".into(),
                ));
            }
        },
    };
    let limit = |v: Option<Spanned<u64>>, name: &str, least: u64| match v {
        Some(v) if *v.get_ref() < least => Err(err(
            v.span().start,
            format!("{key}.{name}"),
            format!("{} is below what any program needs ({least})", v.get_ref()),
            format!("give at least {least}, or remove `{name}`"),
        )),
        v => Ok(v.map(Spanned::into_inner)),
    };
    Ok(Confinement {
        read,
        write,
        network,
        memory_mib: limit(c.memory_mib, "memory_mib", 16)?,
        processes: limit(c.processes, "processes", 1)?,
        open_files: limit(c.open_files, "open_files", 16)?,
    })
}

fn dirs_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// `[sources.NAME.oauth]`: a client secret only by reference, URLs that
/// can be sent to an authorization server, scopes without spaces.
fn parse_oauth(
    path: &Path,
    text: &str,
    key: &str,
    o: RawOAuth,
) -> Result<OAuthSettings, ConfigError> {
    let err = |offset, key, msg, fix| error_at(path, text, offset, key, msg, fix);
    let key = format!("{key}.oauth");
    let non_empty = |v: Spanned<String>, name: &str| {
        if v.get_ref().trim().is_empty() {
            Err(err(
                v.span().start,
                format!("{key}.{name}"),
                format!("`{name}` is empty"),
                format!("give a value, or remove `{name}`"),
            ))
        } else {
            Ok(v)
        }
    };
    let client_id = o.client_id.map(|v| non_empty(v, "client_id")).transpose()?;
    let client_secret = match o.client_secret {
        None => None,
        Some(v) => {
            let at = format!("{key}.client_secret");
            let value = v.get_ref();
            let name = value.strip_prefix("secret:").or_else(|| {
                value
                    .strip_prefix("${secret:")
                    .and_then(|r| r.strip_suffix('}'))
            });
            if !name.is_some_and(|n| {
                !n.is_empty()
                    && !n.contains(['$', '{', '}', ':'])
                    && !airlock_common::is_reserved_secret_name(n)
            }) {
                return Err(err(
                    v.span().start,
                    at,
                    "`client_secret` must name a stored secret, never hold the value".into(),
                    "store it with `airlock secret set NAME` and write client_secret = \"secret:NAME\""
                        .into(),
                ));
            }
            if client_id.is_none() {
                return Err(err(
                    v.span().start,
                    at,
                    "`client_secret` without `client_id`: a secret belongs to a registered client"
                        .into(),
                    "add the client_id the provider gave you, or remove client_secret".into(),
                ));
            }
            name.map(str::to_string)
        }
    };
    let https = |v: Spanned<String>, name: &str| -> Result<String, ConfigError> {
        let ok = url::Url::parse(v.get_ref())
            .is_ok_and(|u| u.scheme() == "https" && u.host().is_some() && u.path() != "/");
        if !ok {
            return Err(err(
                v.span().start,
                format!("{key}.{name}"),
                format!("`{}` is not an https URL with a path", v.get_ref()),
                "write the document's full https address, e.g. https://example.com/airlock/client.json"
                    .into(),
            ));
        }
        Ok(v.into_inner())
    };
    let client_metadata_url = o
        .client_metadata_url
        .map(|v| https(v, "client_metadata_url"))
        .transpose()?;
    let mut scopes = Vec::new();
    for s in o.scopes {
        if s.get_ref().is_empty() || s.get_ref().contains(char::is_whitespace) {
            return Err(err(
                s.span().start,
                format!("{key}.scopes"),
                format!("`{}` is not one scope", s.get_ref()),
                "list each scope as its own string, e.g. scopes = [\"read\", \"write\"]".into(),
            ));
        }
        scopes.push(s.into_inner());
    }
    let resource = match o.resource {
        None => ResourceIndicator::Server,
        Some(r) => {
            let start = r.span().start;
            match r.into_inner() {
                RawResource::Flag(true) => ResourceIndicator::Server,
                RawResource::Flag(false) => ResourceIndicator::Omit,
                RawResource::Value(v) => {
                    if url::Url::parse(&v).map_or(true, |u| u.cannot_be_a_base()) {
                        return Err(err(
                            start,
                            format!("{key}.resource"),
                            format!("`{v}` is not an absolute URL"),
                            "write the resource the provider expects (an absolute URL), or resource = false to send none".into(),
                        ));
                    }
                    ResourceIndicator::Override(v)
                }
            }
        }
    };
    Ok(OAuthSettings {
        client_id: client_id.map(Spanned::into_inner),
        client_secret,
        client_metadata_url,
        scopes,
        resource,
    })
}

fn duration(
    path: &Path,
    text: &str,
    key: &str,
    value: &Spanned<String>,
) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(value.get_ref()).map_err(|e| {
        ConfigError::at(
            path,
            text,
            Some(value.span().start),
            Some(key.into()),
            format!("`{}` is not a duration: {e}", value.get_ref()),
            "write a number with a unit, e.g. \"30s\", \"2m\" or \"500ms\"",
        )
    })?;
    if d.is_zero() || d > Duration::from_secs(24 * 3600) {
        return Err(ConfigError::at(
            path,
            text,
            Some(value.span().start),
            Some(key.into()),
            format!("`{}` is outside the accepted range", value.get_ref()),
            "use a duration above zero and at most 24h",
        ));
    }
    Ok(d)
}

/// Rejects URLs that cannot be a Streamable HTTP endpoint. Egress review
/// (allowed hosts, private ranges) happens where connections are made.
pub(crate) fn check_url(url: &str) -> Result<(), (String, String)> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err((
            format!("`{url}` is not an absolute URL"),
            "write the full endpoint, e.g. https://example.com/mcp".into(),
        ));
    };
    if !scheme.eq_ignore_ascii_case("https") && !scheme.eq_ignore_ascii_case("http") {
        return Err((
            format!("scheme `{scheme}` is not supported"),
            "use an https:// (or, for loopback, http://) Streamable HTTP endpoint".into(),
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err((
            "the URL carries credentials (user:password@) which would leak into logs and requests"
                .into(),
            "remove them from the URL and send them as a header instead".into(),
        ));
    }
    if authority.is_empty() {
        return Err((
            format!("`{url}` has no host"),
            "write the full endpoint, e.g. https://example.com/mcp".into(),
        ));
    }
    if scheme.eq_ignore_ascii_case("http") && !is_loopback_authority(authority) {
        return Err((
            format!("`{url}` would send calls unencrypted to another machine"),
            "use https://, or http:// only for 127.0.0.1, [::1] or localhost".into(),
        ));
    }
    Ok(())
}

/// `host[:port]` naming this machine.
fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn check_unique(
    path: &Path,
    text: &str,
    sources: &[(usize, SourceConfig)],
) -> Result<(), ConfigError> {
    for (i, (offset, a)) in sources.iter().enumerate() {
        for (_, b) in &sources[..i] {
            if a.name.eq_ignore_ascii_case(&b.name) {
                return Err(ConfigError::at(
                    path,
                    text,
                    Some(*offset),
                    Some(format!("sources.{}", a.name)),
                    format!(
                        "sources `{}` and `{}` differ only in case, so their tool names would collide",
                        b.name, a.name
                    ),
                    "rename one of them",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_in_the_store_table_names_the_key_it_meant_and_a_password_is_refused() {
        let parse = |text: &str| {
            parse_toml(Path::new("airlock.toml"), text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let typo = parse("[store]\nurl = \"postgres://hub@h/db\"\ntenent = \"x\"\n");
        assert!(typo.contains("did you mean `tenant`"), "{typo}");
        let literal = parse("[store]\nurl = \"postgres://hub@h/db\"\npassword = \"hunter2\"\n");
        assert!(
            literal.contains("stored secret") && !literal.contains("hunter2"),
            "{literal}"
        );
        assert!(parse("[store]\nurl = \"postgres://hub@h/db\"\n").is_empty());
    }

    use std::path::PathBuf;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_toml(&PathBuf::from("airlock.toml"), text)
    }

    #[test]
    fn reads_both_kinds_of_source() {
        let c = parse(
            r#"
[hub]
call_timeout = "5s"

[sources.fs]
command = "npx"
args = ["-y", "server"]
env = { A = "b" }

[sources.web]
url = "https://example.com/mcp"
headers = { X-Team = "blue" }
call_timeout = "2m"
"#,
        )
        .unwrap();
        assert_eq!(c.hub.call_timeout, Duration::from_secs(5));
        assert_eq!(c.sources.len(), 2);
        assert_eq!(c.sources[0].name, "fs");
        assert_eq!(c.sources[1].call_timeout, Some(Duration::from_secs(120)));
        assert!(matches!(c.sources[1].transport, Transport::Http { .. }));
    }

    #[test]
    fn an_environment_name_that_is_not_one_is_refused() {
        for name in [
            "\"A B\"",
            "\"1A\"",
            "\"A=B\"",
            "\"A\\nPATH\"",
            "\"\"",
            "\"Ä\"",
        ] {
            let e = parse(&format!(
                "[sources.fs]\ncommand = \"npx\"\nenv = {{ {name} = \"x\" }}\n"
            ))
            .unwrap_err();
            assert!(
                e.message.contains("is not an environment variable name"),
                "{name}: {e}"
            );
            assert!(!e.to_string().contains('\u{0}'), "{name}: {e}");
        }
        assert!(parse("[sources.fs]\ncommand = \"npx\"\nenv = { _A1 = \"x\" }\n").is_ok());
    }

    #[test]
    fn code_mode_and_its_caps_are_read_and_checked() {
        let c = parse(
            "[hub]\ncode_mode = \"only\"\ncode_memory_mib = 32\ncode_cpu = \"2s\"\ncode_output_kib = 8\ncode_calls = 20\ncode_runs = 2\ncode_time = \"10m\"\n",
        )
        .unwrap();
        assert_eq!(c.hub.code_mode, CodeMode::Only);
        assert_eq!(
            c.hub.code,
            crate::model::CodeLimits {
                memory_mib: 32,
                cpu: Duration::from_secs(2),
                output_kib: 8,
                calls: 20,
                runs: 2,
                time: Duration::from_secs(600),
            }
        );
        assert_eq!(parse("").unwrap().hub.code_mode, CodeMode::Off);
        for (text, key, says) in [
            ("code_mode = \"on\"\n", "hub.code_mode", "not a code mode"),
            ("code_mode = \"Only\"\n", "hub.code_mode", "not a code mode"),
            (
                "code_memory_mib = 4\n",
                "hub.code_memory_mib",
                "outside 8..=4096",
            ),
            ("code_memory_mib = -1\n", "hub.code_memory_mib", "outside"),
            ("code_calls = 0\n", "hub.code_calls", "outside 1..=10000"),
            ("code_runs = 65\n", "hub.code_runs", "outside 1..=64"),
            ("code_output_kib = 0\n", "hub.code_output_kib", "outside"),
            (
                "code_cpu = \"0s\"\n",
                "hub.code_cpu",
                "outside the accepted range",
            ),
            ("code_cpu = \"fast\"\n", "hub.code_cpu", "not a duration"),
        ] {
            let e = parse(&format!("[hub]\n{text}")).unwrap_err();
            assert_eq!((e.line, e.key.as_deref()), (2, Some(key)), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
            assert!(!e.fix.is_empty(), "{text}: {e}");
        }
        let e = parse("[hub]\ncode_mod = \"only\"\n").unwrap_err();
        assert!(e.fix.contains("did you mean `code_mode`"), "{e}");
    }

    #[test]
    fn unknown_key_names_line_column_key_and_fix() {
        let e = parse("[sources.fs]\ncomand = \"npx\"\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 1));
        assert_eq!(e.key.as_deref(), Some("sources.fs.comand"));
        assert!(e.fix.contains("did you mean `command`"), "{e}");
        let shown = e.to_string();
        assert!(
            shown.starts_with("airlock.toml:2:1: unknown field `comand`"),
            "{shown}"
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let e = parse("[hub]\ncall_timeout = 60\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("hub.call_timeout"), "{e}");
        assert_eq!(e.line, 2, "{e}");
        let e = parse("[sources.fs]\ncommand = \"npx\"\nenv = { A = 1 }\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("sources.fs.A"), "{e}");
    }

    #[test]
    fn a_live_credential_is_reported_at_its_own_line() {
        let e = parse(
            "[sources.gh]\ncommand = \"npx\"\nargs = [\"-y\"]\n\n[sources.gh.env]\nOTHER = \"x\"\nGITHUB_TOKEN = \"ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert_eq!(e.key.as_deref(), Some("sources.gh.env.GITHUB_TOKEN"), "{e}");
        let e = parse(
            "[sources.db]\ncommand = \"x\"\nargs = [\n  \"--verbose\",\n  \"postgresql://app:hunter2@db/app\",\n]\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        let e = parse("[sources.w]\nurl = \"https://example.com/mcp\"\n\n[sources.w.headers]\nAuthorization = \"Bearer ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n")
            .unwrap_err();
        assert_eq!(e.line, 5, "{e}");
    }

    #[test]
    fn approval_wait_alone_brings_the_ttl_along() {
        let c = parse("[hub]\napproval_wait = \"5m\"\n").unwrap();
        assert_eq!(c.hub.approval_wait, Duration::from_secs(300));
        assert!(c.hub.approval_ttl > c.hub.approval_wait);
        let c = parse("[hub]\napproval_wait = \"10s\"\n").unwrap();
        assert_eq!(
            c.hub.approval_ttl,
            Duration::from_secs(120),
            "the default stays"
        );
        let e = parse("[hub]\napproval_wait = \"5m\"\napproval_ttl = \"2m\"\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (3, Some("hub.approval_ttl")),
            "{e}"
        );
        assert!(
            e.message.contains("(2m)") && e.message.contains("(5m)"),
            "{e}"
        );
        let e = parse("[hub]\napproval_ttl = \"60s\"\n").unwrap_err();
        assert!(e.message.contains("90s, the default"), "{e}");
    }

    #[test]
    fn unknown_top_level_key_is_an_error() {
        let e = parse("[hubb]\n").unwrap_err();
        assert!(e.fix.contains("`hub`"), "{e}");
    }

    #[test]
    fn bad_duration_is_explained() {
        let e = parse("[hub]\ncall_timeout = \"soon\"\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(e.key.as_deref(), Some("hub.call_timeout"));
        assert!(e.fix.contains("30s"));
    }

    #[test]
    fn source_needs_exactly_one_transport() {
        let e = parse("[sources.a]\nargs = []\n").unwrap_err();
        assert!(e.message.contains("needs `command`"), "{e}");
        let e = parse("[sources.a]\ncommand = \"x\"\nurl = \"https://h/mcp\"\n").unwrap_err();
        assert_eq!(e.line, 3);
    }

    #[test]
    fn plain_http_is_only_for_loopback() {
        for ok in [
            "http://127.0.0.1:8080/mcp",
            "http://localhost/mcp",
            "http://[::1]:9/mcp",
        ] {
            check_url(ok).unwrap();
        }
        for bad in [
            "http://example.com/mcp",
            "http://10.0.0.1/mcp",
            "ftp://x/y",
            "example.com/mcp",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_in_url_are_refused() {
        let e = parse("[sources.a]\nurl = \"https://user:tok@example.com/mcp\"\n").unwrap_err();
        assert!(e.message.contains("credentials"), "{e}");
    }

    #[test]
    fn names_that_would_collide_are_refused() {
        let e =
            parse("[sources.Git]\ncommand = \"a\"\n[sources.git]\ncommand = \"b\"\n").unwrap_err();
        assert!(e.message.contains("collide"), "{e}");
        let e = parse("[sources.git_hub]\ncommand = \"a\"\n").unwrap_err();
        assert!(e.fix.contains("[sources.git-hub]"), "{e}");
    }

    #[test]
    fn wrong_type_is_explained() {
        let e = parse("[sources.a]\ncommand = \"x\"\nargs = \"-y\"\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("invalid type"), "{e}");
    }

    const WEB: &str = "[sources.web]\nurl = \"https://mcp.example.com/mcp\"\n";

    fn oauth(table: &str) -> Result<OAuthSettings, ConfigError> {
        parse(&format!("{WEB}[sources.web.oauth]\n{table}"))
            .map(|c| c.sources.into_iter().next().unwrap().oauth)
    }

    #[test]
    fn oauth_defaults_to_discovery_and_the_servers_resource() {
        let c = parse(WEB).unwrap();
        assert_eq!(c.sources[0].oauth, OAuthSettings::default());
        assert_eq!(c.sources[0].oauth.resource, ResourceIndicator::Server);
    }

    #[test]
    fn oauth_reads_every_setting() {
        let o = oauth(concat!(
            "client_id = \"airlock-desktop\"\n",
            "client_secret = \"secret:web-client\"\n",
            "client_metadata_url = \"https://example.com/airlock/client.json\"\n",
            "scopes = [\"read\", \"write\"]\n",
            "resource = \"https://api.example.com/\"\n",
        ))
        .unwrap();
        assert_eq!(o.client_id.as_deref(), Some("airlock-desktop"));
        assert_eq!(o.client_secret.as_deref(), Some("web-client"));
        assert_eq!(
            o.client_metadata_url.as_deref(),
            Some("https://example.com/airlock/client.json")
        );
        assert_eq!(o.scopes, ["read", "write"]);
        assert_eq!(
            o.resource,
            ResourceIndicator::Override("https://api.example.com/".into())
        );
        let braced =
            oauth("client_id = \"a\"\nclient_secret = \"${secret:web-client}\"\n").unwrap();
        assert_eq!(braced.client_secret.as_deref(), Some("web-client"));
        assert_eq!(
            oauth("resource = false\n").unwrap().resource,
            ResourceIndicator::Omit
        );
        assert_eq!(
            oauth("resource = true\n").unwrap().resource,
            ResourceIndicator::Server
        );
    }

    #[test]
    fn an_oauth_client_secret_is_only_ever_a_reference() {
        for literal in [
            "s3cr3t-value",
            "secret:",
            "${secret:}",
            "${secret:a",
            "secret:${x}",
            "${env:TOKEN}",
            "secret:oauth_web_access",
            "${secret:OAUTH_web}",
            "",
        ] {
            let e = oauth(&format!(
                "client_id = \"a\"\nclient_secret = \"{literal}\"\n"
            ))
            .unwrap_err();
            assert_eq!(
                e.key.as_deref(),
                Some("sources.web.oauth.client_secret"),
                "{literal}"
            );
            assert!(e.message.contains("never hold the value"), "{literal}: {e}");
            if !literal.is_empty() && literal.len() > 8 {
                assert!(
                    !e.to_string().contains("s3cr3t"),
                    "the value is echoed: {e}"
                );
            }
        }
        let e = oauth("client_secret = \"secret:web-client\"\n").unwrap_err();
        assert!(e.message.contains("without `client_id`"), "{e}");
    }

    #[test]
    fn oauth_settings_that_cannot_work_are_refused_with_their_key() {
        let cases = [
            ("client_id = \"\"\n", "client_id", "is empty"),
            (
                "client_metadata_url = \"http://example.com/c.json\"\n",
                "client_metadata_url",
                "https URL",
            ),
            (
                "client_metadata_url = \"https://example.com/\"\n",
                "client_metadata_url",
                "with a path",
            ),
            (
                "client_metadata_url = \"client.json\"\n",
                "client_metadata_url",
                "https URL",
            ),
            ("scopes = [\"read write\"]\n", "scopes", "not one scope"),
            ("scopes = [\"\"]\n", "scopes", "not one scope"),
            ("resource = \"api\"\n", "resource", "absolute URL"),
            ("resource = \"mailto:a@b\"\n", "resource", "absolute URL"),
        ];
        for (table, key, says) in cases {
            let e = oauth(table).unwrap_err();
            assert_eq!(
                e.key.as_deref(),
                Some(format!("sources.web.oauth.{key}").as_str()),
                "{table}"
            );
            assert!(e.message.contains(says), "{table}: {e}");
        }
        let e = oauth("client_idd = \"a\"\n").unwrap_err();
        assert!(e.fix.contains("did you mean `client_id`"), "{e}");
    }

    #[test]
    fn oauth_belongs_to_url_sources_only() {
        let e = parse("[sources.fs]\ncommand = \"npx\"\n[sources.fs.oauth]\nclient_id = \"a\"\n")
            .unwrap_err();
        assert!(e.message.contains("only to url sources"), "{e}");
    }

    #[test]
    fn confine_reads_paths_against_the_config_and_refuses_what_cannot_be() {
        let c = parse(
            "[sources.fs]\ncommand = \"npx\"\n[sources.fs.confine]\nread = [\"docs\"]\nwrite = [\"/srv/data\"]\nnetwork = \"host\"\nmemory_mib = 512\nprocesses = 32\nopen_files = 256\n",
        )
        .unwrap();
        let confine = c.sources[0].confine.clone().unwrap();
        assert_eq!(
            confine.read,
            [std::env::current_dir().unwrap().join("docs")],
            "relative to the config's directory, made absolute"
        );
        assert_eq!(confine.write, [PathBuf::from("/srv/data")]);
        assert_eq!(confine.network, NetworkAccess::Host);
        assert_eq!(
            (confine.memory_mib, confine.processes, confine.open_files),
            (Some(512), Some(32), Some(256))
        );
        let none = parse("[sources.fs]\ncommand = \"x\"\n[sources.fs.confine]\n").unwrap();
        assert_eq!(
            none.sources[0].confine.as_ref().unwrap().network,
            NetworkAccess::None
        );
        assert_eq!(
            parse("[sources.fs]\ncommand = \"x\"\n").unwrap().sources[0].confine,
            None
        );
        for (table, key, says) in [
            ("network = \"wide\"\n", "network", "not a network mode"),
            ("read = [\"\"]\n", "read", "empty path"),
            ("memory_mib = 1\n", "memory_mib", "below"),
            ("processes = 0\n", "processes", "below"),
        ] {
            let e = parse(&format!(
                "[sources.fs]\ncommand = \"x\"\n[sources.fs.confine]\n{table}"
            ))
            .unwrap_err();
            assert_eq!(
                e.key.as_deref(),
                Some(format!("sources.fs.confine.{key}").as_str()),
                "{table}"
            );
            assert!(e.message.contains(says), "{table}: {e}");
        }
        let e =
            parse("[sources.fs]\ncommand = \"x\"\n[sources.fs.confine]\nwrtie = []\n").unwrap_err();
        assert!(e.fix.contains("did you mean `write`"), "{e}");
        let e = parse("[sources.w]\nurl = \"https://h.example/mcp\"\n[sources.w.confine]\n")
            .unwrap_err();
        assert!(e.message.contains("only to command sources"), "{e}");
    }
}
