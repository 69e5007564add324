//! Logging out: revoke at the provider first (RFC 7009: the refresh token,
//! then the access token), then forget locally, and say plainly what could
//! not be revoked.

use std::sync::Arc;

use super::vault::TokenVault;
use crate::ports::Vault;

/// What a logout did.
#[derive(Debug, Default)]
pub struct Logout {
    /// Tokens the provider confirmed revoked ("refresh token", "access token").
    pub revoked: Vec<&'static str>,
    /// Why some could not be revoked, in airlock's words.
    pub not_revoked: Vec<String>,
    /// Whether anything was stored to forget.
    pub forgot: bool,
}

/// Revokes what can be revoked, then deletes everything stored for the
/// source, whatever the provider said.
pub async fn logout(target: &super::Target, secrets: Arc<dyn Vault>) -> Result<Logout, String> {
    let vault = TokenVault::new(&target.source, secrets);
    let mut out = Logout::default();
    if !vault.exists()? {
        return Ok(out);
    }
    // Whatever stands in the way of revoking (an unreadable record, an
    // endpoint the egress guard refuses) is said, and the login is
    // forgotten all the same.
    match vault.record() {
        Ok(record) => {
            if let Err(why) = revoke(target, &vault, &record, &mut out).await {
                out.not_revoked.push(format!("nothing was revoked: {why}"));
            }
        }
        Err(why) => out.not_revoked.push(format!("nothing was revoked: {why}")),
    }
    vault.forget_tokens(None)?;
    out.forgot = true;
    Ok(out)
}

/// RFC 7009, refresh token first, at the endpoint the provider named.
async fn revoke(
    target: &super::Target,
    vault: &TokenVault,
    record: &super::Record,
    out: &mut Logout,
) -> Result<(), String> {
    let tokens = [
        ("refresh token", "refresh_token", vault.refresh_token()?),
        ("access token", "access_token", vault.access_token()?),
    ];
    let any = tokens.iter().any(|(_, _, t)| t.is_some());
    match (record.revocation_endpoint(), any) {
        (_, false) => {}
        (None, true) => out.not_revoked.push(
            "the provider has no revocation endpoint: the tokens stay valid there until they expire"
                .into(),
        ),
        (Some(endpoint), true) => {
            crate::egress::check_target(endpoint, target.allow_private)?;
            let client = crate::egress::client_without_redirects(target.allow_private)?;
            let secret = vault.secret_of_client(record.registration, &target.settings)?;
            let basic = secret.is_some() && !only_post(record);
            for (label, hint, token) in &tokens {
                let Some(token) = token else { continue };
                let mut form = vec![("token", token.as_str()), ("token_type_hint", hint)];
                let client_id = record.client_id.clone().unwrap_or_default();
                let mut request = client.post(endpoint);
                match (&secret, basic) {
                    (Some(s), true) => request = request.basic_auth(&client_id, Some(s)),
                    (Some(s), false) => {
                        form.push(("client_id", &client_id));
                        form.push(("client_secret", s));
                    }
                    (None, _) => form.push(("client_id", &client_id)),
                }
                let body = url::form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(form.iter())
                    .finish();
                let sent = tokio::time::timeout(
                    super::http::TIMEOUT,
                    request
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(body)
                        .send(),
                )
                .await;
                match sent {
                    Ok(Ok(r)) if r.status().is_success() => out.revoked.push(label),
                    Ok(Ok(r)) => out.not_revoked.push(format!(
                        "the provider refused to revoke the {label} (HTTP {})",
                        r.status().as_u16()
                    )),
                    Ok(Err(_)) => out
                        .not_revoked
                        .push(format!("the provider could not be reached to revoke the {label}")),
                    Err(_) => out.not_revoked.push(format!(
                        "the provider did not answer the revocation of the {label} in time"
                    )),
                }
            }
        }
    }
    Ok(())
}

/// Whether the provider takes client credentials only in the body.
fn only_post(record: &super::Record) -> bool {
    let methods = record
        .metadata
        .as_ref()
        .and_then(|m| {
            m.additional_fields
                .get("token_endpoint_auth_methods_supported")
        })
        .and_then(|v| v.as_array());
    methods.is_some_and(|m| {
        m.iter().any(|x| x == "client_secret_post") && !m.iter().any(|x| x == "client_secret_basic")
    })
}
