//! `airlock __sandbox`: the process a code-mode run runs in. Before the
//! program starts, the kernel is given its limits: CPU seconds (the run's
//! budget and two more, so a loop inside the engine that never yields is
//! stopped by the kernel); where Landlock is offered, no files and no TCP
//! at all; and a seccomp filter: no socket, no new process, no exec. These
//! are walls behind the engine, which offers the program none of it.

use std::process::ExitCode;

pub fn run() -> ExitCode {
    ExitCode::from(airlock_sandbox::process::serve(harden) as u8)
}

#[cfg(target_os = "linux")]
fn harden(limits: &airlock_sandbox::Limits) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    let cpu = airlock_sandbox::process::cpu_seconds(limits);
    setrlimit(Resource::RLIMIT_CPU, cpu, cpu + 1)
        .map_err(|e| format!("cannot limit the run's CPU time to {cpu} s: {e}"))?;
    setrlimit(Resource::RLIMIT_NOFILE, 64, 64)
        .map_err(|e| format!("cannot limit the run's open files: {e}"))?;
    walls();
    // No socket, no new process, no exec, none of what the confiner's
    // filter refuses: required, unlike Landlock.
    crate::seccomp::apply(crate::seccomp::Profile::Sandbox)
}

/// Landlock with nothing allowed: no path opened, no TCP bound or
/// connected, no abstract socket or signal outside. Best effort: the engine
/// offers the program none of these in the first place.
#[cfg(target_os = "linux")]
fn walls() {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope,
    };
    let restricted = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V5))
        .and_then(|r| r.handle_access(AccessNet::from_all(ABI::V4)))
        .and_then(|r| r.scope(Scope::from_all(ABI::V6)))
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self());
    if let Err(e) = restricted {
        // Nothing to tell but the host's logs, which do not see stderr.
        let _ = e;
    }
}

#[cfg(not(target_os = "linux"))]
fn harden(_: &airlock_sandbox::Limits) -> Result<(), String> {
    // The host kills the process when the run is stopped.
    Ok(())
}
