//! Translation between protocol versions where rmcp does not do it for us.
//!
//! Clients on 2026-07-28 require `resultType` on every result; servers on
//! earlier versions never send it. rmcp strips a `complete` result type for
//! older clients, so airlock marks every result it forwards as complete
//! when the source left it out, and each client receives its own shape.

use rmcp::model::{
    CallToolResponse, CompleteResult, GetPromptResponse, ReadResourceResponse, ResultType,
};

pub(crate) fn call(mut r: CallToolResponse) -> CallToolResponse {
    if let CallToolResponse::Complete(c) = &mut r {
        c.result_type.get_or_insert(ResultType::COMPLETE);
    }
    r
}

pub(crate) fn prompt(mut r: GetPromptResponse) -> GetPromptResponse {
    if let GetPromptResponse::Complete(p) = &mut r {
        p.result_type.get_or_insert(ResultType::COMPLETE);
    }
    r
}

pub(crate) fn resource(mut r: ReadResourceResponse) -> ReadResourceResponse {
    if let ReadResourceResponse::Complete(c) = &mut r {
        c.result_type.get_or_insert(ResultType::COMPLETE);
    }
    r
}

pub(crate) fn completion(mut r: CompleteResult) -> CompleteResult {
    r.result_type.get_or_insert(ResultType::COMPLETE);
    r
}
