//! Code mode's sandbox: the model's JavaScript, run in QuickJS on a thread
//! of its own, with hard caps on memory, stack, CPU time, output and tool
//! calls. The program has no network, filesystem, environment, timers or
//! module loader; its clock is the run's start and `Math.random` is seeded.
//! Its only way out is `tools.<source>.<tool>(args)`, which becomes a
//! [`Call`] for the host to decide and answer with a [`Reply`].
//!
//! [`start`] runs the program on a thread of this process (tests, the
//! benchmark's floor); [`process::start`] in a process of its own, which
//! the kernel stops at its CPU limit and the host can kill, so a native
//! loop of the engine that never yields cannot hold the hub (what airlock
//! serves with).
//!
//! Replies reach the code in the order its calls were made, whatever order
//! they arrive in, so a run given the same replies takes the same path:
//! that is what lets a journal replay a run (see `airlock-gateway`'s code
//! mode).

mod engine;
pub mod process;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};

/// What one run may use.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub memory_bytes: usize,
    pub stack_bytes: usize,
    /// Time spent running JavaScript (not waiting for tool calls).
    pub cpu: Duration,
    /// Everything the code writes with `console.*`, and its result.
    pub output_bytes: usize,
    /// Tool calls per run, replayed ones included.
    pub calls: u32,
    /// One call's arguments, as JSON.
    pub argument_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes: 64 << 20,
            stack_bytes: 512 << 10,
            cpu: Duration::from_secs(5),
            output_bytes: 64 << 10,
            calls: 100,
            argument_bytes: 1 << 20,
        }
    }
}

/// A tool the code may call, as `tools[source][tool]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolName {
    pub source: String,
    pub tool: String,
    /// The name the host knows it by.
    pub exposed: String,
}

/// What to run, and the run's own clock and seed (the same on a resume).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Program {
    pub code: String,
    pub seed: u32,
    pub clock_ms: i64,
    pub tools: Vec<ToolName>,
}

/// A tool call the code made; its sequence numbers start at 1.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Call {
    pub seq: u32,
    pub exposed: String,
    pub arguments: Map<String, Value>,
}

/// The host's answer to a [`Call`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    /// The call's promise resolves with this value.
    Value(Value),
    /// The call's promise rejects with an `Error` whose `code` is `code`.
    Error { code: String, message: String },
    /// The call cannot settle now: the run stops here, before the code
    /// sees anything more.
    Pause,
}

/// Why a run ended without a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum RunError {
    #[error("the code is not valid JavaScript: {0}")]
    Syntax(String),
    #[error("the code threw: {0}")]
    Thrown(String),
    #[error("the run needed more than its {} MiB of memory", .0 >> 20)]
    Memory(usize),
    #[error("the code recursed deeper than its stack allows")]
    Stack,
    #[error("the run used more than its {} ms of CPU time", .0.as_millis())]
    Cpu(Duration),
    #[error("the run wrote more than its {0} bytes of output")]
    Output(usize),
    #[error("the run tried to make more than its {0} tool calls")]
    Calls(u32),
    #[error(
        "the code's result never settles: it waits for something that is not a tool call (there are no timers)"
    )]
    Stuck,
    #[error("the run was stopped")]
    Stopped,
    #[error("the sandbox could not start: {0}")]
    Start(String),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Ended {
    /// The code's result (`null` for none).
    Finished(Value),
    /// The reply to call `at` was [`Reply::Pause`].
    Paused {
        at: u32,
    },
    Failed(RunError),
}

/// A run's end, with what it wrote.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub ended: Ended,
    /// `console.*` lines, in order.
    pub output: Vec<String>,
    /// JavaScript time used.
    pub cpu: Duration,
}

/// What a running program does next, as seen by the host.
pub enum Next {
    Call(Call),
    Ended(Report),
}

/// A program running, on a thread or in a process.
pub struct Running {
    calls: tokio::sync::mpsc::UnboundedReceiver<Call>,
    replies: Replies,
    stop: Arc<AtomicBool>,
    /// Kills the process of an isolated run.
    kill: Option<Arc<tokio::sync::Notify>>,
    done: Option<tokio::sync::oneshot::Receiver<Report>>,
}

/// Where the host's replies go.
enum Replies {
    Thread(std::sync::mpsc::Sender<engine::Message>),
    Process(tokio::sync::mpsc::UnboundedSender<(u32, Reply)>),
}

/// Starts `program` on a thread of its own.
pub fn start(program: Program, limits: Limits) -> Running {
    let (call_tx, calls) = tokio::sync::mpsc::unbounded_channel();
    let (replies, reply_rx) = std::sync::mpsc::channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = engine::Worker {
        program,
        limits,
        calls: call_tx,
        replies: reply_rx,
        stop: stop.clone(),
    };
    let spawned = std::thread::Builder::new()
        .name("airlock-run".into())
        // QuickJS's stack cap must sit well inside the thread's own stack.
        .stack_size(worker.limits.stack_bytes.max(256 << 10) * 4 + (4 << 20))
        .spawn(move || {
            let _ = done_tx.send(worker.run());
        });
    if let Err(e) = spawned {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = tx.send(Report {
            ended: Ended::Failed(RunError::Start(e.to_string())),
            output: Vec::new(),
            cpu: Duration::ZERO,
        });
        return Running {
            calls,
            replies: Replies::Thread(replies),
            stop,
            kill: None,
            done: Some(rx),
        };
    }
    Running {
        calls,
        replies: Replies::Thread(replies),
        stop,
        kill: None,
        done: Some(done),
    }
}

impl Running {
    /// The next call the code made, or how it ended. Calls made before the
    /// end are always seen first.
    pub async fn next(&mut self) -> Next {
        let Some(done) = self.done.as_mut() else {
            return Next::Ended(stopped());
        };
        tokio::select! {
            biased;
            Some(call) = self.calls.recv() => Next::Call(call),
            report = done => {
                self.done = None;
                match self.calls.try_recv() {
                    // A call sent just before the end still comes first;
                    // the end is then told on the next look.
                    Ok(call) => {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        let _ = tx.send(report.unwrap_or_else(|_| stopped()));
                        self.done = Some(rx);
                        Next::Call(call)
                    }
                    Err(_) => Next::Ended(report.unwrap_or_else(|_| stopped())),
                }
            }
        }
    }

    /// Answers call `seq`.
    pub fn reply(&self, seq: u32, reply: Reply) {
        match &self.replies {
            Replies::Thread(tx) => {
                let _ = tx.send(engine::Message::Reply(seq, reply));
            }
            Replies::Process(tx) => {
                let _ = tx.send((seq, reply));
            }
        }
    }

    /// Stops the run at its next instruction (an isolated run's process is
    /// killed); it ends [`RunError::Stopped`].
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(kill) = &self.kill {
            kill.notify_one();
        }
        // A run waiting for a reply wakes to stop.
        if let Replies::Thread(tx) = &self.replies {
            let _ = tx.send(engine::Message::Stop);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A run nobody listens to any more stops.
        self.stop();
    }
}

pub(crate) fn stopped() -> Report {
    Report {
        ended: Ended::Failed(RunError::Stopped),
        output: Vec::new(),
        cpu: Duration::ZERO,
    }
}
