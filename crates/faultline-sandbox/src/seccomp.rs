//! The system-call filter every sandboxed process runs under.
//!
//! Namespaces and a dedicated uid decide what a command can reach; a few system calls are still
//! dangerous on what it can reach, and this filter refuses them (with `EPERM`, or `ENOSYS` where
//! programs are expected to fall back):
//!
//! - **Set-user-ID and set-group-ID bits.** A file the sandbox owns keeps its mode on the host
//!   after the sandbox ends, so `chmod 4755` on a copied binary would leave a set-user-ID program
//!   in the data directory. `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `mknod(at)` and creating
//!   files with `open(at)`/`creat` are refused when the mode carries either bit. `openat2` takes
//!   its mode in memory the filter cannot read, so it is refused whole (`ENOSYS`: C libraries
//!   fall back to `openat`).
//! - **Terminal injection.** `TIOCSTI` (and `TIOCLINUX`, which can do the same on a console)
//!   push characters into a terminal's input, which the shell that started `faultline shell`
//!   would read after the sandbox exits.
//! - **io_uring**, whose operations (open with a mode, and more) bypass this filter.
//! - **Kernel keyrings**, which belong to the uid, not to the sandbox: two sandboxes running at
//!   once could pass data through them.
//! - **New user namespaces** (`clone` or `unshare` with `CLONE_NEWUSER`; `clone3`, whose flags
//!   the filter cannot read, answers `ENOSYS` and C libraries fall back to `clone`): inside one,
//!   a command would hold every capability over what it creates, such as an uncapped tmpfs.
//! - On x86-64, system calls of the x32 ABI (numbers with bit 30 set), which would otherwise
//!   reach the same kernel functions under numbers the filter does not list. Calls of another
//!   architecture's ABI (32-bit `int 0x80`) kill the process.
//!
//! The filter is compiled by `seccompiler` and handed to bubblewrap (`--seccomp FD`) as raw
//! classic-BPF instructions.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::io::Write;

/// `S_ISUID` and `S_ISGID`: the mode bits no sandboxed file may get.
const SPECIAL_BITS: [u64; 2] = [0o4000, 0o2000];

/// `O_CREAT`, and the flag that `O_TMPFILE` adds to `O_DIRECTORY`: the open flags that make the
/// mode argument matter.
const CREATING_FLAGS: [u64; 2] = [0o100, 0o20000000];

/// The flag of `clone` and `unshare` that makes a user namespace.
const CLONE_NEWUSER: u64 = 0x1000_0000;

/// The terminal ioctls that inject input.
const INJECTING_IOCTLS: [u64; 2] = [0x5412, 0x541C];

/// An unnamed file holding the compiled filter, for the launcher to hand to bubblewrap: it has no
/// path, so nothing is left behind in the temporary directory when a process ends or is killed.
pub(crate) fn program_file() -> Result<std::fs::File, String> {
    use std::io::Seek;
    let fail = |e: std::io::Error| format!("cannot write the system-call filter: {e}");
    let mut file = tempfile::tempfile().map_err(fail)?;
    file.write_all(&program_bytes()?).map_err(fail)?;
    file.rewind().map_err(fail)?;
    Ok(file)
}

/// The compiled filter as bubblewrap reads it: `struct sock_filter` records in native byte order.
pub(crate) fn program_bytes() -> Result<Vec<u8>, String> {
    let program = program()?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for insn in program {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    Ok(bytes)
}

fn program() -> Result<BpfProgram, String> {
    let arch = target_arch()?;
    let mut program = rules()
        .and_then(|rules| {
            SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(libc::EPERM as u32),
                arch,
            )
        })
        .and_then(BpfProgram::try_from)
        .map_err(|e| format!("cannot compile the system-call filter: {e}"))?;
    let mut refused_whole = SeccompFilter::new(
        whole_refusals(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| format!("cannot compile the system-call filter: {e}"))?;
    // Two filters run as one program: the first's "allow" falls through to the second. Each
    // starts with the same three-instruction architecture check; the second's is kept, harmless.
    program.pop();
    program.append(&mut refused_whole);
    if cfg!(target_arch = "x86_64") {
        program.splice(ARCH_CHECK_LEN..ARCH_CHECK_LEN, refuse_x32());
    }
    Ok(program)
}

/// Length of the architecture check `seccompiler` puts first.
const ARCH_CHECK_LEN: usize = 3;

/// Instructions that answer `ENOSYS` to any x32 system call (`nr >= 0x40000000`).
fn refuse_x32() -> Vec<seccompiler::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let insn = |code, jt, jf, k| seccompiler::sock_filter { code, jt, jf, k };
    vec![
        insn(LD_W_ABS, 0, 0, 0),
        insn(JGE_K, 0, 1, 0x4000_0000),
        insn(RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]
}

fn target_arch() -> Result<TargetArch, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err("no system-call filter for this architecture".into())
    }
}

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

type BackendResult<T> = Result<T, seccompiler::BackendError>;

/// Calls refused with `EPERM` when their arguments match.
fn rules() -> BackendResult<Rules> {
    let mut rules = Rules::new();
    // (system call, index of its mode argument)
    let mut mode_calls: Vec<(i64, u8)> = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_mknodat, 2),
    ];
    let mut creating_calls: Vec<(i64, u8, u8)> = vec![(libc::SYS_openat, 2, 3)];
    #[cfg(target_arch = "x86_64")]
    {
        mode_calls.extend([
            (libc::SYS_chmod, 1),
            (libc::SYS_mknod, 1),
            (libc::SYS_creat, 1),
        ]);
        creating_calls.push((libc::SYS_open, 1, 2));
    }
    for (call, mode_arg) in mode_calls {
        let chain = SPECIAL_BITS
            .iter()
            .map(|bit| SeccompRule::new(vec![has_bits(mode_arg, *bit)?]))
            .collect::<BackendResult<Vec<_>>>()?;
        rules.insert(call, chain);
    }
    for (call, flags_arg, mode_arg) in creating_calls {
        let mut chain = Vec::new();
        for flag in CREATING_FLAGS {
            for bit in SPECIAL_BITS {
                chain.push(SeccompRule::new(vec![
                    has_bits(flags_arg, flag)?,
                    has_bits(mode_arg, bit)?,
                ])?);
            }
        }
        rules.insert(call, chain);
    }
    let ioctls = INJECTING_IOCTLS
        .iter()
        .map(|request| {
            SeccompRule::new(vec![SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                *request,
            )?])
        })
        .collect::<BackendResult<Vec<_>>>()?;
    rules.insert(libc::SYS_ioctl, ioctls);
    for call in [libc::SYS_unshare, libc::SYS_clone] {
        rules.insert(
            call,
            vec![SeccompRule::new(vec![has_bits(0, CLONE_NEWUSER)?])?],
        );
    }
    Ok(rules)
}

/// Calls refused outright with `ENOSYS`.
fn whole_refusals() -> Rules {
    [
        SYS_OPENAT2,
        // Its flags are in memory the filter cannot read; C libraries fall back to `clone`.
        SYS_CLONE3,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ]
    .into_iter()
    .map(|call| (call, Vec::new()))
    .collect()
}

/// `fchmodat2` (Linux 6.6) and `openat2` (5.6) have the same number on every architecture;
/// older C libraries' headers lack them.
const SYS_FCHMODAT2: i64 = 452;
const SYS_OPENAT2: i64 = 437;
const SYS_CLONE3: i64 = 435;

fn has_bits(arg: u8, bits: u64) -> BackendResult<SeccompCondition> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(bits),
        bits,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_compiles_to_whole_instructions() {
        let bytes = program_bytes().unwrap();
        assert!(!bytes.is_empty());
        assert_eq!(bytes.len() % 8, 0);
        assert!(bytes.len() / 8 < 4096, "over the kernel's limit");
    }

    /// The filter's file had a name once, and every process that ran a sandbox left one behind.
    #[test]
    fn the_filter_file_has_no_name_to_leave_behind() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let mut file = program_file().unwrap();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
        assert!(
            link.to_string_lossy().ends_with(" (deleted)"),
            "the filter is reachable at {}",
            link.display()
        );
        let mut read = Vec::new();
        file.read_to_end(&mut read).unwrap();
        assert_eq!(
            read,
            program_bytes().unwrap(),
            "bubblewrap reads from the start"
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_calls_are_refused_right_after_the_architecture_check() {
        let program = program().unwrap();
        assert_eq!(program[ARCH_CHECK_LEN].k, 0);
        assert_eq!(program[ARCH_CHECK_LEN + 1].k, 0x4000_0000);
    }
}
