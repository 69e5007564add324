//! What a source reaches, as a person reviews it. For a stdio source: the
//! resolved program path, the arguments, the names (never the values) of
//! the environment it is given, and its working directory. For a url
//! source: the endpoint's origin (scheme, host, port) and the names of the
//! headers it sends. A change to any of these asks for review again.

use std::path::{Path, PathBuf};

use airlock_config::{SourceConfig, Transport};

/// The exact command of a stdio source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandIdentity {
    /// Set for url sources: the origin the source may reach.
    pub endpoint: Option<String>,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env_names: Vec<String>,
    pub cwd: Option<PathBuf>,
}

impl CommandIdentity {
    /// What `source` runs or reaches. A program that cannot be found keeps
    /// its name as written; starting it will fail with "not found".
    pub fn of(source: &SourceConfig) -> Option<CommandIdentity> {
        let (command, args, env, cwd) = match &source.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => (command, args, env, cwd),
            Transport::Http { url, headers } => {
                let origin = reqwest::Url::parse(url)
                    .map(|u| u.origin().ascii_serialization())
                    .unwrap_or_else(|_| url.clone());
                return Some(CommandIdentity {
                    endpoint: Some(origin),
                    program: PathBuf::new(),
                    args: Vec::new(),
                    env_names: headers.keys().cloned().collect(),
                    cwd: None,
                });
            }
        };
        Some(CommandIdentity {
            endpoint: None,
            program: locate(command).unwrap_or_else(|| PathBuf::from(command)),
            args: args.clone(),
            env_names: env.keys().cloned().collect(),
            cwd: cwd.clone(),
        })
    }

    /// One line for a person.
    pub fn describe(&self) -> String {
        if let Some(origin) = &self.endpoint {
            let mut s = format!("endpoint {origin}");
            if !self.env_names.is_empty() {
                s.push_str(&format!("  (headers: {})", self.env_names.join(", ")));
            }
            return s;
        }
        let mut s = self.program.display().to_string();
        for a in &self.args {
            s.push(' ');
            if a.is_empty() || a.contains([' ', '"', '\'']) {
                s.push_str(&format!("{a:?}"));
            } else {
                s.push_str(a);
            }
        }
        if !self.env_names.is_empty() {
            s.push_str(&format!("  (env: {})", self.env_names.join(", ")));
        }
        if let Some(cwd) = &self.cwd {
            s.push_str(&format!("  (in {})", cwd.display()));
        }
        s
    }

    /// What a review pins: the description is the identity.
    pub fn fingerprint(&self) -> String {
        self.describe()
    }
}

/// The absolute path a command name runs, searching PATH like a shell.
fn locate(command: &str) -> Option<PathBuf> {
    let p = Path::new(command);
    if p.components().count() > 1 {
        return p.canonicalize().ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|c| c.is_file())
        .and_then(|c| c.canonicalize().ok())
}
