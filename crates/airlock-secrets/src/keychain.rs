//! The OS keychain (macOS Keychain, Windows Credential Manager, the Secret
//! Service on Linux) through the `keyring` crate, with a small index of
//! names beside it, since keychains cannot list what one program stored.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::store::{SecretError, SecretStore, SecretValue, valid_name};

const SERVICE: &str = "airlock";
const PROBE: &str = "__airlock_probe__";

pub struct KeychainStore {
    index: PathBuf,
}

/// Runs a keychain call on a thread of its own: the Secret Service client
/// drives its own async runtime, which must not nest inside the hub's.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("keychain thread"))
}

fn platform(e: keyring::Error) -> SecretError {
    SecretError::Io {
        path: "the OS keychain".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

impl KeychainStore {
    /// The keychain, if one answers here.
    pub fn open(data_dir: &Path) -> Option<KeychainStore> {
        let reachable = off_runtime(|| {
            keyring::Entry::new(SERVICE, PROBE)
                .map(|e| matches!(e.get_password(), Ok(_) | Err(keyring::Error::NoEntry)))
                .unwrap_or(false)
        });
        reachable.then(|| KeychainStore {
            index: data_dir.join("secret-names.json"),
        })
    }

    fn io(&self, source: std::io::Error) -> SecretError {
        SecretError::Io {
            path: self.index.display().to_string(),
            source,
        }
    }

    fn names_set(&self) -> Result<BTreeSet<String>, SecretError> {
        match std::fs::read_to_string(&self.index) {
            Ok(t) => serde_json::from_str(&t)
                .map_err(|_| SecretError::Corrupt(self.index.display().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeSet::new()),
            Err(source) => Err(SecretError::Io {
                path: self.index.display().to_string(),
                source,
            }),
        }
    }

    fn save_names(&self, names: &BTreeSet<String>) -> Result<(), SecretError> {
        crate::files::replace(
            &self.index,
            serde_json::to_string(names).unwrap_or_default().as_bytes(),
        )
        .map_err(|e| self.io(e))
    }
}

impl SecretStore for KeychainStore {
    fn get(&self, name: &str) -> Result<SecretValue, SecretError> {
        let name = name.to_string();
        off_runtime(move || {
            let entry = keyring::Entry::new(SERVICE, &name).map_err(platform)?;
            match entry.get_password() {
                Ok(v) => Ok(SecretValue::new(v)),
                Err(keyring::Error::NoEntry) => Err(SecretError::Missing(name)),
                Err(e) => Err(platform(e)),
            }
        })
    }

    fn set(&self, name: &str, value: &SecretValue) -> Result<(), SecretError> {
        if !valid_name(name) {
            return Err(SecretError::BadName(name.to_string()));
        }
        off_runtime(|| {
            keyring::Entry::new(SERVICE, name)
                .and_then(|e| e.set_password(value.expose()))
                .map_err(platform)
        })?;
        let _held = crate::files::exclusive(&self.index).map_err(|e| self.io(e))?;
        let mut names = self.names_set()?;
        names.insert(name.to_string());
        self.save_names(&names)
    }

    fn remove(&self, name: &str) -> Result<bool, SecretError> {
        let removed = off_runtime(|| {
            match keyring::Entry::new(SERVICE, name).and_then(|e| e.delete_credential()) {
                Ok(()) => Ok(true),
                Err(keyring::Error::NoEntry) => Ok(false),
                Err(e) => Err(platform(e)),
            }
        })?;
        let _held = crate::files::exclusive(&self.index).map_err(|e| self.io(e))?;
        let mut names = self.names_set()?;
        if names.remove(name) {
            self.save_names(&names)?;
        }
        Ok(removed)
    }

    fn names(&self) -> Result<Vec<String>, SecretError> {
        Ok(self.names_set()?.into_iter().collect())
    }

    fn describe(&self) -> String {
        "the OS keychain (service \"airlock\")".into()
    }
}
