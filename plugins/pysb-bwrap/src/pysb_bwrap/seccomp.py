"""A tiny seccomp filter (classic BPF, for ``bwrap --seccomp FD``): no terminal injection.

An interactive run keeps the terminal's session (``--new-session`` would break job
control), so the program could push keystrokes into the user's shell with the
``TIOCSTI`` ioctl (and, on a virtual console, ``TIOCLINUX``) -- Linux 6.1 has no
``dev.tty.legacy_tiocsti`` switch. The filter makes exactly those two ioctls fail with
``EPERM``, for the native ABI and for the 32-bit one (``int 0x80``) and x32 that a 64-bit
process can also call. Everything else is allowed: bwrap's namespaces do the confining.

The program is assembled here from a dozen instructions, so it can be read and tested
without libseccomp; ``None`` on an architecture not listed (the caller then keeps
``--new-session``).
"""

from __future__ import annotations

import errno
import functools
import platform
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


def filter_program(machine: str | None = None) -> list[tuple[int, int, int, int]] | None:
    """The instructions for ``machine`` (default: this one), or ``None`` if unsupported."""
    abis = ABIS.get(machine or platform.machine())
    return _assemble(abis) if abis else None


@functools.lru_cache(maxsize=4)
def filter_bytes(machine: str | None = None) -> bytes | None:
    """The filter as ``struct sock_filter[]``, as ``bwrap --seccomp`` reads it."""
    prog = filter_program(machine)
    if prog is None:
        return None
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)
