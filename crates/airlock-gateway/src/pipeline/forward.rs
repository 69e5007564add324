//! Step 2: send the call to its source and wait, within budget.

use airlock_upstream::UpstreamError;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ProgressNotificationParam,
};
use std::sync::Arc;
use tokio::sync::mpsc;

use super::{Target, ToolCall};
use crate::hub::Hub;

/// How the upstream call ended.
pub(crate) enum Outcome {
    /// The source answered (possibly with `isError`, possibly asking for input).
    Answered(CallToolResponse),
    /// The source answered with a JSON-RPC error; passed on unchanged.
    Refused(ErrorData),
    /// No answer: timeout, the source is down or died, the client cancelled.
    Failed(String),
}

impl Outcome {
    /// What the client receives. A failure the model can act on is a tool
    /// result with `isError`, prefixed so it is clearly airlock speaking.
    pub(crate) fn into_response(self) -> Result<CallToolResponse, ErrorData> {
        match self {
            Outcome::Answered(r) => Ok(r),
            Outcome::Refused(e) => Err(e),
            Outcome::Failed(why) => Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(format!("airlock: {why}")),
            ]))),
        }
    }
}

pub(crate) async fn tool(hub: &Arc<Hub>, call: &ToolCall, target: &Target) -> Outcome {
    let source = &hub.sources[target.source];
    // Registered before sending, so a request the source makes of the
    // client during this call finds its way back to this client.
    let (in_flight, mut progress) = hub.begin_call(
        target.source,
        call.session,
        call.peer.clone(),
        call.progress.is_some(),
    );
    let mut params = CallToolRequestParams::new(target.upstream_name.clone());
    params.arguments = call.params.arguments.clone();
    params.input_responses = call.params.input_responses.clone();
    params.request_state = call.params.request_state.clone();
    let timeout = hub.call_timeout(target.source);
    let pending = match source.start_call(params, timeout).await {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    in_flight.set_upstream_token(pending.progress_token.clone());
    // Dropping `pending` on cancel tells the source to stop.
    let finish = pending.finish();
    tokio::pin!(finish);
    let result = loop {
        tokio::select! {
            r = &mut finish => break r,
            Some(p) = next_progress(&mut progress) => relay_progress(call, p).await,
            _ = call.cancelled.cancelled() => return Outcome::Failed("the client cancelled the call".into()),
        }
    };
    // The SDK hands notifications to tasks of their own, so progress sent
    // just before the answer may still be on its way: let those tasks run,
    // then pass on what arrived, all before the answer itself.
    if let Some(rx) = progress.as_mut() {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        while let Ok(p) = rx.try_recv() {
            relay_progress(call, p).await;
        }
    }
    drop(in_flight);
    match result {
        Ok(response) => Outcome::Answered(response),
        Err(UpstreamError::Mcp { error, .. }) => Outcome::Refused(error),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

async fn next_progress(
    rx: &mut Option<mpsc::UnboundedReceiver<ProgressNotificationParam>>,
) -> Option<ProgressNotificationParam> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Passes progress on under the client's own token.
async fn relay_progress(call: &ToolCall, mut p: ProgressNotificationParam) {
    if let Some(token) = call.progress.clone() {
        p.progress_token = token;
        let _ = call.peer.notify_progress(p).await;
    }
}
