//! Where secret values live: entered by a person (`airlock secret set`),
//! never through MCP, and handed out only as [`SecretValue`]s that cannot be
//! printed by accident.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A secret value. Its `Debug` prints `[secret]`; the value is reachable
/// only through [`SecretValue::expose`], at the one place that sends it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: String) -> SecretValue {
        SecretValue(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(crate::REDACTED)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("no secret named `{0}`; store it with `airlock secret set {0}`")]
    Missing(String),
    #[error("`{0}` is not a secret name: use letters, digits, '_' and '-' (1 to 64)")]
    BadName(String),
    #[error("the secret file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the secret file {0} is not valid; fix or remove it")]
    Corrupt(String),
}

pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A place secrets are kept.
pub trait SecretStore: Send + Sync {
    fn get(&self, name: &str) -> Result<SecretValue, SecretError>;
    fn set(&self, name: &str, value: &SecretValue) -> Result<(), SecretError>;
    fn remove(&self, name: &str) -> Result<bool, SecretError>;
    fn names(&self) -> Result<Vec<String>, SecretError>;
    /// Where, in words, for messages.
    fn describe(&self) -> String;
    /// Whether every use deserves a warning (a fallback weaker than the
    /// OS keychain).
    fn is_fallback(&self) -> bool {
        false
    }
}

/// The fallback when no OS keychain is reachable: a JSON file in the data
/// directory, readable and writable by its owner only. Every use warns.
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    pub fn in_dir(dir: &Path) -> FileStore {
        FileStore {
            path: dir.join("secrets.json"),
        }
    }

    fn io(&self, source: std::io::Error) -> SecretError {
        SecretError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn read(&self) -> Result<BTreeMap<String, String>, SecretError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|_| SecretError::Corrupt(self.path.display().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(self.io(e)),
        }
    }

    fn write(&self, map: &BTreeMap<String, String>) -> Result<(), SecretError> {
        crate::files::replace(
            &self.path,
            serde_json::to_string_pretty(map)
                .unwrap_or_default()
                .as_bytes(),
        )
        .map_err(|e| self.io(e))
    }
}

impl SecretStore for FileStore {
    fn get(&self, name: &str) -> Result<SecretValue, SecretError> {
        self.read()?
            .remove(name)
            .map(SecretValue)
            .ok_or_else(|| SecretError::Missing(name.to_string()))
    }

    fn set(&self, name: &str, value: &SecretValue) -> Result<(), SecretError> {
        if !valid_name(name) {
            return Err(SecretError::BadName(name.to_string()));
        }
        let _held = crate::files::exclusive(&self.path).map_err(|e| self.io(e))?;
        let mut map = self.read()?;
        map.insert(name.to_string(), value.0.clone());
        self.write(&map)
    }

    fn remove(&self, name: &str) -> Result<bool, SecretError> {
        let _held = crate::files::exclusive(&self.path).map_err(|e| self.io(e))?;
        let mut map = self.read()?;
        let had = map.remove(name).is_some();
        if had {
            self.write(&map)?;
        }
        Ok(had)
    }

    fn names(&self) -> Result<Vec<String>, SecretError> {
        Ok(self.read()?.into_keys().collect())
    }

    fn is_fallback(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!(
            "the file {} (mode 0600; no OS keychain is in use)",
            self.path.display()
        )
    }
}

/// Replaces `secret:NAME` (a whole value) and `${secret:NAME}` (inside a
/// string) with the stored values. Returns the text and the values used.
pub fn resolve(
    text: &str,
    store: &dyn SecretStore,
) -> Result<(String, Vec<SecretValue>), SecretError> {
    if let Some(name) = text.strip_prefix("secret:") {
        let v = store.get(name)?;
        return Ok((v.0.clone(), vec![v]));
    }
    let mut out = String::with_capacity(text.len());
    let mut used = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${secret:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "${secret:".len()..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let v = store.get(&after[..end])?;
        out.push_str(v.expose());
        used.push(v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok((out, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_at_once_lose_no_secret() {
        // Separate stores on one file stand for separate airlock processes.
        let dir = tempfile::tempdir().unwrap();
        let writers: Vec<_> = (0..6)
            .map(|w| {
                let path = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let store = FileStore::in_dir(&path);
                    for i in 0..15 {
                        store
                            .set(&format!("w{w}-{i}"), &SecretValue::new(format!("v{w}{i}")))
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let names = FileStore::in_dir(dir.path()).names().unwrap();
        assert_eq!(names.len(), 6 * 15, "a concurrent change was lost");
    }

    #[test]
    fn file_store_round_trip_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let s = FileStore::in_dir(dir.path());
        s.set("GH_TOKEN", &SecretValue::new("ghp_abc".into()))
            .unwrap();
        assert_eq!(s.get("GH_TOKEN").unwrap().expose(), "ghp_abc");
        assert_eq!(s.names().unwrap(), ["GH_TOKEN"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("secrets.json"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(s.remove("GH_TOKEN").unwrap());
        assert!(matches!(s.get("GH_TOKEN"), Err(SecretError::Missing(_))));
    }

    #[test]
    fn references_resolve_whole_and_inline() {
        let dir = tempfile::tempdir().unwrap();
        let s = FileStore::in_dir(dir.path());
        s.set("T", &SecretValue::new("v4lue".into())).unwrap();
        assert_eq!(resolve("secret:T", &s).unwrap().0, "v4lue");
        let (text, used) = resolve("Bearer ${secret:T} and ${secret:T}", &s).unwrap();
        assert_eq!(text, "Bearer v4lue and v4lue");
        assert_eq!(used.len(), 2);
        assert_eq!(resolve("plain", &s).unwrap().0, "plain");
        assert!(resolve("secret:NOPE", &s).is_err());
    }

    #[test]
    fn debug_hides_the_value() {
        assert_eq!(format!("{:?}", SecretValue::new("x".into())), "[secret]");
    }
}
