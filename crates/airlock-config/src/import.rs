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
}

pub(crate) fn parse_client_json(path: &Path, text: &str) -> Result<ImportOutput, ConfigError> {
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
    let (servers, top, client) = match (file.mcp_servers, file.servers) {
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

    let mut renamed = Vec::new();
    let mut skipped = Vec::new();
    let mut inputs = Vec::new();
    let mut sources: Vec<SourceConfig> = Vec::new();
    let vscode = VsCode::for_file(path);
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
        if client == ClientKind::VsCode {
            vscode
                .resolve(&mut server, &dotted, &mut inputs)
                .map_err(|(k, m, f)| err(Some(k), m, f))?;
        } else if let Some(file) = &server.env_file {
            return Err(err(
                Some(format!("{dotted}.envFile")),
                format!("`envFile` ({file}) is a VS Code key, and this is not a VS Code file"),
                "move the variables into `env`".into(),
            ));
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
        sources.push(SourceConfig {
            connection: name.clone(),
            name,
            transport,
            call_timeout: None,
            prefix: true,
            trusted: false,
            allow_private: false,
            quote_output: true,
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
        },
        client,
        renamed,
        skipped,
        secrets_to_store: inputs,
    })
}

/// VS Code's variables in a `servers` file: `${workspaceFolder}` (the
/// folder holding `.vscode/`, or the file's own folder), `${userHome}`,
/// `${env:NAME}` (from the environment `import` runs in) and
/// `${input:ID}`, which VS Code asks the person for: it becomes the stored
/// secret `ID`. Anything else cannot be resolved outside VS Code.
struct VsCode {
    workspace: std::path::PathBuf,
}

type Refusal = (String, String, String);

impl VsCode {
    fn for_file(path: &Path) -> VsCode {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let workspace = match dir.file_name() {
            Some(n) if n == ".vscode" => dir.parent().map(Path::to_path_buf).unwrap_or(dir),
            _ => dir,
        };
        VsCode { workspace }
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

/// Reads a client JSON file and renders the equivalent airlock TOML.
pub fn import_json(path: &Path) -> Result<(ImportOutput, String), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, &e))?;
    let mut out = parse_client_json(path, &text)?;
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
        let (out, toml) = import_json(&file).unwrap();
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
        assert!(e.message.contains("VS Code key"), "{e}");
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
        let (out, toml) = import_json(&path).unwrap();
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
        let (out, toml) = import_json(&path).unwrap();
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
        let e = import_json(&path).unwrap_err();
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
