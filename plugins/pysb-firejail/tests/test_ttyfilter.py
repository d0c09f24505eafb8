"""The terminal-injection filter (with the namespace refusals firejail's child set-up adds):
its decisions by emulation, and for real on a pty and under firejail."""

from __future__ import annotations

import os
import pty
import select
import time

import pytest

from pysb_core import ttyfilter as tf
from pysb_core.testing import Project, pysb_command, require_provider, run_pysb

X86_64, I386, AARCH64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
NEWUSER, NEWNS, NEWPID, NEWNET, NEWTIME = 0x10000000, 0x20000, 0x20000000, 0x40000000, 0x80
FORK_FLAGS = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD: a fork
THREAD_FLAGS = 0x003D0F00  # what pthread_create passes to clone


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


@pytest.mark.parametrize(
    ("machine", "data", "expected"),
    [
        # (nr, arch, arg1, arg0): unshare and clone judge arg0, setns arg1
        ("x86_64", (272, X86_64, 0, NEWUSER), EPERM),
        ("x86_64", (272, X86_64, 0, NEWUSER | NEWNS), EPERM),
        ("x86_64", (272, X86_64, 0, NEWTIME), EPERM),
        ("x86_64", (272, X86_64, 0, 0x400), ALLOW),  # CLONE_FILES: no namespace
        ("x86_64", (272, X86_64, 0, (1 << 32) | 0x400), ALLOW),
        ("x86_64", (56, X86_64, 0, FORK_FLAGS), ALLOW),
        ("x86_64", (56, X86_64, 0, THREAD_FLAGS), ALLOW),
        ("x86_64", (56, X86_64, 0, FORK_FLAGS | NEWPID), EPERM),
        ("x86_64", (56, X86_64, 0, FORK_FLAGS | NEWNET), EPERM),
        ("x86_64", (308, X86_64, 0, 3), EPERM),  # setns(fd, 0): any namespace
        ("x86_64", (308, X86_64, NEWNET, 3), EPERM),
        ("x86_64", (435, X86_64, 0, 0), ENOSYS),  # clone3: flags behind a pointer
        ("x86_64", (0x40000000 | 272, X86_64, 0, NEWUSER), EPERM),  # x32
        ("x86_64", (0x40000000 | 435, X86_64, 0, 0), ENOSYS),
        ("x86_64", (310, I386, 0, NEWUSER), EPERM),  # int 0x80
        ("x86_64", (120, I386, 0, FORK_FLAGS | NEWPID), EPERM),
        ("x86_64", (346, I386, 0, 3), EPERM),
        ("x86_64", (435, I386, 0, 0), ENOSYS),
        ("x86_64", (120, I386, 0, FORK_FLAGS), ALLOW),
        ("x86_64", (16, X86_64, tf.TIOCSTI, 0), EPERM),  # the terminal rules still hold
        ("x86_64", (0, X86_64, 0, NEWUSER), ALLOW),  # read(): same argument value
        ("aarch64", (97, AARCH64, 0, NEWUSER), EPERM),
        ("aarch64", (220, AARCH64, 0, FORK_FLAGS | NEWPID), EPERM),
        ("aarch64", (220, AARCH64, 0, FORK_FLAGS), ALLOW),
        ("aarch64", (268, AARCH64, 0, 3), EPERM),
        ("aarch64", (435, AARCH64, 0, 0), ENOSYS),
        ("aarch64", (337, ARM, 0, NEWUSER), EPERM),
        ("aarch64", (375, ARM, 0, 3), EPERM),
        ("aarch64", (29, AARCH64, tf.TIOCSTI, 0), EPERM),
    ],
)
def test_namespace_decisions(machine: str, data: tuple[int, ...], expected: int) -> None:
    prog = tf.program(machine, namespaces=True)
    assert prog is not None
    assert tf.run(prog, data) == expected


def test_terminal_only_filter_is_unchanged_by_the_namespace_rules() -> None:
    """bwrap's filter (``namespaces`` off) has no namespace rule at all."""
    for machine in ("x86_64", "aarch64"):
        prog = tf.program(machine)
        assert prog is not None
        assert tf.run(prog, (272, tf.ABIS[machine][0][0], 0, NEWUSER)) == ALLOW
        assert {code for code, *_ in prog} == {0x20, 0x15, 0x06}
        assert tf.filter_bytes(machine) != tf.filter_bytes(machine, namespaces=True)


def test_uncovered_machine_has_no_filter() -> None:
    assert tf.program("riscv64") is None
    assert tf.program("riscv64", namespaces=True) is None
    assert not tf.covers("riscv64")


def test_no_namespaces_inside_while_threads_and_processes_work(project: Project) -> None:
    """The child's filter stands in for --restrict-namespaces: new namespaces and setns are
    refused, while threads, fork and subprocesses (clone3 refused: the C library falls back
    to clone) work."""
    require_provider("firejail")
    project.profile('version: 1\nimports: ["*"]\napi: {allow: ["*"]}\n')
    code = (
        "import ctypes, os, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for flags in (0x10000000, 0x20000, 0x40000000, 0x80):\n"
        "    print(hex(flags), libc.unshare(flags), ctypes.get_errno())\n"
        "fd = os.open('/proc/self/ns/net', os.O_RDONLY)\n"
        "print('setns', libc.setns(fd, 0), ctypes.get_errno())\n"
        "print('clone3', libc.syscall(435, None, 0), ctypes.get_errno())\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(7)\n"
        "print('fork', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        "print(subprocess.run(['/bin/echo', 'sub'], capture_output=True).stdout.decode())\n"
    )
    res = run_pysb(
        "run", "--provider", "firejail", "--no-python-guards", "-c", code, cwd=project.root
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("\n")
    for flags in ("0x10000000", "0x20000", "0x40000000", "0x80"):
        assert f"{flags} -1 1" in lines, res.stdout  # EPERM
    assert "setns -1 1" in lines
    assert "clone3 -1 38" in lines  # ENOSYS
    assert {"thread", "fork 7", "sub"} <= set(lines), res.stdout


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
