//! The one value [`super::forward`] accepts: a call that may run, with the
//! proof of why. Its fields are private to this module, and each way to
//! make one takes a proof only the step that grants it can produce.

use airlock_store::ledger::Executing;
use rmcp::model::JsonObject;

use super::decide::PolicyAllows;
use super::{Target, ToolCall};
use crate::hub::GrantSpent;
use crate::parked::Resumed;
use crate::seal::Continuation;

/// Why a call may run.
pub(crate) enum Proof {
    /// Policy allowed it ([`super::decide`]).
    Policy,
    /// A person's "allow for this run" covered it.
    RunGrant,
    /// A person approved it; the claim is held until it ends.
    Person(Executing),
    /// It was allowed when it started, and is resuming with the client's
    /// input.
    Resumed(Resumed),
    /// It was allowed when it started, and the source asked for input
    /// under a state that only airlock's seal of that call gives back.
    Continued(Continuation),
}

/// What a fresh call may carry for its source: the client's answers to
/// the source's own questions pass (a 2026-07-28 source may be stateless
/// and take them at face value; the call is decided by policy like any
/// other), but nothing under airlock's own keys, and no state, which only
/// airlock's seal gives back.
fn unasked(call: &mut ToolCall) {
    crate::input::unreserved(&mut call.params.input_responses);
    call.params.request_state = None;
}

pub(crate) struct Allowed {
    call: ToolCall,
    target: Target,
    proof: Proof,
}

impl Allowed {
    pub(super) fn by_policy(mut call: ToolCall, target: Target, _yes: PolicyAllows) -> Allowed {
        unasked(&mut call);
        Allowed {
            call,
            target,
            proof: Proof::Policy,
        }
    }

    pub(super) fn by_run_grant(mut call: ToolCall, target: Target, _grant: GrantSpent) -> Allowed {
        unasked(&mut call);
        Allowed {
            call,
            target,
            proof: Proof::RunGrant,
        }
    }

    /// The call runs with `arguments`, the ones the person was shown
    /// (checked by digest), never anything resent.
    pub(super) fn by_person(
        mut call: ToolCall,
        target: Target,
        claim: Executing,
        arguments: JsonObject,
    ) -> Allowed {
        call.params.arguments = Some(arguments);
        unasked(&mut call);
        Allowed {
            call,
            target,
            proof: Proof::Person(claim),
        }
    }

    pub(super) fn resumed(call: ToolCall, target: Target, resumed: Resumed) -> Allowed {
        Allowed {
            call,
            target,
            proof: Proof::Resumed(resumed),
        }
    }

    /// The call goes on where the source left it: with the source's own
    /// state from the seal, never one the client sent.
    pub(super) fn continued(
        mut call: ToolCall,
        target: Target,
        continuation: Continuation,
    ) -> Allowed {
        call.params.request_state = continuation.upstream_state.clone();
        Allowed {
            call,
            target,
            proof: Proof::Continued(continuation),
        }
    }

    pub(super) fn into_parts(self) -> (ToolCall, Target, Proof) {
        (self.call, self.target, self.proof)
    }
}
