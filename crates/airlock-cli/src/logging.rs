//! airlock's own log output, scrubbed.
//!
//! Every log line is written through the hub's scrubber, so a secret value
//! that reaches a log message — an upstream's error text, a debug dump of a
//! protocol message, anything — leaves as `[secret]`, in every encoding
//! the scrubber knows. Each event is formatted into its own buffer and
//! scrubbed whole when the event ends, so no value is split across writes.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, OnceLock};

use airlock_gateway::secrets::HubSecrets;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Where the scrubber comes from once the hub's secrets exist; until then
/// no secret has been resolved, so there is nothing to scrub.
#[derive(Clone, Default)]
pub struct Scrubbed {
    secrets: Arc<OnceLock<Arc<HubSecrets>>>,
}

impl Scrubbed {
    /// From now on, log lines are scrubbed of every value `secrets` knows.
    pub fn attach(&self, secrets: Arc<HubSecrets>) {
        let _ = self.secrets.set(secrets);
    }
}

/// One event's bytes, scrubbed and written to stderr when dropped.
pub struct EventWriter {
    buffer: Vec<u8>,
    secrets: Option<Arc<HubSecrets>>,
}

impl Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buffer);
        let clean = match &self.secrets {
            Some(s) => s.scrubber().scrub(&text).into_owned(),
            None => text.into_owned(),
        };
        let _ = std::io::stderr().lock().write_all(clean.as_bytes());
    }
}

impl<'a> MakeWriter<'a> for Scrubbed {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter {
            buffer: Vec::with_capacity(256),
            secrets: self.secrets.get().cloned(),
        }
    }
}

/// Logs to stderr (stdout belongs to the MCP client on stdio), filtered by
/// `AIRLOCK_LOG` or `default_level`, scrubbed. Returns the handle that
/// attaches the scrubber.
pub fn init(default_level: &str) -> Scrubbed {
    let scrubbed = Scrubbed::default();
    tracing_subscriber::fmt()
        .with_writer(scrubbed.clone())
        .with_ansi(colour(std::io::stderr().is_terminal()))
        .with_env_filter(
            EnvFilter::try_from_env("AIRLOCK_LOG")
                .unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .init();
    scrubbed
}

/// Colour only on a terminal, and never when `NO_COLOR` is set to anything
/// (<https://no-color.org>).
pub fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
