//! The stores' small files (the private secret file, the keychain's index
//! of names), changed safely by several airlock processes at once: each
//! change holds an exclusive lock beside the file across its read and
//! write, and a write replaces the file whole (a reader never sees it half
//! written).

use std::path::Path;

/// Held (until dropped) across a read, change and write of `path`.
pub(crate) fn exclusive(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("lock"))?;
    lock.lock()?;
    Ok(lock)
}

/// Replaces `path` with `bytes`, readable and writable by its owner only,
/// through a temporary file of this process's own.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let extension = path
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_extension(format!("{extension}.{}.tmp", std::process::id()));
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
