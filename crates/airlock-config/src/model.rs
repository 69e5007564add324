use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A validated configuration. Constructing one means every check passed.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from (for messages); `None` for the built-in default.
    pub origin: Option<PathBuf>,
    pub hub: HubSettings,
    /// Where the hub keeps its state (`[store]`).
    pub store: crate::store::StoreSettings,
    /// Sorted by name; names are unique ignoring case.
    pub sources: Vec<SourceConfig>,
    /// The user's rules, in file order.
    pub rules: Vec<RuleConfig>,
    /// Rules from the administrator's managed file, if one is configured.
    pub managed_rules: Vec<RuleConfig>,
}

/// Which file a rule came from; later layers win ties, and a deny from any
/// layer cannot be loosened by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    Builtin,
    User,
    Managed,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Builtin => "built-in",
            Layer::User => "user",
            Layer::Managed => "managed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// One `[[rules]]` entry, validated (globs and patterns compile).
#[derive(Debug, Clone, PartialEq)]
pub struct RuleConfig {
    pub layer: Layer,
    /// Where it was written, `file:line`, for explanations.
    pub origin: String,
    pub action: Action,
    /// Glob over source names.
    pub source: Option<String>,
    /// Glob over exposed tool names (`fs__write_file`).
    pub tool: Option<String>,
    /// Exact connection label.
    pub connection: Option<String>,
    /// `sha256:<hex>`: the rule applies only while the tool's contract has
    /// this digest.
    pub pin: Option<String>,
    /// Every condition must hold for the rule to match.
    pub when: Vec<ArgCondition>,
    /// The rule targets tools, sources or connections that do not exist
    /// yet, on purpose: `policy check` warns instead of failing.
    pub for_future: bool,
}

/// A condition on one argument, addressed by JSON pointer.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgCondition {
    pub pointer: String,
    pub test: ArgTest,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ArgTest {
    /// The value is a string matching this glob (`*` stays within one path
    /// segment, `**` crosses them).
    Glob(String),
    /// The value equals this JSON value exactly (strict types).
    Equals(serde_json::Value),
    /// The value is a string matching this regular expression (anchored).
    Regex(String),
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
    /// The administrator's managed policy file, if any.
    pub managed_policy: Option<PathBuf>,
    /// How long a call that asks waits for a person.
    pub approval_wait: Duration,
    /// How long a pending approval stays decidable (longer than the wait).
    pub approval_ttl: Duration,
    /// How long a finished approval keeps its arguments.
    pub approval_retention: Duration,
    /// If set, the only programs a stdio source may run (file names or
    /// absolute paths).
    pub allowed_programs: Option<Vec<String>>,
    /// How a person is pointed at the approval page when a call asks.
    pub approval_page: ApprovalPage,
    /// Whether clients are offered code mode's meta tools.
    pub code_mode: CodeMode,
    /// What one code-mode run may use.
    pub code: CodeLimits,
}

/// Code mode: the model writes a program that calls tools through airlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodeMode {
    /// No meta tools.
    #[default]
    Off,
    /// The meta tools beside every tool.
    Beside,
    /// The meta tools instead of the tools: calls go through `run_code`.
    Only,
}

/// The caps on one code-mode run (`[hub] code_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLimits {
    pub memory_mib: u64,
    /// JavaScript time per run (waiting for calls does not count).
    pub cpu: Duration,
    pub output_kib: u64,
    /// Tool calls per run.
    pub calls: u32,
    /// Runs going at once on one hub.
    pub runs: u32,
    /// How long one run may take in all, waits for people included.
    pub time: Duration,
}

impl Default for CodeLimits {
    fn default() -> Self {
        CodeLimits {
            memory_mib: 64,
            cpu: Duration::from_secs(5),
            output_kib: 64,
            calls: 100,
            runs: 4,
            time: Duration::from_secs(600),
        }
    }
}

/// How the approval page reaches the person when a call waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalPage {
    /// Open it in the default browser (printing the link where that fails).
    #[default]
    Open,
    /// Print a one-time link on airlock's stderr.
    Print,
    /// No page: the client's prompt and the CLI only.
    Off,
}

impl Default for HubSettings {
    fn default() -> Self {
        HubSettings {
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            max_message_bytes: 4 * 1024 * 1024,
            allow_non_loopback: false,
            managed_policy: None,
            approval_wait: Duration::from_secs(90),
            approval_ttl: Duration::from_secs(120),
            approval_retention: Duration::from_secs(24 * 3600),
            allowed_programs: None,
            approval_page: ApprovalPage::Open,
            code_mode: CodeMode::Off,
            code: CodeLimits::default(),
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
    /// The user vouches for this source's annotations: with no rule, its
    /// tools that declare themselves read-only and closed-world run unasked.
    pub trusted: bool,
    /// Which account or credentials this entry stands for (`work`,
    /// `personal`); rules can be narrowed to it. Defaults to the name.
    pub connection: String,
    /// A url source may reach loopback and private addresses (and plain
    /// http). Cloud metadata addresses stay refused.
    pub allow_private: bool,
    /// Text results are wrapped as quoted data (the untrusted-content
    /// envelope). Default: on unless the source is `trusted`.
    pub quote_output: bool,
    /// Which protocol lifecycle airlock speaks to this source.
    pub protocol: Protocol,
    /// Whether client sessions share one connection to an older source or
    /// each has its own (see [`Sessions`]).
    pub sessions: Sessions,
    /// How airlock logs in to a url source that asks for OAuth. Nothing
    /// needs setting for the common case (discovery and dynamic
    /// registration); see [`OAuthSettings`].
    pub oauth: OAuthSettings,
    /// What a stdio source may reach when it runs (`[sources.NAME.confine]`);
    /// `None` runs it as the user, unconfined.
    pub confine: Option<Confinement>,
}

/// `[sources.NAME.confine]`: the files and network a stdio source may
/// reach, and its resource limits. Enforced on Linux by the kernel
/// (Landlock, a user and network namespace, rlimits); a layer the machine
/// lacks stops the source from starting.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confinement {
    /// Readable (with everything beneath), beside the system's libraries
    /// and the program's own install tree. Absolute.
    pub read: Vec<PathBuf>,
    /// Readable and writable, with everything beneath. Absolute.
    pub write: Vec<PathBuf>,
    pub network: NetworkAccess,
    pub memory_mib: Option<u64>,
    pub processes: Option<u64>,
    pub open_files: Option<u64>,
}

/// What network a confined source reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkAccess {
    /// Nothing, loopback included (a network namespace of its own).
    #[default]
    None,
    /// The machine's network, as the user has it.
    Host,
}

impl NetworkAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkAccess::None => "none",
            NetworkAccess::Host => "host",
        }
    }
}

/// `[sources.NAME.oauth]`: what a provider needs beyond discovery.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OAuthSettings {
    /// A client registered with the provider beforehand.
    pub client_id: Option<String>,
    /// The name of the stored secret holding its secret (written
    /// `secret:NAME` in the file; never a literal).
    pub client_secret: Option<String>,
    /// The https URL of airlock's Client ID Metadata Document, used as the
    /// client id where the authorization server supports such documents.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for, beyond what the server's challenge names.
    pub scopes: Vec<String>,
    /// The resource indicator (RFC 8707) sent on authorization, token and
    /// refresh requests.
    pub resource: ResourceIndicator,
}

/// Which `resource` airlock names to the authorization server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ResourceIndicator {
    /// The server's own URL (or the resource its metadata names).
    #[default]
    Server,
    /// This value instead.
    Override(String),
    /// None at all, for providers that reject the parameter.
    Omit,
}

/// How client sessions reach a source that speaks a protocol before
/// 2026-07-28 (a 2026-07-28 source is stateless: one connection serves all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sessions {
    /// One connection for every client. A request the source makes of a
    /// client while calls from several are in flight on it is refused
    /// unless the transport says which call it came with.
    #[default]
    Shared,
    /// Each client session gets a connection of its own on its first
    /// request (a process of its own for a stdio source), closed when the
    /// session ends; the shared one is kept for the catalog.
    PerClient,
}

impl Sessions {
    pub fn as_str(self) -> &'static str {
        match self {
            Sessions::Shared => "shared",
            Sessions::PerClient => "per-client",
        }
    }
}

/// How airlock opens its session with a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// Ask with `server/discover` and speak 2026-07-28 where the source
    /// offers it; the `initialize` handshake otherwise.
    #[default]
    Auto,
    /// Only the `initialize` handshake (2025-11-25 and earlier).
    Legacy,
    /// Only 2026-07-28; a source that does not speak it fails to start.
    Modern,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Auto => "auto",
            Protocol::Legacy => "legacy",
            Protocol::Modern => "2026-07-28",
        }
    }
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
                // airlock's own demo: its read-only annotations are honest,
                // so after review its reads flow and its writes ask.
                trusted: true,
                quote_output: false,
                protocol: Protocol::Auto,
                sessions: Sessions::default(),
                oauth: OAuthSettings::default(),
                confine: None,
                connection: "demo".into(),
                allow_private: false,
            }],
            rules: Vec::new(),
            managed_rules: Vec::new(),
            store: Default::default(),
        }
    }

    /// Every rule, built-in and user and managed.
    pub fn all_rules(&self) -> impl Iterator<Item = &RuleConfig> {
        self.rules.iter().chain(&self.managed_rules)
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }

    pub fn timeout_for(&self, source: &SourceConfig) -> Duration {
        source.call_timeout.unwrap_or(self.hub.call_timeout)
    }
}
