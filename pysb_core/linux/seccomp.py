"""The one seccomp filter every OS provider loads into the sandbox (classic BPF, no libseccomp).

A provider's namespaces or Landlock ruleset confine files and the network; some system calls
reach past both and are refused here, for every provider alike:

- ``socket()`` of a family no profile rule can express: only ``AF_UNIX``, ``AF_INET``,
  ``AF_INET6`` and ``AF_NETLINK`` with ``NETLINK_ROUTE`` are created (other netlink
  protocols: ``EPROTONOSUPPORT``; sock_diag lists the host's sockets under Landlock).
  ``AF_VSOCK`` is not confined by network namespaces (on a host that is itself a VM it
  leads to the hypervisor), ``AF_PACKET``, ``AF_ALG``, ``AF_XDP``, Bluetooth, CAN, TIPC,
  RDS... are kernel surface no rule covers
  (``EAFNOSUPPORT``, which programs read as "this family does not exist here");
- ``ptrace``, ``process_vm_readv``/``writev`` and ``pidfd_getfd``: under bwrap a traced
  sandbox PID 1 stops and the run hangs; no profile grants debugging (``EPERM``);
- TCP Fast Open: ``sendto``/``sendmsg``/``sendmmsg`` with ``MSG_FASTOPEN`` and
  ``setsockopt(TCP_FASTOPEN_CONNECT)`` open a connection without ``connect()``, which is
  where Landlock checks its TCP rules (``EPERM``);
- a set-user-ID or set-group-ID bit in a mode (``chmod`` family, ``open``/``openat`` with
  ``O_CREAT``, ``creat``, ``mknod``): a file left in a writable exposure must not run with
  its owner's rights for whoever starts it later (``EPERM``); ``openat2``, whose mode the
  filter cannot read, fails with ``ENOSYS`` (callers fall back to ``openat``);
- io_uring (its operations are not seen by seccomp or by Landlock's socket checks) and
  ``ioctl(TIOCSTI/TIOCLINUX)``, typing into the terminal the sandbox may share (``EPERM``);
- kernel surface no profile grants (:data:`KERNEL`: eBPF, userfaultfd, perf events,
  fanotify, keys, file handles, the mount API, modules, kexec...: ``EPERM``), and new or
  joined namespaces (``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag:
  ``EPERM``; ``clone3``: ``ENOSYS``).

A :class:`Rules` adds what one provider needs: Landlock refuses SysV IPC (no IPC namespace
there: the host's segments are reachable by key or id), setting extended attributes (no
Landlock right covers them), Unix and non-TCP IP sockets; firejail's child may leave
namespaces to firejail's own filter.

Foreign system-call ABIs (i386 and x32 on x86_64, 32-bit ARM on aarch64) are refused as a
whole (``ENOSYS``): their ``socketcall``/``ipc`` multiplexers hide the arguments judged above.
Only little-endian x86_64 and aarch64 are covered; elsewhere :func:`program` is ``None``.

Only built-in modules are used: the sandboxed interpreter loads this before user code.

Why one module: it is one BPF program: the tables of calls, the blocks that judge their
arguments and the assembler that joins them must agree on jump offsets and return values, and
the sandboxed interpreter loads this before user code with built-in modules only (a split would
be more imports at every start).
"""

from __future__ import annotations

import errno
import os
import sys

# Bound at import: a child set-up may load the filter after the guards judge imports and
# C-function look-ups (Landlock's does).
from pysb_core.linux import cfuncs

_syscall = cfuncs.function("syscall", cfuncs.Long)
_prctl = cfuncs.function("prctl", cfuncs.Long)

TYPE_CHECKING = False  # loaded in the sandboxed child: no typing at run time
if TYPE_CHECKING:
    from pysb_core.plan import ChildSetup

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000


def ret_errno(code: int) -> int:
    """The filter's return value for "fail with ``code``"."""
    return _RET_ERRNO | code


#: ``struct seccomp_data``: nr, arch, the instruction pointer, then args[n] (its low 32
#: bits on little-endian).
OFF_NR, OFF_ARCH, OFF_IP = 0, 4, 8


def off_arg(n: int) -> int:
    return 16 + 8 * n


AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0
SOCK_STREAM, SOCK_DGRAM = 1, 2
IPPROTO_TCP, IPPROTO_UDP = 6, 17
MSG_FASTOPEN = 0x20000000
TCP_FASTOPEN_CONNECT = 30
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
_X32 = 0x40000000

#: Every ``CLONE_NEW*`` flag.
CLONE_NEW = {
    "cgroup": 0x02000000,
    "ipc": 0x08000000,
    "net": 0x40000000,
    "mnt": 0x00020000,
    "pid": 0x20000000,
    "time": 0x00000080,
    "user": 0x10000000,
    "uts": 0x04000000,
}
NS_FLAGS = sum(CLONE_NEW.values())
#: For ``clone``, without ``CLONE_NEWTIME``: 0x80 lies in its exit-signal byte there.
CLONE_NS_FLAGS = NS_FLAGS & ~0x80

#: machine -> AUDIT_ARCH of the native ABI.
ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

#: machine -> system call numbers of the native ABI.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "socket": 41, "sendto": 44, "sendmsg": 46, "sendmmsg": 307, "setsockopt": 54,
        "ioctl": 16, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "pidfd_getfd": 438, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427,
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
        "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
        "msgctl": 71,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
        "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463, "removexattrat": 466,
        "clone": 56, "unshare": 272, "setns": 308, "clone3": 435,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "open": 2, "creat": 85,
        "openat": 257, "openat2": 437, "mknod": 133, "mknodat": 259,
        "bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "fanotify_init": 300,
        "keyctl": 250, "add_key": 248, "request_key": 249, "kcmp": 312, "syslog": 103,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "open_tree_attr": 467, "swapon": 167, "swapoff": 168,
        "reboot": 169, "acct": 163, "quotactl": 179, "quotactl_fd": 443,
        "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "setuid": 105,
        "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119,
    },
    "aarch64": {
        "socket": 198, "sendto": 206, "sendmsg": 211, "sendmmsg": 269, "setsockopt": 208,
        "ioctl": 29, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "pidfd_getfd": 438, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427,
        "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193,
        "semctl": 191, "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188,
        "msgctl": 187,
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14,
        "lremovexattr": 15, "fremovexattr": 16, "setxattrat": 463, "removexattrat": 466,
        "clone": 220, "unshare": 97, "setns": 268, "clone3": 435,
        "fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "openat": 56, "openat2": 437,
        "mknodat": 33,
        "bpf": 280, "userfaultfd": 282, "perf_event_open": 241, "fanotify_init": 262,
        "keyctl": 219, "add_key": 217, "request_key": 218, "kcmp": 272, "syslog": 116,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "mount": 40, "umount2": 39, "pivot_root": 41, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "open_tree_attr": 467, "swapon": 224, "swapoff": 225,
        "reboot": 142, "acct": 89, "quotactl": 60, "quotactl_fd": 443,
        "fchownat": 54, "fchown": 55, "setregid": 143, "setgid": 144, "setreuid": 145,
        "setuid": 146, "setresuid": 147, "setresgid": 149,
    },
}  # fmt: skip
SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1

#: (call, index of its mode argument, index of its flags argument or None): the calls that
#: set a file's mode. A set-user-ID or set-group-ID bit is refused: a file the sandbox
#: leaves in a writable exposure must not run with its owner's rights for whoever starts it
#: later (as root: a set-uid root binary for every user of the host).
SET_MODE = (
    ("chmod", 1, None), ("fchmod", 1, None), ("fchmodat", 2, None), ("fchmodat2", 2, None),
    ("creat", 1, None), ("mknod", 1, None), ("mknodat", 2, None),
    ("open", 2, 1), ("openat", 3, 2),
)  # fmt: skip
S_ISUID_ISGID = 0o6000
#: open flags with which the mode argument is used: O_CREAT, and __O_TMPFILE.
O_CREAT_TMPFILE = 0o100 | 0o20000000
#: Kernel surface no profile grants, refused under every provider (``EPERM``, what an
#: unprivileged caller gets): eBPF, userfaultfd and perf events (the usual first step of a
#: kernel exploit), fanotify (it watches files by path, where Landlock does not look),
#: keys (``keyctl`` only to join a new anonymous session keyring: see
#: :mod:`pysb_core.child.keyring`), ``kcmp``, the kernel log, kexec and modules, file
#: handles (``open_by_handle_at`` opens a file by number, past every path rule: the
#: "shocker" container escape), the mount API, swap, reboot, accounting and quotas.
KERNEL = (
    "bpf", "userfaultfd", "perf_event_open", "fanotify_init", "add_key", "request_key",
    "kcmp", "syslog", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "open_by_handle_at", "name_to_handle_at", "mount", "umount2",
    "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "open_tree_attr", "swapon", "swapoff", "reboot", "acct", "quotactl",
    "quotactl_fd",
)  # fmt: skip
#: (call, the indices of its user-id arguments, those of its group-id arguments): the calls
#: that change an owner or this process's identity. An id other than the sandbox's own
#: (or -1, "unchanged") is refused with ``EPERM``, what CPython's code (tarfile, shutil,
#: the tests) expects of a refused identity change: in a user namespace that maps one id
#: (bwrap, unshare) the kernel's answer is ``EINVAL`` (the id does not exist there), and
#: without the capability it is ``EPERM`` already.
IDENTITY = (
    ("chown", (1,), (2,)), ("fchown", (1,), (2,)), ("lchown", (1,), (2,)),
    ("fchownat", (2,), (3,)), ("setuid", (0,), ()), ("setgid", (), (0,)),
    ("setreuid", (0, 1), ()), ("setregid", (), (0, 1)), ("setresuid", (0, 1, 2), ()),
    ("setresgid", (), (0, 1, 2)),
)  # fmt: skip
KEYCTL_JOIN_SESSION_KEYRING = 1
_TRACE = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd")
_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")
SYSV_IPC = ("shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
            "msgget", "msgsnd", "msgrcv", "msgctl")  # fmt: skip
XATTR_SET = ("setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
             "fremovexattr", "setxattrat", "removexattrat")  # fmt: skip


class Rules:
    """What a provider adds to the common refusals (a plain class: no dataclasses import in
    the sandbox). Defaults suit a provider with its own network and IPC namespaces.

    ``ip``: ``"any"`` (namespaces confine the network), ``"tcp"`` or ``"tcp+udp"`` (Landlock:
    only the protocols its rules or the Python layer judge; ICMP, SCTP, MPTCP refused with
    ``EACCES``). ``unix``: ``socket(AF_UNIX)`` allowed (``socketpair`` always is).
    ``sysv_ipc``: SysV message queues, semaphores and shared memory allowed. ``xattr``:
    setting and removing extended attributes allowed. ``namespaces``: making or joining
    namespaces allowed. By default they are refused under every provider: a nested user
    namespace gives the program every capability over new namespaces, kernel surface no
    profile needs (under Landlock, with nothing else in the way, it succeeded); ``clone3``
    then fails with ``ENOSYS`` (its flags sit behind a pointer: the C library falls back to
    ``clone``, whose flags the filter reads). firejail's child allows them only while
    firejail's own ``--restrict-namespaces`` refuses them.
    """

    __slots__ = ("ids", "ip", "namespaces", "sysv_ipc", "unix", "xattr")

    def __init__(
        self,
        *,
        ip: str = "any",
        unix: bool = True,
        sysv_ipc: bool = True,
        xattr: bool = True,
        namespaces: bool = False,
        ids: tuple[int, int] | list[int] | None = None,
    ) -> None:
        if ip not in ("any", "tcp", "tcp+udp"):
            raise ValueError(f"unknown ip rule {ip!r}")
        self.ip, self.unix, self.sysv_ipc = ip, unix, sysv_ipc
        self.xattr, self.namespaces = xattr, namespaces
        #: The (uid, gid) the sandbox runs as (:data:`IDENTITY`); None: the ids of the
        #: process that makes the filter (the sandbox's own, also for bwrap, which keeps
        #: the caller's uid and loads the filter pysb made).
        self.ids = None if ids is None else (int(ids[0]), int(ids[1]))

    def own_ids(self) -> tuple[int, int]:
        return self.ids if self.ids is not None else (os.getuid(), os.getgid())

    def key(self) -> tuple[object, ...]:
        return (self.ip, self.unix, self.sysv_ipc, self.xattr, self.namespaces, self.own_ids())

    def to_dict(self) -> dict[str, object]:
        """JSON-safe keyword arguments (a child set-up's ``args``)."""
        return {s: getattr(self, s) for s in self.__slots__}


def _native(machine: str, rules: Rules) -> list[tuple[str | int, ...]]:
    """The labelled program: ``("ld", off)``, ``("jeq"|"jset"|"jge", k, label)``,
    ``("and", k)``, ``("ret", value)``, ``("label", name)``."""
    nr = SYSCALLS[machine]
    eperm = ret_errno(errno.EPERM)
    prog: list[tuple[str | int, ...]] = [
        ("ld", OFF_ARCH),
        ("jeq", ARCHES[machine], "native"),
        ("ret", ret_errno(errno.ENOSYS)),  # a foreign ABI: nothing at all
        ("label", "native"),
        ("ld", OFF_NR),
    ]
    # First (native numbers only: an x32 call passes it): every jump stays short.
    prog += _identity_block(nr, rules)
    if machine == "x86_64":
        prog.append(("jge", _X32, "enosys"))  # x32: foreign too
    prog += [
        ("jeq", nr["socket"], "socket"),
        ("jeq", nr["ioctl"], "ioctl"),
        ("jeq", nr["sendto"], "flags3"),
        ("jeq", nr["sendmmsg"], "flags3"),
        ("jeq", nr["sendmsg"], "flags2"),
        ("jeq", nr["setsockopt"], "sockopt"),
    ]
    prog += [("jeq", nr[name], "eperm") for name in (*_TRACE, *_URING, *KERNEL)]
    prog.append(("jeq", nr["keyctl"], "keyctl"))
    # openat2's mode sits in a struct behind a pointer: ENOSYS, callers fall back to openat.
    prog.append(("jeq", nr["openat2"], "enosys"))
    prog += [("jeq", nr[name], f"mode_{name}") for name, _, _ in SET_MODE if name in nr]
    if not rules.sysv_ipc:
        prog += [("jeq", nr[name], "eperm") for name in SYSV_IPC]
    if not rules.xattr:
        prog += [("jeq", nr[name], "enotsup") for name in XATTR_SET]
    if not rules.namespaces:
        prog += [
            ("jeq", nr["clone"], "clone"),
            ("jeq", nr["unshare"], "unshare"),
            ("jeq", nr["setns"], "setns"),
            ("jeq", nr["clone3"], "enosys"),  # ENOSYS: the C library falls back to clone
        ]
    prog += [
        ("ret", RET_ALLOW),
        ("label", "flags3"),
        ("ld", off_arg(3)),
        ("jset", MSG_FASTOPEN, "eperm"),
        ("ret", RET_ALLOW),
        ("label", "flags2"),
        ("ld", off_arg(2)),
        ("jset", MSG_FASTOPEN, "eperm"),
        ("ret", RET_ALLOW),
        ("label", "sockopt"),
        ("ld", off_arg(1)),
        ("jeq", IPPROTO_TCP, "sockopt_tcp"),
        ("ret", RET_ALLOW),
        ("label", "sockopt_tcp"),
        ("ld", off_arg(2)),
        ("jeq", TCP_FASTOPEN_CONNECT, "eperm"),
        ("ret", RET_ALLOW),
        ("label", "ioctl"),
        ("ld", off_arg(1)),
        ("jeq", TIOCSTI, "eperm"),
        ("jeq", TIOCLINUX, "eperm"),
        ("ret", RET_ALLOW),
        # keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL) only: a new, empty, anonymous keyring.
        ("label", "keyctl"),
        ("ld", off_arg(0)),
        ("jeq", KEYCTL_JOIN_SESSION_KEYRING, "keyctl_join"),
        ("ret", eperm),
        ("label", "keyctl_join"),
        ("ld", off_arg(1)),
        ("jeq", 0, "keyctl_join_low"),
        ("ret", eperm),
        ("label", "keyctl_join_low"),
        ("ld", off_arg(1) + 4),
        ("jeq", 0, "allow"),
        ("ret", eperm),
        ("label", "allow"),
        ("ret", RET_ALLOW),
    ]
    for name, mode_arg, flags_arg in SET_MODE:
        if name not in nr:
            continue
        prog.append(("label", f"mode_{name}"))
        if flags_arg is not None:
            prog += [("ld", off_arg(flags_arg)), ("jset", O_CREAT_TMPFILE, f"mode_{name}_used")]
            prog += [("ret", RET_ALLOW), ("label", f"mode_{name}_used")]
        prog += [("ld", off_arg(mode_arg)), ("jset", S_ISUID_ISGID, "eperm"), ("ret", RET_ALLOW)]
    prog += _socket_block(rules)
    if not rules.namespaces:
        prog += [
            ("label", "clone"),
            ("ld", off_arg(0)),
            ("jset", CLONE_NS_FLAGS, "eperm"),
            ("ret", RET_ALLOW),
            ("label", "unshare"),
            ("ld", off_arg(0)),
            ("jset", NS_FLAGS, "eperm"),
            ("ret", RET_ALLOW),
            ("label", "setns"),  # nstype 0 means "any namespace": refused too
            ("ld", off_arg(1)),
            ("jeq", 0, "eperm"),
            ("jset", NS_FLAGS, "eperm"),
            ("ret", RET_ALLOW),
        ]
    prog += [
        ("label", "eperm"),
        ("ret", eperm),
        ("label", "enotsup"),
        ("ret", ret_errno(errno.EOPNOTSUPP)),
        ("label", "enosys"),
        ("ret", ret_errno(errno.ENOSYS)),
    ]
    return prog


def _identity_block(nr: dict[str, int], rules: Rules) -> list[tuple[str | int, ...]]:
    """The :data:`IDENTITY` calls: each id argument is -1 or the sandbox's own, or EPERM.
    Entered with the call's number loaded; every other call goes on past the block with
    it loaded again (jumps reach 255 instructions: the block stays at the top)."""
    uid, gid = rules.own_ids()
    calls = [name for name, _, _ in IDENTITY if name in nr]
    block: list[tuple[str | int, ...]] = [("jeq", nr[name], f"ids_{name}") for name in calls]
    block.append(("jge", 0, "ids_done"))  # always: not one of them
    for name, uids, gids in IDENTITY:
        if name not in nr:
            continue
        block.append(("label", f"ids_{name}"))
        for n, (arg, own) in enumerate([(a, uid) for a in uids] + [(a, gid) for a in gids]):
            ok = f"ids_{name}_{n}"
            block += [
                ("ld", off_arg(arg)),
                ("jeq", 0xFFFFFFFF, ok),  # (uid_t) -1: unchanged
                ("jeq", own & 0xFFFFFFFF, ok),
                ("ret", ret_errno(errno.EPERM)),
                ("label", ok),
            ]
        block.append(("ret", RET_ALLOW))
    return [*block, ("label", "ids_done"), ("ld", OFF_NR)]


def _socket_block(rules: Rules) -> list[tuple[str | int, ...]]:
    """``socket(domain, type, protocol)``: the family allow-list, then Landlock's IP rules."""
    eacces = ret_errno(errno.EACCES)
    ip_target = "allow_socket" if rules.ip == "any" else "ip"
    block: list[tuple[str | int, ...]] = [
        ("label", "socket"),
        ("ld", off_arg(0)),
        ("jeq", AF_INET, ip_target),
        ("jeq", AF_INET6, ip_target),
        ("jeq", AF_NETLINK, "netlink"),
        ("jeq", AF_UNIX, "allow_socket" if rules.unix else "eacces"),
        ("ret", ret_errno(errno.EAFNOSUPPORT)),
        ("label", "eacces"),
        ("ret", eacces),
        # Netlink: NETLINK_ROUTE only (the C library's address queries; changes need
        # CAP_NET_ADMIN). sock_diag would list the host's sockets under Landlock, uevents
        # and audit are host-wide: the kernel's own answer for an unknown protocol.
        ("label", "netlink"),
        ("ld", off_arg(2)),
        ("jeq", NETLINK_ROUTE, "allow_socket"),
        ("ret", ret_errno(errno.EPROTONOSUPPORT)),
    ]
    if rules.ip != "any":
        block += [
            ("label", "ip"),
            ("ld", off_arg(1)),
            ("and", 0xF),  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
            ("jeq", SOCK_STREAM, "ip_stream"),
        ]
        if rules.ip == "tcp+udp":
            block += [
                ("jeq", SOCK_DGRAM, "ip_dgram"),
                ("ret", eacces),
                ("label", "ip_dgram"),
                ("ld", off_arg(2)),
                ("jeq", 0, "allow_socket"),
                ("jeq", IPPROTO_UDP, "allow_socket"),  # ICMP "ping" sockets: refused
            ]
        block += [
            ("ret", eacces),
            ("label", "ip_stream"),
            ("ld", off_arg(2)),
            ("jeq", 0, "allow_socket"),
            ("jeq", IPPROTO_TCP, "allow_socket"),  # SCTP, MPTCP: refused
            ("ret", eacces),
        ]
    block += [("label", "allow_socket"), ("ret", RET_ALLOW)]
    return block


def resolve(prog: list[tuple[str | int, ...]]) -> list[tuple[int, int, int, int]]:
    """Labels to relative jumps: ``(code, jt, jf, k)`` instructions (this filter's, and the
    learning run's watch filter's: :mod:`pysb_core.launch.execwatch.child`)."""
    labels: dict[str, int] = {}
    pos = 0
    for ins in prog:
        if ins[0] == "label":
            labels[str(ins[1])] = pos
        else:
            pos += 1
    codes = {"jeq": _JEQ_K, "jset": _JSET_K, "jge": _JGE_K}
    out: list[tuple[int, int, int, int]] = []
    for ins in prog:
        op = ins[0]
        if op == "label":
            continue
        if op == "ld":
            out.append((_LD_W_ABS, 0, 0, int(ins[1])))
        elif op == "and":
            out.append((_AND_K, 0, 0, int(ins[1])))
        elif op == "ret":
            out.append((_RET_K, 0, 0, int(ins[1])))
        else:  # jump to the label when true, fall through otherwise
            jt = labels[str(ins[2])] - (len(out) + 1)
            if not 0 <= jt <= 255:
                raise ValueError("seccomp jump out of range")
            out.append((codes[str(op)], jt, 0, int(ins[1])))
    return out


def covers(machine: str | None = None) -> bool:
    """Whether there is a filter for ``machine`` (default: this one)."""
    return (machine or os.uname().machine) in ARCHES


def program(
    machine: str | None = None, rules: Rules | None = None
) -> list[tuple[int, int, int, int]] | None:
    """The ``(code, jt, jf, k)`` instructions for ``machine`` (default: this one), or
    ``None`` where it is not covered."""
    machine = machine or os.uname().machine
    if machine not in ARCHES:
        return None
    return resolve(_native(machine, rules or Rules()))


#: (machine, rules key) -> bytes; a plain dict: no functools in the sandboxed child.
_BYTES: dict[tuple[object, ...], bytes | None] = {}


def filter_bytes(machine: str | None = None, rules: Rules | None = None) -> bytes | None:
    """The filter as ``struct sock_filter[]`` (what ``bwrap --seccomp FD`` reads)."""
    rules = rules or Rules()
    key = (machine, *rules.key())
    if key not in _BYTES:
        prog = program(machine, rules)
        _BYTES[key] = None if prog is None else b"".join(pack(*ins) for ins in prog)
    return _BYTES[key]


def pack(code: int, jt: int, jf: int, k: int) -> bytes:
    """One ``struct sock_filter`` (u16 code, u8 jt, u8 jf, u32 k; native byte order),
    without the struct module (the sandboxed child has not loaded it)."""
    order = sys.byteorder
    return code.to_bytes(2, order) + bytes((jt, jf)) + k.to_bytes(4, order)


def run(prog: list[tuple[int, int, int, int]], nr: int, arch: int, *args: int, ip: int = 0) -> int:
    """Interpret ``prog`` for one system call (unit tests): the filter's return value."""
    acc = pc = 0
    values = [ip, *(a & 0xFFFFFFFFFFFFFFFF for a in (*args, *[0] * (6 - len(args))))]
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == _LD_W_ABS:
            if k in (OFF_NR, OFF_ARCH):
                acc = nr if k == OFF_NR else arch
            else:  # the instruction pointer's or an argument's low (little-endian: first)
                acc = (values[(k - 8) // 8] >> (32 if k % 8 else 0)) & 0xFFFFFFFF  # or high bits
        elif code == _AND_K:
            acc &= k
        elif code in (_JEQ_K, _JGE_K, _JSET_K):
            hit = acc == k if code == _JEQ_K else acc >= k if code == _JGE_K else acc & k
            pc += jt if hit else jf
        elif code == _RET_K:
            return k
        else:
            raise ValueError(f"unknown opcode {code:#x}")


def install(rules: Rules | None = None) -> bool:
    """Load the filter into this process (every thread: ``TSYNC``); ``False`` where this
    machine is not covered. ``no_new_privs`` must already hold."""
    machine = os.uname().machine
    raw = filter_bytes(machine, rules)
    if raw is None:
        return False
    program_buf, program_address = cfuncs.buffer(raw)
    # struct sock_fprog: unsigned short len, padding, struct sock_filter *filter (LP64).
    order = sys.byteorder
    fprog = (len(raw) // 8).to_bytes(2, order) + bytes(6) + program_address.to_bytes(8, order)
    fprog_buf, fprog_address = cfuncs.buffer(fprog)
    rc = _syscall(
        cfuncs.Long(SYS_SECCOMP[machine]),
        cfuncs.Long(_SECCOMP_SET_MODE_FILTER),
        cfuncs.Long(_SECCOMP_FILTER_FLAG_TSYNC),
        cfuncs.Pointer(fprog_address),
    )
    del program_buf, fprog_buf  # referenced until the kernel has copied the program
    if rc != 0:
        err = cfuncs.get_errno()
        raise OSError(err, f"cannot load the sandbox's seccomp filter: {os.strerror(err)}")
    return True


def setup(**rules: object) -> None:
    """A child set-up (:class:`pysb_core.plan.ChildSetup`): set ``no_new_privs`` and load the
    filter; a machine without a filter is an error (fail closed: the provider checked
    :func:`covers` before asking)."""
    zero = cfuncs.Long(0)
    if _prctl(cfuncs.Long(38), cfuncs.Long(1), zero, zero, zero) != 0:  # PR_SET_NO_NEW_PRIVS
        err = cfuncs.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    if not install(Rules(**rules)):  # type: ignore[arg-type]
        raise OSError(f"no seccomp filter for {os.uname().machine}")


def child_setup(rules: Rules | None = None) -> ChildSetup | None:
    """The child set-up that loads the filter (for a provider that starts the interpreter
    itself: unshare, qemu), or ``None`` where this machine has no filter."""
    if not covers():
        return None
    from pysb_core.plan import ChildSetup

    return ChildSetup("pysb_core.linux.seccomp", "setup", (rules or Rules()).to_dict())


def describe() -> str:
    """One line for ``pysb check``: what the common filter refuses on this machine."""
    if not covers():
        return f"seccomp: none ({os.uname().machine} has no filter table)"
    return (
        "seccomp: ptrace, io_uring, bpf, userfaultfd, perf events, keys, file handles, "
        "mounts, modules, new namespaces, TCP Fast Open, set-uid/set-gid modes, changes to "
        "other user or group ids (EPERM), socket "
        "families but unix/inet/inet6/netlink-route, TIOCSTI, 32-bit system calls: refused"
    )
