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

With ``namespaces=True`` the same filter also refuses what firejail's
``--restrict-namespaces`` refuses (firejail 0.9.72 compiles that filter with two helper
processes at every start): ``clone`` and ``unshare`` with any ``CLONE_NEW*`` flag and
``setns`` into any namespace (``EPERM``), and ``clone3``, whose flags sit behind a pointer
seccomp cannot read, with ``ENOSYS`` (the C library then falls back to ``clone``).
"""

from __future__ import annotations

import errno
import os
import sys

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_EPERM = 0x00050000 | errno.EPERM
RET_ENOSYS = 0x00050000 | errno.ENOSYS

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
#: ``struct seccomp_data`` offsets: nr, arch, low 32 bits of args[0] and args[1]
#: (little-endian).
OFF_NR, OFF_ARCH, OFF_ARG0, OFF_ARG1 = 0, 4, 16, 24

#: machine -> [(AUDIT_ARCH_*, [ioctl syscall numbers under that ABI])]
ABIS: dict[str, list[tuple[int, list[int]]]] = {
    "x86_64": [(0xC000003E, [16, 0x40000000 | 514]), (0x40000003, [54])],
    "aarch64": [(0xC00000B7, [29]), (0x40000028, [54])],
}
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
#: For ``clone``, without ``CLONE_NEWTIME``: 0x80 lies in its exit-signal byte there (a
#: time namespace is only made by ``unshare``).
CLONE_NS_FLAGS = NS_FLAGS & ~0x80
_X32 = 0x40000000
#: machine -> per ABI of :data:`ABIS`, in the same order: syscall numbers of
#: ``(clone, unshare, setns, clone3)`` (x32's with the x32 bit, next to x86_64's).
NS_SYSCALLS: dict[str, list[tuple[list[int], list[int], list[int], list[int]]]] = {
    "x86_64": [
        ([56, _X32 | 56], [272, _X32 | 272], [308, _X32 | 308], [435, _X32 | 435]),
        ([120], [310], [346], [435]),
    ],
    "aarch64": [([220], [97], [268], [435]), ([120], [337], [375], [435])],
}
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1


def _assemble(
    abis: list[tuple[int, list[int]]],
    ns: list[tuple[list[int], list[int], list[int], list[int]]] | None = None,
) -> list[tuple[int, int, int, int]]:
    """Return ``(code, jt, jf, k)`` instructions; labels resolved to relative jumps.

    ``ns``: the namespace syscalls per ABI (:data:`NS_SYSCALLS`), or ``None`` for the
    terminal rules alone."""
    prog: list[tuple[str | int, ...]] = [("ld", OFF_ARCH)]
    for i, (arch, _) in enumerate(abis):
        prog.append(("jeq", arch, f"abi{i}"))
    prog.append(("ret", RET_ALLOW))
    for i, (_, numbers) in enumerate(abis):
        prog.append(("label", f"abi{i}"))
        prog.append(("ld", OFF_NR))
        for nr in numbers:
            prog.append(("jeq", nr, "check"))
        if ns is not None:
            for label, nrs in zip(("clone", "unshare", "setns", "clone3"), ns[i], strict=True):
                prog += [("jeq", nr, label) for nr in nrs]
        prog.append(("ret", RET_ALLOW))
    prog += [
        ("label", "check"),
        ("ld", OFF_ARG1),
        ("jeq", TIOCSTI, "deny"),
        ("jeq", TIOCLINUX, "deny"),
        ("ret", RET_ALLOW),
    ]
    if ns is not None:
        prog += [
            ("label", "clone"),
            ("ld", OFF_ARG0),
            ("jset", CLONE_NS_FLAGS, "deny"),
            ("ret", RET_ALLOW),
            ("label", "unshare"),
            ("ld", OFF_ARG0),
            ("jset", NS_FLAGS, "deny"),
            ("ret", RET_ALLOW),
            ("label", "setns"),  # nstype 0 means "any namespace": refused too
            ("ld", OFF_ARG1),
            ("jeq", 0, "deny"),
            ("jset", NS_FLAGS, "deny"),
            ("ret", RET_ALLOW),
            ("label", "clone3"),
            ("ret", RET_ENOSYS),
        ]
    prog += [
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
        else:  # jeq/jset k -> label when equal / any bit set, fall through otherwise
            jt = labels[str(ins[2])] - (len(out) + 1)
            if not 0 <= jt <= 255:
                raise ValueError("seccomp jump out of range")
            out.append((_JEQ_K if op == "jeq" else _JSET_K, jt, 0, int(ins[1])))
    return out


def program(
    machine: str | None = None, *, namespaces: bool = False
) -> list[tuple[int, int, int, int]] | None:
    """The instructions for ``machine`` (default: this one), or ``None`` if not covered;
    ``namespaces``: also refuse making or joining namespaces (see the module's text)."""
    machine = machine or os.uname().machine
    abis = ABIS.get(machine)
    if not abis:
        return None
    return _assemble(abis, NS_SYSCALLS[machine] if namespaces else None)


def covers(machine: str | None = None) -> bool:
    """Whether this module has a filter for ``machine`` (default: this one)."""
    return (machine or os.uname().machine) in ABIS


#: (machine, namespaces) -> bytes; a plain dict: no functools in the sandboxed child.
_BYTES: dict[tuple[str | None, bool], bytes | None] = {}


def filter_bytes(machine: str | None = None, *, namespaces: bool = False) -> bytes | None:
    """The filter as ``struct sock_filter[]`` (what ``bwrap --seccomp`` reads)."""
    key = (machine, namespaces)
    if key not in _BYTES:
        prog = program(machine, namespaces=namespaces)
        _BYTES[key] = None if prog is None else b"".join(_pack(*ins) for ins in prog)
    return _BYTES[key]


def _pack(code: int, jt: int, jf: int, k: int) -> bytes:
    """One ``struct sock_filter`` (u16 code, u8 jt, u8 jf, u32 k; native byte order),
    without the struct module (the sandboxed child has not loaded it)."""
    order = sys.byteorder
    return code.to_bytes(2, order) + bytes((jt, jf)) + k.to_bytes(4, order)


def run(prog: list[tuple[int, int, int, int]], data: tuple[int, ...]) -> int:
    """Interpret ``prog`` for ``(nr, arch, arg1)`` or ``(nr, arch, arg1, arg0)`` (for
    tests): the return value."""
    nr, arch, arg1, *rest = data
    arg0 = rest[0] if rest else 0
    mem = {OFF_NR: nr, OFF_ARCH: arch, OFF_ARG0: arg0 & 0xFFFFFFFF, OFF_ARG1: arg1 & 0xFFFFFFFF}
    acc = pc = 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == _LD_W_ABS:
            acc = mem[k]
            pc += 1
        elif code == _JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == _JSET_K:
            pc += 1 + (jt if acc & k else jf)
        elif code == _RET_K:
            return k
        else:
            raise ValueError(f"unknown opcode {code:#x}")


def install(*, namespaces: bool = False) -> bool:
    """Load the filter into this process (all threads, ``TSYNC``); ``False`` when this
    machine is not covered. ``no_new_privs`` must already hold."""
    from pysb_core import cfuncs

    machine = os.uname().machine
    raw = filter_bytes(machine, namespaces=namespaces)
    if raw is None:
        return False
    program_buf, program_address = cfuncs.buffer(raw)
    # struct sock_fprog: unsigned short len, padding, struct sock_filter *filter (LP64).
    order = sys.byteorder
    fprog = (len(raw) // 8).to_bytes(2, order) + bytes(6) + program_address.to_bytes(8, order)
    fprog_buf, fprog_address = cfuncs.buffer(fprog)
    syscall = cfuncs.function("syscall", cfuncs.Long)
    rc = syscall(
        cfuncs.Long(_SYS_SECCOMP[machine]),
        cfuncs.Long(_SECCOMP_SET_MODE_FILTER),
        cfuncs.Long(_SECCOMP_FILTER_FLAG_TSYNC),
        cfuncs.Pointer(fprog_address),
    )
    del program_buf, fprog_buf  # referenced until the kernel has copied the program
    if rc != 0:
        err = cfuncs.get_errno()
        name = errno.errorcode.get(err, str(err))
        what = "terminal-injection" + (" and namespace" if namespaces else "")
        raise OSError(err, f"cannot load the {what} seccomp filter: {name}")
    return True
