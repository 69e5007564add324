//! `airlock`: the command a person runs. Thin glue over the library crates;
//! each subcommand lives in its own module.

mod admin;
mod approvals;
mod audit;
mod auth;
mod browser;
mod channels;
mod confine;
mod doctor;
mod harden;
mod home;
mod import;
mod logging;
mod policy;
mod rules;
mod runs;
mod sandbox;
#[cfg(target_os = "linux")]
mod seccomp;
mod secret;
mod serve;
mod show;
mod status;
mod store;
mod token;
mod tools;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "airlock",
    version,
    about = "An MCP security hub between your MCP clients and servers."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Use a team's PostgreSQL store (postgres://ROLE@HOST:PORT/DATABASE)
    /// instead of the embedded one or the config's [store].
    #[arg(long, global = true, env = "AIRLOCK_STORE", value_name = "URL")]
    store: Option<String>,
    /// The tenant to act for in that store (default: "default").
    #[arg(long, global = true, env = "AIRLOCK_TENANT", requires = "store")]
    tenant: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the hub: stdio by default (what desktop clients launch), or
    /// Streamable HTTP at /mcp with --http.
    Serve {
        /// airlock TOML, or a client's mcpServers / servers JSON. Default:
        /// $AIRLOCK_HOME/airlock.toml if it exists, else the built-in demo.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Serve Streamable HTTP on this address (loopback only unless the
        /// config allows otherwise), e.g. 127.0.0.1:7330.
        #[arg(long)]
        http: Option<SocketAddr>,
        /// Serve Prometheus metrics at /metrics on this address (loopback
        /// only unless the config allows otherwise), e.g. 127.0.0.1:9464.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<SocketAddr>,
    },
    /// Convert a client's mcpServers JSON to airlock TOML and print the
    /// snippet that points the client at airlock instead.
    Import {
        /// The client's config (claude_desktop_config.json, .mcp.json, ...).
        file: PathBuf,
        /// Write the TOML here instead of printing it.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Claude Code's ~/.claude.json: also the servers it keeps for this
        /// project directory (its "local" scope; they win over user-scope
        /// servers of the same name).
        #[arg(long)]
        project: Option<String>,
    },
    /// Show each source's state as last reported by the hub, and recent calls.
    Status {
        /// How many recent calls to show.
        #[arg(long, default_value_t = 10)]
        calls: usize,
    },
    /// Check the config, the store and every source, and say what is wrong.
    Doctor {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Log in to a url source that asks for OAuth, see where logins
    /// stand, or log out.
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// Store, list or remove secrets that config refers to by name.
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
    /// List the calls waiting for your approval.
    Pending {
        /// Every approval, decided ones included.
        #[arg(long)]
        all: bool,
    },
    /// Approve one waiting call; it runs once, with the arguments shown.
    Approve {
        id: String,
        /// Also allow this tool for the rest of the client's session (at
        /// most 100 calls or an hour).
        #[arg(long, conflicts_with = "always")]
        for_run: bool,
        /// Also allow this tool on this connection from now on, while its
        /// contract stays as it is (a rule pinned to its digest).
        #[arg(long)]
        always: bool,
    },
    /// Decline one waiting call.
    Deny { id: String },
    /// Open the running hub's approval page (a fresh one-time link).
    Page {
        /// Print the link instead of opening a browser.
        #[arg(long)]
        print: bool,
    },
    /// Review new and changed tools, and pin the contracts a person approves.
    Tools {
        #[command(subcommand)]
        command: ToolsCommand,
    },
    /// Check the policy, or explain the decision for one tool.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Code mode's runs: list them, or show one with its journal.
    Runs {
        #[command(subcommand)]
        command: Option<RunsCommand>,
    },
    /// Read, filter and export the audit log, or verify its chain.
    Audit {
        #[command(subcommand)]
        command: Option<AuditCommand>,
        #[command(flatten)]
        filter: audit::FilterArgs,
    },
    /// List or revoke the standing rules "always allow" created.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// Print the token HTTP clients send (`Authorization: Bearer <token>`),
    /// creating it on first use.
    Token {
        /// Replace it with a new one; clients with the old one get 401.
        #[arg(long)]
        rotate: bool,
    },
    /// Set up or upgrade a team's PostgreSQL store, as its owner.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Run the demo MCP server on stdio (used by the built-in config).
    #[command(hide = true)]
    DemoServer,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Create airlock's schema (or apply what this version adds), with
    /// row-level security on every table, and grant the hub's role its
    /// rows. Run as the role that owns the schema, never the hub's.
    Migrate {
        /// The owner's connection, postgres://OWNER@HOST:PORT/DATABASE.
        #[arg(long, value_name = "URL")]
        owner: String,
        /// The stored secret holding the owner's password, if it needs one.
        #[arg(long, value_name = "NAME")]
        owner_password: Option<String>,
        /// The role one tenant's hubs connect as (it must exist; it must
        /// not own anything or bypass row-level security).
        #[arg(long, value_name = "ROLE")]
        hub_role: String,
        /// The tenant that role acts for; each tenant needs a role of its
        /// own (run once per tenant).
        #[arg(long = "for-tenant", value_name = "TENANT")]
        for_tenant: String,
    },
}

#[derive(Subcommand)]
enum ToolsCommand {
    /// Show every new or changed tool with what changed and any signs of
    /// tool poisoning, and pin the ones you approve. Starts the sources to
    /// see their current definitions.
    Review {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Approve every new or changed tool without asking.
        #[arg(long, conflicts_with_all = ["approve", "list"])]
        approve_all: bool,
        /// Approve these tools (exposed names) without asking.
        #[arg(long, num_args = 1.., conflicts_with = "list")]
        approve: Vec<String>,
        /// Only show what needs review; change nothing.
        #[arg(long)]
        list: bool,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Every standing rule: what it allows, on which connection and
    /// contract, who created it and when.
    List,
    /// Remove one; calls it allowed ask again.
    Revoke { id: i64 },
}

#[derive(Subcommand)]
enum SecretCommand {
    /// Store a secret: typed at a masked prompt, or piped on stdin.
    Set { name: String },
    /// The names of stored secrets (never their values).
    List,
    /// Forget a secret.
    Rm { name: String },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate the config and managed policy without serving.
    Check {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Print the decision for TOOL and the exact chain that produced it.
    Explain {
        /// The exposed tool name, e.g. fs__write_file.
        tool: String,
        /// The call's arguments as JSON.
        #[arg(long)]
        args: Option<String>,
        /// Decide as if the source were this connection (what-if).
        #[arg(long)]
        connection: Option<String>,
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum AuthCommand {
    /// Log in: opens the browser at the provider, waits for its redirect
    /// on 127.0.0.1, stores the tokens in the secret store.
    Login {
        source: String,
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Print the authorization URL alone on stdout instead of opening
        /// a browser, and wait for the redirect.
        #[arg(long)]
        no_browser: bool,
        /// Ask for this scope too (repeatable).
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
    /// Issuer, registration, scopes and expiry of each login (never a value).
    Status {
        source: Option<String>,
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Revoke the tokens at the provider, then delete them here.
    Logout {
        source: String,
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum RunsCommand {
    /// The newest runs (the default).
    List,
    /// One run: its code, state and journal.
    Show { id: String },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check the hash chain and name the first broken record.
    Verify,
}

fn main() -> ExitCode {
    // The confiner of a stdio source: before anything else, with the
    // source's own environment, and never a thread of its own.
    let mut args = std::env::args_os();
    let first = args.nth(1);
    if first
        .as_ref()
        .is_some_and(|a| a == airlock_upstream::confine::CONFINE_ARG)
    {
        return confine::run(args);
    }
    // A code-mode run's process, as the hub starts it.
    if first
        .as_ref()
        .is_some_and(|a| a == airlock_sandbox::process::SANDBOX_ARG)
    {
        return sandbox::run();
    }
    harden::drop_credentials_from_env();
    harden::not_dumpable();
    harden::raise_open_file_limit();
    let cli = Cli::parse();
    if let Err(e) = store::choose(cli.store, cli.tenant) {
        eprintln!("airlock: {e:#}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Serve {
            config,
            http,
            metrics,
        } => serve::run(config, http, metrics),
        Command::Import { file, out, project } => {
            import::run(&file, out.as_deref(), project.as_deref())
        }
        Command::Status { calls } => status::run(calls),
        Command::Doctor { config } => doctor::run(config),
        Command::Auth { command } => match command {
            AuthCommand::Login {
                source,
                config,
                no_browser,
                scopes,
            } => auth::login(config.as_deref(), &source, no_browser, &scopes),
            AuthCommand::Status { source, config } => {
                auth::status(config.as_deref(), source.as_deref())
            }
            AuthCommand::Logout { source, config } => auth::logout(config.as_deref(), &source),
        },
        Command::Secret { command } => match command {
            SecretCommand::Set { name } => secret::set(&name),
            SecretCommand::List => secret::list(),
            SecretCommand::Rm { name } => secret::rm(&name),
        },
        Command::Pending { all } => approvals::pending(all),
        Command::Runs { command } => match command {
            None | Some(RunsCommand::List) => runs::list(),
            Some(RunsCommand::Show { id }) => runs::show(&id),
        },
        Command::Approve {
            id,
            for_run,
            always,
        } => approvals::decide(
            &id,
            if always {
                airlock_store::ledger::Choice::AllowAlways
            } else if for_run {
                airlock_store::ledger::Choice::AllowForRun
            } else {
                airlock_store::ledger::Choice::AllowOnce
            },
        ),
        Command::Deny { id } => approvals::decide(&id, airlock_store::ledger::Choice::Deny),
        Command::Store {
            command:
                StoreCommand::Migrate {
                    owner,
                    owner_password,
                    hub_role,
                    for_tenant,
                },
        } => store::migrate(&owner, owner_password.as_deref(), &hub_role, &for_tenant),
        Command::Page { print } => approvals::page(print),
        Command::Tools {
            command:
                ToolsCommand::Review {
                    config,
                    approve_all,
                    approve,
                    list,
                },
        } => tools::review(config, tools::Mode::from_flags(approve_all, approve, list)),
        Command::Policy {
            command: PolicyCommand::Check { config },
        } => policy::check(config),
        Command::Policy {
            command:
                PolicyCommand::Explain {
                    tool,
                    args,
                    connection,
                    config,
                },
        } => policy::explain(config, &tool, args.as_deref(), connection.as_deref()),
        Command::Audit {
            command: Some(AuditCommand::Verify),
            ..
        } => audit::verify(),
        Command::Audit {
            command: None,
            filter,
        } => audit::show(&filter),
        Command::Token { rotate } => token::run(rotate),
        Command::Rules { command } => match command {
            RulesCommand::List => rules::list(),
            RulesCommand::Revoke { id } => rules::revoke(id),
        },
        Command::DemoServer => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(airlock_demo::serve_stdio()))
            .map(|()| ExitCode::SUCCESS),
    };
    result.unwrap_or_else(|e| {
        eprintln!("airlock: {e:#}");
        ExitCode::from(1)
    })
}
