"""The learning run's watch filter, loaded in the sandboxed interpreter (a child set-up).

:func:`watch` runs after the guards are installed and before the program starts (so that
nothing of pysb's own start-up is handed over): it sets ``no_new_privs`` (what every
enforcing provider sets too, and what a filter needs without ``CAP_SYS_ADMIN``), loads a
filter that returns ``SECCOMP_RET_USER_NOTIF`` for the calls of :mod:`.calls`, and sends
the listener to pysb over the socket it was given (``SCM_RIGHTS``); then closes both, so
that the program holds neither. Where the kernel refuses the filter, pysb is told why and
the run goes on, watching nothing but what the guards see (said on stderr).

Only built-in modules: this runs in the sandboxed interpreter.
"""

from __future__ import annotations

import os
import sys

from pysb_core.launch.execwatch import calls
from pysb_core.linux import cfuncs, seccomp

_syscall = cfuncs.function("syscall", cfuncs.Long)
_prctl = cfuncs.function("prctl", cfuncs.Long)
_sendmsg = cfuncs.function("sendmsg", cfuncs.Long)
_personality = cfuncs.function("personality", cfuncs.Int)

RET_USER_NOTIF = 0x7FC00000
_SET_MODE_FILTER = 1
_FLAG_TSYNC, _FLAG_NEW_LISTENER, _FLAG_TSYNC_ESRCH = 1, 8, 16
_SOL_SOCKET = _SCM_RIGHTS = 1


def program(
    machine: str, sock: int, own: tuple[tuple[int, int], ...] = ()
) -> list[tuple[int, int, int, int]] | None:
    """The filter for ``machine``: every watched call notifies pysb, except the ``fstat``
    forms of ``newfstatat`` and ``statx`` (``AT_EMPTY_PATH``: no path), ``sendto`` without
    an address, ``sendmsg`` on ``sock`` (the listener travels over it: notifying that call
    would wait for the very listener it carries), and calls made from the code ranges
    ``own`` (``[start, end)``: the guarded interpreter's C library and loader, see
    :func:`own_code`). Foreign ABIs are let through."""
    if machine not in calls.NUMBERS or machine not in seccomp.ARCHES:
        return None
    nr = calls.NUMBERS[machine]
    special = {"sendmsg": "sendmsg", "sendto": "sendto", "newfstatat": "at3", "statx": "at2"}
    prog: list[tuple[str | int, ...]] = [
        ("ld", seccomp.OFF_ARCH),
        ("jeq", seccomp.ARCHES[machine], "native"),
        ("ret", seccomp.RET_ALLOW),
        ("label", "native"),
        ("ld", seccomp.OFF_NR),
    ]
    if machine == "x86_64":
        prog.append(("jge", 0x40000000, "allow"))  # x32: foreign too
    prog += [("jeq", nr[name], special.get(name, "notify")) for name in sorted(nr)]
    prog += [
        ("ret", seccomp.RET_ALLOW),
        ("label", "sendmsg"),
        ("ld", seccomp.off_arg(0)),
        ("jeq", sock, "allow"),
        ("jge", 0, "notify"),  # always: an unconditional jump
        ("label", "sendto"),  # the destination pointer, both halves
        ("ld", seccomp.off_arg(4)),
        ("jset", 0xFFFFFFFF, "notify"),
        ("ld", seccomp.off_arg(4) + 4),
        ("jset", 0xFFFFFFFF, "notify"),
        ("ret", seccomp.RET_ALLOW),
        ("label", "at3"),
        ("ld", seccomp.off_arg(3)),
        ("jset", calls.AT_EMPTY_PATH, "allow"),
        ("jge", 0, "notify"),
        ("label", "at2"),
        ("ld", seccomp.off_arg(2)),
        ("jset", calls.AT_EMPTY_PATH, "allow"),
        ("label", "notify"),
    ]
    # The caller's instruction pointer in one of the ``own`` ranges: the guarded
    # interpreter (or a fork of it) calling through its own C library: let it through.
    for i, (start, end) in enumerate(_split(own)):
        prog += [
            ("label", f"range{i}"),
            ("ld", seccomp.OFF_IP + 4),
            ("jeq", start >> 32, f"low{i}"),
            ("jge", 0, f"range{i + 1}"),
            ("label", f"low{i}"),
            ("ld", seccomp.OFF_IP),
            *([("jge", end & 0xFFFFFFFF, f"range{i + 1}")] if end & 0xFFFFFFFF else []),
            ("jge", start & 0xFFFFFFFF, "allow"),
        ]
    prog += [
        ("label", f"range{len(_split(own))}"),
        ("ret", RET_USER_NOTIF),
        ("label", "allow"),
        ("ret", seccomp.RET_ALLOW),
    ]
    return seccomp.resolve(prog)


def _split(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """``ranges`` cut at 4 GiB boundaries: the filter compares 32-bit words."""
    out = []
    for start, end in ranges:
        while start < end:
            cut = min(end, ((start >> 32) + 1) << 32)
            out.append((start, cut))
            start = cut
    return out[:16]


def own_code() -> tuple[tuple[int, int], ...]:
    """The executable mappings of this process's C library and dynamic loader: where the
    guarded interpreter's system calls come from. A program it executes gets its own C
    library at another random address (ASLR), so its calls are still notified; without
    ASLR (``randomize_va_space`` 0, ``setarch -R``) that would not hold: none then."""
    try:
        with open("/proc/sys/kernel/randomize_va_space", "rb") as f:
            if f.read().strip() == b"0":
                return ()
        if _personality(cfuncs.Long(0xFFFFFFFF)) & 0x0040000:  # ADDR_NO_RANDOMIZE
            return ()
        with open("/proc/self/maps", "rb") as f:
            maps = f.read(1 << 20)
    except OSError:
        return ()
    found = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) < 6 or b"x" not in fields[1]:
            continue
        name = fields[-1].rsplit(b"/", 1)[-1]
        if name.startswith((b"libc.so", b"libc-", b"ld-linux", b"ld-musl", b"ld.so", b"ld-2.")):
            start, _, end = fields[0].partition(b"-")
            found.append((int(start, 16), int(end, 16)))
    return tuple(found)


def _install(machine: str, sock: int) -> int:
    """Load the filter on every thread; return the listener."""
    prog = program(machine, sock, own_code())
    if prog is None:
        raise OSError(f"no system-call table for {machine}")
    raw = b"".join(seccomp.pack(*ins) for ins in prog)
    program_buf, address = cfuncs.buffer(raw)
    order = sys.byteorder
    fprog = (len(raw) // 8).to_bytes(2, order) + bytes(6) + address.to_bytes(8, order)
    fprog_buf, fprog_address = cfuncs.buffer(fprog)
    number = seccomp.SYS_SECCOMP[machine]
    fd = -1
    for flags in (_FLAG_NEW_LISTENER | _FLAG_TSYNC | _FLAG_TSYNC_ESRCH, _FLAG_NEW_LISTENER):
        fd = _syscall(
            cfuncs.Long(number),
            cfuncs.Long(_SET_MODE_FILTER),
            cfuncs.Long(flags),
            cfuncs.Pointer(fprog_address),
        )
        if fd >= 0 or cfuncs.get_errno() != 22:  # EINVAL: TSYNC_ESRCH unknown (< 5.7)
            break
    err = cfuncs.get_errno()
    del program_buf, fprog_buf
    if fd < 0:
        raise OSError(err, f"seccomp user notification refused: {os.strerror(err)}")
    return int(fd)


def _send(sock: int, data: bytes, fd: int | None) -> None:
    """``sendmsg(sock, data, SCM_RIGHTS [fd])`` with the C library (no ``socket`` module:
    its objects are the network guard's to judge)."""
    order = sys.byteorder
    data_buf, data_address = cfuncs.buffer(data)
    iov_buf, iov_address = cfuncs.buffer(
        data_address.to_bytes(8, order) + len(data).to_bytes(8, order)
    )
    control = b""
    if fd is not None:  # struct cmsghdr: size_t len, int level, int type, then the fd
        control = (20).to_bytes(8, order) + _SOL_SOCKET.to_bytes(4, order)
        control += _SCM_RIGHTS.to_bytes(4, order) + fd.to_bytes(4, order) + bytes(4)
    control_buf, control_address = cfuncs.buffer(control or bytes(8))
    msghdr = bytes(16) + iov_address.to_bytes(8, order) + (1).to_bytes(8, order)
    msghdr += (control_address if control else 0).to_bytes(8, order)
    msghdr += len(control).to_bytes(8, order) + bytes(8)
    msg_buf, msg_address = cfuncs.buffer(msghdr)
    rc = _sendmsg(sock, cfuncs.Pointer(msg_address), 0)
    err = cfuncs.get_errno()
    del data_buf, iov_buf, control_buf, msg_buf
    if rc != len(data):
        raise OSError(err, f"cannot hand the watch to pysb: {os.strerror(err)}")


def watch(fd: int) -> None:
    """The child set-up: watch every process of the run from here on (see the module)."""
    machine = os.uname().machine
    try:
        zero = cfuncs.Long(0)
        if _prctl(cfuncs.Long(38), cfuncs.Long(1), zero, zero, zero) != 0:  # NO_NEW_PRIVS
            err = cfuncs.get_errno()
            raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        listener = _install(machine, fd)
    except OSError as exc:
        # Nothing is watched: pysb says so, and the program runs as it did before.
        _send(fd, f"no {exc.strerror or exc}".encode("ascii", "replace")[:200], None)
        os.close(fd)
        return
    try:
        _send(fd, f"pid {os.getpid()}".encode(), listener)
    finally:
        os.close(listener)
        os.close(fd)
