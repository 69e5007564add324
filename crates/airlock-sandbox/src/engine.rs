//! The run's thread: one QuickJS runtime and context, the caps set on
//! them, and the loop that runs the code's jobs and hands it the host's
//! replies, one at a time, in the order its calls were made.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rquickjs::context::intrinsic;
use rquickjs::function::{Opt, Rest};
use rquickjs::promise::PromiseState;
use rquickjs::{CaughtError, Context, Ctx, Exception, Function, Promise, Runtime, Value};

use crate::{Call, Ended, Limits, Program, Reply, Report, RunError};

const PRELUDE: &str = include_str!("prelude.js");

/// What the host sends a run's thread.
pub(crate) enum Message {
    Reply(u32, Reply),
    /// Stop waiting: the run is stopped.
    Stop,
}

/// Why the interrupt handler stopped the code.
const WHY_NONE: u8 = 0;
const WHY_CPU: u8 = 1;
const WHY_STOP: u8 = 2;

pub(crate) struct Worker {
    pub program: Program,
    pub limits: Limits,
    pub calls: tokio::sync::mpsc::UnboundedSender<Call>,
    pub replies: std::sync::mpsc::Receiver<Message>,
    pub stop: Arc<AtomicBool>,
}

/// The CPU budget: JavaScript runs only inside [`Clock::slice`], and the
/// interrupt handler ends a slice at the budget's end.
struct Clock {
    base: Instant,
    /// Nanoseconds after `base` at which the running slice must stop.
    deadline: Arc<AtomicU64>,
    used: Duration,
    limit: Duration,
}

impl Clock {
    fn slice<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let left = self.limit.saturating_sub(self.used);
        let until = (start + left).duration_since(self.base).as_nanos() as u64;
        self.deadline.store(until, Ordering::SeqCst);
        let out = f();
        self.used += start.elapsed();
        out
    }

    fn spent(&self) -> bool {
        self.used >= self.limit
    }
}

/// What the host functions share with the loop.
#[derive(Default)]
struct Shared {
    next_seq: u32,
    /// Calls made and not yet answered to the code, in order.
    outstanding: VecDeque<u32>,
    output: Vec<String>,
    output_bytes: usize,
    /// A cap was hit: the run ends with this, whatever the code caught.
    over: Option<RunError>,
    disconnected: bool,
}

impl Worker {
    pub(crate) fn run(self) -> Report {
        let mut clock = Clock {
            base: Instant::now(),
            deadline: Arc::new(AtomicU64::new(u64::MAX)),
            used: Duration::ZERO,
            limit: self.limits.cpu,
        };
        let why = Arc::new(AtomicU8::new(WHY_NONE));
        let shared = Rc::new(RefCell::new(Shared::default()));
        let ended = match self.setup(&clock, &why) {
            Ok((runtime, context)) => self.drive(&runtime, &context, &mut clock, &why, &shared),
            Err(e) => Ended::Failed(RunError::Start(e.to_string())),
        };
        let output = std::mem::take(&mut shared.borrow_mut().output);
        Report {
            ended,
            output,
            cpu: clock.used,
        }
    }

    fn setup(&self, clock: &Clock, why: &Arc<AtomicU8>) -> rquickjs::Result<(Runtime, Context)> {
        let runtime = Runtime::new()?;
        runtime.set_memory_limit(self.limits.memory_bytes);
        runtime.set_max_stack_size(self.limits.stack_bytes);
        let (deadline, base, stop, why) = (
            clock.deadline.clone(),
            clock.base,
            self.stop.clone(),
            why.clone(),
        );
        runtime.set_interrupt_handler(Some(Box::new(move || {
            if stop.load(Ordering::Relaxed) {
                why.store(WHY_STOP, Ordering::SeqCst);
                return true;
            }
            let now = base.elapsed().as_nanos() as u64;
            if now > deadline.load(Ordering::Relaxed) {
                why.store(WHY_CPU, Ordering::SeqCst);
                return true;
            }
            false
        })));
        // No Performance (a timer); no module loader is ever set, so
        // `import()` finds nothing.
        let context = Context::custom::<(
            intrinsic::Date,
            intrinsic::Eval,
            intrinsic::RegExpCompiler,
            intrinsic::RegExp,
            intrinsic::Json,
            intrinsic::Proxy,
            intrinsic::MapSet,
            intrinsic::TypedArrays,
            intrinsic::Promise,
        )>(&runtime)?;
        Ok((runtime, context))
    }

    fn drive(
        &self,
        runtime: &Runtime,
        context: &Context,
        clock: &mut Clock,
        why: &AtomicU8,
        shared: &Rc<RefCell<Shared>>,
    ) -> Ended {
        let limits = &self.limits;
        let ended = context.with(|ctx| -> Ended {
            let settle = match clock.slice(|| self.prelude(&ctx, shared)) {
                Ok(f) => f,
                Err(e) => return Ended::Failed(RunError::Start(caught(&ctx, e))),
            };
            let wrapped = format!("(async () => {{{}\n}})()", self.program.code);
            let result: Promise = match clock.slice(|| ctx.eval::<Promise, _>(wrapped)) {
                Ok(p) => p,
                Err(e) => {
                    let text = caught(&ctx, e);
                    return match stopped_by(why, limits) {
                        Some(stop) => Ended::Failed(stop),
                        None if text.starts_with("SyntaxError") => {
                            Ended::Failed(RunError::Syntax(cut(text, limits)))
                        }
                        None => Ended::Failed(classify(text, limits)),
                    };
                }
            };
            let mut ready: HashMap<u32, Reply> = HashMap::new();
            loop {
                // Every job the code has queued, within its CPU budget.
                clock.slice(|| while !clock_spent(why) && ctx.execute_pending_job() {});
                if let Some(stop) = stopped_by(why, limits) {
                    return Ended::Failed(stop);
                }
                if clock.spent() {
                    return Ended::Failed(RunError::Cpu(limits.cpu));
                }
                if let Some(over) = shared.borrow_mut().over.take() {
                    return Ended::Failed(over);
                }
                match result.state() {
                    PromiseState::Resolved => return self.finished(&ctx, &result, shared),
                    PromiseState::Rejected => {
                        let why = match result.result::<Value>() {
                            Some(Err(e)) => caught(&ctx, e),
                            _ => "a rejected promise".into(),
                        };
                        return Ended::Failed(classify(why, limits));
                    }
                    PromiseState::Pending => {}
                }
                let Some(front) = shared.borrow().outstanding.front().copied() else {
                    return Ended::Failed(RunError::Stuck);
                };
                let reply = match self.reply_to(front, &mut ready) {
                    Some(r) => r,
                    None => return Ended::Failed(RunError::Stopped),
                };
                shared.borrow_mut().outstanding.pop_front();
                let (ok, value) = match reply {
                    Reply::Pause => return Ended::Paused { at: front },
                    Reply::Value(v) => (true, v),
                    Reply::Error { code, message } => {
                        (false, serde_json::json!({"code": code, "message": message}))
                    }
                };
                let settled = clock.slice(|| -> rquickjs::Result<()> {
                    let value = ctx.json_parse(value.to_string())?;
                    settle.call::<_, ()>((front, ok, value))
                });
                if let Err(e) = settled {
                    let text = caught(&ctx, e);
                    return Ended::Failed(
                        stopped_by(why, limits).unwrap_or_else(|| classify(text, limits)),
                    );
                }
            }
        });
        // What the code left behind is freed with the runtime, after the
        // context; a collection first keeps QuickJS's own checks quiet.
        runtime.run_gc();
        ended
    }

    /// Runs the prelude and returns its `settle` function.
    fn prelude<'js>(
        &self,
        ctx: &Ctx<'js>,
        shared: &Rc<RefCell<Shared>>,
    ) -> rquickjs::Result<Function<'js>> {
        let build: Function = ctx.eval(PRELUDE)?;
        let names = rquickjs::Array::new(ctx.clone())?;
        for (i, t) in self.program.tools.iter().enumerate() {
            let entry = rquickjs::Array::new(ctx.clone())?;
            entry.set(0, t.source.as_str())?;
            entry.set(1, t.tool.as_str())?;
            entry.set(2, t.exposed.as_str())?;
            names.set(i, entry)?;
        }
        let call = {
            let shared = shared.clone();
            let sender = self.calls.clone();
            let limits = self.limits.clone();
            Function::new(
                ctx.clone(),
                move |ctx: Ctx<'js>, exposed: String, args: Opt<Value<'js>>| {
                    bridge_call(&ctx, &shared, &sender, &limits, exposed, args.0)
                },
            )?
        };
        let write = {
            let shared = shared.clone();
            let cap = self.limits.output_bytes;
            Function::new(
                ctx.clone(),
                move |ctx: Ctx<'js>, parts: Rest<Value<'js>>| {
                    let mut line = String::new();
                    for (i, part) in parts.0.into_iter().enumerate() {
                        if i > 0 {
                            line.push(' ');
                        }
                        line.push_str(&shown(&ctx, part));
                    }
                    let mut s = shared.borrow_mut();
                    if s.output_bytes + line.len() > cap {
                        s.over = Some(RunError::Output(cap));
                        return Err(Exception::throw_range(&ctx, "output limit reached"));
                    }
                    s.output_bytes += line.len();
                    s.output.push(line);
                    Ok(())
                },
            )?
        };
        build.call((
            call,
            names,
            self.program.seed as i32,
            self.program.clock_ms as f64,
            write,
        ))
    }

    /// The reply to call `seq`, waiting for it (asleep: a long wait for a
    /// person costs no CPU) if it has not come; none when the run is
    /// stopped or the host is gone.
    fn reply_to(&self, seq: u32, ready: &mut HashMap<u32, Reply>) -> Option<Reply> {
        loop {
            if let Some(r) = ready.remove(&seq) {
                return Some(r);
            }
            if self.stop.load(Ordering::SeqCst) {
                return None;
            }
            match self.replies.recv() {
                Ok(Message::Reply(n, r)) => {
                    ready.insert(n, r);
                }
                Ok(Message::Stop) | Err(_) => return None,
            }
        }
    }

    fn finished<'js>(
        &self,
        ctx: &Ctx<'js>,
        result: &Promise<'js>,
        shared: &Rc<RefCell<Shared>>,
    ) -> Ended {
        let value = match result.result::<Value>() {
            Some(Ok(v)) => v,
            _ => return Ended::Failed(RunError::Thrown("the result cannot be read".into())),
        };
        let json = match ctx.json_stringify(value) {
            Ok(Some(s)) => s.to_string().unwrap_or_default(),
            Ok(None) => "null".to_string(),
            Err(e) => {
                let text = caught(ctx, e);
                return Ended::Failed(classify(
                    format!("the result is not JSON: {text}"),
                    &self.limits,
                ));
            }
        };
        let s = shared.borrow();
        if s.output_bytes + json.len() > self.limits.output_bytes {
            return Ended::Failed(RunError::Output(self.limits.output_bytes));
        }
        Ended::Finished(serde_json::from_str(&json).unwrap_or(serde_json::Value::Null))
    }
}

/// `call(exposed, args)` from the prelude: checks the arguments and the
/// call budget, hands the call to the host, and returns its number.
fn bridge_call<'js>(
    ctx: &Ctx<'js>,
    shared: &Rc<RefCell<Shared>>,
    sender: &tokio::sync::mpsc::UnboundedSender<Call>,
    limits: &Limits,
    exposed: String,
    args: Option<Value<'js>>,
) -> rquickjs::Result<u32> {
    let arguments = match args {
        None => serde_json::Map::new(),
        Some(v) if v.is_undefined() || v.is_null() => serde_json::Map::new(),
        Some(v) if v.is_object() && !v.is_array() && !v.is_function() => {
            let json = ctx
                .json_stringify(v)?
                .map(|s| s.to_string())
                .transpose()?
                .unwrap_or_else(|| "{}".into());
            if json.len() > limits.argument_bytes {
                return Err(Exception::throw_range(
                    ctx,
                    &format!(
                        "the arguments are {} bytes, more than the {} a call may carry",
                        json.len(),
                        limits.argument_bytes
                    ),
                ));
            }
            match serde_json::from_str::<serde_json::Value>(&json) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => {
                    return Err(Exception::throw_type(
                        ctx,
                        "a tool's arguments must be a plain object",
                    ));
                }
            }
        }
        Some(_) => {
            return Err(Exception::throw_type(
                ctx,
                "a tool's arguments must be an object",
            ));
        }
    };
    let mut s = shared.borrow_mut();
    if s.next_seq >= limits.calls {
        s.over = Some(RunError::Calls(limits.calls));
        return Err(Exception::throw_range(ctx, "tool call limit reached"));
    }
    if s.disconnected {
        return Err(Exception::throw_internal(ctx, "the host is gone"));
    }
    s.next_seq += 1;
    let seq = s.next_seq;
    if sender
        .send(Call {
            seq,
            exposed,
            arguments,
        })
        .is_err()
    {
        s.disconnected = true;
        return Err(Exception::throw_internal(ctx, "the host is gone"));
    }
    s.outstanding.push_back(seq);
    Ok(seq)
}

fn clock_spent(why: &AtomicU8) -> bool {
    why.load(Ordering::SeqCst) != WHY_NONE
}

fn stopped_by(why: &AtomicU8, limits: &Limits) -> Option<RunError> {
    match why.load(Ordering::SeqCst) {
        WHY_CPU => Some(RunError::Cpu(limits.cpu)),
        WHY_STOP => Some(RunError::Stopped),
        _ => None,
    }
}

/// An exception's text, from QuickJS's error.
fn caught(ctx: &Ctx<'_>, e: rquickjs::Error) -> String {
    match CaughtError::from_error(ctx, e) {
        CaughtError::Exception(ex) => {
            let name = ex
                .get::<_, Option<String>>("name")
                .ok()
                .flatten()
                .unwrap_or_else(|| "Error".into());
            format!("{name}: {}", ex.message().unwrap_or_default())
        }
        CaughtError::Value(v) => shown(ctx, v),
        CaughtError::Error(rquickjs::Error::Allocation) => "out of memory".into(),
        CaughtError::Error(e) => e.to_string(),
    }
}

/// Names the caps QuickJS reports as plain errors; what the code threw is
/// cut to [`THROWN_BYTES`] (it is output too).
fn classify(text: String, limits: &Limits) -> RunError {
    if text.contains("out of memory") {
        RunError::Memory(limits.memory_bytes)
    } else if text.contains("stack overflow") || text.contains("call stack") {
        RunError::Stack
    } else {
        RunError::Thrown(cut(text, limits))
    }
}

/// The most of a thrown value or a syntax error that is kept.
const THROWN_BYTES: usize = 4096;

fn cut(mut text: String, limits: &Limits) -> String {
    let max = THROWN_BYTES.min(limits.output_bytes);
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let whole = text.len();
        text.truncate(end);
        text.push_str(&format!("… ({whole} bytes in all)"));
    }
    text
}

/// A value as `console.log` shows it: strings as they are, the rest as JSON.
fn shown<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> String {
    if let Some(s) = v.as_string() {
        return s.to_string().unwrap_or_default();
    }
    if v.is_undefined() {
        return "undefined".into();
    }
    match ctx.json_stringify(v) {
        Ok(Some(s)) => s.to_string().unwrap_or_default(),
        _ => "[unprintable]".into(),
    }
}
