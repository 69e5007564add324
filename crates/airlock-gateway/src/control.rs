//! The control socket: how a human channel in another process wakes a call
//! waiting for approval, or asks for a fresh link to the approval page. A
//! Unix socket in the data directory, readable and writable by its owner
//! only. It carries wake-ups, never decisions: the decision is already in
//! the ledger, and the woken call reads it there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Hub;

/// The socket's path in a data directory.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("hub.sock")
}

/// Listens until the hub shuts down.
#[cfg(unix)]
pub async fn listen(hub: Arc<Hub>, path: PathBuf) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = hub.shutdown().cancelled() => break,
        };
        let Ok((stream, _)) = accepted else { continue };
        let hub = hub.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = tokio::io::BufReader::new(read).lines();
            // One short line per request; anything else is ignored.
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(id) = line.strip_prefix("decided ")
                    && id.len() <= 64
                    && id.chars().all(|c| c.is_ascii_hexdigit())
                {
                    hub.wake_approval(id);
                } else if line == "page" {
                    let link = hub.approvals.channels().and_then(|c| c.page_link());
                    let reply = link.map_or("none\n".to_string(), |l| format!("link {l}\n"));
                    let _ = write.write_all(reply.as_bytes()).await;
                }
            }
        });
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Tells a running hub that approval `id` was decided. Best effort: with no
/// hub running there is no call waiting.
#[cfg(unix)]
pub fn notify(data_dir: &Path, id: &str) -> bool {
    use std::io::Write;
    std::os::unix::net::UnixStream::connect(socket_path(data_dir))
        .and_then(|mut s| s.write_all(format!("decided {id}\n").as_bytes()))
        .is_ok()
}

/// A fresh one-time link to the running hub's approval page, if a hub runs
/// and has a page.
#[cfg(unix)]
pub fn page_link(data_dir: &Path) -> Option<String> {
    use std::io::{BufRead, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket_path(data_dir)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    stream.write_all(b"page\n").ok()?;
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line).ok()?;
    line.trim_end().strip_prefix("link ").map(str::to_string)
}

#[cfg(not(unix))]
pub fn page_link(_data_dir: &Path) -> Option<String> {
    None
}

#[cfg(not(unix))]
pub async fn listen(_hub: Arc<Hub>, _path: PathBuf) -> std::io::Result<()> {
    Ok(())
}

#[cfg(not(unix))]
pub fn notify(_data_dir: &Path, _id: &str) -> bool {
    false
}
