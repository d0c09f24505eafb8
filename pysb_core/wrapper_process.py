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

from pysb_core.proctree import children, running


class WrapperProcess(subprocess.Popen[bytes]):
    """A ``Popen`` of a wrapper whose ``send_signal`` reaches the sandboxed program."""

    #: Levels between our child and the program: wrapper -> sandbox PID 1 -> program.
    depth = 2

    def chain(self) -> list[int]:
        """Host PIDs from the sandbox's PID 1 down to the program (our descendants)."""
        out: list[int] = []
        pid = self.pid
        for _ in range(self.depth):
            kids = children(pid)
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


def adopt(proc: subprocess.Popen[bytes], *, own_session: bool | None = None) -> None:
    """``on_started`` hook: turn the ``Popen`` the base launch made into a
    :class:`WrapperProcess`. ``own_session`` tells pysb's waiter whether the program has
    left the terminal's process group (then Ctrl-C must be forwarded, not assumed
    delivered: pysb_core.execute)."""
    proc.__class__ = WrapperProcess
    if own_session is not None:
        proc.pysb_own_session = own_session  # type: ignore[attr-defined]
