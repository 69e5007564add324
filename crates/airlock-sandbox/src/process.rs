//! A run in a process of its own: `EXE __sandbox`, spoken to in JSON lines
//! on its stdin and stdout.
//!
//! The host writes the [`Spec`] first, then one [`Reply`] per line; the
//! process writes each [`Call`] and, last, the [`Report`]. The process is
//! given an OS CPU limit (see [`serve`]'s `harden`), so a loop inside the
//! engine that never polls the interrupt handler is still stopped by the
//! kernel; [`Running::stop`] kills it.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::{Call, Ended, Limits, Next, Program, Replies, Reply, Report, RunError, Running};

/// The argument that makes the airlock binary a sandbox process.
pub const SANDBOX_ARG: &str = "__sandbox";

/// What the host sends first.
#[derive(Serialize, Deserialize)]
pub struct Spec {
    pub program: Program,
    pub limits: Limits,
}

/// What the process sends.
#[derive(Serialize, Deserialize)]
enum Out {
    Call(Call),
    Report(Report),
}

/// The whole seconds of CPU the process may use: the run's budget, and a
/// second for starting and for the host's side of the work.
pub fn cpu_seconds(limits: &Limits) -> u64 {
    limits.cpu.as_secs() + 2
}

/// Starts `program` in `exe __sandbox`.
pub fn start(exe: &Path, program: Program, limits: Limits) -> Running {
    let (call_tx, calls) = tokio::sync::mpsc::unbounded_channel();
    let (reply_tx, mut reply_rx) = tokio::sync::mpsc::unbounded_channel::<(u32, Reply)>();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let kill = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(AtomicBool::new(false));
    let running = Running {
        calls,
        replies: Replies::Process(reply_tx),
        stop: stop.clone(),
        kill: Some(kill.clone()),
        done: Some(done),
    };
    let spawned = tokio::process::Command::new(exe)
        .arg(SANDBOX_ARG)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = done_tx.send(failed(RunError::Start(format!(
                "cannot start the sandbox process: {e}"
            ))));
            return running;
        }
    };
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = done_tx.send(failed(RunError::Start(
            "the sandbox process has no pipes".into(),
        )));
        return running;
    };
    let cpu = limits.cpu;
    // The longest line an honest sandbox writes: a call's arguments, or a
    // report of its output and result, each capped inside it (and each
    // byte escaped in JSON at most six times as long).
    let max_line = 6 * (limits.argument_bytes + 2 * limits.output_bytes) + (64 << 10);
    let spec = serde_json::to_string(&Spec { program, limits }).unwrap_or_default();
    tokio::spawn(async move {
        if stdin
            .write_all(format!("{spec}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
        while let Some(reply) = reply_rx.recv().await {
            let line = serde_json::to_string(&reply).unwrap_or_default();
            if stdin
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stdout);
        let read = async {
            loop {
                let line = match bounded_line(&mut reader, max_line).await {
                    Ok(Some(line)) => line,
                    Ok(None) => return Read::Ended,
                    Err(why) => return Read::Garbled(why),
                };
                match serde_json::from_slice::<Out>(&line) {
                    Ok(Out::Call(c)) => {
                        let _ = call_tx.send(c);
                    }
                    Ok(Out::Report(r)) => return Read::Report(r),
                    Err(_) => return Read::Garbled("a line that is not one of its messages"),
                }
            }
        };
        let read = tokio::select! {
            r = read => r,
            _ = kill.notified() => Read::Killed,
        };
        let _ = child.start_kill();
        let status = child.wait().await.ok();
        let report = match read {
            Read::Report(r) => r,
            Read::Killed => failed(RunError::Stopped),
            Read::Garbled(why) => failed(RunError::Start(format!(
                "the sandbox process sent {why}, so the run was ended"
            ))),
            Read::Ended => failed(match status.and_then(signal_of) {
                // The kernel's CPU limit (SIGXCPU, then SIGKILL).
                Some(24 | 9) => RunError::Cpu(cpu),
                Some(s) => RunError::Start(format!("the sandbox process died of signal {s}")),
                None => RunError::Start("the sandbox process ended without a report".into()),
            }),
        };
        let _ = done_tx.send(report);
    });
    running
}

/// How reading the sandbox's messages ended.
enum Read {
    Report(Report),
    /// The host stopped the run.
    Killed,
    /// Its output ended without a report (it died).
    Ended,
    /// It wrote something it never writes.
    Garbled(&'static str),
}

/// The next line, without its newline; none at the end (or a read error),
/// an error for a line longer than `max` (which a sandbox never writes).
async fn bounded_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<Vec<u8>>, &'static str> {
    let mut line = Vec::new();
    loop {
        let Ok(available) = reader.fill_buf().await else {
            return Ok(None);
        };
        if available.is_empty() {
            return Ok(None);
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if line.len() + chunk.len() > max {
            return Err("a line longer than any message of its");
        }
        line.extend_from_slice(chunk);
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(line));
        }
    }
}

#[cfg(unix)]
fn signal_of(status: std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&status)
}

#[cfg(not(unix))]
fn signal_of(_: std::process::ExitStatus) -> Option<i32> {
    None
}

fn failed(error: RunError) -> Report {
    Report {
        ended: Ended::Failed(error),
        output: Vec::new(),
        cpu: Duration::ZERO,
    }
}

/// The sandbox process: reads its [`Spec`], lets `harden` apply the OS's
/// limits for it, runs the program on a thread, and relays calls and
/// replies until the report. Returns the exit code.
pub fn serve(harden: impl FnOnce(&Limits) -> Result<(), String>) -> i32 {
    let stdin = std::io::stdin();
    let mut first = String::new();
    if stdin.lock().read_line(&mut first).is_err() {
        return 2;
    }
    let Ok(spec) = serde_json::from_str::<Spec>(&first) else {
        return 2;
    };
    let out = std::sync::Mutex::new(std::io::stdout());
    let send = |o: &Out| {
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{}", serde_json::to_string(o).unwrap_or_default());
        let _ = out.flush();
    };
    if let Err(e) = harden(&spec.limits) {
        send(&Out::Report(failed(RunError::Start(e))));
        return 1;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            send(&Out::Report(failed(RunError::Start(e.to_string()))));
            return 1;
        }
    };
    runtime.block_on(async {
        let mut running = crate::start(spec.program, spec.limits);
        // Replies from the host, read on a thread of their own.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u32, Reply)>();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str(&line) {
                    Ok(reply) => {
                        if tx.send(reply).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        let mut host = true;
        loop {
            tokio::select! {
                next = running.next() => match next {
                    Next::Call(c) => send(&Out::Call(c)),
                    Next::Ended(report) => {
                        send(&Out::Report(report));
                        return;
                    }
                },
                reply = rx.recv(), if host => match reply {
                    Some((seq, reply)) => running.reply(seq, reply),
                    // The host is gone: so is the run.
                    None => {
                        host = false;
                        running.stop();
                    }
                },
            }
        }
    });
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_from_the_sandbox_are_bounded() {
        let input = format!("short\n{}\nafter\n", "x".repeat(100));
        let mut r = tokio::io::BufReader::with_capacity(7, input.as_bytes());
        assert_eq!(bounded_line(&mut r, 50).await, Ok(Some(b"short".to_vec())));
        // Too long: the stream is given up, nothing after it is read.
        assert!(bounded_line(&mut r, 50).await.is_err());
        let mut r = tokio::io::BufReader::new("exactly\nno newline".as_bytes());
        assert_eq!(bounded_line(&mut r, 7).await, Ok(Some(b"exactly".to_vec())));
        assert_eq!(bounded_line(&mut r, 64).await, Ok(None));
    }
}
