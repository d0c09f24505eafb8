"""The terminal-injection filter: its decisions by emulation, and for real on a pty."""

from __future__ import annotations

import os
import pty
import select
import time

import pytest

from pysb_core import ttyfilter as tf
from pysb_core.testing import Project, pysb_command, require_provider

X86_64, I386, AARCH64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
ALLOW, EPERM = 0x7FFF0000, 0x00050000 | 1


@pytest.mark.parametrize(
    ("machine", "data", "expected"),
    [
        ("x86_64", (16, X86_64, tf.TIOCSTI), EPERM),
        ("x86_64", (16, X86_64, tf.TIOCLINUX), EPERM),
        ("x86_64", (16, X86_64, 0x5413), ALLOW),  # TIOCGWINSZ
        ("x86_64", (16, X86_64, (1 << 32) | tf.TIOCSTI), EPERM),  # high bits ignored
        ("x86_64", (0x40000000 | 514, X86_64, tf.TIOCSTI), EPERM),  # x32
        ("x86_64", (54, I386, tf.TIOCSTI), EPERM),  # int 0x80
        ("x86_64", (0, X86_64, tf.TIOCSTI), ALLOW),  # read(), same argument value
        ("x86_64", (16, AARCH64, tf.TIOCSTI), ALLOW),  # another arch: not this ABI's ioctl
        ("aarch64", (29, AARCH64, tf.TIOCSTI), EPERM),
        ("aarch64", (54, ARM, tf.TIOCLINUX), EPERM),
        ("aarch64", (16, AARCH64, tf.TIOCSTI), ALLOW),
    ],
)
def test_filter_decisions(machine: str, data: tuple[int, int, int], expected: int) -> None:
    prog = tf.program(machine)
    assert prog is not None
    assert tf.run(prog, data) == expected


def test_uncovered_machine_has_no_filter() -> None:
    assert tf.program("riscv64") is None


def _on_pty(argv: list[str], cwd: str) -> bytes:
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(cwd)
        os.execve(argv[0], argv, {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return out


def test_tiocsti_is_refused_inside_and_other_ioctls_work(project: Project) -> None:
    require_provider("firejail")
    project.profile('version: 1\nimports: ["*"]\napi: {allow: ["*"]}\n')
    code = (
        "import fcntl, struct, termios\n"
        "print('winsz', len(fcntl.ioctl(0, termios.TIOCGWINSZ, b'\\0' * 8)))\n"
        "try:\n"
        "    fcntl.ioctl(0, termios.TIOCSTI, b'Z')\n"
        "    print('tiocsti ok')\n"
        "except OSError as e:\n"
        "    print('tiocsti refused', e.errno)\n"
    )
    argv = [*pysb_command(), "run", "--provider", "firejail", "--no-python-guards", "-c", code]
    if not os.path.isabs(argv[0]):
        pytest.skip("pysb's console script is needed as an absolute path")
    out = _on_pty(argv, str(project.root)).decode(errors="replace")
    assert "winsz 8" in out, out
    assert "tiocsti refused 1" in out, out
