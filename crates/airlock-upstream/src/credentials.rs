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

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use crate::egress::HttpClient;
use crate::ports::Secrets;

type Error = StreamableHttpError<reqwest::Error>;

/// An egress-guarded client that adds the source's headers, secrets
/// resolved, to each request.
#[derive(Clone)]
pub(crate) struct Credentialed {
    inner: HttpClient,
    /// Header name → value template (may contain secret references).
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
        Ok(Credentialed {
            inner,
            headers: headers.into(),
            secrets,
        })
    }

    /// The request's own headers plus the source's, resolved now.
    fn with_credentials(
        &self,
        mut custom: HashMap<HeaderName, HeaderValue>,
    ) -> Result<HashMap<HeaderName, HeaderValue>, Error> {
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

impl StreamableHttpClient for Credentialed {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let headers = self.with_credentials(custom_headers)?;
        self.inner
            .post_message(uri, message, session_id, auth_header, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let headers = self.with_credentials(custom_headers)?;
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let headers = self.with_credentials(custom_headers)?;
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let headers = self.with_credentials(custom_headers)?;
        self.inner
            .delete_session(uri, session_id, auth_header, headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let headers = self.with_credentials(custom_headers)?;
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let headers = self.with_credentials(custom_headers)?;
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }
}
