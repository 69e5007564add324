//! A Streamable HTTP client wrapped by one concern: what it adds to each
//! request's headers, and what it notices in each answer. rmcp's client
//! trait is delegated once, here, for every such wrapper (the source's
//! credentials, the watch for refusals that ask for a login).

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

pub(crate) type Headers = HashMap<HeaderName, HeaderValue>;

/// One concern around every request of a client whose errors are `E`.
pub(crate) trait Layer<E: std::error::Error + Send + Sync + 'static>:
    Clone + Send + Sync
{
    /// The request's headers, with what this layer adds.
    fn headers(&self, headers: Headers) -> Result<Headers, StreamableHttpError<E>> {
        Ok(headers)
    }

    /// An answer, once this layer has looked at it.
    fn seen<T>(
        &self,
        result: Result<T, StreamableHttpError<E>>,
    ) -> Result<T, StreamableHttpError<E>> {
        result
    }
}

/// `inner` with `layer` around each of its requests.
#[derive(Clone)]
pub(crate) struct Layered<C, L> {
    pub(crate) inner: C,
    pub(crate) layer: L,
}

type Answer<T, E> = Result<T, StreamableHttpError<E>>;

impl<C, L> StreamableHttpClient for Layered<C, L>
where
    C: StreamableHttpClient + Send + Sync,
    L: Layer<C::Error> + 'static,
{
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Answer<StreamableHttpPostResponse, Self::Error> {
        let headers = self.layer.headers(custom_headers)?;
        self.layer.seen(
            self.inner
                .post_message(uri, message, session_id, auth_header, headers)
                .await,
        )
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Answer<StreamableHttpPostResponse, Self::Error> {
        let headers = self.layer.headers(custom_headers)?;
        self.layer.seen(
            self.inner
                .post_message_with_max_sse_event_size(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    headers,
                    max_sse_event_size,
                )
                .await,
        )
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> Answer<StreamableHttpPostResponse, Self::Error> {
        let headers = self.layer.headers(custom_headers)?;
        self.layer.seen(
            self.inner
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    headers,
                    limits,
                )
                .await,
        )
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Answer<(), Self::Error> {
        let headers = self.layer.headers(custom_headers)?;
        self.layer.seen(
            self.inner
                .delete_session(uri, session_id, auth_header, headers)
                .await,
        )
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Answer<BoxStream<'static, Result<Sse, SseError>>, Self::Error> {
        let headers = self.layer.headers(custom_headers)?;
        self.layer.seen(
            self.inner
                .get_stream(uri, session_id, last_event_id, auth_header, headers)
                .await,
        )
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Answer<BoxStream<'static, Result<Sse, SseError>>, Self::Error> {
        let headers = self.layer.headers(custom_headers)?;
        self.layer.seen(
            self.inner
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    headers,
                    max_sse_event_size,
                )
                .await,
        )
    }
}
