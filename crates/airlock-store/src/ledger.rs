//! The approval ledger: one row per call that asks, from pending to a
//! terminal state, each transition a conditional single-row update so the
//! database picks the winner of any race.
//!
//! ```text
//! pending ──(a person, airlock-decision only)──▶ approved ──claim──▶ executing ──▶ executed | failed
//!    │                                        └─▶ denied
//!    └──expire──▶ expired
//! ```
//!
//! The types make the diagram the only way through: a [`Pending`] can only
//! be expired, an [`Approved`] can only be claimed or refused, an
//! [`Executing`] can only be finished. Each consumes itself. Nothing here
//! can approve or deny: that edge belongs to the `airlock-decision` crate,
//! which the code that faces MCP clients does not depend on.

use serde::{Deserialize, Serialize};

/// The hub instance that owns a row, from its `session`
/// (`<instance>/<session>`); a row without one is owned by no running hub.
pub fn owning_hub(session: &str) -> Option<&str> {
    session.split_once('/').map(|(hub, _)| hub)
}

/// The call as it was when it asked: what a person sees and what runs if
/// they approve. Execution reads this copy, never anything resent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrozenCall {
    pub principal: String,
    /// `<hub instance>/<client session>`: which running hub owns the call
    /// (see [`owning_hub`]).
    pub session: String,
    pub source: String,
    pub connection: String,
    /// Exposed tool name.
    pub tool: String,
    pub upstream: String,
    /// Canonical JSON of the arguments.
    pub arguments: String,
    pub args_digest: String,
    /// Why it asks.
    pub reason: String,
    /// What a person is shown about the tool: its description, or for a
    /// tool that changed since its review, what changed and the poisoning
    /// lint's findings.
    pub description: String,
    /// The tool's contract digest when the call asked ('always allow' pins
    /// its rule to it).
    pub contract_digest: String,
}

/// A rule a person created by choosing "always allow": allow this exposed
/// tool on this connection while its contract has this digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandingRule {
    pub id: i64,
    pub tool: String,
    pub connection: String,
    /// The contract it applies to; another contract asks again.
    pub digest: String,
    pub created_by: String,
    pub created_at_ms: i64,
    /// The approval whose "always allow" created it.
    pub approval: String,
}

/// Where an approval row stands. The diagram above is the only way
/// between these; the words are the ones stored and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerState {
    Pending,
    Approved,
    Denied,
    Expired,
    Executing,
    Executed,
    Failed,
}

impl LedgerState {
    pub const ALL: [LedgerState; 7] = [
        LedgerState::Pending,
        LedgerState::Approved,
        LedgerState::Denied,
        LedgerState::Expired,
        LedgerState::Executing,
        LedgerState::Executed,
        LedgerState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LedgerState::Pending => "pending",
            LedgerState::Approved => "approved",
            LedgerState::Denied => "denied",
            LedgerState::Expired => "expired",
            LedgerState::Executing => "executing",
            LedgerState::Executed => "executed",
            LedgerState::Failed => "failed",
        }
    }

    pub fn parse(word: &str) -> Option<LedgerState> {
        LedgerState::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// Nothing more will happen to a row in this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            LedgerState::Denied
                | LedgerState::Expired
                | LedgerState::Executed
                | LedgerState::Failed
        )
    }
}

impl std::fmt::Display for LedgerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A row as `airlock pending` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRow {
    pub id: String,
    pub state: LedgerState,
    pub call: FrozenCall,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub decided_by: Option<String>,
    pub channel: Option<String>,
    pub detail: String,
    /// What the person chose; `None` until someone decides.
    pub choice: Option<Choice>,
}

/// A row waiting for a person. Only the store makes one, from a row that
/// is pending.
#[derive(Debug)]
pub struct Pending {
    pub(crate) id: String,
    pub(crate) expires_at_ms: i64,
}

impl Pending {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// When the approval expires, the moment every channel counts down to.
    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms
    }
}

/// A row a person approved; it has not run yet. Only the store makes one,
/// from a row that is approved.
#[derive(Debug)]
pub struct Approved {
    pub(crate) id: String,
    pub(crate) call: FrozenCall,
    pub(crate) choice: Choice,
    pub(crate) channel: String,
}

impl Approved {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The call as it asked: what the person was shown.
    pub fn call(&self) -> &FrozenCall {
        &self.call
    }

    /// Which of the allowing choices the person made.
    pub fn choice(&self) -> Choice {
        self.choice
    }

    /// Where the person decided: `prompt`, `page` or `cli`.
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

/// A claimed row: the call is running, and can run only this once. Only
/// the store makes one, by claiming an [`Approved`].
#[derive(Debug)]
pub struct Executing {
    pub(crate) id: String,
}

impl Executing {
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Where a pending row stands when the waiting call looks.
#[derive(Debug)]
pub enum Waited {
    Approved(Box<Approved>),
    Denied {
        by: String,
        channel: String,
    },
    Expired,
    /// Still pending (woken for another reason); keep waiting.
    Pending(Pending),
    /// The row is gone or in a state only a bug could produce.
    Missing,
}

/// How trying to expire a pending row came out: the database decides
/// whether the clock or the person won.
#[derive(Debug)]
pub enum Expiry {
    Expired,
    DecisionWon(Waited),
}

/// What a person chose for a pending call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    AllowOnce,
    /// This call, and the same tool for the rest of the client session
    /// (bounded in count and time by the hub).
    AllowForRun,
    /// This call, and from now on this tool on this connection while its
    /// contract stays the one it had when the call asked.
    AllowAlways,
    Deny,
}

impl Choice {
    pub const ALL: [Choice; 4] = [
        Choice::AllowOnce,
        Choice::AllowForRun,
        Choice::AllowAlways,
        Choice::Deny,
    ];

    /// The stable word used in forms, the page and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Choice::AllowOnce => "allow_once",
            Choice::AllowForRun => "allow_for_run",
            Choice::AllowAlways => "always_allow",
            Choice::Deny => "deny",
        }
    }

    /// What a person reads on a button or in a list.
    pub fn label(self) -> &'static str {
        match self {
            Choice::AllowOnce => "Allow once",
            Choice::AllowForRun => "Allow for this run",
            Choice::AllowAlways => "Always allow",
            Choice::Deny => "Deny",
        }
    }

    pub fn parse(word: &str) -> Option<Choice> {
        Choice::ALL.into_iter().find(|c| c.as_str() == word)
    }

    /// The state a row moves to when a person makes this choice.
    pub fn state(self) -> LedgerState {
        match self {
            Choice::Deny => LedgerState::Denied,
            _ => LedgerState::Approved,
        }
    }
}

impl Serialize for Choice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Choice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Choice, D::Error> {
        let word = String::deserialize(d)?;
        Choice::parse(&word)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown choice `{word}`")))
    }
}

/// What recording a choice did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    Approved,
    Denied,
    /// Too late: the approval expired before the decision.
    Expired,
    /// No pending approval with this id for this principal (never was,
    /// belongs to someone else, or was already decided).
    NotFound,
}

/// A new approval's id: 128 random bits.
pub(crate) fn new_id() -> String {
    airlock_common::random::hex::<16>()
}

/// What a waiting call learns from its row as read.
pub(crate) fn waited(row: Option<ApprovalRow>) -> Waited {
    match row {
        None => Waited::Missing,
        Some(r) => match (r.state, r.choice) {
            (LedgerState::Pending, _) => Waited::Pending(Pending {
                id: r.id,
                expires_at_ms: r.expires_at_ms,
            }),
            (LedgerState::Approved, Some(choice)) if choice != Choice::Deny => {
                Waited::Approved(Box::new(Approved {
                    id: r.id,
                    call: r.call,
                    choice,
                    channel: r.channel.unwrap_or_default(),
                }))
            }
            (LedgerState::Denied, _) => Waited::Denied {
                by: r.decided_by.unwrap_or_default(),
                channel: r.channel.unwrap_or_default(),
            },
            (LedgerState::Expired, _) => Waited::Expired,
            _ => Waited::Missing,
        },
    }
}

/// The most of a call's arguments any channel shows a person.
pub const ARGS_SHOWN: usize = 4096;

/// `text` cut to at most [`ARGS_SHOWN`] bytes (at a character boundary),
/// saying how long it was when cut: what a person is shown of arguments.
pub fn shown(text: &str) -> String {
    airlock_common::text::shorten(text, ARGS_SHOWN, |n| format!(" ({n} bytes in all)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_arguments_are_capped_at_a_character_boundary() {
        assert_eq!(shown("{\"a\":1}"), "{\"a\":1}");
        let long = "é".repeat(ARGS_SHOWN);
        let cut = shown(&long);
        assert!(cut.ends_with(&format!("… ({} bytes in all)", long.len())));
        assert!(cut.len() <= ARGS_SHOWN + 30);
    }
}
