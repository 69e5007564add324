//! Who may use the HTTP face: every request carries the per-user token as
//! `Authorization: Bearer <token>`. Anything else gets `401` and nothing
//! more: no session, no JSON-RPC parsing, no hint of what runs behind.
//!
//! Loopback is not a boundary on a shared machine (any local user can
//! connect to 127.0.0.1), so the token is what says "this is the user's own
//! client". Processes of the same user can read the token file: they are
//! the user.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// Where the face learns the token in force now (it may be rotated while
/// the hub runs). `None` means no token can be read: every request is
/// refused.
pub trait ClientToken: Send + Sync {
    fn current(&self) -> Option<Arc<str>>;
}

/// A fixed token, for hubs embedded in tests and benches.
pub struct FixedToken(pub Arc<str>);

impl ClientToken for FixedToken {
    fn current(&self) -> Option<Arc<str>> {
        Some(self.0.clone())
    }
}

/// Why a request was refused; only ever logged, never sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    /// More than one `Authorization` header: which one counts is ambiguous.
    Several,
    NotBearer,
    Wrong,
    NoTokenConfigured,
}

/// Checks the request's headers against the token in force.
pub fn check(headers: &axum::http::HeaderMap, expected: Option<&str>) -> Result<(), Refusal> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or(Refusal::Missing)?;
    if values.next().is_some() {
        return Err(Refusal::Several);
    }
    let presented = bearer(value).ok_or(Refusal::NotBearer)?;
    let expected = expected.ok_or(Refusal::NoTokenConfigured)?;
    // Constant time: the comparison says nothing about how much matched.
    if expected.is_empty() || !bool::from(presented.as_bytes().ct_eq(expected.as_bytes())) {
        return Err(Refusal::Wrong);
    }
    Ok(())
}

/// The credential of `Bearer <credential>` (the scheme is case-insensitive,
/// as HTTP says; exactly one space, no other parameters).
fn bearer(value: &HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?;
    let (scheme, credential) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") || credential.is_empty() || credential.contains(' ') {
        return None;
    }
    Some(credential)
}

/// The axum layer: refuses with 401 before anything else runs.
pub async fn require_token(
    State(token): State<Arc<dyn ClientToken>>,
    request: Request,
    next: Next,
) -> Response {
    let expected = token.current();
    match check(request.headers(), expected.as_deref()) {
        Ok(()) => next.run(request).await,
        Err(why) => {
            tracing::debug!(?why, "refused an HTTP request without the client token");
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "airlock: this hub needs `Authorization: Bearer <token>`; `airlock token` prints the token\n",
            )
                .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"airlock\""),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn with(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let t = Some("s3cr3t-token");
        assert_eq!(check(&with(&["Bearer s3cr3t-token"]), t), Ok(()));
        assert_eq!(check(&with(&["bearer s3cr3t-token"]), t), Ok(()));
        assert_eq!(check(&with(&["BEARER s3cr3t-token"]), t), Ok(()));
        for bad in [
            "Bearer s3cr3t-toke",
            "Bearer s3cr3t-token2",
            "Bearer S3CR3T-TOKEN",
            "Bearer  s3cr3t-token",
            "Bearer s3cr3t-token extra",
            "Bearer ",
            "Bearer",
            "Basic s3cr3t-token",
            "Token s3cr3t-token",
            "s3cr3t-token",
        ] {
            assert!(check(&with(&[bad]), t).is_err(), "{bad:?} passed");
        }
        assert_eq!(check(&with(&[]), t), Err(Refusal::Missing));
        assert_eq!(
            check(&with(&["Bearer s3cr3t-token", "Bearer s3cr3t-token"]), t),
            Err(Refusal::Several)
        );
        assert_eq!(
            check(&with(&["Bearer x"]), None),
            Err(Refusal::NoTokenConfigured)
        );
        assert_eq!(check(&with(&["Bearer x"]), Some("")), Err(Refusal::Wrong));
    }
}
