//! `airlock __confine [--read P]… [--write P]… --network none|host
//! [--memory-mib N] [--processes N] [--open-files N] -- PROGRAM ARGS…`:
//! the confiner a stdio source with `[sources.NAME.confine]` is started
//! through. It restricts itself, in this order, and then becomes PROGRAM:
//!
//! 1. a user namespace of its own (mapped to the same user), and with
//!    `network = "none"` a network namespace with no interface but a
//!    loopback of its own: nothing on the machine's network or loopback
//!    is reachable, TCP or UDP;
//! 2. resource limits (address space, processes in that user namespace,
//!    open files);
//! 3. Landlock: the system's libraries and configuration, the program's
//!    install tree and the `read` paths readable, the `write` paths
//!    writable, nothing else; TCP bind and connect refused with `network =
//!    "none"`; abstract Unix sockets and signals outside the sandbox out of
//!    reach where the kernel offers it. Landlock also keeps it from
//!    tracing or reading the memory of any process outside.
//!
//! Every layer asked for is required: if the kernel lacks one, the
//! confiner says which on stderr and exits 126, so the source does not
//! start. It never runs the program unconfined.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Default)]
struct Plan {
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    no_network: bool,
    memory_mib: Option<u64>,
    processes: Option<u64>,
    open_files: Option<u64>,
    program: PathBuf,
    args: Vec<OsString>,
}

fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Plan, String> {
    let mut plan = Plan::default();
    let mut network = None;
    loop {
        let flag = args.next().ok_or("no `--` before the program")?;
        let flag = flag.to_string_lossy().into_owned();
        if flag == "--" {
            break;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("`{flag}` has no value"))?;
        let number = || {
            value
                .to_string_lossy()
                .parse::<u64>()
                .map_err(|_| format!("`{flag}` wants a number"))
        };
        match flag.as_str() {
            "--read" => plan.read.push(value.into()),
            "--write" => plan.write.push(value.into()),
            "--network" => network = Some(value.to_string_lossy().into_owned()),
            "--memory-mib" => plan.memory_mib = Some(number()?),
            "--processes" => plan.processes = Some(number()?),
            "--open-files" => plan.open_files = Some(number()?),
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    plan.no_network = match network.as_deref() {
        Some("none") => true,
        Some("host") => false,
        _ => return Err("`--network none|host` is required".into()),
    };
    plan.program = args.next().ok_or("no program after `--`")?.into();
    plan.args = args.collect();
    Ok(plan)
}

/// Runs the confiner with the arguments after `__confine`; returns only if
/// it could not become the program.
pub fn run(args: impl Iterator<Item = OsString>) -> ExitCode {
    let mut args = args.peekable();
    if args.peek().is_some_and(|a| a == "--probe") {
        println!("{}", probe());
        return ExitCode::SUCCESS;
    }
    let plan = match parse(args) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("airlock: cannot confine the source: {why}");
            return ExitCode::from(126);
        }
    };
    let program = plan.program.display().to_string();
    match confine(&plan) {
        Ok(()) => {
            use std::os::unix::process::CommandExt;
            // The loader's variables, held back from the confiner's own
            // start, go to the program.
            let mut command = std::process::Command::new(&plan.program);
            for (k, v) in std::env::vars_os() {
                if let Some(name) = k
                    .to_str()
                    .and_then(|k| k.strip_prefix(airlock_upstream::confine::LOADER_PREFIX))
                {
                    command.env_remove(&k).env(name, v);
                }
            }
            let e = command.args(&plan.args).exec();
            eprintln!("airlock: cannot start `{program}` confined: {e}");
            ExitCode::from(127)
        }
        Err(why) => {
            eprintln!("airlock: cannot confine `{program}`, so it does not start: {why}");
            ExitCode::from(126)
        }
    }
}

#[cfg(target_os = "linux")]
fn confine(plan: &Plan) -> Result<(), String> {
    namespaces(plan.no_network)?;
    limits(plan)?;
    landlock(plan)?;
    // Last: it refuses `unshare`, which the first layer needs.
    crate::seccomp::apply(crate::seccomp::Profile::Source)
}

#[cfg(not(target_os = "linux"))]
fn confine(_: &Plan) -> Result<(), String> {
    Err("confinement is enforced on Linux only".into())
}

/// A user namespace mapped to the same user (so files keep their owner),
/// and a network namespace when the source gets no network.
#[cfg(target_os = "linux")]
fn namespaces(no_network: bool) -> Result<(), String> {
    use nix::sched::{CloneFlags, unshare};
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let mut flags = CloneFlags::CLONE_NEWUSER;
    if no_network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).map_err(|e| {
        format!("the kernel refuses an unprivileged user namespace ({e}); the source cannot be confined here")
    })?;
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|e| format!("cannot write /proc/self/{file}: {e}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))?;
    Ok(())
}

#[cfg(target_os = "linux")]
fn limits(plan: &Plan) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    let set = |what: Resource, name: &str, v: u64| {
        setrlimit(what, v, v).map_err(|e| format!("cannot limit {name} to {v}: {e}"))
    };
    if let Some(m) = plan.memory_mib {
        set(Resource::RLIMIT_AS, "memory", m.saturating_mul(1024 * 1024))?;
    }
    if let Some(p) = plan.processes {
        // The kernel never holds root to RLIMIT_NPROC: a limit it would
        // not enforce is refused, not pretended.
        if nix::unistd::getuid().is_root() {
            return Err(format!(
                "a limit of {p} processes cannot be enforced for root (the kernel exempts it); run airlock as a user, or remove `processes`"
            ));
        }
        set(Resource::RLIMIT_NPROC, "processes", p)?;
    }
    if let Some(f) = plan.open_files {
        set(Resource::RLIMIT_NOFILE, "open files", f)?;
    }
    Ok(())
}

/// What every program needs to read: the system's libraries, programs and
/// configuration, and the few devices everyone writes to or reads from.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc",
];
const DEVICES_READ: &[&str] = &["/dev/urandom", "/dev/random", "/dev/zero"];
const DEVICES_WRITE: &[&str] = &["/dev/null"];

/// The program's own install tree: the directory above the one it is in
/// (`/usr` for `/usr/bin/python3`, the package for `…/node/bin/node`).
/// Never `/`, the home directory or a directory above it (a program in
/// `~/bin` or `~/.local/bin` gets its own directory, not the home): then
/// the program's own directory, or the program alone.
fn install_tree(program: &Path) -> Option<PathBuf> {
    let real = program.canonicalize().ok()?;
    let dir = real.parent()?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let too_wide =
        |p: &Path| p.parent().is_none() || home.as_deref().is_some_and(|h| h.starts_with(p));
    [dir.parent().unwrap_or(dir), dir, real.as_path()]
        .into_iter()
        .find(|p| !too_wide(p))
        .map(Path::to_path_buf)
}

#[cfg(target_os = "linux")]
fn landlock(plan: &Plan) -> Result<(), String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
        RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    };
    let abi = ABI::V5;
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V3))
        .map_err(|e| format!("the kernel has no Landlock filesystem sandbox this needs ({e})"))?;
    if plan.no_network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(|e| format!("the kernel has no Landlock network sandbox ({e})"))?;
    }
    // Closer confinement where the kernel offers it; the namespaces above
    // already keep the network away.
    ruleset = ruleset
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?
        .scope(Scope::from_all(ABI::V6))
        .map_err(fail)?;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let mut rules = Vec::new();
    let mut allow = |path: &Path, access, must_exist: bool| -> Result<(), String> {
        match PathFd::new(path) {
            Ok(fd) => {
                rules.push(PathBeneath::new(fd, access));
                Ok(())
            }
            Err(_) if !must_exist => Ok(()),
            Err(e) => Err(format!("`{}` cannot be opened: {e}", path.display())),
        }
    };
    for p in SYSTEM_READ.iter().chain(DEVICES_READ) {
        allow(Path::new(p), read, false)?;
    }
    for p in DEVICES_WRITE {
        allow(Path::new(p), read | AccessFs::WriteFile, false)?;
    }
    if let Some(tree) = install_tree(&plan.program) {
        allow(&tree, read, true)?;
    }
    // A reviewed path is used only as it reads: one reached through a
    // symbolic link (which the source may have planted) is refused.
    for p in plan.read.iter().chain(&plan.write) {
        match p.canonicalize() {
            Ok(real) if real == *p => {}
            Ok(real) => {
                return Err(format!(
                    "`{}` leads to `{}` (a symbolic link or `..` on the way); name the real path in [confine]",
                    p.display(),
                    real.display()
                ));
            }
            Err(e) => return Err(format!("`{}` cannot be opened: {e}", p.display())),
        }
    }
    for p in &plan.read {
        allow(p, read, true)?;
    }
    for p in &plan.write {
        allow(p, all, true)?;
    }
    let created = ruleset
        .create()
        .map_err(fail)?
        .add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>))
        .map_err(fail)?;
    let status = created.restrict_self().map_err(fail)?;
    match status.ruleset {
        RulesetStatus::NotEnforced => Err("Landlock is not enforced by this kernel".into()),
        _ => Ok(()),
    }
}

/// What this machine can enforce, in words, for `doctor`: each layer, and
/// whether the kernel offers it. Probed in a throwaway child process (a
/// namespace taken here would be this process's for good).
pub fn layers() -> String {
    let Ok(me) = std::env::current_exe() else {
        return "unknown (airlock cannot find its own program)".into();
    };
    match std::process::Command::new(me)
        .arg(airlock_upstream::confine::CONFINE_ARG)
        .arg("--probe")
        .env_clear()
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Err(e) => format!("unknown (the probe did not run: {e})"),
    }
}

#[cfg(target_os = "linux")]
fn probe() -> String {
    use landlock::{ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr};
    let abi = [
        ABI::V7,
        ABI::V6,
        ABI::V5,
        ABI::V4,
        ABI::V3,
        ABI::V2,
        ABI::V1,
    ]
    .into_iter()
    .find(|abi| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(*abi))
            .and_then(|r| r.create())
            .is_ok()
    });
    let landlock = match abi {
        Some(abi) => {
            let v = abi as i32;
            let net = if v >= 4 {
                ", TCP rules"
            } else {
                ", no TCP rules (ABI 4)"
            };
            let scope = if v >= 6 {
                ", scoping"
            } else {
                ", no scoping (ABI 6)"
            };
            format!("Landlock ABI {v} (files{net}{scope})")
        }
        None => "no Landlock: confined sources cannot start".into(),
    };
    // Before the namespace: inside it, root is no longer uid 0.
    let root = nix::unistd::getuid().is_root();
    let namespaces = match nix::sched::unshare(
        nix::sched::CloneFlags::CLONE_NEWUSER | nix::sched::CloneFlags::CLONE_NEWNET,
    ) {
        Ok(()) => "user and network namespaces".to_string(),
        Err(e) => format!("no unprivileged user namespaces ({e}): confined sources cannot start"),
    };
    let processes = if root {
        "process limits not enforceable (running as root)"
    } else {
        "process, memory and file limits"
    };
    // Last: the filter refuses the namespaces probed above.
    let seccomp = if crate::seccomp::available() {
        "seccomp filter (Unix sockets, chmod and chown, tracing, keyrings, BPF, mounts, io_uring)"
    } else {
        "no seccomp filter: confined sources cannot start"
    };
    // What no layer here covers yet, said every time.
    format!(
        "{landlock}; {namespaces}; {processes}; {seccomp}; not covered: /etc and /proc readable whole, processes left behind (no PID namespace)"
    )
}

#[cfg(not(target_os = "linux"))]
fn probe() -> String {
    "none: confinement is enforced on Linux only".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> impl Iterator<Item = OsString> {
        v.iter().map(OsString::from).collect::<Vec<_>>().into_iter()
    }

    #[test]
    fn reads_the_plan_and_refuses_what_is_not_one() {
        let p = parse(args(&[
            "--read",
            "/a",
            "--write",
            "/b",
            "--network",
            "none",
            "--processes",
            "8",
            "--",
            "prog",
            "x",
        ]))
        .unwrap();
        assert_eq!(p.read, [PathBuf::from("/a")]);
        assert_eq!(p.write, [PathBuf::from("/b")]);
        assert!(p.no_network);
        assert_eq!(p.processes, Some(8));
        assert_eq!(p.program, PathBuf::from("prog"));
        assert_eq!(p.args, [OsString::from("x")]);
        for bad in [
            &["--network", "none", "prog"][..],
            &["--", "prog"],
            &["--network", "wide", "--", "prog"],
            &["--network", "none", "--processes", "many", "--", "prog"],
            &["--network", "none", "--shell", "x", "--", "prog"],
            &["--network", "none", "--"],
        ] {
            assert!(parse(args(bad)).is_err(), "{bad:?}");
        }
    }
}
