//! Noticing a server's 401 or 403 on any request, not only the handshake.
//!
//! rmcp's Streamable HTTP worker ends the connection when a request after
//! the handshake is refused for want of authorization, and the call in
//! flight then sees only "closed". [`Watched`] sits under the worker, sees
//! the refusal as it happens, records in the source's login record that it
//! needs a person, and leaves the message in the source's [`Watch`] for the
//! call to report instead.

use std::sync::{Arc, Mutex};

use rmcp::transport::streamable_http_client::StreamableHttpError;

use crate::layer::{Layer, Layered};
use crate::ports::Vault;

/// The last refusal a source's connection met, as the message that says
/// what to run; taken by the call that failed because of it.
#[derive(Clone, Default)]
pub(crate) struct Watch(Arc<Mutex<Option<String>>>);

impl Watch {
    pub(crate) fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn put(&self, why: String) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }
}

/// A Streamable HTTP client that notices refusals asking for a login.
pub(crate) type Watched<C> = Layered<C, Watching>;

/// What notices them, and where it keeps what it saw.
#[derive(Clone)]
pub(crate) struct Watching {
    source: Arc<str>,
    /// None for a source that sends its own Authorization header: its
    /// refusals are about that header, and no login changes them.
    vault: Option<Arc<dyn Vault>>,
    watch: Watch,
}

impl<C> Watched<C> {
    /// Wraps `inner`; what an earlier connection saw is forgotten.
    pub(crate) fn new(inner: C, source: &str, vault: Option<Arc<dyn Vault>>, watch: Watch) -> Self {
        watch.take();
        Layered {
            inner,
            layer: Watching {
                source: source.into(),
                vault,
                watch,
            },
        }
    }
}

impl<E> Layer<E> for Watching
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn seen<T>(
        &self,
        result: Result<T, StreamableHttpError<E>>,
    ) -> Result<T, StreamableHttpError<E>> {
        if let (Err(e), Some(vault)) = (&result, &self.vault)
            && let Some(needed) = super::needed_by(e)
        {
            self.watch
                .put(super::mark_needs_login(&self.source, vault.clone(), needed));
        }
        result
    }
}
