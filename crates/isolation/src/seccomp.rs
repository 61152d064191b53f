//! The agent's seccomp filter: the kernel interfaces a sandboxed program never needs and that
//! widen the kernel's attack surface or reach outside the sandbox.
//!
//! Denied with `EPERM`: ptrace, cross-process memory access and taking another process's
//! descriptors (`pidfd_getfd`: a program's proxy connection would then be another's), bpf,
//! io_uring, mounts and pivot_root, new namespaces (unshare, setns, and namespace flags on
//! clone), kexec, kernel modules, the kernel keyring, userfaultfd, perf events, raw and
//! packet sockets, and netlink other than ROUTE. clone3 answers `ENOSYS`, since its flags live
//! in memory a filter cannot read; libc then falls back to clone, whose flags it can.
//!
//! Other ABIs cannot go around the list: a syscall from another architecture (i386 through
//! `int 0x80`) kills the process, and on x86_64 the x32 numbers (bit 30 set, which the
//! list's numbers do not match) are denied with `EPERM` whether or not the kernel has x32.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::IsolationError;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Syscalls denied whatever their arguments.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_bpf,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
];

/// Namespace flags that clone may not carry.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
];

fn cond(arg: u8, op: Op, value: u64) -> Result<Cond, IsolationError> {
    Cond::new(arg, Len::Dword, op, value).map_err(|e| IsolationError(format!("seccomp condition: {e}")))
}

fn rule(conds: Vec<Cond>) -> Result<SeccompRule, IsolationError> {
    SeccompRule::new(conds).map_err(|e| IsolationError(format!("seccomp rule: {e}")))
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, IsolationError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), ARCH)
        .map_err(|e| IsolationError(format!("seccomp filter: {e}")))?;
    filter.try_into().map_err(|e| IsolationError(format!("seccomp filter: {e}")))
}

/// The agent's filters, compiled (apply them in order with [`apply`]).
pub fn agent_filters() -> Result<Vec<BpfProgram>, IsolationError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|nr| (*nr, Vec::new())).collect();
    let sock_raw = libc::SOCK_RAW as u64;
    rules.insert(
        libc::SYS_socket,
        vec![
            rule(vec![cond(0, Op::Eq, libc::AF_PACKET as u64)?])?,
            // The type argument carries SOCK_NONBLOCK and SOCK_CLOEXEC in its high bits.
            rule(vec![cond(0, Op::Eq, libc::AF_INET as u64)?, cond(1, Op::MaskedEq(0xf), sock_raw)?])?,
            rule(vec![cond(0, Op::Eq, libc::AF_INET6 as u64)?, cond(1, Op::MaskedEq(0xf), sock_raw)?])?,
            rule(vec![cond(0, Op::Eq, libc::AF_NETLINK as u64)?, cond(2, Op::Ne, libc::NETLINK_ROUTE as u64)?])?,
        ],
    );
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|f| rule(vec![cond(0, Op::MaskedEq(*f as u64), *f as u64)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    let denied = compile(rules, libc::EPERM)?;
    let clone3 = compile(BTreeMap::from([(libc::SYS_clone3, Vec::new())]), libc::ENOSYS)?;
    let mut filters = vec![denied, clone3];
    #[cfg(target_arch = "x86_64")]
    filters.push(no_x32());
    Ok(filters)
}

/// Denies every x32 syscall (numbers with bit 30 set), which a rule per syscall number cannot
/// express. Other architectures are left to the first filter, which kills them.
#[cfg(target_arch = "x86_64")]
fn no_x32() -> BpfProgram {
    use seccompiler::sock_filter;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    // Offsets in struct seccomp_data.
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    let op = |code: u32, jt: u8, jf: u8, k: u32| sock_filter { code: code as u16, jt, jf, k };
    vec![
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, ARCH),
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 3, AUDIT_ARCH_X86_64),
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, NR),
        op(libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K, 0, 1, X32_SYSCALL_BIT),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Installs the filters on the calling thread; `no_new_privs` must be set first.
pub fn apply(filters: &[BpfProgram]) -> Result<(), IsolationError> {
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| IsolationError(format!("installing the seccomp filter: {e}")))?;
    }
    Ok(())
}
