//! The stores' small files (the private secret file, the keychain's index
//! of names), changed safely by several airlock processes at once: each
//! change holds an exclusive lock beside the file across its read and
//! write, and a write replaces the file whole (a reader never sees it half
//! written).

use std::path::Path;

use crate::store::SecretError;

fn io(path: &Path, source: std::io::Error) -> SecretError {
    SecretError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Held (until dropped) across a read, change and write of `path`.
pub(crate) fn exclusive(path: &Path) -> Result<std::fs::File, SecretError> {
    let lock_path = path.with_extension("lock");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(path, e))?;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io(&lock_path, e))?;
    lock.lock().map_err(|e| io(&lock_path, e))?;
    Ok(lock)
}

/// Replaces `path` with `bytes`, readable and writable by its owner only,
/// through a temporary file of this process's own.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<(), SecretError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(path, e))?;
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
        let mut f = options.open(&tmp).map_err(|e| io(&tmp, e))?;
        std::io::Write::write_all(&mut f, bytes).map_err(|e| io(&tmp, e))?;
        f.sync_all().map_err(|e| io(&tmp, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}
