//! The hub's side of secrets: resolving references for sources, and
//! scrubbing every registered value from what leaves toward clients, the
//! audit and the logs.

use std::sync::{Arc, Mutex, RwLock};

use airlock_secrets::{Scrubber, SecretStore};
use serde_json::Value;

pub struct HubSecrets {
    store: Box<dyn SecretStore>,
    /// Every value resolved so far; the scrubber is rebuilt when it grows.
    known: Mutex<Vec<String>>,
    scrubber: RwLock<Arc<Scrubber>>,
    /// Where lock files for token refreshes go (the data directory).
    locks: std::path::PathBuf,
}

impl HubSecrets {
    pub fn new(store: Box<dyn SecretStore>, locks: std::path::PathBuf) -> Arc<HubSecrets> {
        Arc::new(HubSecrets {
            store,
            locks,
            known: Mutex::new(Vec::new()),
            scrubber: RwLock::new(Arc::new(Scrubber::new::<&str>(&[]))),
        })
    }

    pub fn scrubber(&self) -> Arc<Scrubber> {
        self.scrubber
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn register(&self, values: &[airlock_secrets::SecretValue]) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let before = known.len();
        for v in values {
            if !known.iter().any(|k| k == v.expose()) {
                known.push(v.expose().to_string());
            }
        }
        if known.len() != before {
            let scrubber = Arc::new(Scrubber::new(&known));
            *self.scrubber.write().unwrap_or_else(|p| p.into_inner()) = scrubber;
        }
    }

    /// Learns every value in the secret store, so that one a source was
    /// never given is still scrubbed if an upstream (or anything else)
    /// repeats it. Used by what runs the hub; names that cannot be read
    /// are skipped with a warning.
    pub fn learn_stored(&self) {
        let names = match self.store.names() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list stored secrets to scrub them");
                return;
            }
        };
        let mut values = Vec::new();
        for name in names {
            match self.store.get(&name) {
                Ok(v) => values.push(v),
                Err(e) => {
                    tracing::warn!(%name, error = %e, "cannot read a stored secret to scrub it")
                }
            }
        }
        self.register(&values);
    }
}

impl airlock_upstream::Vault for HubSecrets {
    fn get(&self, name: &str) -> Result<Option<String>, String> {
        match self.store.get(name) {
            Ok(v) => {
                self.register(std::slice::from_ref(&v));
                Ok(Some(v.expose().to_string()))
            }
            Err(airlock_secrets::SecretError::Missing(_)) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn set(&self, name: &str, value: &str) -> Result<(), String> {
        let value = airlock_secrets::SecretValue::new(value.to_string());
        self.register(std::slice::from_ref(&value));
        self.store.set(name, &value).map_err(|e| e.to_string())
    }

    fn get_note(&self, name: &str) -> Result<Option<String>, String> {
        match self.store.get(name) {
            Ok(v) => Ok(Some(v.expose().to_string())),
            Err(airlock_secrets::SecretError::Missing(_)) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn set_note(&self, name: &str, value: &str) -> Result<(), String> {
        self.store
            .set(name, &airlock_secrets::SecretValue::new(value.to_string()))
            .map_err(|e| e.to_string())
    }

    fn remove(&self, name: &str) -> Result<bool, String> {
        self.store.remove(name).map_err(|e| e.to_string())
    }

    fn describe(&self) -> String {
        self.store.describe()
    }

    fn learn(&self, value: &str) {
        self.register(&[airlock_secrets::SecretValue::new(value.to_string())]);
    }

    fn lock_dir(&self) -> std::path::PathBuf {
        self.locks.clone()
    }
}

impl airlock_upstream::Secrets for HubSecrets {
    fn resolve(&self, text: &str) -> Result<String, String> {
        if !text.contains("secret:") {
            return Ok(text.to_string());
        }
        let (out, used) =
            airlock_secrets::resolve(text, self.store.as_ref()).map_err(|e| e.to_string())?;
        if self.store.is_fallback() {
            tracing::warn!("secret read from {}", self.store.describe());
        } else {
            tracing::debug!("secret read from {}", self.store.describe());
        }
        self.register(&used);
        Ok(out)
    }

    fn scrub(&self, text: &str) -> String {
        self.scrubber().scrub(text).into_owned()
    }

    fn scrub_json(&self, value: &mut Value) {
        self.scrubber().scrub_json(value);
    }

    fn finds_in_serialized(&self, json: &[u8]) -> bool {
        self.scrubber().finds_in_serialized(json)
    }

    fn active(&self) -> bool {
        !self.scrubber().is_empty()
    }
}
