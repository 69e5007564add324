//! `airlock import`: a client's JSON → airlock TOML, plus the snippet that
//! points the client at airlock.

use std::path::Path;
use std::process::ExitCode;

use airlock_config::ClientKind;
use anyhow::Context;

pub fn run(file: &Path, out: Option<&Path>, project: Option<&str>) -> anyhow::Result<ExitCode> {
    let (imported, toml) = airlock_config::import_json(file, project)?;
    eprintln!("imported {}", imported.scopes.join(" and "));
    for (dir, servers) in &imported.other_projects {
        eprintln!(
            "note: project {dir} has {} server(s) of its own, not imported ({}); add them with `airlock import {} --project {dir}`",
            servers.len(),
            servers.join(", "),
            file.display()
        );
    }
    for name in &imported.private {
        eprintln!(
            "note: source `{name}` reaches this machine or a private network, so it has `allow_private = true`; remove that line if the address is not one you meant to trust"
        );
    }
    for (from, to) in &imported.renamed {
        eprintln!(
            "note: server `{from}` becomes source `{to}` (source names use letters, digits and '-')"
        );
    }
    for skipped in &imported.skipped {
        eprintln!("note: server `{skipped}` is disabled in the client file and was left out");
    }
    for (name, place) in &imported.secrets_to_store {
        eprintln!(
            "note: {place} looked like a credential and is now \"secret:{name}\"; store its value with `airlock secret set {name}` (the value was not copied)"
        );
    }
    let header = format!(
        "# Imported by `airlock import` from {}.\n# Tools appear to clients as <source>__<tool>.\n\n",
        file.display()
    );
    let config_path = match out {
        Some(path) => {
            if path.exists() {
                anyhow::bail!(
                    "{} already exists; choose another --out or remove it first",
                    path.display()
                );
            }
            // Private to the user: a config names sources and secrets.
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            std::io::Write::write_all(
                &mut options
                    .open(path)
                    .with_context(|| format!("cannot write {}", path.display()))?,
                format!("{header}{toml}").as_bytes(),
            )
            .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
        }
        None => {
            print!("{header}{toml}");
            // Where it would be saved from here: a client starts airlock
            // from its own directory, so the snippet needs the whole path.
            std::env::current_dir()
                .unwrap_or_default()
                .join("airlock.toml")
        }
    };
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "airlock".into());
    let args = ["serve", "--config", &config_path.display().to_string()].map(String::from);
    // Each client's own shape: VS Code wants `servers` and a `type`.
    let snippet = match imported.client {
        ClientKind::McpServers => serde_json::json!({
            "mcpServers": { "airlock": { "command": exe, "args": args } }
        }),
        ClientKind::VsCode => serde_json::json!({
            "servers": { "airlock": { "type": "stdio", "command": exe, "args": args } }
        }),
    };
    eprintln!(
        "\nReplace the client's servers with this entry so every call goes through airlock:\n{}",
        serde_json::to_string_pretty(&snippet)?
    );
    Ok(ExitCode::SUCCESS)
}
