"""The host process of a bwrap sandbox, with signals routed to the program inside.

bwrap 0.8 does not forward signals: ``SIGTERM`` sent to bwrap kills bwrap, and
``--die-with-parent`` then SIGKILLs the program, which never runs its handlers or
``finally`` blocks. With ``--unshare-pid`` the tree is always *bwrap (monitor) -> bwrap
(PID 1 of the sandbox, a reaper) -> program*, so :meth:`BwrapProcess.send_signal` (and
``terminate()``) deliver to the program's host PID, found by walking the children of our
own child; ``kill()`` still goes to bwrap and so ends the whole sandbox at once.
"""

from __future__ import annotations

import os
import signal
import subprocess


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


class BwrapProcess(subprocess.Popen[bytes]):
    """A ``Popen`` of bwrap whose ``send_signal`` reaches the sandboxed program."""

    def program_pid(self) -> int | None:
        """The program's host PID (a descendant of this process), or ``None`` if not (yet)
        or no longer running."""
        pid = self.pid
        for _ in range(2):  # monitor -> sandbox PID 1 -> program
            kids = _children(pid)
            if len(kids) != 1:
                return None
            pid = kids[0]
        return pid

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        target = None if sig in (signal.SIGKILL, signal.SIGSTOP) else self.program_pid()
        if target is None:
            super().send_signal(sig)
            return
        try:
            os.kill(target, sig)
        except ProcessLookupError:
            super().send_signal(sig)


def adopt(proc: subprocess.Popen[bytes], *, own_session: bool = True) -> None:
    """``on_started`` hook: make the ``Popen`` the base launch created a :class:`BwrapProcess`
    (same layout), so its callers' ``send_signal`` reaches the program.

    ``pysb_own_session`` tells pysb's waiter that the program is not in the terminal's
    process group: Ctrl-C from the terminal must be forwarded, not assumed delivered.
    """
    proc.__class__ = BwrapProcess
    proc.pysb_own_session = own_session  # type: ignore[attr-defined]
