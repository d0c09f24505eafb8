"""The sandbox's seccomp filter under bwrap, on a real pty (its decisions are unit-tested in
tests/test_seccomp_filter.py)."""

from __future__ import annotations

import os
import pty
import select
import sys

from pysb_bwrap import BwrapProvider


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
