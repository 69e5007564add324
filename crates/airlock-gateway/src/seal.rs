//! The sealed `requestState`s airlock hands a 2026-07-28 client.
//!
//! Such a client cannot be asked mid-call, so a call that needs something
//! of the person ends with `input_required` and a state; the client's retry
//! brings the answers and the state back. Two kinds are issued:
//!
//! - an **approval** state ([`Claims`]): airlock's own four-choice form
//!   about a pending call;
//! - a **continuation** state ([`Continuation`]): a source on 2026-07-28
//!   asked for input during an allowed call, and its own state rides inside
//!   airlock's, so the retry continues that call and is never decided anew.
//!
//! The state is the only thing that ties the retry to the call, so it is
//! sealed with HMAC-SHA-256 under a key that never leaves this process (the
//! kind's prefix is part of what is signed, so one kind never opens as the
//! other), bound to the principal, the tool and the call's digest,
//! short-lived, and spent on first use: a second use is refused here, on
//! our side, whatever the client does.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Marks a `requestState` as an airlock approval seal.
pub(crate) const SEAL_PREFIX: &str = "airlock-approval.";
/// Marks a `requestState` as a sealed continuation of a source's input request.
pub(crate) const CONTINUATION_PREFIX: &str = "airlock-continue.";

/// What an approval seal vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claims {
    /// The approval (ledger row) id.
    #[serde(rename = "a")]
    pub approval: String,
    #[serde(flatten)]
    common: Common,
}

/// What a continuation seal vouches for: the source's own state, for a
/// call of this tool with these arguments, allowed before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Continuation {
    /// The source's `requestState`, given back to it on the retry.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub upstream_state: Option<String>,
    /// How many rounds of input this call has had, this one included.
    #[serde(rename = "r")]
    pub round: u32,
    #[serde(flatten)]
    common: Common,
}

/// What every seal carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Common {
    #[serde(rename = "p")]
    principal: String,
    /// Exposed tool name.
    #[serde(rename = "t")]
    tool: String,
    /// Digest of the call's canonical arguments.
    #[serde(rename = "d")]
    digest: String,
    #[serde(rename = "n")]
    nonce: String,
    /// Not valid at or after this time (ms since the epoch).
    #[serde(rename = "e")]
    expires_at_ms: i64,
}

/// The call a seal is bound to.
pub(crate) struct Bound<'a> {
    pub principal: &'a str,
    pub tool: &'a str,
    pub digest: &'a str,
    pub expires_at_ms: i64,
}

impl Common {
    fn of(bound: &Bound<'_>) -> Common {
        Common {
            principal: bound.principal.into(),
            tool: bound.tool.into(),
            digest: bound.digest.into(),
            nonce: airlock_common::random::hex::<16>(),
            expires_at_ms: bound.expires_at_ms,
        }
    }
}

/// A kind of sealed state.
trait Kind: Serialize + DeserializeOwned {
    const PREFIX: &'static str;
    fn common(&self) -> &Common;
}

impl Kind for Claims {
    const PREFIX: &'static str = SEAL_PREFIX;
    fn common(&self) -> &Common {
        &self.common
    }
}

impl Kind for Continuation {
    const PREFIX: &'static str = CONTINUATION_PREFIX;
    fn common(&self) -> &Common {
        &self.common
    }
}

macro_rules! bound_getters {
    ($t:ty) => {
        impl $t {
            pub(crate) fn tool(&self) -> &str {
                &self.common.tool
            }
            pub(crate) fn digest(&self) -> &str {
                &self.common.digest
            }
        }
    };
}
bound_getters!(Claims);
bound_getters!(Continuation);

/// Why a state was refused. Each says what was wrong, never what would
/// have been right.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("this requestState was not issued by this airlock, or was altered")]
    Forged,
    #[error("this requestState has expired")]
    Expired,
    #[error("this requestState was already used")]
    Replayed,
    #[error("this requestState belongs to someone else")]
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

    fn mac(&self, prefix: &str, payload: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes any key length");
        mac.update(prefix.as_bytes());
        mac.update(payload);
        mac
    }

    fn sign<K: Kind>(&self, claims: &K) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialize");
        let tag = self.mac(K::PREFIX, &payload).finalize().into_bytes();
        format!(
            "{}{}.{}",
            K::PREFIX,
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// A fresh approval seal for `approval`.
    pub(crate) fn seal(&self, approval: &str, bound: Bound<'_>) -> String {
        self.sign(&Claims {
            approval: approval.into(),
            common: Common::of(&bound),
        })
    }

    /// A fresh continuation seal around a source's own state.
    pub(crate) fn seal_continuation(
        &self,
        upstream_state: Option<String>,
        round: u32,
        bound: Bound<'_>,
    ) -> String {
        self.sign(&Continuation {
            upstream_state,
            round,
            common: Common::of(&bound),
        })
    }

    /// Checks an approval `state` and spends it. Succeeds once per seal.
    pub(crate) fn open(
        &self,
        state: &str,
        principal: &str,
        now_ms: i64,
    ) -> Result<Claims, Refusal> {
        self.open_kind(state, principal, now_ms)
    }

    /// Checks a continuation `state` and spends it. Succeeds once per seal.
    pub(crate) fn open_continuation(
        &self,
        state: &str,
        principal: &str,
        now_ms: i64,
    ) -> Result<Continuation, Refusal> {
        self.open_kind(state, principal, now_ms)
    }

    fn open_kind<K: Kind>(&self, state: &str, principal: &str, now_ms: i64) -> Result<K, Refusal> {
        let body = state.strip_prefix(K::PREFIX).ok_or(Refusal::Forged)?;
        let (payload, tag) = body.split_once('.').ok_or(Refusal::Forged)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| Refusal::Forged)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Refusal::Forged)?;
        self.mac(K::PREFIX, &payload)
            .verify_slice(&tag)
            .map_err(|_| Refusal::Forged)?;
        let claims: K = serde_json::from_slice(&payload).map_err(|_| Refusal::Forged)?;
        let common = claims.common();
        if common.expires_at_ms <= now_ms {
            return Err(Refusal::Expired);
        }
        if common.principal != principal {
            return Err(Refusal::Foreign);
        }
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        spent.retain(|_, until| *until > now_ms);
        if spent
            .insert(common.nonce.clone(), common.expires_at_ms)
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

    fn bound(principal: &str) -> Bound<'_> {
        Bound {
            principal,
            tool: "demo__write_note",
            digest: "d1g",
            expires_at_ms: NOW + 60_000,
        }
    }

    fn sealed(s: &Sealer) -> String {
        s.seal("ab12", bound("ana"))
    }

    #[test]
    fn a_seal_opens_once() {
        let s = Sealer::new();
        let state = sealed(&s);
        let claims = s.open(&state, "ana", NOW).unwrap();
        assert_eq!(claims.approval, "ab12");
        assert_eq!(claims.tool(), "demo__write_note");
        assert_eq!(claims.digest(), "d1g");
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

    #[test]
    fn a_continuation_opens_once_and_never_as_an_approval() {
        let s = Sealer::new();
        let state = s.seal_continuation(Some("their-state".into()), 2, bound("ana"));
        assert!(state.starts_with(CONTINUATION_PREFIX));
        // The same payload under the other prefix is not a valid seal.
        let as_approval = state.replacen(CONTINUATION_PREFIX, SEAL_PREFIX, 1);
        assert_eq!(s.open(&as_approval, "ana", NOW), Err(Refusal::Forged));
        assert_eq!(
            s.open_continuation(&sealed(&s), "ana", NOW),
            Err(Refusal::Forged)
        );
        assert_eq!(
            s.open_continuation(&state, "bob", NOW),
            Err(Refusal::Foreign)
        );
        let c = s.open_continuation(&state, "ana", NOW).unwrap();
        assert_eq!(c.upstream_state.as_deref(), Some("their-state"));
        assert_eq!(c.round, 2);
        assert_eq!(c.tool(), "demo__write_note");
        assert_eq!(
            s.open_continuation(&state, "ana", NOW),
            Err(Refusal::Replayed)
        );
    }
}
