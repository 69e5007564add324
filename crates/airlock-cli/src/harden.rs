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
