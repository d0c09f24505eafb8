"""The host process of a firejail launch, made to behave like the program for pysb.

pysb forwards the signals it receives (SIGTERM, SIGHUP, SIGUSR1...) with
``proc.send_signal``. firejail does not pass them on: on SIGINT or SIGTERM it shuts the
whole sandbox down and exits 128+N, and SIGUSR1 simply kills firejail. So the signal is
sent to the program itself, found by PID as a descendant of firejail (firejail -> the
sandbox's PID 1 -> the program); SIGKILL and SIGSTOP still go to firejail, whose death
takes the sandbox with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie whose files are already closed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


class FirejailProcess(subprocess.Popen[bytes]):
    """A ``Popen`` of firejail whose ``send_signal`` reaches the sandboxed program."""

    def program_pid(self) -> int | None:
        """The program's host PID (a descendant of this process), or ``None`` if not (yet)
        or no longer running."""
        pid = self.pid
        for _ in range(2):  # firejail -> sandbox PID 1 -> program
            kids = _children(pid)
            if len(kids) != 1:
                return None
            pid = kids[0]
        return pid

    def kill(self) -> None:
        """SIGKILL the program and the sandbox's PID 1 first, then firejail, and wait
        (briefly) until the program is gone.

        Killing only firejail ends the sandbox a few milliseconds later, asynchronously;
        meanwhile the program still holds its files and sockets open, and a caller that
        kills a worker and sends the next request at once (partial mode's timeout) would
        send it to a dying worker.
        """
        if self.poll() is not None:
            return
        chain = []
        pid = self.pid
        for _ in range(2):  # firejail -> sandbox PID 1 -> program: our descendants
            kids = _children(pid)
            if len(kids) != 1:
                break
            pid = kids[0]
            chain.append(pid)
        for target in reversed(chain):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        super().kill()
        if chain:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and _alive(chain[-1]):
                time.sleep(0.002)

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


def adopt(proc: subprocess.Popen[bytes]) -> None:
    """``on_started`` hook: make the ``Popen`` the base launch created a
    :class:`FirejailProcess` (same layout), so its callers' ``send_signal`` reaches the
    program."""
    proc.__class__ = FirejailProcess
