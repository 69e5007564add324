//! The HTTP face's client token: random, kept in `http-token` in the data
//! directory (mode 0600), created on first use, replaced by
//! `airlock token --rotate`. A running hub notices a rotation within a
//! second.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_gateway::faces::auth::ClientToken;
use anyhow::{Context, bail};

const FILE: &str = "http-token";
/// How often a running hub re-reads the file (a rotation takes this long).
const RECHECK: Duration = Duration::from_secs(1);

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// The token, creating it if there is none yet.
pub fn load_or_create(data_dir: &Path) -> anyhow::Result<String> {
    match read(data_dir)? {
        Some(t) => Ok(t),
        None => rotate(data_dir),
    }
}

/// Reads the token; refuses a file other users could read or write.
pub fn read(data_dir: &Path) -> anyhow::Result<Option<String>> {
    let file = path(data_dir);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    check_private(&file)?;
    let token = text.trim().to_string();
    if token.len() < 32 {
        bail!(
            "{} holds no usable token (too short); run `airlock token --rotate`",
            file.display()
        );
    }
    Ok(Some(token))
}

/// A new token replaces the old one (written beside it, then renamed, so a
/// reader never sees half a file).
pub fn rotate(data_dir: &Path) -> anyhow::Result<String> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let token = format!("airlock_{}", airlock_common::random::hex::<32>());
    let file = path(data_dir);
    let staged = data_dir.join(format!("{FILE}.new"));
    let _ = std::fs::remove_file(&staged);
    {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options
            .open(&staged)
            .with_context(|| format!("cannot write {}", staged.display()))?;
        writeln!(f, "{token}")?;
        f.sync_all()?;
    }
    std::fs::rename(&staged, &file)
        .with_context(|| format!("cannot replace {}", file.display()))?;
    Ok(token)
}

#[cfg(unix)]
fn check_private(file: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file)?;
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "{} can be read or written by other users (mode {mode:o}), so the token may be known to them; \
             run `airlock token --rotate` to replace it with a private one",
            file.display()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_file: &Path) -> anyhow::Result<()> {
    Ok(())
}

/// The token as a running hub sees it: re-read at most every second, so a
/// rotation takes effect without a restart. An unreadable file refuses
/// every request (fail closed) until it is readable again.
pub struct TokenFile {
    dir: PathBuf,
    cached: Mutex<(Option<Arc<str>>, Instant)>,
}

impl TokenFile {
    pub fn new(dir: &Path, token: String) -> TokenFile {
        TokenFile {
            dir: dir.to_path_buf(),
            cached: Mutex::new((Some(token.into()), Instant::now())),
        }
    }
}

impl ClientToken for TokenFile {
    fn current(&self) -> Option<Arc<str>> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if cached.1.elapsed() >= RECHECK {
            cached.0 = match read(&self.dir) {
                Ok(t) => t.map(Into::into),
                Err(e) => {
                    tracing::error!("refusing HTTP clients: {e:#}");
                    None
                }
            };
            cached.1 = Instant::now();
        }
        cached.0.clone()
    }
}

/// `airlock token [--rotate]`.
pub fn run(rotate_it: bool) -> anyhow::Result<std::process::ExitCode> {
    let dir = crate::home::data_dir()?;
    let token = if rotate_it {
        let t = rotate(&dir)?;
        eprintln!(
            "airlock: a new token is in force (running hubs take it within a second); \
             clients configured with the old one get 401 until you give them this one"
        );
        t
    } else {
        load_or_create(&dir)?
    };
    println!("{token}");
    eprintln!(
        "airlock: HTTP clients send it as `Authorization: Bearer <token>` (kept in {})",
        path(&dir).display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}
