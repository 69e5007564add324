//! The confiner's last layer: a seccomp filter, inherited across `exec`,
//! that refuses (`EPERM`) what Landlock does not cover: Unix sockets made
//! with `socket()` (so a pathname socket such as D-Bus or an agent cannot
//! be reached; `socketpair` stays, programs use it within themselves),
//! changing a file's mode or owner, and the calls a source has no use for
//! that reach into other processes or the kernel (tracing, other
//! processes' memory, keyrings, BPF, performance counters, mounts, new
//! namespaces, io_uring, modules, kexec, typing into the terminal).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `fchmodat2` (Linux 6.6), not yet named by every libc.
const SYS_FCHMODAT2: i64 = 452;

/// Calls refused whatever their arguments.
fn refused() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        SYS_FCHMODAT2,
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_setns,
        libc::SYS_unshare,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([libc::SYS_chmod, libc::SYS_chown, libc::SYS_lchown]);
    calls
}

fn filter() -> Result<BpfProgram, String> {
    let fail = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        refused().into_iter().map(|nr| (nr, Vec::new())).collect();
    let when = |arg: u8, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(fail)
    };
    // socket(AF_UNIX, …): the domain is the first argument.
    rules.insert(libc::SYS_socket, vec![when(0, libc::AF_UNIX as u64)?]);
    // ioctl(fd, TIOCSTI, …): pushing input into a terminal.
    rules.insert(libc::SYS_ioctl, vec![when(1, libc::TIOCSTI)?]);
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp does not know this architecture: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(fail)?;
    BpfProgram::try_from(filter).map_err(fail)
}

/// Applies the filter to this (single-threaded) process and what it
/// `exec`s.
pub fn apply() -> Result<(), String> {
    let program = filter()?;
    seccompiler::apply_filter(&program)
        .map_err(|e| format!("the kernel refuses the seccomp filter ({e})"))
}

/// Whether the kernel takes a filter, for `doctor` (in a throwaway
/// process).
pub fn available() -> bool {
    filter().is_ok_and(|p| seccompiler::apply_filter(&p).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_for_this_machine() {
        let program = filter().unwrap();
        assert!(program.len() > refused().len());
    }
}
