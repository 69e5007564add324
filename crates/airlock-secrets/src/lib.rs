//! Secrets: stored by a person, referenced by name in config, and kept out
//! of everything that leaves airlock (I1).
//!
//! [`Scrubber`] replaces every registered value with `[secret]` in the forms
//! an upstream might echo it back in: raw; base64, standard and URL-safe,
//! padded or not, at every byte alignment (a secret inside a longer encoded
//! string is encoded differently depending on where it starts);
//! URL-encoded; JSON-escaped, each form also as it reads inside a JSON
//! string. [`Needles`] matches all of them in a single pass, sampling the
//! text rather than reading every byte when every form is long enough. [`StreamScrubber`] does the same over a stream
//! of chunks, so a value split across two chunks is still caught.

mod files;
mod keychain;
mod needles;
mod scrub;
mod store;

pub use keychain::KeychainStore;
pub use needles::Needles;
pub use scrub::{REDACTED, Scrubber, StreamScrubber};
pub use store::{FileStore, SecretError, SecretStore, SecretValue, resolve, valid_name};

/// The OS keychain if one answers, else the private file in `data_dir`
/// (which says so wherever it is used).
pub fn open_store(data_dir: &std::path::Path) -> Box<dyn SecretStore> {
    if std::env::var_os("AIRLOCK_SECRET_STORE").is_some_and(|v| v == "file") {
        return Box::new(FileStore::in_dir(data_dir));
    }
    match KeychainStore::open(data_dir) {
        Some(k) => Box::new(k),
        None => Box::new(FileStore::in_dir(data_dir)),
    }
}
