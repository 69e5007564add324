//! The sealed `requestState` of an approval form put to a 2026-07-28 client.
//!
//! Such a client cannot be asked mid-call, so a call that asks ends with
//! `input_required` carrying airlock's four-choice form and this state; the
//! client's retry brings the person's answer and the state back. The state
//! is the only thing that ties the answer to the pending call, so it is
//! sealed with HMAC-SHA-256 under a key that never leaves this process,
//! bound to the approval, the principal, the tool and the call's digest,
//! short-lived, and spent on first use — a second use is refused here, on
//! our side, whatever the client does.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Marks a `requestState` as an airlock approval seal.
pub(crate) const SEAL_PREFIX: &str = "airlock-approval.";

/// What a seal vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claims {
    /// The approval (ledger row) id.
    #[serde(rename = "a")]
    pub approval: String,
    #[serde(rename = "p")]
    pub principal: String,
    /// Exposed tool name.
    #[serde(rename = "t")]
    pub tool: String,
    /// Digest of the frozen call's canonical arguments.
    #[serde(rename = "d")]
    pub digest: String,
    #[serde(rename = "n")]
    nonce: String,
    /// Not valid at or after this time (ms since the epoch).
    #[serde(rename = "e")]
    expires_at_ms: i64,
}

/// Why a state was refused. Each says what was wrong, never what would
/// have been right.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("this approval state was not issued by this airlock, or was altered")]
    Forged,
    #[error("this approval state has expired")]
    Expired,
    #[error("this approval state was already used")]
    Replayed,
    #[error("this approval state belongs to someone else")]
    Foreign,
}

pub(crate) struct Sealer {
    key: [u8; 32],
    /// Spent nonces, until their seal would have expired anyway.
    spent: Mutex<HashMap<String, i64>>,
}

impl Sealer {
    pub(crate) fn new() -> Sealer {
        Sealer {
            key: airlock_common::random::bytes(),
            spent: Mutex::new(HashMap::new()),
        }
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key length")
    }

    /// A fresh seal for `approval`, valid until `expires_at_ms`.
    pub(crate) fn seal(
        &self,
        approval: &str,
        principal: &str,
        tool: &str,
        digest: &str,
        expires_at_ms: i64,
    ) -> String {
        let claims = Claims {
            approval: approval.into(),
            principal: principal.into(),
            tool: tool.into(),
            digest: digest.into(),
            nonce: airlock_common::random::hex::<16>(),
            expires_at_ms,
        };
        let payload = serde_json::to_vec(&claims).expect("claims serialize");
        let mut mac = self.mac();
        mac.update(&payload);
        let tag = mac.finalize().into_bytes();
        format!(
            "{SEAL_PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Checks `state` and spends it. Succeeds once per seal.
    pub(crate) fn open(
        &self,
        state: &str,
        principal: &str,
        now_ms: i64,
    ) -> Result<Claims, Refusal> {
        let body = state.strip_prefix(SEAL_PREFIX).ok_or(Refusal::Forged)?;
        let (payload, tag) = body.split_once('.').ok_or(Refusal::Forged)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| Refusal::Forged)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Refusal::Forged)?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&tag).map_err(|_| Refusal::Forged)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| Refusal::Forged)?;
        if claims.expires_at_ms <= now_ms {
            return Err(Refusal::Expired);
        }
        if claims.principal != principal {
            return Err(Refusal::Foreign);
        }
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        spent.retain(|_, until| *until > now_ms);
        if spent
            .insert(claims.nonce.clone(), claims.expires_at_ms)
            .is_some()
        {
            return Err(Refusal::Replayed);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn sealed(s: &Sealer) -> String {
        s.seal("ab12", "ana", "demo__write_note", "d1g", NOW + 60_000)
    }

    #[test]
    fn a_seal_opens_once() {
        let s = Sealer::new();
        let state = sealed(&s);
        let claims = s.open(&state, "ana", NOW).unwrap();
        assert_eq!(claims.approval, "ab12");
        assert_eq!(claims.tool, "demo__write_note");
        assert_eq!(claims.digest, "d1g");
        assert_eq!(s.open(&state, "ana", NOW), Err(Refusal::Replayed));
    }

    #[test]
    fn any_changed_byte_is_refused() {
        let s = Sealer::new();
        let state = sealed(&s);
        let body = state.strip_prefix(SEAL_PREFIX).unwrap();
        let (payload, tag) = body.split_once('.').unwrap();
        let mut claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        claims["a"] = "ff00".into();
        let edited = format!(
            "{SEAL_PREFIX}{}.{tag}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap())
        );
        assert_eq!(s.open(&edited, "ana", NOW), Err(Refusal::Forged));
        let mut flipped = state.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(s.open(&flipped, "ana", NOW), Err(Refusal::Forged));
        // The untouched seal still opens: refusals spend nothing.
        assert!(s.open(&state, "ana", NOW).is_ok());
    }

    #[test]
    fn another_hubs_seal_is_refused() {
        let ours = Sealer::new();
        let theirs = Sealer::new();
        assert_eq!(
            ours.open(&sealed(&theirs), "ana", NOW),
            Err(Refusal::Forged)
        );
    }

    #[test]
    fn expired_and_foreign_seals_are_refused() {
        let s = Sealer::new();
        assert_eq!(
            s.open(&sealed(&s), "ana", NOW + 60_000),
            Err(Refusal::Expired)
        );
        assert_eq!(s.open(&sealed(&s), "bob", NOW), Err(Refusal::Foreign));
    }
}
