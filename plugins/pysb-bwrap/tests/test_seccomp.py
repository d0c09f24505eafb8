"""The terminal-injection filter: its decisions (emulated) and its effect (real pty)."""

from __future__ import annotations

import os
import pty
import select
import struct
import sys
import termios

import pytest
from pysb_bwrap import BwrapProvider

from pysb_core.ttyfilter import (
    ABIS,
    RET_ALLOW,
    RET_EPERM,
    TIOCLINUX,
    TIOCSTI,
    filter_bytes,
)
from pysb_core.ttyfilter import program as filter_program

X86_64, I386 = ABIS["x86_64"][0][0], ABIS["x86_64"][1][0]


def run_bpf(prog, nr: int, arch: int, arg1: int) -> int:
    """A classic-BPF interpreter for the three opcodes the filter uses."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, 0, arg1, 0, 0, 0, 0)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == 0x15:
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize(
    ("nr", "arch", "arg1", "expected"),
    [
        (16, X86_64, TIOCSTI, RET_EPERM),
        (16, X86_64, TIOCLINUX, RET_EPERM),
        (16, X86_64, TIOCSTI | (1 << 32), RET_EPERM),  # the kernel ignores the high half
        (16, X86_64, termios.TCGETS, RET_ALLOW),
        (0x40000000 | 514, X86_64, TIOCSTI, RET_EPERM),  # x32
        (54, I386, TIOCSTI, RET_EPERM),  # int 0x80
        (54, I386, termios.TCGETS, RET_ALLOW),
        (1, X86_64, TIOCSTI, RET_ALLOW),  # write(fd, buf, 0x5412): not an ioctl
        (54, X86_64, TIOCSTI, RET_ALLOW),  # 54 is setsockopt on x86_64
    ],
)
def test_x86_64_decisions(nr, arch, arg1, expected):
    assert run_bpf(filter_program("x86_64"), nr, arch, arg1 & 0xFFFFFFFF) == expected


def test_aarch64_and_unknown_machines():
    prog = filter_program("aarch64")
    assert run_bpf(prog, 29, ABIS["aarch64"][0][0], TIOCSTI) == RET_EPERM
    assert run_bpf(prog, 29, ABIS["aarch64"][0][0], termios.TCGETS) == RET_ALLOW
    assert filter_program("riscv64") is None
    assert filter_bytes("riscv64") is None


def test_interactive_run_cannot_inject_into_the_terminal(bwrap_available, mkplan):
    """Under a real pty that is the sandbox's controlling terminal (interactive: no new
    session), TIOCSTI is refused; the same ioctl outside the sandbox succeeds."""
    code = (
        "import fcntl, termios\n"
        "try:\n"
        "    fcntl.ioctl(0, termios.TIOCSTI, b'#'); print('INJECTED')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    exe = os.path.realpath(sys.executable)

    def under_pty(sandboxed: bool) -> str:
        pid, fd = pty.fork()
        if pid == 0:  # the forked test process: run, then leave without pytest's cleanup
            status = 1
            try:
                if sandboxed:
                    plan = mkplan([exe, "-c", code], interactive=True)
                    proc = BwrapProvider().launch(plan)
                    status = proc.wait()
                    for fn in plan.cleanups:
                        fn()
                else:
                    os.execv(exe, [exe, "-c", code])
            finally:
                os._exit(status)
        out = b""
        while True:
            ready, _, _ = select.select([fd], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.waitpid(pid, 0)
        os.close(fd)
        return out.decode(errors="replace")

    assert "INJECTED" in under_pty(sandboxed=False)  # the probe works: this tty allows it
    result = under_pty(sandboxed=True)
    assert "refused 1" in result, result
    assert "INJECTED" not in result
