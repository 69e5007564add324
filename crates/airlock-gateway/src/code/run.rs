//! `run_code` and `resume_run`: a run's life.
//!
//! A run starts with a fresh seed and the current time as its clock, both
//! stored with its code. Each call the code makes is journaled as
//! *started* before it enters the pipeline and as *settled* (with the
//! scrubbed reply) before the code sees the result. A call still waiting
//! for a person when `approval_wait` ends pauses the run: calls already in
//! flight settle and are journaled, nothing new starts, and the model is
//! given the run id.
//!
//! `resume_run` takes a paused run once (a conditional update), and runs
//! the same code with the same seed and clock: a call the journal has
//! settled gets its recorded reply without reaching the upstream; the call
//! that paused rejoins its approval; a call past the journal runs live. A
//! call whose tool or arguments differ from the journal's at its position
//! ends the run as diverged, and makes no call. A call journaled as
//! started but never settled (the hub stopped under it) is never repeated:
//! the run fails. Resuming records no decision (I2).

use std::collections::HashMap;
use std::sync::Arc;

use airlock_common::now_ms;
use airlock_policy::contract;
use airlock_sandbox::{Ended, Limits, Next, Program, Reply, ToolName};
use airlock_store::runs::{EntryState, JournalEntry, NewRun, RunState};
use airlock_upstream::Secrets;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rmcp::ErrorData;
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

use super::bridge::{self, Settled};
use super::search;
use crate::hub::Hub;
use crate::pipeline::ToolCall;

/// The largest program accepted.
const MAX_CODE_BYTES: usize = 256 << 10;
/// The largest reply a call from code gets (as the journal keeps it).
const MAX_REPLY_BYTES: usize = 1 << 20;

pub(super) async fn start(
    hub: &Arc<Hub>,
    outer: ToolCall,
    code: String,
) -> Result<CallToolResponse, ErrorData> {
    if code.len() > MAX_CODE_BYTES {
        return Err(ErrorData::invalid_params(
            format!(
                "the code is {} bytes, more than the {MAX_CODE_BYTES} a run accepts",
                code.len()
            ),
            None,
        ));
    }
    // A secret never enters the sandbox, nor the stored run (I1).
    if hub.secrets.scrub(&code) != code {
        return Err(ErrorData::invalid_params(
            "the code contains a secret value; airlock gives tools their credentials itself, so code never needs one",
            None,
        ));
    }
    let _slot = slot(hub)?;
    let run = NewRun {
        id: format!("run-{}", airlock_common::random::hex::<8>()),
        principal: hub.approvals.principal().to_string(),
        code,
        seed: u32::from_le_bytes(airlock_common::random::bytes::<4>()),
        clock_ms: now_ms(),
    };
    let retention = hub.settings().approval_retention.as_millis() as i64;
    if let Err(e) = hub.store.run_create(&run, retention) {
        return Err(ErrorData::internal_error(
            format!("airlock: the run could not be recorded ({e}), so it did not start"),
            None,
        ));
    }
    Ok(drive(hub, &outer, &run, HashMap::new()).await)
}

pub(super) async fn resume(
    hub: &Arc<Hub>,
    outer: ToolCall,
    id: String,
) -> Result<CallToolResponse, ErrorData> {
    let _slot = slot(hub)?;
    let principal = hub.approvals.principal();
    let store_error = |e: airlock_store::StoreError| {
        ErrorData::internal_error(format!("airlock: the run could not be read: {e}"), None)
    };
    let Some(row) = hub.store.run_take(&id, principal).map_err(store_error)? else {
        let why = match hub.store.run_row(&id).map_err(store_error)? {
            Some(row) if row.principal == principal => match row.state {
                RunState::Running => {
                    "it is running (another resume took it), or the hub running it stopped during it".to_string()
                }
                state => format!("it is {}, not paused", state.as_str()),
            },
            _ => "there is no such run".to_string(),
        };
        return Err(ErrorData::invalid_params(
            format!("cannot resume `{id}`: {why}"),
            None,
        ));
    };
    let journal: HashMap<u32, JournalEntry> = hub
        .store
        .journal(&id)
        .map_err(store_error)?
        .into_iter()
        .map(|e| (e.seq, e))
        .collect();
    // A paused run's journal holds the call it paused on; one without it
    // lost entries, and replaying it could repeat calls (I6).
    if !journal.values().any(|e| e.state == EntryState::Paused) {
        let why =
            "its journal is incomplete, so replaying it could repeat a call; it is not resumed";
        let _ = hub.store.run_set(&id, RunState::Failed, why);
        return Err(ErrorData::invalid_params(
            format!("cannot resume `{id}`: {why}"),
            None,
        ));
    }
    let run = NewRun {
        id: row.id,
        principal: row.principal,
        code: row.code,
        seed: row.seed,
        clock_ms: row.clock_ms,
    };
    Ok(drive(hub, &outer, &run, journal).await)
}

/// Keep-alive cadence while a run goes (below common 30–60 s idle limits).
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// Progress on the client's own token, one rising count for the run.
async fn keep_client_waiting(outer: &ToolCall, ticks: u32, waiting: usize) {
    let Some(token) = outer.progress.clone() else {
        return;
    };
    let message = match waiting {
        0 => "running code".to_string(),
        n => format!("running code; {n} tool call(s) in flight or waiting for the user's approval"),
    };
    let params = serde_json::from_value(json!({
        "progressToken": token,
        "progress": ticks,
        "message": message,
    }));
    if let Ok(p) = params {
        let _ = outer.peer.notify_progress(p).await;
    }
}

/// One of the hub's `code_runs` places, held while a run goes.
fn slot(hub: &Hub) -> Result<tokio::sync::OwnedSemaphorePermit, ErrorData> {
    hub.code_runs.clone().try_acquire_owned().map_err(|_| {
        ErrorData::invalid_params(
            format!(
                "airlock already runs {} programs at once (code_runs); try again when one has ended",
                hub.settings().code.runs
            ),
            None,
        )
    })
}

/// Why a run stopped before its code did.
enum Halt {
    Diverged(String),
    Failed(String),
}

/// Runs `run`'s code to its end, a pause, or a halt, with `journal` from
/// an earlier attempt, and records how it ended.
async fn drive(
    hub: &Arc<Hub>,
    outer: &ToolCall,
    run: &NewRun,
    journal: HashMap<u32, JournalEntry>,
) -> CallToolResponse {
    let view = hub.view();
    let callable = search::callable(&view);
    let names: HashMap<String, String> = callable
        .iter()
        .map(|c| (c.exposed.clone(), search::path(&c.source, &c.tool)))
        .collect();
    let program = Program {
        code: run.code.clone(),
        seed: run.seed,
        clock_ms: run.clock_ms,
        tools: callable
            .into_iter()
            .map(|c| ToolName {
                source: c.source,
                tool: c.tool,
                exposed: c.exposed,
            })
            .collect(),
    };
    let limits = limits(hub);
    let (limits_calls, limits_arguments) = (limits.calls, limits.argument_bytes);
    // In a process of its own, which the kernel stops at its CPU limit.
    let mut running = match std::env::current_exe() {
        Ok(exe) => airlock_sandbox::process::start(&exe, program, limits),
        Err(e) => {
            let why = format!("airlock cannot find its own program to run the code in ({e})");
            let _ = hub.store.run_set(&run.id, RunState::Failed, &why);
            return super::answer(
                &json!({"run_id": run.id, "status": "failed", "error": why}),
                None,
                true,
            );
        }
    };
    let mut inflight = FuturesUnordered::new();
    // Cancels the run's calls: when the client cancels the run, or when the
    // run ends with calls its code did not wait for.
    let cancel = outer.cancelled.child_token();
    let mut paused: Option<u32> = None;
    let mut halt: Option<Halt> = None;
    let store = hub.store.as_ref();
    // The sources the run's calls went to, for quoting what it returns.
    let mut called: std::collections::BTreeSet<usize> = Default::default();
    // A sign of life for a client that asked for progress, while calls
    // run or wait for a person.
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.tick().await;
    let mut ticks = 0u32;
    // The run's whole time, waits for people included.
    let time = hub.settings().code.time;
    let deadline = tokio::time::Instant::now() + time;
    let report = loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline), if halt.is_none() => {
                halt = Some(Halt::Failed(format!(
                    "the run took longer than its {} s (code_time), so it was stopped",
                    time.as_secs()
                )));
                running.stop();
            }
            _ = keep_alive.tick() => {
                ticks += 1;
                keep_client_waiting(outer, ticks, inflight.len()).await;
            }
            next = running.next() => match next {
                Next::Ended(report) => break report,
                // After a pause or a halt nothing new starts.
                Next::Call(_) if paused.is_some() || halt.is_some() => {}
                // The sandbox keeps its caps; the host checks them again,
                // in case something in it does not.
                Next::Call(call) if call.seq > limits_calls
                    || serde_json::to_vec(&call.arguments).map_or(true, |a| a.len() > limits_arguments) => {
                    halt = Some(Halt::Failed(format!(
                        "call {} is past what a run may make or carry, so the run was stopped",
                        call.seq
                    )));
                    running.stop();
                }
                Next::Call(call) => {
                    // Replayed or live, what the call returns is the
                    // source's data (for quoting what the run returns).
                    if let Some(route) = view.catalog.tool(&call.exposed) {
                        called.insert(route.source);
                    }
                    let rejoin = match step(store, run, &journal, &names, &call) {
                        Step::Replay(reply) => {
                            running.reply(call.seq, bridge::scrubbed(reply, hub.secrets.as_ref()));
                            continue;
                        }
                        Step::Live(rejoin) => rejoin,
                        Step::Halt(why) => {
                            halt = Some(why);
                            running.stop();
                            continue;
                        }
                    };
                    let seq = call.seq;
                    let id = run.id.clone();
                    let cancel = cancel.clone();
                    inflight.push(async move {
                        (seq, bridge::call(hub, outer, &cancel, &id, call, rejoin).await)
                    });
                }
            },
            Some((seq, settled)) = inflight.next() => {
                match journaled(store, &run.id, seq, settled) {
                    Ok(Some(reply)) => running.reply(seq, reply),
                    Ok(None) => {
                        paused.get_or_insert(seq);
                        running.reply(seq, Reply::Pause);
                    }
                    Err(why) => {
                        halt = Some(Halt::Failed(why));
                        running.stop();
                    }
                }
            }
            _ = outer.abandoned(), if halt.is_none() => {
                halt.get_or_insert(Halt::Failed("the client cancelled the run".into()));
                running.stop();
            }
        }
    };
    // Calls still in flight settle and are journaled before the run ends.
    // A paused run waits for them; one that ended does not wait for a
    // person on calls its code left behind: those are cancelled.
    if !matches!(report.ended, Ended::Paused { .. }) || halt.is_some() {
        cancel.cancel();
    }
    while let Some((seq, settled)) = inflight.next().await {
        if let Err(why) = journaled(store, &run.id, seq, settled) {
            halt.get_or_insert(Halt::Failed(why));
        }
    }
    finish(hub, run, halt, report, &called)
}

/// Records how the run ended and answers the model: airlock's own words
/// (status, run id, why), and apart from them what the code made of the
/// tools' data, quoted if a source it called is.
fn finish(
    hub: &Hub,
    run: &NewRun,
    halt: Option<Halt>,
    report: airlock_sandbox::Report,
    called: &std::collections::BTreeSet<usize>,
) -> CallToolResponse {
    let store = hub.store.as_ref();
    let secrets = hub.secrets.as_ref();
    let output: Vec<String> = report.output.iter().map(|l| secrets.scrub(l)).collect();
    let (state, message, data) = match (halt, report.ended) {
        (Some(Halt::Diverged(why)), _) => (RunState::Diverged, why, json!({})),
        (Some(Halt::Failed(why)), _) => (RunState::Failed, why, json!({})),
        (None, Ended::Paused { at }) => (
            RunState::Paused,
            format!(
                "call {at} waits for the user's approval; when they have decided, call resume_run with this run_id (calls already made are not made again)"
            ),
            json!({}),
        ),
        (None, Ended::Finished(mut value)) => {
            secrets.scrub_json(&mut value);
            (
                RunState::Finished,
                String::new(),
                json!({ "result": value }),
            )
        }
        (None, Ended::Failed(airlock_sandbox::RunError::Thrown(thrown))) => (
            RunState::Failed,
            "the code threw an error".to_string(),
            json!({ "thrown": secrets.scrub(&thrown) }),
        ),
        (None, Ended::Failed(e)) => (RunState::Failed, secrets.scrub(&e.to_string()), json!({})),
    };
    if let Err(e) = store.run_set(&run.id, state, &message) {
        tracing::error!(error = %e, run = %run.id, "cannot record how a run ended");
    }
    let mut head = json!({"run_id": run.id, "status": state.as_str()});
    if !message.is_empty() {
        let key = if state == RunState::Paused {
            "message"
        } else {
            "error"
        };
        head[key] = Value::String(message);
    }
    let mut data = data;
    if !output.is_empty() {
        data["output"] = json!(output);
    }
    let quoted: Vec<String> = called
        .iter()
        .map(|i| hub.sources.get(*i))
        .filter(|s| s.config.quote_output)
        .map(|s| s.name().to_string())
        .collect();
    let is_error = matches!(state, RunState::Failed | RunState::Diverged);
    super::answer(
        &head,
        (data != json!({})).then_some((data, quoted)),
        is_error,
    )
}

/// What a call the code made does next.
enum Step {
    /// Answered from the journal; nothing reaches the source.
    Replay(Reply),
    /// Through the pipeline (rejoining the approval it paused on, if any).
    Live(Option<String>),
    Halt(Halt),
}

/// Looks call `call` up in the journal of an earlier attempt: a settled
/// call is replayed, a paused one rejoins its approval, one past the
/// journal is journaled as started and goes live; a different tool or
/// arguments at a journaled position diverges, and a call started but
/// never settled is never repeated.
fn step(
    store: &dyn airlock_store::Store,
    run: &NewRun,
    journal: &HashMap<u32, JournalEntry>,
    names: &HashMap<String, String>,
    call: &airlock_sandbox::Call,
) -> Step {
    let digest =
        contract::digest_canonical(&contract::canonical(&Value::Object(call.arguments.clone())));
    let shown = |exposed: &str| names.get(exposed).cloned().unwrap_or(exposed.to_string());
    let Some(entry) = journal.get(&call.seq) else {
        // Journaled before it can reach the upstream, or it does not run.
        return match store.journal_start(&run.id, call.seq, &call.exposed, &digest) {
            Ok(()) => Step::Live(None),
            Err(e) => Step::Halt(Halt::Failed(format!(
                "call {} could not be journaled ({e}), so it did not run",
                call.seq
            ))),
        };
    };
    let other = if entry.tool != call.exposed {
        Some(format!(
            "`{}`, where the journal has `{}`",
            shown(&call.exposed),
            shown(&entry.tool)
        ))
    } else if entry.args_digest != digest {
        Some(format!(
            "`{}` with other arguments than the journal's",
            shown(&call.exposed)
        ))
    } else {
        None
    };
    if let Some(other) = other {
        return Step::Halt(Halt::Diverged(format!(
            "call {} is {other}: the code took another path, so nothing more runs",
            call.seq
        )));
    }
    match entry.state {
        EntryState::Settled => match bridge::from_journal(&entry.reply) {
            Some(reply) => Step::Replay(reply),
            None => Step::Halt(Halt::Failed(format!(
                "call {}'s journaled reply cannot be read; it is not repeated",
                call.seq
            ))),
        },
        EntryState::Paused => Step::Live(Some(entry.approval.clone())),
        EntryState::Started => Step::Halt(Halt::Failed(format!(
            "call {} started before airlock stopped, and how it ended is unknown; it is not repeated",
            call.seq
        ))),
    }
}

/// Writes how call `seq` settled; the reply the code may now see, or none
/// for a pause. An error means the reply is not on record, so the code
/// does not get it.
fn journaled(
    store: &dyn airlock_store::Store,
    run: &str,
    seq: u32,
    settled: Settled,
) -> Result<Option<Reply>, String> {
    match settled {
        Settled::Reply(reply) => {
            let mut text = bridge::to_journal(&reply);
            // A reply is kept in the journal and read by the code: an
            // answer too large for either is not given.
            let reply = if text.len() > MAX_REPLY_BYTES {
                let too_large = Reply::Error {
                    code: "failed".into(),
                    message: format!(
                        "the tool's answer is {} bytes, more than the {MAX_REPLY_BYTES} a call from code may return",
                        text.len()
                    ),
                };
                text = bridge::to_journal(&too_large);
                too_large
            } else {
                reply
            };
            store
                .journal_settle(run, seq, &text)
                .map_err(|e| format!("call {seq}'s result could not be journaled ({e})"))?;
            Ok(Some(reply))
        }
        Settled::Paused(approval) => {
            store
                .journal_pause(run, seq, &approval)
                .map_err(|e| format!("call {seq}'s pause could not be journaled ({e})"))?;
            Ok(None)
        }
    }
}

fn limits(hub: &Hub) -> Limits {
    let code = &hub.settings().code;
    Limits {
        memory_bytes: (code.memory_mib as usize) << 20,
        cpu: code.cpu,
        output_bytes: (code.output_kib as usize) << 10,
        calls: code.calls,
        ..Limits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_store::Store;
    use serde_json::Map;

    fn call(seq: u32, tool: &str, text: &str) -> airlock_sandbox::Call {
        let mut arguments = Map::new();
        arguments.insert("text".into(), json!(text));
        airlock_sandbox::Call {
            seq,
            exposed: tool.into(),
            arguments,
        }
    }

    fn run() -> NewRun {
        NewRun {
            id: "run-test".into(),
            principal: "me".into(),
            code: String::new(),
            seed: 1,
            clock_ms: 0,
        }
    }

    /// A journal of an earlier attempt: call 1 settled, call 2 paused on
    /// approval `a-2`, call 3 started and never settled.
    fn journal(store: &dyn Store) -> HashMap<u32, JournalEntry> {
        store.run_create(&run(), 1 << 40).unwrap();
        for (seq, text) in [(1, "one"), (2, "two"), (3, "three")] {
            let c = call(seq, "fx__echo", text);
            let digest = contract::digest_canonical(&contract::canonical(&Value::Object(
                c.arguments.clone(),
            )));
            store
                .journal_start("run-test", seq, "fx__echo", &digest)
                .unwrap();
        }
        store
            .journal_settle(
                "run-test",
                1,
                &bridge::to_journal(&Reply::Value(json!("one"))),
            )
            .unwrap();
        store.journal_pause("run-test", 2, "a-2").unwrap();
        store
            .journal("run-test")
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e))
            .collect()
    }

    #[test]
    fn each_call_is_replayed_rejoined_refused_or_journaled_by_what_the_journal_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = airlock_store::SqliteStore::open_in(dir.path()).unwrap();
        let journal = journal(store.as_ref());
        let names = HashMap::new();
        let step = |c: &airlock_sandbox::Call| step(store.as_ref(), &run(), &journal, &names, c);
        assert!(
            matches!(step(&call(1, "fx__echo", "one")), Step::Replay(Reply::Value(v)) if v == "one")
        );
        assert!(matches!(step(&call(2, "fx__echo", "two")), Step::Live(Some(a)) if a == "a-2"));
        assert!(
            matches!(step(&call(3, "fx__echo", "three")), Step::Halt(Halt::Failed(why)) if why.contains("not repeated"))
        );
        assert!(
            matches!(step(&call(1, "fx__other", "one")), Step::Halt(Halt::Diverged(why)) if why.contains("where the journal has"))
        );
        assert!(
            matches!(step(&call(1, "fx__echo", "changed")), Step::Halt(Halt::Diverged(why)) if why.contains("other arguments"))
        );
        // Past the journal: journaled as started, then live; a second
        // attempt at the same position cannot be journaled again.
        assert!(matches!(
            step(&call(4, "fx__echo", "four")),
            Step::Live(None)
        ));
        assert_eq!(store.journal("run-test").unwrap().len(), 4);
        assert!(matches!(
            step(&call(4, "fx__echo", "four")),
            Step::Halt(Halt::Failed(_))
        ));
    }
}
