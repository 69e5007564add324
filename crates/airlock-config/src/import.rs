//! The `mcpServers` JSON of Claude Desktop, Claude Code and Cursor, and the
//! `servers` JSON of VS Code: read as a [`Config`], or converted to TOML.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{ConfigError, closest, line_col};
use crate::model::{Config, HubSettings, SourceConfig, Transport};
use crate::names::{sanitize, validate_source_name};
use crate::raw::check_url;

const SERVER_KEYS: &[&str] = &[
    "command", "args", "env", "envFile", "cwd", "url", "headers", "type", "disabled",
];

/// The client's file. Other top-level keys belong to the client (window
/// settings, preferences) and are ignored; keys inside a server are ours to
/// understand and an unknown one is an error.
#[derive(Deserialize)]
struct ClientFile {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<BTreeMap<String, serde_json::Value>>,
    servers: Option<BTreeMap<String, serde_json::Value>>,
    /// Claude Code's `~/.claude.json`: servers of one project only (its
    /// "local" scope), by the project's directory.
    projects: Option<BTreeMap<String, ClientProject>>,
}

#[derive(Deserialize)]
struct ClientProject {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    disabled: bool,
    /// VS Code: a file of `KEY=VALUE` lines added to `env`.
    #[serde(rename = "envFile")]
    env_file: Option<String>,
}

/// Which client's format a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// `mcpServers`: Claude Desktop, Claude Code, Cursor.
    McpServers,
    /// `servers`, with `"type"` and `${…}` variables: VS Code.
    VsCode,
}

/// The result of reading a client JSON.
#[derive(Debug)]
pub struct ImportOutput {
    pub config: Config,
    pub client: ClientKind,
    /// Server keys renamed to fit the source-name rule, `(from, to)`.
    pub renamed: Vec<(String, String)>,
    /// Servers marked `disabled` in the client file and left out.
    pub skipped: Vec<String>,
    /// Values that looked like credentials, replaced in the TOML by a
    /// reference: (secret name, where it was). The values are not kept.
    pub secrets_to_store: Vec<(String, String)>,
    /// Which scopes of the file were imported, in words.
    pub scopes: Vec<String>,
    /// Projects whose own servers were not imported: (project, servers).
    pub other_projects: Vec<(String, Vec<String>)>,
    /// Sources whose URL is on this machine or a private network, given
    /// `allow_private = true` (the egress guard refuses such addresses
    /// otherwise).
    pub private: Vec<String>,
}

/// Which client's variables a file's values may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// VS Code and Cursor: `${workspaceFolder}`, `${userHome}`,
    /// `${env:NAME}`, `${input:ID}`, and `envFile`.
    VsCode,
    /// Claude Code: `${NAME}` and `${NAME:-default}` from the environment.
    ClaudeCode,
    /// Claude Desktop: values are used as written.
    Plain,
}

impl Dialect {
    fn of(path: &Path, client: ClientKind) -> Dialect {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let dir = path
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("");
        match (client, name, dir) {
            (ClientKind::VsCode, _, _) => Dialect::VsCode,
            (_, ".claude.json" | ".mcp.json", _) => Dialect::ClaudeCode,
            (_, _, ".cursor") => Dialect::VsCode,
            _ => Dialect::Plain,
        }
    }
}

pub(crate) fn parse_client_json(path: &Path, text: &str) -> Result<ImportOutput, ConfigError> {
    parse_client_json_for(path, text, None)
}

/// `project`: also the servers Claude Code keeps for that project in
/// `~/.claude.json` (they win over user-scope servers of the same name, as
/// in Claude Code).
fn parse_client_json_for(
    path: &Path,
    text: &str,
    project: Option<&str>,
) -> Result<ImportOutput, ConfigError> {
    let file: ClientFile = serde_json::from_str(text).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        ConfigError {
            file: path.to_path_buf(),
            line,
            column,
            key: None,
            message: format!("not valid client JSON: {e}"),
            fix: "check the JSON syntax near this position (a missing comma or quote is common)"
                .into(),
        }
    })?;
    let projects: BTreeMap<String, Vec<(String, serde_json::Value)>> = file
        .projects
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(dir, p)| {
            let servers: Vec<_> = p.mcp_servers?.into_iter().collect();
            (!servers.is_empty()).then_some((dir, servers))
        })
        .collect();
    let user = match (&file.mcp_servers, projects.is_empty()) {
        (None, false) => Some(BTreeMap::new()),
        _ => file.mcp_servers,
    };
    let mut scopes = Vec::new();
    let (mut servers, top, client) = match (user, file.servers) {
        (Some(s), _) => (s, "mcpServers", ClientKind::McpServers),
        (None, Some(s)) => (s, "servers", ClientKind::VsCode),
        (None, None) => {
            return Err(ConfigError::at(
                path,
                text,
                None,
                None,
                "the JSON has no `mcpServers` (Claude, Cursor) or `servers` (VS Code) object",
                "point --config at the client's MCP config file, or write airlock TOML",
            ));
        }
    };

    scopes.push(match projects.is_empty() {
        true => format!("{} server(s)", servers.len()),
        false => format!("{} user-scope server(s)", servers.len()),
    });
    let mut other_projects = Vec::new();
    let mut found = false;
    for (dir, own) in projects {
        let chosen = project.is_some_and(|p| {
            p == dir
                || std::fs::canonicalize(p)
                    .is_ok_and(|c| Some(c) == std::fs::canonicalize(&dir).ok())
        });
        if chosen {
            found = true;
            scopes.push(format!("{} server(s) of project {dir}", own.len()));
            servers.extend(own);
        } else {
            other_projects.push((dir, own.into_iter().map(|(k, _)| k).collect::<Vec<_>>()));
        }
    }
    if let (Some(p), false) = (project, found) {
        let known: Vec<&str> = other_projects.iter().map(|(d, _)| d.as_str()).collect();
        return Err(ConfigError::at(
            path,
            text,
            None,
            None,
            format!("no project `{p}` with servers of its own in this file"),
            match known.is_empty() {
                true => "leave out --project: this file has no project servers".to_string(),
                false => format!("projects with servers: {}", known.join(", ")),
            },
        ));
    }

    let mut renamed = Vec::new();
    let mut skipped = Vec::new();
    let mut inputs = Vec::new();
    let mut private = Vec::new();
    let mut sources: Vec<SourceConfig> = Vec::new();
    let dialect = Dialect::of(path, client);
    let vscode = Variables::for_file(path, dialect);
    for (key, value) in servers {
        let at = locate_key(text, &key);
        let err = |k: Option<String>, m: String, f: String| ConfigError {
            file: path.to_path_buf(),
            line: at.0,
            column: at.1,
            key: k,
            message: m,
            fix: f,
        };
        let dotted = format!("{top}.{key}");
        let mut server: ClientServer = serde_json::from_value(value).map_err(|e| {
            let msg = e.to_string();
            let fix = match msg
                .strip_prefix("unknown field `")
                .and_then(|r| r.split('`').next())
            {
                Some(u) => match closest(u, SERVER_KEYS) {
                    Some(k) => format!("did you mean `{k}`?"),
                    None => format!(
                        "remove `{u}`; airlock understands {}",
                        SERVER_KEYS.join(", ")
                    ),
                },
                None => "check the value types: args is a list of strings, env and headers map strings to strings".into(),
            };
            err(Some(dotted.clone()), msg, fix)
        })?;
        if server.disabled {
            skipped.push(key);
            continue;
        }
        if let (Some(file), false) = (&server.env_file, dialect == Dialect::VsCode) {
            return Err(err(
                Some(format!("{dotted}.envFile")),
                format!(
                    "`envFile` ({file}) is a VS Code and Cursor key, and this is not their file"
                ),
                "move the variables into `env`".into(),
            ));
        }
        if dialect != Dialect::Plain {
            vscode
                .resolve(&mut server, &dotted, &mut inputs)
                .map_err(|(k, m, f)| err(Some(k), m, f))?;
        }
        let name = if validate_source_name(&key).is_ok() {
            key.clone()
        } else {
            let s = sanitize(&key);
            validate_source_name(&s).map_err(|m| {
                err(
                    Some(dotted.clone()),
                    m,
                    "rename the server key in the client file".into(),
                )
            })?;
            renamed.push((key.clone(), s.clone()));
            s
        };
        if let Some(other) = sources.iter().find(|s| s.name.eq_ignore_ascii_case(&name)) {
            return Err(err(
                Some(dotted),
                format!(
                    "server `{key}` becomes source `{name}`, which collides with `{}`",
                    other.name
                ),
                "rename one of the two servers so their names differ by more than case or punctuation".into(),
            ));
        }
        let kind = server.kind.as_deref().map(str::to_ascii_lowercase);
        let transport = match (kind.as_deref(), server.command, server.url) {
            (Some("sse"), _, _) => {
                return Err(err(
                    Some(format!("{dotted}.type")),
                    "the legacy SSE transport is not supported".into(),
                    "use the server's Streamable HTTP endpoint with \"type\": \"http\"".into(),
                ));
            }
            (None | Some("stdio"), Some(command), None) => Transport::Stdio {
                command,
                args: server.args,
                env: server.env,
                cwd: server.cwd.map(Into::into),
            },
            (
                None | Some("http") | Some("streamable-http") | Some("streamablehttp"),
                None,
                Some(url),
            ) => {
                check_url(&url).map_err(|(m, f)| err(Some(format!("{dotted}.url")), m, f))?;
                if legacy_sse(&url) {
                    return Err(err(
                        Some(format!("{dotted}.url")),
                        format!("`{url}` looks like a legacy SSE endpoint, which airlock does not speak"),
                        "use the server's Streamable HTTP endpoint (often the same address with /mcp instead of /sse)".into(),
                    ));
                }
                if on_a_private_network(&url) {
                    private.push(name.clone());
                }
                Transport::Http {
                    url,
                    headers: server.headers,
                }
            }
            (Some(other), _, _)
                if !matches!(
                    other,
                    "stdio" | "http" | "streamable-http" | "streamablehttp"
                ) =>
            {
                return Err(err(
                    Some(format!("{dotted}.type")),
                    format!("unknown server type `{other}`"),
                    "use \"stdio\" (with command) or \"http\" (with url)".into(),
                ));
            }
            _ => {
                return Err(err(
                    Some(dotted),
                    "a server needs exactly one of `command` or `url` matching its `type`".into(),
                    "give it a command (stdio) or a url (Streamable HTTP)".into(),
                ));
            }
        };
        let allow_private = private.contains(&name);
        sources.push(SourceConfig {
            connection: name.clone(),
            name,
            transport,
            call_timeout: None,
            prefix: true,
            trusted: false,
            allow_private,
            quote_output: true,
            protocol: crate::model::Protocol::Auto,
            sessions: crate::model::Sessions::default(),
            oauth: Default::default(),
            confine: None,
        });
    }
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ImportOutput {
        config: Config {
            origin: Some(path.to_path_buf()),
            hub: HubSettings::default(),
            sources,
            rules: Vec::new(),
            managed_rules: Vec::new(),
            store: Default::default(),
        },
        client,
        renamed,
        skipped,
        secrets_to_store: inputs,
        scopes,
        other_projects,
        private,
    })
}

/// A URL whose last path segment is `sse`: the legacy HTTP+SSE transport's
/// usual endpoint.
fn legacy_sse(url: &str) -> bool {
    reqwest_free_path(url)
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .is_some_and(|last| last.eq_ignore_ascii_case("sse"))
}

/// The path of `url`, without query or fragment.
fn reqwest_free_path(url: &str) -> &str {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let path = rest.find('/').map(|i| &rest[i..]).unwrap_or("");
    path.split(['?', '#']).next().unwrap_or("")
}

/// Whether `url` names this machine or a private network by its host
/// (`localhost`, a loopback, private or link-local address).
fn on_a_private_network(url: &str) -> bool {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || (ip.segments()[0] & 0xfe00) == 0xfc00
                || (ip.segments()[0] & 0xffc0) == 0xfe80
        }
        Err(_) => false,
    }
}

/// VS Code's variables in a `servers` file: `${workspaceFolder}` (the
/// folder holding `.vscode/`, or the file's own folder), `${userHome}`,
/// `${env:NAME}` (from the environment `import` runs in) and
/// `${input:ID}`, which VS Code asks the person for: it becomes the stored
/// secret `ID`. Anything else cannot be resolved outside VS Code.
struct Variables {
    workspace: std::path::PathBuf,
    dialect: Dialect,
}

type Refusal = (String, String, String);

impl Variables {
    fn for_file(path: &Path, dialect: Dialect) -> Variables {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let workspace = match dir.file_name() {
            Some(n) if n == ".vscode" || n == ".cursor" => {
                dir.parent().map(Path::to_path_buf).unwrap_or(dir)
            }
            _ => dir,
        };
        Variables { workspace, dialect }
    }

    /// Resolves every variable of `server` (at `at`) in place, and reads
    /// its `envFile`; inputs become secret references, named in `inputs`.
    fn resolve(
        &self,
        server: &mut ClientServer,
        at: &str,
        inputs: &mut Vec<(String, String)>,
    ) -> Result<(), Refusal> {
        let plain = |v: &mut String, key: String| self.expand(v, &key, None).map(|e| *v = e);
        if let Some(c) = &mut server.command {
            plain(c, format!("{at}.command"))?;
        }
        for (i, a) in server.args.iter_mut().enumerate() {
            plain(a, format!("{at}.args[{i}]"))?;
        }
        if let Some(c) = &mut server.cwd {
            plain(c, format!("{at}.cwd"))?;
        }
        if let Some(u) = &mut server.url {
            plain(u, format!("{at}.url"))?;
        }
        if let Some(file) = server.env_file.take() {
            let key = format!("{at}.envFile");
            let file = self.expand(&file, &key, None)?;
            let file = self.workspace.join(file);
            let text = std::fs::read_to_string(&file).map_err(|e| {
                (
                    key.clone(),
                    format!("cannot read the envFile {}: {e}", file.display()),
                    "create it, fix the path, or move its variables into `env`".to_string(),
                )
            })?;
            for (k, v) in env_file_lines(&text) {
                // What `env` sets itself wins, as in VS Code.
                server.env.entry(k).or_insert(v);
            }
        }
        for (k, v) in server.env.iter_mut() {
            let key = format!("{at}.env.{k}");
            *v = self.expand(v, &key, Some(inputs))?;
            // A variable named as a credential (from `env`, the envFile or
            // `${env:…}`) leaves the file whatever its value looks like.
            if crate::credentials::names_a_credential(k) && !v.contains("${secret:") {
                let name = secret_name(k);
                *v = format!("${{secret:{name}}}");
                inputs.push((name, key));
            }
        }
        for (k, v) in server.headers.iter_mut() {
            *v = self.expand(v, &format!("{at}.headers.{k}"), Some(inputs))?;
        }
        Ok(())
    }

    /// `text` with its variables resolved. `${input:…}` is allowed only
    /// where a secret reference may stand (`inputs` given: env and headers).
    fn expand(
        &self,
        text: &str,
        key: &str,
        mut inputs: Option<&mut Vec<(String, String)>>,
    ) -> Result<String, Refusal> {
        let refuse = |m: String, f: &str| (key.to_string(), m, f.to_string());
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let Some(len) = rest[start..].find('}') else {
                return Err(refuse(
                    format!("`{text}` has a `${{` that is never closed"),
                    "close the variable with `}`",
                ));
            };
            let var = &rest[start + 2..start + len];
            if self.dialect == Dialect::ClaudeCode {
                self.claude_code(var, key, inputs.as_deref_mut(), &mut out)?;
                rest = &rest[start + len + 1..];
                continue;
            }
            match var.split_once(':') {
                None if var == "workspaceFolder" => out.push_str(&self.workspace.to_string_lossy()),
                None if var == "userHome" => match std::env::var("HOME") {
                    Ok(h) => out.push_str(&h),
                    Err(_) => {
                        return Err(refuse(
                            "`${userHome}` but HOME is not set".into(),
                            "write the path out",
                        ));
                    }
                },
                // A credential is never read into the file (airlock also
                // drops such variables from its own environment).
                Some(("env", name))
                    if inputs.is_some() && crate::credentials::names_a_credential(name) =>
                {
                    let secret = secret_name(name);
                    out.push_str(&format!("${{secret:{secret}}}"));
                    if let Some(inputs) = inputs.as_deref_mut() {
                        inputs.push((secret, format!("{key} (`${{env:{name}}}`)")));
                    }
                }
                Some(("env", name)) => match std::env::var(name) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => {
                        return Err(refuse(
                            format!("`${{env:{name}}}` is not set in this environment"),
                            "set it and import again, or write the value (a credential: `airlock secret set NAME` and \"${secret:NAME}\")",
                        ));
                    }
                },
                Some(("input", id)) => {
                    let Some(inputs) = inputs.as_deref_mut() else {
                        return Err(refuse(
                            format!(
                                "`${{input:{id}}}` asks for a value here, and a command line is readable by every local user"
                            ),
                            "pass it through `env` instead, where it becomes a stored secret",
                        ));
                    };
                    let name = secret_name(id);
                    out.push_str(&format!("${{secret:{name}}}"));
                    inputs.push((name, format!("{key} (VS Code input `{id}`)")));
                }
                _ => {
                    return Err(refuse(
                        format!(
                            "`${{{var}}}` is a VS Code variable airlock cannot resolve outside VS Code"
                        ),
                        "write the value it stands for",
                    ));
                }
            }
            rest = &rest[start + len + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

impl Variables {
    /// Claude Code's `${NAME}` / `${NAME:-default}`, pushed onto `out`.
    fn claude_code(
        &self,
        var: &str,
        key: &str,
        inputs: Option<&mut Vec<(String, String)>>,
        out: &mut String,
    ) -> Result<(), Refusal> {
        let refuse = |m: String, f: &str| (key.to_string(), m, f.to_string());
        let (name, default) = match var.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (var, None),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(refuse(
                format!("`${{{var}}}` is not a variable Claude Code expands"),
                "write `${NAME}` or `${NAME:-default}`, or the value itself",
            ));
        }
        // A credential is never read into the file.
        if let Some(inputs) = inputs
            && crate::credentials::names_a_credential(name)
        {
            let secret = secret_name(name);
            out.push_str(&format!("${{secret:{secret}}}"));
            inputs.push((secret, format!("{key} (`${{{name}}}`)")));
            return Ok(());
        }
        match (std::env::var(name), default) {
            (Ok(v), _) => out.push_str(&v),
            (Err(_), Some(d)) => out.push_str(d),
            (Err(_), None) => {
                return Err(refuse(
                    format!("`${{{name}}}` is not set in this environment and has no default"),
                    "set it and import again, write `${NAME:-default}`, or write the value (a credential: `airlock secret set NAME` and \"${secret:NAME}\")",
                ));
            }
        }
        Ok(())
    }
}

/// A secret name for a VS Code input id: letters, digits, '_' and '-'.
fn secret_name(id: &str) -> String {
    let name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "input".into()
    } else {
        name
    }
}

/// The `KEY=VALUE` lines of an env file (`#` comments, blank lines and an
/// `export ` prefix allowed; one pair of surrounding quotes removed).
fn env_file_lines(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let l = l.strip_prefix("export ").unwrap_or(l);
            let (k, v) = l.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// Position of `"key":` in the text, for messages about values serde_json
/// cannot place.
fn locate_key(text: &str, key: &str) -> (usize, usize) {
    let needle = serde_json::to_string(key).unwrap_or_default();
    text.find(&needle)
        .map(|o| line_col(text, o))
        .unwrap_or((1, 1))
}

/// Reads a client JSON file and renders the equivalent airlock TOML; with
/// `project`, also that project's own servers from Claude Code's file.
pub fn import_json(
    path: &Path,
    project: Option<&str>,
) -> Result<(ImportOutput, String), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, &e))?;
    let mut out = parse_client_json_for(path, &text, project)?;
    // A secret in a server's arguments cannot be moved anywhere safe: every
    // local user can read a command line. Say so, with the fix.
    let top = match out.client {
        ClientKind::McpServers => "mcpServers",
        ClientKind::VsCode => "servers",
    };
    for source in &out.config.sources {
        if let Transport::Stdio { args, .. } = &source.transport {
            for (i, a) in args.iter().enumerate() {
                let at = format!("{top}.{}.args[{i}]", source.name);
                crate::credentials::check_arg(&at, a).map_err(|(message, fix)| ConfigError {
                    file: path.to_path_buf(),
                    line: 0,
                    column: 0,
                    key: Some(at.clone()),
                    message,
                    fix,
                })?;
            }
        }
    }
    let moved = move_credentials_out(&mut out.config);
    out.secrets_to_store.extend(moved);
    let toml = render_toml(&out.config);
    Ok((out, toml))
}

/// Replaces every env or header value that looks like a live credential
/// with a `secret:NAME` reference, so the TOML never holds it; returns the
/// names to store and where each was.
fn move_credentials_out(config: &mut Config) -> Vec<(String, String)> {
    let mut moved = Vec::new();
    for source in &mut config.sources {
        // A password inside a URL (a connection string in a variable or a
        // header) is replaced by a reference where it stood.
        let mut urls: Vec<(String, &mut String)> = match &mut source.transport {
            Transport::Stdio { env, .. } => env.iter_mut().map(|(k, v)| (k.clone(), v)).collect(),
            Transport::Http { headers, .. } => {
                headers.iter_mut().map(|(k, v)| (k.clone(), v)).collect()
            }
        };
        for (key, value) in urls.iter_mut() {
            if let Some(range) = crate::credentials::url_password(value) {
                let name = format!("{}_{key}_PASSWORD", source.name)
                    .to_ascii_uppercase()
                    .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
                value.replace_range(range, &format!("${{secret:{name}}}"));
                moved.push((name, format!("{}.{key}", source.name)));
            }
        }
        let values = match &mut source.transport {
            Transport::Stdio { env, .. } => env,
            Transport::Http { headers, .. } => headers,
        };
        for (key, value) in values.iter_mut() {
            if value.contains("secret:")
                || crate::credentials::looks_like_credential(key, value).is_none()
            {
                continue;
            }
            let name = format!("{}_{}", source.name, key)
                .to_ascii_uppercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
            // Keep a scheme word ("Bearer …") in front of the reference.
            let reference = match value.split_once(' ') {
                Some((scheme, _)) if !scheme.is_empty() && scheme.len() < 10 => {
                    format!("{scheme} ${{secret:{name}}}")
                }
                _ => format!("secret:{name}"),
            };
            *value = reference;
            moved.push((name, format!("{}.{key}", source.name)));
        }
    }
    moved
}

/// Renders sources as airlock TOML.
pub fn render_toml(config: &Config) -> String {
    let mut sources = toml::Table::new();
    for s in &config.sources {
        let mut t = toml::Table::new();
        match &s.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                t.insert("command".into(), command.clone().into());
                if !args.is_empty() {
                    t.insert(
                        "args".into(),
                        toml::Value::Array(args.iter().cloned().map(Into::into).collect()),
                    );
                }
                if !env.is_empty() {
                    t.insert("env".into(), string_table(env));
                }
                if let Some(cwd) = cwd {
                    t.insert("cwd".into(), cwd.to_string_lossy().into_owned().into());
                }
            }
            Transport::Http { url, headers } => {
                t.insert("url".into(), url.clone().into());
                if !headers.is_empty() {
                    t.insert("headers".into(), string_table(headers));
                }
            }
        }
        if s.allow_private {
            t.insert("allow_private".into(), true.into());
        }
        sources.insert(s.name.clone(), toml::Value::Table(t));
    }
    let mut root = toml::Table::new();
    root.insert("sources".into(), toml::Value::Table(sources));
    toml::to_string(&root).unwrap_or_default()
}

fn string_table(map: &BTreeMap<String, String>) -> toml::Value {
    toml::Value::Table(
        map.iter()
            .map(|(k, v)| (k.clone(), toml::Value::String(v.clone())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn parse(text: &str) -> Result<ImportOutput, ConfigError> {
        parse_client_json(&PathBuf::from("claude.json"), text)
    }

    #[test]
    fn claude_desktop_file_runs_unchanged() {
        let out = parse(
            r#"{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
    "my_api": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"X-Team": "a"}},
    "old": {"command": "x", "disabled": true}
  }
}"#,
        )
        .unwrap();
        let names: Vec<_> = out.config.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["filesystem", "my-api"]);
        assert_eq!(out.renamed, [("my_api".to_string(), "my-api".to_string())]);
        assert_eq!(out.skipped, ["old"]);
    }

    #[test]
    fn vs_code_servers_are_read() {
        let out = parse(r#"{"servers": {"git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git"]}}, "inputs": []}"#).unwrap();
        assert_eq!(out.config.sources[0].name, "git");
    }

    /// A VS Code workspace's `.vscode/mcp.json`, as people write them.
    #[test]
    fn vs_code_variables_inputs_and_env_files_are_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let vscode = dir.path().join(".vscode");
        std::fs::create_dir(&vscode).unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "# local settings\nexport LOG=debug\nDB_URL=\"postgresql://app@db/app\"\nREGION='eu'\nDB_PASSWORD=postgres-pw\n",
        )
        .unwrap();
        let file = vscode.join("mcp.json");
        std::fs::write(
            &file,
            r#"{"inputs": [{"type": "promptString", "id": "github-token", "password": true}],
                "servers": {
                  "fs": {"type": "stdio", "command": "npx", "args": ["-y", "server-fs", "${workspaceFolder}/src"]},
                  "gh": {"type": "stdio", "command": "npx", "args": ["-y", "server-github"],
                         "env": {"GITHUB_TOKEN": "${input:github-token}", "LOG": "info"},
                         "envFile": "${workspaceFolder}/.env"}}}"#,
        )
        .unwrap();
        let (out, toml) = import_json(&file, None).unwrap();
        assert_eq!(out.client, ClientKind::VsCode);
        let workspace = std::fs::canonicalize(dir.path()).unwrap();
        let Transport::Stdio { args, .. } = &out.config.sources[0].transport else {
            panic!()
        };
        assert_eq!(args[2], format!("{}/src", workspace.display()));
        let Transport::Stdio { env, .. } = &out.config.sources[1].transport else {
            panic!()
        };
        assert_eq!(env["GITHUB_TOKEN"], "${secret:github-token}");
        assert_eq!(env["LOG"], "info", "env wins over the envFile");
        assert_eq!(env["DB_URL"], "postgresql://app@db/app");
        assert_eq!(env["REGION"], "eu");
        assert_eq!(
            env["DB_PASSWORD"], "${secret:DB_PASSWORD}",
            "a weak value is a credential too"
        );
        assert!(!toml.contains("postgres-pw"), "{toml}");
        assert!(
            out.secrets_to_store
                .iter()
                .any(|(n, _)| n == "github-token"),
            "{:?}",
            out.secrets_to_store
        );
        assert!(
            !toml.replace("${secret:", "").contains("${"),
            "only secret references are left: {toml}"
        );
        crate::raw::parse_toml(&file.with_extension("toml"), &toml).unwrap();
    }

    #[test]
    fn vs_code_variables_that_cannot_be_resolved_are_refused_with_the_fix() {
        for (server, wanted) in [
            (
                r#"{"command": "x", "args": ["${input:token}"]}"#,
                "command line",
            ),
            (
                r#"{"command": "x", "args": ["${config:editor.tabSize}"]}"#,
                "cannot resolve outside VS Code",
            ),
            (
                r#"{"command": "x", "env": {"A": "${env:AIRLOCK_TEST_SURELY_UNSET}"}}"#,
                "not set in this environment",
            ),
            (
                r#"{"command": "x", "envFile": "missing.env"}"#,
                "cannot read the envFile",
            ),
        ] {
            let e = parse(&format!(r#"{{"servers": {{"s": {server}}}}}"#)).unwrap_err();
            assert!(e.message.contains(wanted), "{server}: {e}");
        }
        let e = parse(r#"{"mcpServers": {"s": {"command": "x", "envFile": ".env"}}}"#).unwrap_err();
        assert!(e.message.contains("VS Code and Cursor key"), "{e}");
    }

    /// Claude Code's `~/.claude.json`, shaped as Claude Code writes it:
    /// user-scope servers at the top, each project's own under `projects`,
    /// beside settings that are not ours.
    #[test]
    fn claude_code_scopes_are_named_and_a_project_is_imported_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("app");
        std::fs::create_dir(&app).unwrap();
        let file = dir.path().join(".claude.json");
        let text = serde_json::json!({
            "numStartups": 12,
            "mcpServers": {
                "fs": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
                "shared": {"command": "user-version"}
            },
            "projects": {
                app.to_string_lossy(): {
                    "allowedTools": [],
                    "mcpServers": {"shared": {"command": "project-version"}, "db": {"command": "db-server"}}
                },
                "/somewhere/else": {"mcpServers": {}}
            }
        })
        .to_string();
        std::fs::write(&file, &text).unwrap();
        let (out, _) = import_json(&file, None).unwrap();
        let names: Vec<&str> = out.config.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fs", "shared"]);
        assert_eq!(out.scopes, ["2 user-scope server(s)"]);
        assert_eq!(
            out.other_projects,
            [(
                app.to_string_lossy().into_owned(),
                vec!["db".to_string(), "shared".to_string()]
            )]
        );
        let (out, _) = import_json(&file, Some(&app.to_string_lossy())).unwrap();
        let names: Vec<&str> = out.config.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["db", "fs", "shared"]);
        let shared = &out.config.sources[2];
        assert!(
            matches!(&shared.transport, Transport::Stdio { command, .. } if command == "project-version"),
            "the project's own wins, as in Claude Code"
        );
        assert!(out.other_projects.is_empty());
        let e = import_json(&file, Some("/not/a/project")).unwrap_err();
        assert!(e.fix.contains(&*app.to_string_lossy()), "{e}");
    }

    #[test]
    fn claude_code_variables_expand_as_claude_code_expands_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".mcp.json");
        let home = std::env::var("HOME").expect("HOME is set");
        std::fs::write(
            &file,
            r#"{"mcpServers": {"s": {"command": "${AIRLOCK_IMPORT_TEST_BIN:-node}",
                "args": ["${HOME}/x"],
                "env": {"API_TOKEN": "${API_TOKEN}", "MODE": "${AIRLOCK_IMPORT_TEST_MODE:-fast}"}}}}"#,
        )
        .unwrap();
        let (out, toml) = import_json(&file, None).unwrap();
        let Transport::Stdio {
            command, args, env, ..
        } = &out.config.sources[0].transport
        else {
            panic!("stdio");
        };
        assert_eq!(command, "node");
        assert_eq!(args[0], format!("{home}/x"));
        assert_eq!(env["MODE"], "fast");
        assert_eq!(env["API_TOKEN"], "${secret:API_TOKEN}", "{toml}");
        std::fs::write(
            &file,
            r#"{"mcpServers": {"s": {"command": "${AIRLOCK_IMPORT_TEST_UNSET}"}}}"#,
        )
        .unwrap();
        let e = import_json(&file, None).unwrap_err();
        assert!(e.message.contains("is not set"), "{e}");
        // Claude Desktop expands nothing: the value is used as written.
        let desktop = dir.path().join("claude_desktop_config.json");
        std::fs::write(
            &desktop,
            r#"{"mcpServers": {"s": {"command": "${NOT_EXPANDED}"}}}"#,
        )
        .unwrap();
        let (out, _) = import_json(&desktop, None).unwrap();
        assert!(
            matches!(&out.config.sources[0].transport, Transport::Stdio { command, .. } if command == "${NOT_EXPANDED}")
        );
    }

    #[test]
    fn sse_endpoints_are_refused_and_local_urls_allowed_private() {
        let e =
            parse(r#"{"mcpServers": {"old": {"url": "http://localhost:8080/sse"}}}"#).unwrap_err();
        assert!(e.message.contains("legacy SSE"), "{e}");
        assert!(e.fix.contains("/mcp"), "{e}");
        let out = parse(
            r#"{"mcpServers": {"local": {"url": "http://127.0.0.1:8080/mcp"}, "lan": {"url": "https://[fd00::1]/mcp"},
                "remote": {"url": "https://mcp.example.com/mcp"}, "named": {"url": "https://api.localhost:3000/mcp"}}}"#,
        )
        .unwrap();
        assert_eq!(out.private, ["lan", "local", "named"]);
        let toml = render_toml(&out.config);
        assert_eq!(toml.matches("allow_private = true").count(), 3, "{toml}");
        assert!(
            !out.config
                .sources
                .iter()
                .any(|s| s.name == "remote" && s.allow_private)
        );
    }

    #[test]
    fn unknown_server_key_is_an_error_with_a_suggestion() {
        let e = parse("{\n\"mcpServers\": {\n \"a\": {\"comand\": \"x\"}}}").unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(e.key.as_deref(), Some("mcpServers.a"));
        assert!(e.fix.contains("`command`"), "{e}");
    }

    #[test]
    fn renamed_collision_is_refused() {
        let e = parse(r#"{"mcpServers": {"a_b": {"command": "x"}, "a-b": {"command": "y"}}}"#)
            .unwrap_err();
        assert!(e.message.contains("collides"), "{e}");
    }

    #[test]
    fn malformed_json_names_the_position() {
        let e = parse("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"\n  }\n").unwrap_err();
        assert!(e.line >= 4, "{e}");
    }

    #[test]
    fn import_moves_credentials_out_of_the_toml() {
        let dir = std::env::temp_dir().join(format!("airlock-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("claude.json");
        std::fs::write(
            &path,
            r#"{"mcpServers": {"gh": {"command": "npx", "env": {"GITHUB_TOKEN": "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "LOG": "debug"}},
                "api": {"url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer sk-proj-abcdefghijklmnop"}}}}"#,
        )
        .unwrap();
        let (out, toml) = import_json(&path, None).unwrap();
        assert!(!toml.contains("ghp_16C7e42F"), "{toml}");
        assert!(!toml.contains("sk-proj"), "{toml}");
        assert!(toml.contains("secret:GH_GITHUB_TOKEN"), "{toml}");
        assert!(
            toml.contains("Bearer ${secret:API_AUTHORIZATION}"),
            "{toml}"
        );
        assert!(toml.contains("debug"), "{toml}");
        assert_eq!(out.secrets_to_store.len(), 2);
        // The TOML it wrote loads.
        crate::raw::parse_toml(&path.with_extension("toml"), &toml).unwrap();
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn import_moves_passwords_out_of_connection_strings() {
        let dir = std::env::temp_dir().join(format!("airlock-import-url-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("claude.json");
        std::fs::write(
            &path,
            r#"{"mcpServers": {"pg": {"command": "npx", "args": ["-y", "server-postgres"],
                "env": {"CACHE_URL": "redis://:s3cr3tpw@cache:6379/0"}}}}"#,
        )
        .unwrap();
        let (out, toml) = import_json(&path, None).unwrap();
        assert!(!toml.contains("s3cr3tpw"), "{toml}");
        assert!(
            toml.contains("redis://:${secret:PG_CACHE_URL_PASSWORD}@cache"),
            "{toml}"
        );
        assert_eq!(out.secrets_to_store.len(), 1, "{:?}", out.secrets_to_store);
        crate::raw::parse_toml(&path.with_extension("toml"), &toml).unwrap();
        // In an argument it has nowhere safe to go: the import says so.
        std::fs::write(
            &path,
            r#"{"mcpServers": {"pg": {"command": "npx", "args": ["-y", "server-postgres", "postgresql://app:hunter2hunter2@db.internal/app"]}}}"#,
        )
        .unwrap();
        let e = import_json(&path, None).unwrap_err();
        assert!(e.message.contains("read a process's arguments"), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        // Written literally in TOML, the same source is refused with the fix.
        let e = crate::raw::parse_toml(
            &path.with_extension("toml"),
            "[sources.pg]\ncommand = \"npx\"\nargs = [\"postgresql://app:hunter2hunter2@db/app\"]\n",
        )
        .unwrap_err();
        assert!(e.message.contains("password"), "{e}");
        assert!(
            !e.to_string().contains("hunter2"),
            "the error repeats the password: {e}"
        );
        assert!(e.fix.contains("airlock secret set"), "{e}");
        assert!(e.fix.contains("env = {"), "{e}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn toml_round_trip_gives_the_same_sources() {
        let out = parse(r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "pkg"], "env": {"K": "v"}}, "web": {"url": "https://h.example/mcp"}}}"#).unwrap();
        let text = render_toml(&out.config);
        let back = crate::raw::parse_toml(&PathBuf::from("x.toml"), &text).unwrap();
        assert_eq!(back.sources, out.config.sources);
    }
}
