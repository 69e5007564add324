//! `airlock`: the command a person runs. Thin glue over the library crates;
//! each subcommand lives in its own module.

mod doctor;
mod home;
mod import;
mod serve;
mod status;

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
    },
    /// Convert a client's mcpServers JSON to airlock TOML and print the
    /// snippet that points the client at airlock instead.
    Import {
        /// The client's config (claude_desktop_config.json, .mcp.json, ...).
        file: PathBuf,
        /// Write the TOML here instead of printing it.
        #[arg(long, short)]
        out: Option<PathBuf>,
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
    /// Run the demo MCP server on stdio (used by the built-in config).
    #[command(hide = true)]
    DemoServer,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config, http } => serve::run(config, http),
        Command::Import { file, out } => import::run(&file, out.as_deref()),
        Command::Status { calls } => status::run(calls),
        Command::Doctor { config } => doctor::run(config),
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
