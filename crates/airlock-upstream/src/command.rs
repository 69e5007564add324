//! What a source reaches, as a person reviews it. For a stdio source: the
//! program path, resolved with the `PATH` the source itself is started
//! with; the arguments; the environment it is given (the values of
//! variables that change what runs — `PATH`, `LD_PRELOAD`, `NODE_OPTIONS`,
//! … — in full, every other value by a digest); the content of the files
//! it runs (the program when it is a script, every argument that names a
//! file); and its working directory. For a url source: the endpoint's
//! origin (scheme, host, port) and the names of the headers it sends. A
//! change to any of these asks for review again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_config::{SourceConfig, Transport};
use sha2::{Digest, Sha256};

/// Files larger than this are pinned by path only (hashing them at every
/// start would cost more than it tells).
const MAX_PINNED_FILE: u64 = 16 * 1024 * 1024;

/// Variables whose value changes which code runs: shown in full.
const SHOWN_ENV: &[&str] = &[
    "PATH",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PERL5LIB",
    "PERL5OPT",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "BASH_ENV",
    "ENV",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "GCONV_PATH",
];
const SHOWN_ENV_PREFIXES: &[&str] = &["LD_", "DYLD_"];

/// The exact command of a stdio source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandIdentity {
    /// Set for url sources: the origin the source may reach.
    pub endpoint: Option<String>,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env_names: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Variables that change what runs, with their values as configured.
    pub env_shown: Vec<(String, String)>,
    /// A digest of every other variable's configured value (secret
    /// references, never secrets), so changing one asks again.
    pub env_values: Option<String>,
    /// The program's content digest when it is a script (`#!`).
    pub program_digest: Option<String>,
    /// Per argument, the content digest of the file it names, if any.
    pub arg_digests: Vec<Option<String>>,
    /// What the source may reach when it is confined, in words: part of
    /// what is reviewed, so widening it asks again.
    pub confine: Option<String>,
}

fn shown(name: &str) -> bool {
    SHOWN_ENV.contains(&name) || SHOWN_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
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
                    env_shown: Vec::new(),
                    env_values: None,
                    program_digest: None,
                    arg_digests: Vec::new(),
                    confine: None,
                });
            }
        };
        // The child is started with its own PATH (the config's, or the one
        // it inherits from airlock) and in its own directory: resolve the
        // program the way that start will.
        let path = env
            .get("PATH")
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"));
        let base = cwd
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default();
        let program =
            locate(command, path.as_deref(), &base).unwrap_or_else(|| PathBuf::from(command));
        let program_digest = if is_script(&program) {
            file_digest(&program)
        } else {
            None
        };
        let arg_digests = args.iter().map(|a| arg_file_digest(a, &base)).collect();
        Some(CommandIdentity {
            endpoint: None,
            program,
            args: args.clone(),
            env_names: env.keys().cloned().collect(),
            cwd: cwd.clone(),
            env_shown: env
                .iter()
                .filter(|(k, _)| shown(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            env_values: values_digest(env),
            program_digest,
            arg_digests,
            confine: source.confine.as_ref().map(confinement),
        })
    }

    /// Whether what this runs can run at all: a url source can be tried; a
    /// stdio source's program must be found and be an executable file.
    /// Approving one that cannot run would only fail later, elsewhere.
    pub fn runnable(&self) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        if self.endpoint.is_some() {
            return Ok(());
        }
        let program = self.program.display();
        if !self.program.is_absolute() {
            return Err(format!(
                "program not found: `{program}` is not on the PATH the source is started with"
            ));
        }
        match std::fs::metadata(&self.program) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(format!("program not found: `{program}`"))
            }
            Err(e) => Err(format!("`{program}` cannot be read: {e}")),
            Ok(m) if !m.is_file() => Err(format!("`{program}` is not a file")),
            Ok(m) if m.permissions().mode() & 0o111 == 0 => {
                Err(format!("`{program}` is not executable"))
            }
            Ok(_) => Ok(()),
        }
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
        if let Some(d) = &self.program_digest {
            s.push_str(&format!(" [{d}]"));
        }
        for (i, a) in self.args.iter().enumerate() {
            s.push(' ');
            if a.is_empty() || a.contains([' ', '"', '\'']) {
                s.push_str(&format!("{a:?}"));
            } else {
                s.push_str(a);
            }
            if let Some(Some(d)) = self.arg_digests.get(i) {
                s.push_str(&format!(" [{d}]"));
            }
        }
        if !self.env_names.is_empty() {
            let names: Vec<String> = self
                .env_names
                .iter()
                .map(|n| match self.env_shown.iter().find(|(k, _)| k == n) {
                    Some((_, v)) => format!("{n}={v:?}"),
                    None => n.clone(),
                })
                .collect();
            s.push_str(&format!("  (env: {}", names.join(", ")));
            if let Some(d) = &self.env_values {
                s.push_str(&format!("; values {d}"));
            }
            s.push(')');
        }
        if let Some(cwd) = &self.cwd {
            s.push_str(&format!("  (in {})", cwd.display()));
        }
        if let Some(c) = &self.confine {
            s.push_str(&format!("  (confined: {c})"));
        }
        s
    }

    /// What a review pins: the description is the identity.
    pub fn fingerprint(&self) -> String {
        self.describe()
    }
}

/// A confinement in words, every part of it.
fn confinement(c: &airlock_config::Confinement) -> String {
    let list = |paths: &[std::path::PathBuf]| {
        if paths.is_empty() {
            "nothing".to_string()
        } else {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut s = format!(
        "read {}; write {}; network {}",
        list(&c.read),
        list(&c.write),
        c.network.as_str()
    );
    if let Some(m) = c.memory_mib {
        s.push_str(&format!("; memory {m} MiB"));
    }
    if let Some(p) = c.processes {
        s.push_str(&format!("; processes {p}"));
    }
    if let Some(f) = c.open_files {
        s.push_str(&format!("; open files {f}"));
    }
    s
}

/// The absolute path a command runs: a name is searched on `path` (the
/// child's PATH), a relative path is taken from `base` (its directory).
fn locate(command: &str, path: Option<&std::ffi::OsStr>, base: &Path) -> Option<PathBuf> {
    let p = Path::new(command);
    if p.components().count() > 1 {
        return base.join(p).canonicalize().ok();
    }
    std::env::split_paths(path?)
        .map(|dir| base.join(dir).join(command))
        .find(|c| c.is_file())
        .and_then(|c| c.canonicalize().ok())
}

/// A program that starts with `#!` is a script: its text is what runs.
fn is_script(program: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 2];
    std::fs::File::open(program)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"#!"
}

/// `sha256:<16 hex>` of a regular file's content, if it is one and not too
/// large; `None` otherwise.
fn file_digest(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_PINNED_FILE {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    Some(short(&Sha256::digest(&bytes)))
}

/// Extensions of files an interpreter runs. Other files an argument names
/// (a database, a data directory) change as the server works, so pinning
/// them would stop it at its next start.
const CODE_EXTENSIONS: &[&str] = &[
    "js", "mjs", "cjs", "ts", "mts", "cts", "py", "pyc", "pyz", "rb", "pl", "pm", "php", "lua",
    "sh", "bash", "zsh", "ps1", "jar", "wasm",
];

/// The digest of the code file an argument names (`server.js`,
/// `/srv/app/main.py`, `--script=tool.py`, or any `#!` script), relative
/// to the child's directory.
fn arg_file_digest(arg: &str, base: &Path) -> Option<String> {
    let candidate = arg
        .split_once('=')
        .filter(|(k, _)| k.starts_with('-'))
        .map_or(arg, |(_, v)| v);
    if candidate.is_empty() || candidate.starts_with('-') {
        return None;
    }
    let path = base.join(candidate);
    let code = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| CODE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
        || is_script(&path);
    if code { file_digest(&path) } else { None }
}

/// A digest of the values of every variable not shown in full.
fn values_digest(env: &BTreeMap<String, String>) -> Option<String> {
    let mut h = Sha256::new();
    let mut any = false;
    for (k, v) in env.iter().filter(|(k, _)| !shown(k)) {
        any = true;
        h.update(k.as_bytes());
        h.update([0]);
        h.update(v.as_bytes());
        h.update([0]);
    }
    any.then(|| short(&h.finalize()))
}

fn short(digest: &[u8]) -> String {
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("airlock-command-{name}-{n}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn stdio(command: &str, args: &[&str], env: &[(&str, &str)], cwd: &Path) -> SourceConfig {
        SourceConfig {
            name: "s".into(),
            transport: Transport::Stdio {
                command: command.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                cwd: Some(cwd.to_path_buf()),
            },
            call_timeout: None,
            prefix: true,
            trusted: false,
            connection: "s".into(),
            allow_private: false,
            quote_output: true,
            protocol: airlock_config::Protocol::Auto,
            sessions: airlock_config::Sessions::default(),
            oauth: Default::default(),
            confine: None,
        }
    }

    #[cfg(unix)]
    fn executable(path: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The program is found on the PATH the child gets, not airlock's: a
    /// changed PATH value names another program, and asks again.
    #[cfg(unix)]
    #[test]
    fn the_program_is_resolved_with_the_childs_path() {
        let dir = scratch("path");
        for d in ["a", "b"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
            executable(&dir.join(d).join("srv"), &format!("#!/bin/sh\necho {d}\n"));
        }
        let a = dir.join("a").to_string_lossy().into_owned();
        let b = dir.join("b").to_string_lossy().into_owned();
        let in_a = CommandIdentity::of(&stdio("srv", &[], &[("PATH", &a)], &dir)).unwrap();
        let in_b = CommandIdentity::of(&stdio("srv", &[], &[("PATH", &b)], &dir)).unwrap();
        assert_eq!(in_a.program, dir.join("a/srv").canonicalize().unwrap());
        assert_eq!(in_b.program, dir.join("b/srv").canonicalize().unwrap());
        assert_ne!(in_a.fingerprint(), in_b.fingerprint());
        assert!(
            in_a.describe().contains(&format!("PATH={a:?}")),
            "{}",
            in_a.describe()
        );
        // A relative program is taken from the source's directory.
        let rel = CommandIdentity::of(&stdio("./a/srv", &[], &[], &dir)).unwrap();
        assert_eq!(rel.program, in_a.program);
    }

    #[test]
    fn env_values_are_pinned_and_loader_variables_shown() {
        let dir = scratch("env");
        let id = |env: &[(&str, &str)]| {
            CommandIdentity::of(&stdio("/bin/sh", &[], env, &dir))
                .unwrap()
                .fingerprint()
        };
        let base = id(&[("TOKEN", "secret:T"), ("MODE", "a")]);
        assert_eq!(base, id(&[("TOKEN", "secret:T"), ("MODE", "a")]));
        // Another value asks again, without showing the value.
        let changed = id(&[("TOKEN", "secret:T"), ("MODE", "b")]);
        assert_ne!(base, changed);
        assert!(
            !changed.contains("MODE=") && !changed.contains("\"b\""),
            "{changed}"
        );
        // What changes the code that runs is shown in full.
        for (k, v) in [
            ("LD_PRELOAD", "/tmp/evil.so"),
            ("NODE_OPTIONS", "--require /tmp/x.js"),
            ("PYTHONPATH", "/tmp/py"),
        ] {
            let f = id(&[(k, v)]);
            assert!(f.contains(&format!("{k}={v:?}")), "{f}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_script_edited_after_review_asks_again() {
        let dir = scratch("script");
        std::fs::write(dir.join("server.js"), "console.log(1)").unwrap();
        std::fs::write(dir.join("tool.py"), "print(1)").unwrap();
        std::fs::write(dir.join("data.db"), "rows").unwrap();
        executable(&dir.join("run.sh"), "#!/bin/sh\nexec true\n");
        let id = || {
            CommandIdentity::of(&stdio(
                "./run.sh",
                &["-y", "server.js", "--script=tool.py", "--db=data.db"],
                &[],
                &dir,
            ))
            .unwrap()
            .fingerprint()
        };
        let before = id();
        assert_eq!(before, id());
        std::fs::write(dir.join("server.js"), "console.log(2)").unwrap();
        let after_arg = id();
        assert_ne!(before, after_arg, "an edited script named in args");
        std::fs::write(dir.join("tool.py"), "print(2)").unwrap();
        let after_flag = id();
        assert_ne!(after_arg, after_flag, "an edited script named by --flag=");
        // Data the server changes as it works is not pinned.
        std::fs::write(dir.join("data.db"), "more rows").unwrap();
        assert_eq!(after_flag, id());
        executable(&dir.join("run.sh"), "#!/bin/sh\nexec false\n");
        assert_ne!(after_flag, id(), "an edited script program");
    }
}
