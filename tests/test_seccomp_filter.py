"""pysb_core.linux.seccomp: every decision of the shared filter, run through its BPF interpreter.

What the filter does to real programs under each provider is tested in
tests/security/test_os_syscalls.py and the providers' own test_seccomp.py / test_seccomp_child.py.
"""

from __future__ import annotations

import errno
import struct

import pytest

from pysb_core.linux import seccomp as sc

X86_64, I386, AARCH64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
ALLOW = sc.RET_ALLOW
EPERM, EACCES = sc.ret_errno(errno.EPERM), sc.ret_errno(errno.EACCES)
ENOSYS, EAFNO = sc.ret_errno(errno.ENOSYS), sc.ret_errno(errno.EAFNOSUPPORT)
ENOTSUP = sc.ret_errno(errno.EOPNOTSUPP)
EPROTO = sc.ret_errno(errno.EPROTONOSUPPORT)
NEWUSER, NEWNS, NEWPID, NEWNET, NEWTIME = 0x10000000, 0x20000, 0x20000000, 0x40000000, 0x80
FORK_FLAGS = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD: a fork
THREAD_FLAGS = 0x003D0F00  # what pthread_create passes to clone
CLOEXEC, NONBLOCK = 0o2000000, 0o4000
LANDLOCK = sc.Rules(ip="tcp", unix=False, sysv_ipc=False, xattr=False)
MACHINES = [("x86_64", X86_64), ("aarch64", AARCH64)]


def decide(machine: str, rules: sc.Rules, name: str, *args: int, arch: int = 0) -> int:
    prog = sc.program(machine, rules)
    assert prog is not None
    return sc.run(prog, sc.SYSCALLS[machine][name], arch or sc.ARCHES[machine], *args)


@pytest.mark.parametrize(("machine", "arch"), MACHINES)
@pytest.mark.parametrize("rules", [sc.Rules(), LANDLOCK, sc.Rules(namespaces=True)])
def test_refused_under_every_provider(machine: str, arch: int, rules: sc.Rules) -> None:
    for family in (40, 17, 38, 44, 30, 21, 15, 29, 31, 3, 0, 46):  # vsock, packet, alg, xdp...
        assert decide(machine, rules, "socket", family, 1, 0) == EAFNO, family
    assert decide(machine, rules, "socket", (1 << 32) | 40, 1, 0) == EAFNO  # int argument
    for name in ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"):
        assert decide(machine, rules, name, 16, 1) == EPERM, name
    for name in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
        assert decide(machine, rules, name, 8, 0) == EPERM, name
    for name in sc.KERNEL:  # bpf, userfaultfd, perf events, file handles, mounts...
        assert decide(machine, rules, name, 0, 1, 8) == EPERM, name
    # keyctl: only joining a new anonymous session keyring (what pysb's child set-up does)
    assert decide(machine, rules, "keyctl", sc.KEYCTL_JOIN_SESSION_KEYRING, 0) == ALLOW
    assert decide(machine, rules, "keyctl", sc.KEYCTL_JOIN_SESSION_KEYRING, 0x1000) == EPERM
    assert decide(machine, rules, "keyctl", sc.KEYCTL_JOIN_SESSION_KEYRING, 1 << 32) == EPERM
    for command in (0, 10, 11, 21):  # get id, search, read, invalidate
        assert decide(machine, rules, "keyctl", command, 0) == EPERM, command
    # TCP Fast Open: the flags are the 4th argument of sendto/sendmmsg, the 3rd of sendmsg
    assert decide(machine, rules, "sendto", 3, 0, 1, sc.MSG_FASTOPEN, 0, 16) == EPERM
    assert decide(machine, rules, "sendto", 3, 0, 1, 0x4000, 0, 16) == ALLOW  # MSG_NOSIGNAL
    assert decide(machine, rules, "sendmmsg", 3, 0, 1, sc.MSG_FASTOPEN | 0x40) == EPERM
    assert decide(machine, rules, "sendmsg", 3, 0, sc.MSG_FASTOPEN) == EPERM
    assert decide(machine, rules, "sendmsg", 3, 0, 0x40) == ALLOW  # MSG_DONTWAIT
    assert decide(machine, rules, "setsockopt", 3, 6, sc.TCP_FASTOPEN_CONNECT) == EPERM
    assert decide(machine, rules, "setsockopt", 3, 6, 1) == ALLOW  # TCP_NODELAY
    assert decide(machine, rules, "setsockopt", 3, 1, sc.TCP_FASTOPEN_CONNECT) == ALLOW
    assert decide(machine, rules, "ioctl", 0, sc.TIOCSTI) == EPERM
    assert decide(machine, rules, "ioctl", 0, (1 << 32) | sc.TIOCLINUX) == EPERM
    assert decide(machine, rules, "ioctl", 0, 0x5401) == ALLOW  # TCGETS
    assert decide(machine, rules, "socket", 16, 3, 0) == ALLOW  # netlink: route queries
    assert decide(machine, rules, "socket", 16, 3 | CLOEXEC, 0) == ALLOW
    for protocol in (4, 9, 15, 12, 16):  # sock_diag, audit, uevent, nfnetlink, generic
        assert decide(machine, rules, "socket", 16, 3, protocol) == EPROTO, protocol
    # A foreign ABI is refused whole: its multiplexers hide the arguments judged above.
    prog = sc.program(machine, rules)
    assert prog is not None
    foreign = I386 if machine == "x86_64" else ARM
    assert sc.run(prog, 54, foreign, 0, sc.TIOCSTI) == ENOSYS
    assert sc.run(prog, 0, foreign) == ENOSYS
    if machine == "x86_64":
        assert sc.run(prog, 0x40000000 | 41, arch, 2, 1, 0) == ENOSYS  # x32


@pytest.mark.parametrize(("machine", "arch"), MACHINES)
def test_namespace_providers_keep_sockets_ipc_and_xattrs(machine: str, arch: int) -> None:
    rules = sc.Rules()
    for family, kind, proto in ((1, 1, 0), (2, 1, 0), (2, 2, 0), (10, 3, 58), (2, 1, 132)):
        assert decide(machine, rules, "socket", family, kind, proto) == ALLOW
    for name in (*sc.SYSV_IPC, *sc.XATTR_SET):
        assert decide(machine, rules, name, 0, 0) == ALLOW, name


@pytest.mark.parametrize(("machine", "arch"), MACHINES)
def test_namespaces_are_refused_unless_a_provider_allows_them(machine: str, arch: int) -> None:
    """Every provider refuses new namespaces (issue 26 #7: ``unshare(CLONE_NEWUSER)``
    succeeded under Landlock); only firejail's child may leave them to firejail."""
    for rules in (sc.Rules(), LANDLOCK):
        assert decide(machine, rules, "unshare", NEWUSER) == EPERM
        assert decide(machine, rules, "clone", FORK_FLAGS | NEWUSER) == EPERM
        assert decide(machine, rules, "clone3", 0) == ENOSYS
    allowed = sc.Rules(namespaces=True)
    assert decide(machine, allowed, "unshare", NEWUSER) == ALLOW
    assert decide(machine, allowed, "clone3", 0) == ALLOW


@pytest.mark.parametrize(("machine", "arch"), MACHINES)
@pytest.mark.parametrize("udp", [False, True])
@pytest.mark.parametrize("unix", [False, True])
def test_landlock_sockets(machine: str, arch: int, udp: bool, unix: bool) -> None:
    rules = sc.Rules(ip="tcp+udp" if udp else "tcp", unix=unix, sysv_ipc=False, xattr=False)
    udp_result = ALLOW if udp else EACCES
    cases = [
        ((1, 1, 0), ALLOW if unix else EACCES),  # Landlock cannot mediate connect()
        ((1, 2 | CLOEXEC, 0), ALLOW if unix else EACCES),
        ((2, 1, 0), ALLOW),
        ((10, 1 | CLOEXEC | NONBLOCK, 6), ALLOW),
        ((2, 1, 132), EACCES),  # SCTP
        ((2, 1, 262), EACCES),  # MPTCP
        ((2, 5, 132), EACCES),  # SCTP seqpacket
        ((2, 3, 6), EACCES),  # raw
        ((2, 2, 0), udp_result),
        ((10, 2 | NONBLOCK, 17), udp_result),
        ((2, 2, 1), EACCES),  # ICMP ping socket
        ((40, 1, 0), EAFNO),
    ]
    for args, expected in cases:
        assert decide(machine, rules, "socket", *args) == expected, args


@pytest.mark.parametrize(("machine", "arch"), MACHINES)
def test_landlock_refuses_sysv_ipc_and_xattrs_unless_allowed(machine: str, arch: int) -> None:
    for name in sc.SYSV_IPC:
        assert decide(machine, LANDLOCK, name, 0, 4096, 0o1600) == EPERM, name
    for name in sc.XATTR_SET:
        assert decide(machine, LANDLOCK, name, 0, 0) == ENOTSUP, name
    allowed = sc.Rules(ip="tcp", unix=False, sysv_ipc=True, xattr=False)
    for name in sc.SYSV_IPC:
        assert decide(machine, allowed, name, 0, 4096, 0o1600) == ALLOW, name


@pytest.mark.parametrize(
    ("machine", "name", "args", "expected"),
    [
        # unshare and clone judge arg0, setns arg1
        ("x86_64", "unshare", (NEWUSER,), EPERM),
        ("x86_64", "unshare", (NEWUSER | NEWNS,), EPERM),
        ("x86_64", "unshare", (NEWTIME,), EPERM),
        ("x86_64", "unshare", (0x400,), ALLOW),  # CLONE_FILES: no namespace
        ("x86_64", "unshare", ((1 << 32) | 0x400,), ALLOW),
        ("x86_64", "clone", (FORK_FLAGS,), ALLOW),
        ("x86_64", "clone", (THREAD_FLAGS,), ALLOW),
        ("x86_64", "clone", (FORK_FLAGS | NEWPID,), EPERM),
        ("x86_64", "clone", (FORK_FLAGS | NEWNET,), EPERM),
        ("x86_64", "setns", (3, 0), EPERM),  # setns(fd, 0): any namespace
        ("x86_64", "setns", (3, NEWNET), EPERM),
        ("x86_64", "clone3", (0,), ENOSYS),  # flags behind a pointer
        ("aarch64", "unshare", (NEWUSER,), EPERM),
        ("aarch64", "clone", (FORK_FLAGS | NEWPID,), EPERM),
        ("aarch64", "clone", (FORK_FLAGS,), ALLOW),
        ("aarch64", "setns", (3, 0), EPERM),
        ("aarch64", "clone3", (0,), ENOSYS),
    ],
)
def test_namespace_refusals(machine: str, name: str, args: tuple[int, ...], expected: int) -> None:
    assert decide(machine, sc.Rules(), name, *args) == expected


def test_other_calls_with_the_same_argument_values_are_allowed() -> None:
    prog = sc.program("x86_64", LANDLOCK)
    assert prog is not None
    assert sc.run(prog, 0, X86_64, 40, sc.TIOCSTI, sc.MSG_FASTOPEN, sc.MSG_FASTOPEN) == ALLOW
    assert sc.run(prog, 54, AARCH64, 40) == ENOSYS  # another arch than the native one


def test_bytes_match_the_program_and_uncovered_machines_get_none() -> None:
    for machine, _ in MACHINES:
        for rules in (sc.Rules(), LANDLOCK, sc.Rules(namespaces=True)):
            prog = sc.program(machine, rules)
            raw = sc.filter_bytes(machine, rules)
            assert prog is not None and raw is not None
            assert [struct.unpack("=HBBI", raw[i : i + 8]) for i in range(0, len(raw), 8)] == prog
    assert sc.filter_bytes("x86_64") != sc.filter_bytes("x86_64", LANDLOCK)
    assert sc.program("riscv64") is None and sc.filter_bytes("riscv64") is None
    assert not sc.covers("riscv64") and sc.covers("aarch64")


def test_rules_round_trip_and_reject_unknown_ip_rules() -> None:
    assert sc.Rules(**LANDLOCK.to_dict()).key() == LANDLOCK.key()  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sc.Rules(ip="udp")


@pytest.mark.parametrize(("machine", "arch"), MACHINES)
@pytest.mark.parametrize("rules", [sc.Rules(), LANDLOCK])
def test_set_id_bits_are_refused_in_every_mode_setting_call(
    machine: str, arch: int, rules: sc.Rules
) -> None:
    """A set-uid/set-gid file left in an exposure would run with its owner's rights later."""
    o_creat, o_tmpfile_rdwr, o_rdonly = 0o100, 0o20200000 | 2, 0
    assert decide(machine, rules, "fchmod", 3, 0o4755) == EPERM
    assert decide(machine, rules, "fchmod", 3, 0o755) == ALLOW
    assert decide(machine, rules, "fchmodat", -100, 0, 0o2755) == EPERM
    assert decide(machine, rules, "fchmodat", -100, 0, 0o1777) == ALLOW  # sticky: harmless
    assert decide(machine, rules, "fchmodat2", -100, 0, 0o6000, 0) == EPERM
    assert decide(machine, rules, "openat", -100, 0, o_creat | 1, 0o4755) == EPERM
    assert decide(machine, rules, "openat", -100, 0, o_tmpfile_rdwr, 0o2700) == EPERM
    assert decide(machine, rules, "openat", -100, 0, o_creat | 1, 0o644) == ALLOW
    assert decide(machine, rules, "openat", -100, 0, o_rdonly, 0o4755) == ALLOW  # mode unused
    assert decide(machine, rules, "mknodat", -100, 0, 0o100000 | 0o4755, 0) == EPERM
    assert decide(machine, rules, "mknodat", -100, 0, 0o10644, 0) == ALLOW  # a FIFO
    assert decide(machine, rules, "openat2", -100, 0, 0, 24) == ENOSYS
    if machine == "x86_64":
        assert decide(machine, rules, "chmod", 0, 0o4755) == EPERM
        assert decide(machine, rules, "open", 0, o_creat, 0o6755) == EPERM
        assert decide(machine, rules, "open", 0, o_rdonly, 0o6755) == ALLOW
        assert decide(machine, rules, "creat", 0, 0o4700) == EPERM
        assert decide(machine, rules, "mknod", 0, 0o100000 | 0o2755, 0) == EPERM


@pytest.mark.parametrize("machine", sorted(sc.ARCHES))
def test_identity_changes_to_other_ids_are_eperm(machine: str) -> None:
    """chown family and set*id: an id argument other than -1 and the sandbox's own is
    EPERM (a one-id user namespace answered EINVAL); -1 and the own ids pass."""
    prog = sc.program(machine, sc.Rules(ids=(1000, 100)))
    assert prog is not None
    nr, arch = sc.SYSCALLS[machine], sc.ARCHES[machine]
    eperm = sc.ret_errno(errno.EPERM)
    for name, uids, gids in sc.IDENTITY:
        if name not in nr:
            continue
        width = max((*uids, *gids)) + 1
        for arg in (*uids, *gids):
            own = 1000 if arg in uids else 100
            args = [-1] * width
            args[arg] = 4242
            assert sc.run(prog, nr[name], arch, *args) == eperm, (name, arg)
            args[arg] = own
            assert sc.run(prog, nr[name], arch, *args) == sc.RET_ALLOW, (name, arg)
        assert sc.run(prog, nr[name], arch, *[-1] * width) == sc.RET_ALLOW, name
