//! The control sockets: how the hubs sharing one data directory, and the
//! human channels in other processes, reach each other. Every running hub
//! listens on its own Unix socket, `hubs/<instance>.sock` in the data
//! directory (the directory 0700, the socket 0600), and removes only its
//! own when it stops. Beside it, `hubs/<instance>.lock` is locked for as
//! long as the hub runs: that lock, which the kernel drops when the process
//! dies however it dies, is what says a hub is running (a socket that
//! refuses a connection for a moment says nothing). Whoever finds a lock
//! nobody holds removes it and its socket.
//!
//! A socket carries wake-ups and questions, never decisions: a decision is
//! already in the shared ledger when a hub is told of it, and the woken call
//! reads it there. See decisions/0007.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Hub;

/// What a running hub says of itself when asked (`airlock status`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HubReport {
    pub pid: u32,
    pub instance: String,
    pub started_at_ms: i64,
    /// `stdio`, or the HTTP face's URL.
    pub face: String,
    /// The config file, or the built-in defaults.
    pub config: String,
    pub sources: Vec<SourceReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceReport {
    pub name: String,
    pub state: String,
    pub detail: String,
    /// The protocol version its connection speaks (empty when down).
    #[serde(default)]
    pub protocol: String,
}

/// Where the hubs of a data directory keep their sockets.
pub fn hubs_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("hubs")
}

/// One hub's socket, bound; the file goes when this is dropped.
pub struct Control {
    path: PathBuf,
    /// Held locked while the hub runs.
    lock: (PathBuf, std::fs::File),
    #[cfg(unix)]
    listener: tokio::net::UnixListener,
}

impl Control {
    /// Binds the socket of hub `instance` in `data_dir`. Must run inside
    /// a tokio runtime.
    #[cfg(unix)]
    pub fn bind(data_dir: &Path, instance: &str) -> std::io::Result<Control> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = hubs_dir(data_dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let lock_path = dir.join(format!("{instance}.lock"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)?;
        lock.try_lock().map_err(|e| {
            std::io::Error::other(format!(
                "{} is locked by another hub: {e}",
                lock_path.display()
            ))
        })?;
        let path = dir.join(format!("{instance}.sock"));
        // A file of this name can only be a dead hub's: instances are unique.
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        Ok(Control {
            path,
            lock: (lock_path, lock),
            listener: tokio::net::UnixListener::from_std(listener)?,
        })
    }

    #[cfg(not(unix))]
    pub fn bind(data_dir: &Path, instance: &str) -> std::io::Result<Control> {
        let dir = hubs_dir(data_dir);
        std::fs::create_dir_all(&dir)?;
        let lock_path = dir.join(format!("{instance}.lock"));
        let lock = std::fs::File::create(&lock_path)?;
        lock.try_lock()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Control {
            path: dir.join(format!("{instance}.sock")),
            lock: (lock_path, lock),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers until the hub shuts down. `report` is asked afresh each time
    /// someone wants the hub's status.
    #[cfg(unix)]
    pub async fn serve(self, hub: Arc<Hub>, report: Arc<dyn Fn() -> HubReport + Send + Sync>) {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = hub.shutdown().cancelled() => break,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: back off, do not spin.
                    tracing::warn!(error = %e, "accepting on the control socket failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (hub, report) = (hub.clone(), report.clone());
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                // Short lines only: a peer cannot make the hub buffer more.
                let mut lines = tokio::io::BufReader::new(read.take(64 * 1024)).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply = match line.as_str() {
                        "page" => {
                            let link = hub.approvals.channels().and_then(|c| c.page_link());
                            Some(link.map_or("none".to_string(), |l| format!("link {l}")))
                        }
                        "status" => serde_json::to_string(&report()).ok(),
                        _ => {
                            if let Some(id) = line.strip_prefix("decided ")
                                && id.len() <= 64
                                && id.chars().all(|c| c.is_ascii_hexdigit())
                            {
                                hub.wake_approval(id);
                            }
                            None
                        }
                    };
                    if let Some(reply) = reply
                        && write
                            .write_all(format!("{reply}\n").as_bytes())
                            .await
                            .is_err()
                    {
                        break;
                    }
                }
            });
        }
    }

    #[cfg(not(unix))]
    pub async fn serve(self, _hub: Arc<Hub>, _report: Arc<dyn Fn() -> HubReport + Send + Sync>) {}
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.lock.0);
    }
}

/// The instances of the hubs running on `data_dir`: those whose lock is
/// held. What a dead hub left (its lock and socket) is removed.
fn live_instances(data_dir: &Path) -> Vec<String> {
    sweep(data_dir).0
}

/// The hubs on `data_dir` that are running, and those found stopped (their
/// lock free: killed or gone), whose files this removes.
fn sweep(data_dir: &Path) -> (Vec<String>, Vec<String>) {
    let dir = hubs_dir(data_dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (Vec::new(), Vec::new());
    };
    let (mut live, mut stopped) = (Vec::new(), Vec::new());
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "lock") {
            continue;
        }
        let Some(instance) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
            // Cannot tell: count it as running, never close its calls.
            live.push(instance);
            continue;
        };
        match file.try_lock() {
            Ok(()) => {
                let _ = std::fs::remove_file(dir.join(format!("{instance}.sock")));
                let _ = std::fs::remove_file(&path);
                stopped.push(instance);
            }
            Err(std::fs::TryLockError::WouldBlock) => live.push(instance),
            // Cannot tell: count it as running.
            Err(std::fs::TryLockError::Error(_)) => live.push(instance),
        }
    }
    live.sort();
    (live, stopped)
}

/// The sockets of the hubs running on `data_dir`, connected, with their
/// paths (a running hub whose socket cannot be reached is left out).
#[cfg(unix)]
fn running(data_dir: &Path) -> Vec<(PathBuf, std::os::unix::net::UnixStream)> {
    live_instances(data_dir)
        .into_iter()
        .filter_map(|instance| {
            let path = hubs_dir(data_dir).join(format!("{instance}.sock"));
            let stream = std::os::unix::net::UnixStream::connect(&path).ok()?;
            Some((path, stream))
        })
        .collect()
}

/// Sends `line` to one hub and reads its one-line answer.
#[cfg(unix)]
fn ask(mut stream: std::os::unix::net::UnixStream, line: &str) -> Option<String> {
    use std::io::{BufRead, Write};
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    stream.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut answer = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut answer)
        .ok()?;
    Some(answer.trim_end().to_string())
}

/// Tells every hub on `data_dir` but the one at `except` that approval `id`
/// was decided; returns how many were told. With no hub running there is no
/// call waiting.
#[cfg(unix)]
pub fn notify(data_dir: &Path, id: &str, except: Option<&Path>) -> usize {
    use std::io::Write;
    running(data_dir)
        .into_iter()
        .filter(|(path, _)| Some(path.as_path()) != except)
        .filter(|(_, stream)| {
            let mut stream = stream;
            stream
                .write_all(format!("decided {id}\n").as_bytes())
                .is_ok()
        })
        .count()
}

/// A fresh one-time link to the approval page of a hub running on
/// `data_dir` (any of them: each page shows every waiting call).
#[cfg(unix)]
pub fn page_link(data_dir: &Path) -> Option<String> {
    running(data_dir)
        .into_iter()
        .find_map(|(_, s)| ask(s, "page")?.strip_prefix("link ").map(str::to_string))
}

/// What each hub running on `data_dir` says of itself.
#[cfg(unix)]
pub fn reports(data_dir: &Path) -> Vec<HubReport> {
    running(data_dir)
        .into_iter()
        .filter_map(|(_, s)| serde_json::from_str(&ask(s, "status")?).ok())
        .collect()
}

/// The instances of the hubs on `data_dir` found stopped (killed, their
/// lock free) and those running, by their locks: a team store forgets the
/// stopped ones at once instead of waiting for their heartbeat to age.
pub fn stopped_and_running(data_dir: &Path) -> (Vec<String>, Vec<String>) {
    let (running, stopped) = sweep(data_dir);
    (stopped, running)
}

/// The instances of the hubs running on `data_dir` (by their locks,
/// without asking them anything).
pub fn instances(data_dir: &Path) -> Vec<String> {
    live_instances(data_dir)
}

#[cfg(not(unix))]
pub fn notify(_data_dir: &Path, _id: &str, _except: Option<&Path>) -> usize {
    0
}

#[cfg(not(unix))]
pub fn page_link(_data_dir: &Path) -> Option<String> {
    None
}

#[cfg(not(unix))]
pub fn reports(_data_dir: &Path) -> Vec<HubReport> {
    Vec::new()
}
