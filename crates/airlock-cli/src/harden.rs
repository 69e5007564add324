//! What the process does to itself before anything else.

/// Marks the process non-dumpable, so other processes of the same user
/// (a stdio source among them) cannot read its memory, its environment or
/// its open files through `/proc/<pid>/` or attach a debugger to it. Only
/// a process with `CAP_SYS_PTRACE` still can. Children get their own
/// setting back at `exec`, so the sources airlock starts are unaffected.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn not_dumpable() {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) takes plain integers and only
    // changes this process's own flag.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc != 0 {
        eprintln!(
            "airlock: warning: cannot mark the process non-dumpable ({}); other processes of this user may read its memory",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
pub fn not_dumpable() {}

/// Drops from airlock's own environment every variable whose name marks a
/// credential (`GITHUB_TOKEN`, `OPENAI_API_KEY`, `PGPASSWORD`, …): a
/// client that starts airlock often passes its own, and airlock never
/// reads one (its secrets come from the keychain, by reference). What
/// airlock starts that inherits its environment (the browser launcher) so
/// never sees them; stdio sources get a minimal environment anyway.
///
/// Must run before any other thread starts.
#[allow(unsafe_code)]
pub fn drop_credentials_from_env() {
    let names: Vec<_> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| airlock_config::names_a_credential(k))
        .collect();
    for name in names {
        // SAFETY: called first thing in `main`, before the runtime or any
        // other thread exists, so nothing reads the environment meanwhile.
        unsafe { std::env::remove_var(name) };
    }
}

/// Raises the open-file limit to the most the system allows this user: the
/// HTTP face and the approval page each keep up to 512 connections, beside
/// the sources' pipes and the store, and a default soft limit of 1024 would
/// let a full face starve the rest.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit take a plain struct this function owns.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[cfg(not(unix))]
pub fn raise_open_file_limit() {}
