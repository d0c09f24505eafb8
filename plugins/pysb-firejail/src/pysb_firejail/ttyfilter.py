"""A seccomp filter against terminal injection, installed inside the sandbox (stdlib only).

Under firejail the program stays in the caller's session, so the terminal pysb was
started from is its controlling terminal, and ``ioctl(TIOCSTI)`` would push keystrokes
into the user's shell (``TIOCLINUX`` does the same on a virtual console; Linux 6.1 has no
``dev.tty.legacy_tiocsti`` switch). firejail's ``--seccomp`` filters by syscall only, so
it cannot refuse one ``ioctl`` request. This filter does: the child set-up loads it into
the sandboxed interpreter (firejail's ``--nonewprivs`` already holds, which seccomp
requires) with ``SECCOMP_FILTER_FLAG_TSYNC`` so that every thread gets it; every process
the program starts inherits it. It refuses exactly those two requests with ``EPERM``, for
the native ABI and the 32-bit one a 64-bit process can also call (and x32 on x86_64), and
allows everything else. Only little-endian x86_64 and aarch64 are covered; elsewhere
:func:`program` returns ``None`` and nothing is loaded (docs: residual weaknesses).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
#: machine -> (AUDIT_ARCH value, ioctl syscall numbers under that ABI)
_ABIS = {
    "x86_64": ((0xC000003E, (16, 0x40000000 | 514)), (0x40000003, (54,))),
    "aarch64": ((0xC00000B7, (29,)), (0x40000028, (54,))),
}
# classic BPF opcodes
_LD_ABS_W = 0x20
_JEQ_K = 0x15
_RET_K = 0x06
# struct seccomp_data: nr (0), arch (4), instruction_pointer (8), args[6] (16...)
_NR, _ARCH, _ARG1_LOW = 0, 4, 24


def program(machine: str | None = None) -> list[tuple[int, int, int, int]] | None:
    """The filter as ``(code, jt, jf, k)`` instructions, or ``None`` if not covered."""
    abis = _ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    # Symbolic first: ("ld", offset) | ("jeq", value, label) | ("ret", value) | ("at", label)
    sym: list[tuple[object, ...]] = [("ld", _ARCH)]
    sym += [("jeq", arch, f"abi{i}") for i, (arch, _) in enumerate(abis)]
    sym.append(("ret", _ALLOW))
    for i, (_, numbers) in enumerate(abis):
        sym += [("at", f"abi{i}"), ("ld", _NR)]
        sym += [("jeq", nr, "ioctl") for nr in numbers]
        sym.append(("ret", _ALLOW))
    sym += [
        ("at", "ioctl"),
        ("ld", _ARG1_LOW),
        ("jeq", TIOCSTI, "deny"),
        ("jeq", TIOCLINUX, "deny"),
        ("ret", _ALLOW),
        ("at", "deny"),
        ("ret", _ERRNO | errno.EPERM),
    ]
    labels: dict[object, int] = {}
    count = 0
    for entry in sym:
        if entry[0] == "at":
            labels[entry[1]] = count
        else:
            count += 1
    out: list[tuple[int, int, int, int]] = []
    for entry in sym:
        op = entry[0]
        if op == "ld":
            out.append((_LD_ABS_W, 0, 0, int(entry[1])))  # type: ignore[call-overload]
        elif op == "ret":
            out.append((_RET_K, 0, 0, int(entry[1])))  # type: ignore[call-overload]
        elif op == "jeq":  # taken: to the label; not taken: the next instruction
            jt = labels[entry[2]] - (len(out) + 1)
            if not 0 <= jt <= 255:
                raise ValueError("seccomp jump out of range")
            out.append((_JEQ_K, jt, 0, int(entry[1])))  # type: ignore[call-overload]
    return out


def run(prog: list[tuple[int, int, int, int]], data: tuple[int, int, int]) -> int:
    """Interpret ``prog`` for ``(nr, arch, arg1)`` (for the tests): the return value."""
    nr, arch, arg1 = data
    mem = {_NR: nr, _ARCH: arch, _ARG1_LOW: arg1 & 0xFFFFFFFF}
    acc = 0
    pc = 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == _LD_ABS_W:
            acc = mem[k]
            pc += 1
        elif code == _JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == _RET_K:
            return k
        else:
            raise ValueError(f"unknown opcode {code:#x}")


def install() -> bool:
    """Load the filter into this process (all threads); ``False`` when not covered here."""
    machine = platform.machine()
    prog = program(machine)
    if prog is None:
        return False
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
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
