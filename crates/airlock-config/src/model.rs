use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A validated configuration. Constructing one means every check passed.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from (for messages); `None` for the built-in default.
    pub origin: Option<PathBuf>,
    pub hub: HubSettings,
    /// Sorted by name; names are unique ignoring case.
    pub sources: Vec<SourceConfig>,
}

/// Budgets and face settings that apply to the whole hub.
#[derive(Debug, Clone, PartialEq)]
pub struct HubSettings {
    /// Longest an upstream call may take before the caller gets an error.
    pub call_timeout: Duration,
    /// Longest a source may take to start and finish its handshake.
    pub connect_timeout: Duration,
    /// Largest single message accepted from an upstream or a client.
    pub max_message_bytes: usize,
    /// Allows `serve --http` on a non-loopback address.
    pub allow_non_loopback: bool,
}

impl Default for HubSettings {
    fn default() -> Self {
        HubSettings {
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            max_message_bytes: 4 * 1024 * 1024,
            allow_non_loopback: false,
        }
    }
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    /// Exposed names are `<name>__<upstream name>`.
    pub name: String,
    pub transport: Transport,
    /// Overrides [`HubSettings::call_timeout`] for this source.
    pub call_timeout: Option<Duration>,
    /// `false` exposes names unchanged (no `<source>__`); a name that then
    /// collides with another source's is withheld from both.
    pub prefix: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

impl Config {
    /// The configuration airlock runs with when none is given: one source,
    /// the demo server shipped inside the `airlock` binary itself.
    pub fn builtin_demo(airlock_exe: PathBuf) -> Config {
        Config {
            origin: None,
            hub: HubSettings::default(),
            sources: vec![SourceConfig {
                name: "demo".into(),
                transport: Transport::Stdio {
                    command: airlock_exe.to_string_lossy().into_owned(),
                    args: vec!["demo-server".into()],
                    env: BTreeMap::new(),
                    cwd: None,
                },
                call_timeout: None,
                prefix: true,
            }],
        }
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }

    pub fn timeout_for(&self, source: &SourceConfig) -> Duration {
        source.call_timeout.unwrap_or(self.hub.call_timeout)
    }
}
