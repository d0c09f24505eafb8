"""pysb's seccomp filter under firejail (with the namespace refusals its child set-up adds),
for real on a pty; its decisions are unit-tested in tests/test_seccomp_filter.py."""

from __future__ import annotations

import os
import pty
import select
import time

import pytest

from pysb_core.testing import Project, pysb_command, require_provider, run_pysb


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
    argv = [*pysb_command(), "run", "--profile", ".pysb.yaml", "--provider", "firejail"]
    argv += ["--no-python-guards", "-c", code]  # named: _on_pty passes no HOME (no trust store)
    if not os.path.isabs(argv[0]):
        pytest.skip("pysb's console script is needed as an absolute path")
    out = _on_pty(argv, str(project.root)).decode(errors="replace")
    assert "winsz 8" in out, out
    assert "tiocsti refused 1" in out, out
