"""The host process of a wrapper sandbox (bwrap, firejail), made to behave like the program.

pysb forwards the signals it receives with ``proc.send_signal``. Wrapper tools do not pass
them on: on SIGTERM bwrap dies (and ``--die-with-parent`` SIGKILLs the program, which
never runs its handlers), firejail shuts the sandbox down. With a PID namespace the tree
is always *wrapper -> the sandbox's PID 1 -> program*, so signals go to the program's
host PID, found by walking the children of our own child (descendants only, by PID).
SIGKILL and SIGSTOP still go to the wrapper; :meth:`kill` ends the program first and
waits briefly, so that a caller that kills a worker and sends the next request at once
(partial mode's timeout) never talks to a dying one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

from pysb_core.linux.proctree import children, running


class WrapperProcess(subprocess.Popen[bytes]):
    """A ``Popen`` of a wrapper whose ``send_signal`` reaches the sandboxed program."""

    #: Levels between our child and the program: wrapper -> sandbox PID 1 -> program
    #: (``adopt(depth=...)`` for another shape).
    depth = 2

    def chain(self) -> list[int]:
        """Host PIDs from the sandbox's PID 1 down to the program (our descendants)."""
        out: list[int] = []
        pid = self.pid
        for _ in range(self.depth):
            kids = children(pid)
            if len(kids) > 1:
                kids = _same_session(pid, kids)
            if len(kids) != 1:
                break
            pid = kids[0]
            out.append(pid)
        return out

    def program_pid(self) -> int | None:
        """The program's host PID, or ``None`` if not (yet) or no longer running."""
        chain = self.chain()
        return chain[-1] if len(chain) == self.depth else None

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        target = None if sig in (signal.SIGKILL, signal.SIGSTOP) else self.program_pid()
        if target is not None and not running(target):
            target = None  # a zombie the sandbox's PID 1 does not reap: the wrapper's turn
        if target is None:
            super().send_signal(sig)
            return
        try:
            os.kill(target, sig)
        except ProcessLookupError:
            super().send_signal(sig)

    def kill(self) -> None:
        """SIGKILL the program and the sandbox's PID 1, then the wrapper; wait (briefly)
        until the program is gone."""
        if self.poll() is not None:
            return
        chain = self.chain()
        for target in reversed(chain):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        super().kill()
        if chain:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and running(chain[-1]):
                time.sleep(0.002)


def _same_session(parent: int, kids: list[int]) -> list[int]:
    """The children of ``parent`` in its session: a helper the sandbox starts beside the
    program in a session of its own (a daemon the program left, adopted by the sandbox's
    init or by firejail's reaper) is not the program."""
    try:
        session = os.getsid(parent)
    except OSError:
        return kids
    out = []
    for kid in kids:
        try:
            if os.getsid(kid) == session:
                out.append(kid)
        except OSError:
            continue
    return out


def adopt(
    proc: subprocess.Popen[bytes], *, own_session: bool | None = None, depth: int | None = None
) -> None:
    """``on_started`` hook: turn the ``Popen`` the base launch made into a
    :class:`WrapperProcess`. ``own_session`` tells pysb's waiter whether the program has
    left the terminal's process group (then Ctrl-C must be forwarded, not assumed
    delivered: pysb_core.launch.execute). ``depth`` (kit 1.6) counts the processes from
    the wrapper's child down to the program when it is not :attr:`WrapperProcess.depth`
    (firejail's reaper is the program's parent: 3)."""
    proc.__class__ = WrapperProcess
    if depth is not None:
        if depth < 1:
            raise ValueError(f"adopt_wrapper: depth must be at least 1, not {depth}")
        proc.depth = depth  # type: ignore[attr-defined]
    if own_session is not None:
        proc.pysb_own_session = own_session  # type: ignore[attr-defined]


class SetupCheckedProcess(WrapperProcess):
    """A wrapper whose own set-up failure becomes status 125 with pysb's words.

    Wrapper tools exit 1 with their message on stderr when they cannot build the sandbox,
    the same status as a program that exits 1. The provider gives the launch a pipe that
    receives ``marker`` only once the program ran (bwrap's ``--json-status-fd``, or a byte
    the provider's child set-up writes); once the wrapper has exited with status 1, no
    marker means the program never started: pysb says so after the tool's own message.
    """

    status_fd: int | None = None
    marker: bytes = b""
    tool: str = "the sandbox tool"

    def _judge_exit(self) -> None:
        fd, self.status_fd = self.status_fd, None
        if fd is None:
            return
        try:
            if self.returncode != 1:
                return
            os.set_blocking(fd, False)
            data = b""
            while True:
                try:
                    chunk = os.read(fd, 4096)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                data += chunk
            if self.marker not in data:
                import sys

                sys.stderr.write(
                    f"pysb: error: {self.tool} could not set the sandbox up (its own message, "
                    "above, says what failed); the program was not started\n"
                )
                sys.stderr.flush()
                self.returncode = 125
        finally:
            os.close(fd)

    def poll(self) -> int | None:
        status = super().poll()
        if status is not None and self.status_fd is not None:
            self._judge_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        super().wait(timeout)
        if self.status_fd is not None:
            self._judge_exit()
        return self.returncode


def watch_setup(
    status_r: int, *, tool: str, marker: bytes
) -> Callable[[subprocess.Popen[bytes]], None]:
    """``on_started`` hook, after :func:`adopt`: the process becomes a
    :class:`SetupCheckedProcess` reading its own copy of ``status_r``."""

    def started(proc: subprocess.Popen[bytes]) -> None:
        proc.__class__ = SetupCheckedProcess
        proc.status_fd = os.dup(status_r)  # type: ignore[attr-defined]
        proc.tool = tool  # type: ignore[attr-defined]
        proc.marker = marker  # type: ignore[attr-defined]

    return started
