//! Credentials of HTTP sources, resolved per request.
//!
//! A source's headers may name secrets (`Authorization = "Bearer
//! ${secret:NAME}"`). They are not resolved when the connection is made:
//! the transport holds only the templates, and every request it sends
//! resolves them at that moment, from the secret store, into header values
//! marked sensitive. A tool call reaches the transport only after policy
//! and approval let it through, so a denied or still-pending call never
//! touches a credential; the value lives for the length of one request.
//!
//! The HTTP client itself comes from [`crate::egress`]; this only wraps it.

use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::transport::streamable_http_client::StreamableHttpError;

use crate::egress::HttpClient;
use crate::layer::{Headers, Layer, Layered};
use crate::ports::Secrets;

/// An egress-guarded client that adds the source's headers, secrets
/// resolved, to each request.
pub(crate) type Credentialed = Layered<HttpClient, Credentials>;

/// The source's headers: name → value template (may contain secret
/// references), resolved per request.
#[derive(Clone)]
pub(crate) struct Credentials {
    headers: Arc<[(HeaderName, String)]>,
    secrets: Arc<dyn Secrets>,
}

impl Credentialed {
    /// Checks every header name now, so a typo fails the source at start
    /// rather than at its first request.
    pub(crate) fn new(
        inner: HttpClient,
        headers: &std::collections::BTreeMap<String, String>,
        secrets: Arc<dyn Secrets>,
    ) -> Result<Credentialed, String> {
        let headers = headers
            .iter()
            .map(|(k, v)| {
                let name = k
                    .parse::<HeaderName>()
                    .map_err(|_| format!("header name `{k}` is not valid"))?;
                Ok((name, v.clone()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Layered {
            inner,
            layer: Credentials {
                headers: headers.into(),
                secrets,
            },
        })
    }
}

impl Layer<reqwest::Error> for Credentials {
    /// The request's own headers plus the source's, resolved now.
    fn headers(&self, mut custom: Headers) -> Result<Headers, StreamableHttpError<reqwest::Error>> {
        for (name, template) in self.headers.iter() {
            let value = self.secrets.resolve(template).map_err(|e| {
                StreamableHttpError::Io(std::io::Error::other(format!("header `{name}`: {e}")))
            })?;
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                StreamableHttpError::Io(std::io::Error::other(format!(
                    "the value of header `{name}` is not a valid header value"
                )))
            })?;
            value.set_sensitive(true);
            custom.insert(name.clone(), value);
        }
        Ok(custom)
    }
}
