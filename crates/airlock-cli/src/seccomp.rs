//! seccomp filters, inherited across `exec`, for what Landlock does not
//! cover. Two profiles:
//!
//! - [`Profile::Source`], the confiner's last layer: no Unix socket made
//!   with `socket()` (a pathname socket such as D-Bus or an agent cannot
//!   be reached) nor a datagram `socketpair` (which could `sendto` one);
//!   stream `socketpair`, which programs use within themselves, stays. No
//!   change of a file's mode, owner or ACL. No new namespaces (`unshare`,
//!   `setns`, `clone` with a `CLONE_NEW*` flag; `clone3` answers ENOSYS, so
//!   libc falls back to `clone`). None of the calls a source has no use
//!   for that reach into other processes or the kernel (tracing, other
//!   processes' memory, keyrings, BPF, performance counters, mounts,
//!   io_uring, modules, kexec, typing into the terminal).
//! - [`Profile::Sandbox`], code mode's process: all of that, and no socket
//!   at all, no new process (`clone` without `CLONE_THREAD`) and no `exec`.
//!
//! Each filter also refuses the x32 system-call numbers, which would
//! otherwise reach the same calls under other numbers.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Source,
    Sandbox,
}

/// `fchmodat2` (Linux 6.6) and `setxattrat` (6.13), not yet named by
/// every libc.
const SYS_FCHMODAT2: i64 = 452;
const SYS_SETXATTRAT: i64 = 463;
/// Every `CLONE_NEW*` flag `clone` takes.
const CLONE_NEW: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// Calls refused whatever their arguments.
fn refused(profile: Profile) -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        SYS_FCHMODAT2,
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        SYS_SETXATTRAT,
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
    if profile == Profile::Sandbox {
        calls.extend([libc::SYS_socket, libc::SYS_execve, libc::SYS_execveat]);
    }
    calls
}

fn fail(e: seccompiler::BackendError) -> String {
    format!("seccomp: {e}")
}

/// A rule matching when argument `arg` masked with `mask` equals `value`.
fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompRule, String> {
    let len = if mask > u64::from(u32::MAX) {
        SeccompCmpArgLen::Qword
    } else {
        SeccompCmpArgLen::Dword
    };
    SeccompCondition::new(arg, len, SeccompCmpOp::MaskedEq(mask), value)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(fail)
}

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp does not know this architecture: {e}"))
}

/// The calls refused with `EPERM`.
fn refusals(profile: Profile) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = refused(profile)
        .into_iter()
        .map(|nr| (nr, Vec::new()))
        .collect();
    if profile == Profile::Source {
        // socket(AF_UNIX, …): the domain is the first argument.
        rules.insert(
            libc::SYS_socket,
            vec![masked(0, u64::from(u32::MAX), libc::AF_UNIX as u64)?],
        );
    }
    // socketpair(AF_UNIX, SOCK_DGRAM, …): a datagram end can `sendto` a path.
    rules.insert(
        libc::SYS_socketpair,
        vec![masked(1, 0xf, libc::SOCK_DGRAM as u64)?],
    );
    // ioctl(fd, TIOCSTI, …): pushing input into a terminal.
    rules.insert(
        libc::SYS_ioctl,
        vec![masked(1, u64::from(u32::MAX), libc::TIOCSTI)?],
    );
    // clone with any CLONE_NEW* flag; in the sandbox, also a new process.
    let mut clone: Vec<SeccompRule> = CLONE_NEW
        .iter()
        .map(|&flag| masked(0, flag, flag))
        .collect::<Result<_, _>>()?;
    if profile == Profile::Sandbox {
        clone.push(masked(0, libc::CLONE_THREAD as u64, 0)?);
    }
    rules.insert(libc::SYS_clone, clone);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(fail)?;
    BpfProgram::try_from(filter).map_err(fail)
}

/// `clone3` answered ENOSYS (its flags sit in memory a filter cannot read;
/// libc then uses `clone`, which the other filter sees).
fn no_clone3() -> Result<BpfProgram, String> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(fail)?;
    BpfProgram::try_from(filter).map_err(fail)
}

/// Refuses (ENOSYS) every call made with the x32 bit set (x86_64 only).
fn no_x32() -> BpfProgram {
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JGE | BPF_K, BPF_RET | BPF_K.
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JGE_K: u16 = 0x05 | 0x30;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    vec![
        // The system call's number, at offset 0 of seccomp_data.
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: BPF_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        },
    ]
}

fn filters(profile: Profile) -> Result<Vec<BpfProgram>, String> {
    let mut all = vec![refusals(profile)?, no_clone3()?];
    if cfg!(target_arch = "x86_64") {
        all.push(no_x32());
    }
    Ok(all)
}

/// Applies `profile`'s filters to this thread and what it starts or
/// `exec`s (the confiner and the sandbox are single-threaded then).
pub fn apply(profile: Profile) -> Result<(), String> {
    for program in filters(profile)? {
        seccompiler::apply_filter(&program)
            .map_err(|e| format!("the kernel refuses the seccomp filter ({e})"))?;
    }
    Ok(())
}

/// Whether the kernel takes the filters, for `doctor` (in a throwaway
/// process).
pub fn available() -> bool {
    apply(Profile::Source).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine() {
        for profile in [Profile::Source, Profile::Sandbox] {
            let all = filters(profile).unwrap();
            assert!(all[0].len() > refused(profile).len());
        }
    }
}
