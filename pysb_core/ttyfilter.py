"""A tiny seccomp filter against terminal injection, shared by the providers.

A program that keeps the caller's terminal (an interactive run, or a provider that stays in
the caller's session) could push keystrokes into the user's shell with ``ioctl(TIOCSTI)``
(and ``TIOCLINUX`` on a virtual console); Linux 6.1 has no ``dev.tty.legacy_tiocsti``
switch. This filter makes exactly those two requests fail with ``EPERM``, for the native
ABI and for the 32-bit one (and x32) that a 64-bit process can also call, and allows
everything else: the provider's namespaces or rulesets do the confining.

It is assembled here from a dozen classic-BPF instructions (readable and testable without
libseccomp): :func:`filter_bytes` for ``bwrap --seccomp FD``, :func:`install` to load it
into the calling process (firejail's child set-up). Only little-endian x86_64 and aarch64
are covered; elsewhere :func:`program` returns ``None``.
"""

from __future__ import annotations

import errno
import functools
import os
import struct

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_EPERM = 0x00050000 | errno.EPERM

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
#: ``struct seccomp_data`` offsets: nr, arch, low 32 bits of args[1] (little-endian).
OFF_NR, OFF_ARCH, OFF_ARG1 = 0, 4, 24

#: machine -> [(AUDIT_ARCH_*, [ioctl syscall numbers under that ABI])]
ABIS: dict[str, list[tuple[int, list[int]]]] = {
    "x86_64": [(0xC000003E, [16, 0x40000000 | 514]), (0x40000003, [54])],
    "aarch64": [(0xC00000B7, [29]), (0x40000028, [54])],
}
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1


def _assemble(abis: list[tuple[int, list[int]]]) -> list[tuple[int, int, int, int]]:
    """Return ``(code, jt, jf, k)`` instructions; labels resolved to relative jumps."""
    prog: list[tuple[str | int, ...]] = [("ld", OFF_ARCH)]
    for i, (arch, _) in enumerate(abis):
        prog.append(("jeq", arch, f"abi{i}"))
    prog.append(("ret", RET_ALLOW))
    for i, (_, numbers) in enumerate(abis):
        prog.append(("label", f"abi{i}"))
        prog.append(("ld", OFF_NR))
        for nr in numbers:
            prog.append(("jeq", nr, "check"))
        prog.append(("ret", RET_ALLOW))
    prog += [
        ("label", "check"),
        ("ld", OFF_ARG1),
        ("jeq", TIOCSTI, "deny"),
        ("jeq", TIOCLINUX, "deny"),
        ("ret", RET_ALLOW),
        ("label", "deny"),
        ("ret", RET_EPERM),
    ]
    labels: dict[str, int] = {}
    pos = 0
    for ins in prog:
        if ins[0] == "label":
            labels[str(ins[1])] = pos
        else:
            pos += 1
    out: list[tuple[int, int, int, int]] = []
    for ins in prog:
        op = ins[0]
        if op == "label":
            continue
        if op == "ld":
            out.append((_LD_W_ABS, 0, 0, int(ins[1])))
        elif op == "ret":
            out.append((_RET_K, 0, 0, int(ins[1])))
        else:  # jeq k -> label when equal, fall through otherwise
            jt = labels[str(ins[2])] - (len(out) + 1)
            if not 0 <= jt <= 255:
                raise ValueError("seccomp jump out of range")
            out.append((_JEQ_K, jt, 0, int(ins[1])))
    return out


def program(machine: str | None = None) -> list[tuple[int, int, int, int]] | None:
    """The instructions for ``machine`` (default: this one), or ``None`` if not covered."""
    abis = ABIS.get(machine or os.uname().machine)
    return _assemble(abis) if abis else None


@functools.lru_cache(maxsize=4)
def filter_bytes(machine: str | None = None) -> bytes | None:
    """The filter as ``struct sock_filter[]`` (what ``bwrap --seccomp`` reads)."""
    prog = program(machine)
    if prog is None:
        return None
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def run(prog: list[tuple[int, int, int, int]], data: tuple[int, int, int]) -> int:
    """Interpret ``prog`` for ``(nr, arch, arg1)`` (for tests): the return value."""
    nr, arch, arg1 = data
    mem = {OFF_NR: nr, OFF_ARCH: arch, OFF_ARG1: arg1 & 0xFFFFFFFF}
    acc = pc = 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == _LD_W_ABS:
            acc = mem[k]
            pc += 1
        elif code == _JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == _RET_K:
            return k
        else:
            raise ValueError(f"unknown opcode {code:#x}")


def install() -> bool:
    """Load the filter into this process (all threads, ``TSYNC``); ``False`` when this
    machine is not covered. ``no_new_privs`` must already hold."""
    import ctypes

    machine = os.uname().machine
    raw = filter_bytes(machine)
    if raw is None:
        return False
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(
        ctypes.c_long(_SYS_SECCOMP[machine]),
        ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if rc != 0:
        err = ctypes.get_errno()
        name = errno.errorcode.get(err, str(err))
        raise OSError(err, f"cannot load the terminal-injection seccomp filter: {name}")
    return True
