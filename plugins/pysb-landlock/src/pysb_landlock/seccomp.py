"""A small seccomp filter that closes what Landlock leaves open around its TCP rules.

Landlock's network rules cover TCP ``bind``/``connect`` and nothing else, so this filter
(installed right before ``landlock_restrict_self``) refuses with ``EACCES``:

- IPv4/IPv6 sockets that are neither TCP nor, when a rule allows UDP, UDP: SCTP, MPTCP,
  ICMP "ping" sockets and the like would otherwise reach any host and port;
- UDP sockets when no network rule allows UDP (the default), so that default-deny holds
  for UDP too at the OS layer (Landlock cannot filter UDP by port; a rule allowing some UDP
  therefore opens all of it here, and the Python layer narrows it);
- ``io_uring_setup``: io_uring creates sockets without the ``socket`` system call;
- ``ioctl(TIOCSTI)`` / ``ioctl(TIOCLINUX)``: typing into the terminal the sandbox shares
  with the user's shell (Landlock does not re-check inherited file descriptors).

A foreign system-call ABI (i386 or x32 calls from an x86_64 process) is refused as a whole,
so the numbers above cannot be dodged. Machines other than x86_64 and aarch64 get no
filter (said in ``describe``); the Landlock ruleset still applies.
"""

from __future__ import annotations

import ctypes
import errno
import os

from pysb_landlock import _libc

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

# BPF opcodes (linux/bpf_common.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# struct seccomp_data offsets
_OFF_NR = 0
_OFF_ARCH = 4


def _arg_lo(n: int) -> int:
    return 16 + 8 * n  # low 32 bits of args[n] (little-endian machines only)


_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_SOCK_STREAM, _SOCK_DGRAM = 1, 2
_IPPROTO_TCP, _IPPROTO_UDP = 6, 17
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C

#: machine -> (AUDIT_ARCH, socket, ioctl, io_uring_setup, x32 bit or 0)
_ARCHES = {
    "x86_64": (0xC000003E, 41, 16, 425, 0x40000000),
    "aarch64": (0xC00000B7, 198, 29, 425, 0),
}


def supported() -> bool:
    return os.uname().machine in _ARCHES


class _Insn(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def build(
    machine: str, *, allow_udp: bool, allow_unix: bool = False
) -> list[tuple[int, int, int, int]]:
    """The filter as ``(code, jt, jf, k)`` tuples (pure: unit-testable with an emulator)."""
    audit_arch, nr_socket, nr_ioctl, nr_uring, x32 = _ARCHES[machine]
    deny = (_RET_K, 0, 0, _RET_ERRNO | errno.EACCES)
    allow = (_RET_K, 0, 0, _RET_ALLOW)
    prog: list[tuple[int, int, int, int]] = []
    prog += [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 1, 0, audit_arch),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),  # a foreign ABI: nothing at all
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if x32:
        prog += [(_JGE_K, 0, 1, x32), (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    # Jump offsets count from the next instruction; the index of each line is on its right.
    dgram = (_JEQ_K, 1, 0, _SOCK_DGRAM) if allow_udp else (_JEQ_K, 0, 0, 0)  # else: deny
    socket_block = [
        (_LD_W_ABS, 0, 0, _arg_lo(0)),  # 0  domain
        (_JEQ_K, 2, 0, _AF_INET),  # 1
        (_JEQ_K, 1, 0, _AF_INET6),  # 2
        # 3  AF_UNIX: refused (-> 8) unless allowed: Landlock does not mediate connect() to a
        # named socket, so any host socket (docker.sock, D-Bus) would be reachable by path.
        # socketpair() is another system call: inherited pairs and new pairs still work.
        # AF_NETLINK and the rest: allowed (-> 16; the dropped capabilities gate them).
        allow if allow_unix else (_JEQ_K, 4, 12, _AF_UNIX),
        (_LD_W_ABS, 0, 0, _arg_lo(1)),  # 4  type
        (_AND_K, 0, 0, 0xF),  # 5  without SOCK_NONBLOCK / SOCK_CLOEXEC
        (_JEQ_K, 5, 0, _SOCK_STREAM),  # 6  -> 12
        dgram,  # 7  -> 9, or -> 8
        deny,  # 8
        (_LD_W_ABS, 0, 0, _arg_lo(2)),  # 9  datagram protocol
        (_JEQ_K, 5, 0, 0),  # 10 -> 16
        (_JEQ_K, 4, 3, _IPPROTO_UDP),  # 11 -> 16 / 15 (ICMP ping sockets are denied)
        (_LD_W_ABS, 0, 0, _arg_lo(2)),  # 12 stream protocol
        (_JEQ_K, 2, 0, 0),  # 13 -> 16
        (_JEQ_K, 1, 0, _IPPROTO_TCP),  # 14 -> 16 (SCTP, MPTCP: denied)
        deny,  # 15
        allow,  # 16
    ]
    ioctl_block = [
        (_LD_W_ABS, 0, 0, _arg_lo(1)),  # request
        (_JEQ_K, 1, 0, _TIOCSTI),
        (_JEQ_K, 0, 1, _TIOCLINUX),
        deny,
        allow,
    ]
    # nr dispatch: socket -> socket_block, ioctl -> ioctl_block, io_uring_setup -> deny
    prog += [
        (_JEQ_K, 0, 1, nr_uring),
        deny,
        (_JEQ_K, 0, len(socket_block), nr_socket),
        *socket_block,
        (_JEQ_K, 0, len(ioctl_block), nr_ioctl),
        *ioctl_block,
        allow,
    ]
    return prog


def install(*, allow_udp: bool, allow_unix: bool = False) -> bool:
    """Install the filter on the calling thread (``PR_SET_NO_NEW_PRIVS`` must be set).
    Return False on machines without a table (nothing installed)."""
    machine = os.uname().machine
    if machine not in _ARCHES:
        return False
    insns = build(machine, allow_udp=allow_udp, allow_unix=allow_unix)
    arr = (_Insn * len(insns))(*(_Insn(*i) for i in insns))
    prog = _Prog(len(insns), ctypes.cast(arr, ctypes.POINTER(_Insn)))
    res = _libc.prctl(
        ctypes.c_int(_PR_SET_SECCOMP),
        ctypes.c_ulong(_SECCOMP_MODE_FILTER),
        ctypes.byref(prog),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
    if res != 0:
        err = _libc.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")
    return True
