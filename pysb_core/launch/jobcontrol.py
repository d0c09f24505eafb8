"""Job control for ``pysb run`` on a terminal, done as a shell does it for a command.

The sandbox always has a process group of its own, so that a signal sent to pysb's group
(``timeout``, supervisors, CI runners, ``kill -INT -PGID``) reaches pysb alone, which
forwards it once (pysb_core.launch.execute). On the controlling terminal, when pysb holds its
foreground, the sandbox's group is made the foreground group before the sandbox's first
process runs anything (in the child, between ``fork`` and ``exec``, as shells do): a
Ctrl-C typed there reaches the sandbox alone, and the program reads the terminal without
being stopped by SIGTTIN. pysb takes the terminal back when the run ends, and when the
sandbox stops (Ctrl-Z, or SIGTTIN from reading the terminal in the background) pysb
stops too, so that the shell that started it sees its job stop and gets its terminal
back; continued (``fg``), pysb gives the terminal to the sandbox again and continues it.

A provider whose program is in a session of its own (``proc.pysb_own_session``: bwrap
with ``--new-session``, unshare, for the sake of TIOCSTI) cannot put that program in the
terminal's foreground group (``tcsetpgrp`` accepts only a group of the terminal's
session): pysb keeps the terminal then and forwards what the terminal sends it.
"""

from __future__ import annotations

import _signal as signal  # the C module: `signal` costs ~0.5 ms more at every start
import os

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable


def _ignoring_tty_stops(step: Callable[[], None]) -> None:
    """Run ``step`` with SIGTTOU and SIGTTIN ignored: ``tcsetpgrp`` from a process that is
    not (or no longer) in the foreground group would stop it otherwise."""
    previous = [(s, signal.signal(s, signal.SIG_IGN)) for s in (signal.SIGTTOU, signal.SIGTTIN)]
    try:
        step()
    finally:
        for s, handler in previous:
            signal.signal(s, handler)


class Terminal:
    """pysb's controlling terminal, and whether the sandbox's group holds it."""

    def __init__(self, fd: int, foreground: bool) -> None:
        self.fd = fd  # pysb's own, close-on-exec copy (the child's fds 0-2 may differ)
        #: pysb held the terminal's foreground when the run started.
        self.foreground = foreground
        #: The group pysb gave the terminal to, until it takes it back.
        self.given: int | None = None

    @classmethod
    def find(cls) -> Terminal | None:
        """The controlling terminal among fds 0-2, or None (no terminal, or one that is
        not pysb's controlling terminal: ``tcgetpgrp`` fails on it)."""
        for fd in (0, 1, 2):
            try:
                if not os.isatty(fd):
                    continue
                group = os.tcgetpgrp(fd)
            except OSError:
                continue
            return cls(os.dup(fd), group == os.getpgrp())
        return None

    def child_step(self) -> Callable[[], None]:
        """What the sandbox's first process runs before its ``exec`` (in its own group by
        then): take the terminal's foreground. Done in the child so that nothing of the
        sandbox runs before it holds the terminal."""
        fd = self.fd

        def take() -> None:
            _ignoring_tty_stops(lambda: os.tcsetpgrp(fd, os.getpgrp()))

        return take

    def holds_foreground(self) -> bool:
        try:
            return os.tcgetpgrp(self.fd) == os.getpgrp()
        except OSError:
            return False

    def give(self, group: int) -> None:
        """Make ``group`` the terminal's foreground group (pysb's own job)."""
        try:
            _ignoring_tty_stops(lambda: os.tcsetpgrp(self.fd, group))
        except OSError:
            return  # the group is gone already
        self.given = group

    def take_back(self) -> None:
        """pysb's group is the terminal's foreground again, if pysb gave it away."""
        if self.given is None:
            return
        self.given = None
        try:
            _ignoring_tty_stops(lambda: os.tcsetpgrp(self.fd, os.getpgrp()))
        except OSError:
            pass

    def close(self) -> None:
        self.take_back()
        try:
            os.close(self.fd)
        except OSError:
            pass


def stopped(pid: int) -> bool:
    """Whether our child ``pid`` has stopped since last asked (consumes the report; an
    exit is left for ``Popen`` to reap)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)
    except ChildProcessError:
        return False
    return info is not None and info.si_code == os.CLD_STOPPED


def _state(pid: int) -> str:
    """The one-letter state of process ``pid`` (``T`` stopped), or '' if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


class Job:
    """The sandbox as the job a shell started: when it stops, pysb stops (see the module's
    docstring). The sandbox's group is ``proc.pid`` (pysb made it). A provider may move the
    program into a group of its own that takes the terminal (firejail: its own process
    would end the sandbox on Ctrl-C); that group stopping is seen on the terminal: its
    foreground group, a stopped descendant of the sandbox's first process."""

    def __init__(self, pid: int, terminal: Terminal | None) -> None:
        self.pid = pid
        self.terminal = terminal

    def _stopped_foreground(self) -> int | None:
        terminal = self.terminal
        if terminal is None or terminal.given is None:
            return None
        try:
            group = os.tcgetpgrp(terminal.fd)
        except OSError:
            return None
        if group in (self.pid, os.getpgrp()) or _state(group) != "T":
            return None
        from pysb_core.linux.proctree import descendants

        return group if group in descendants(self.pid) else None

    def check(self, child_changed: bool) -> bool:
        """Stop with the sandbox if it stopped (``child_changed``: a SIGCHLD came, so the
        first process may have); True if pysb stopped and was continued since."""
        stopped_child = child_changed and stopped(self.pid)
        program = self._stopped_foreground()
        if not stopped_child and program is None:
            return False
        self._pause(program or self.pid)
        return True

    def suspend(self) -> None:
        """pysb was asked to stop (SIGTSTP: Ctrl-Z where pysb keeps the terminal because
        the program is in a session of its own, whose orphaned group would discard it):
        stop the sandbox's processes (ours: descendants of its first process, by PID)
        with SIGSTOP, then pysb."""
        for pid in self._sandbox_pids():
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        self._pause(self.pid)

    def _sandbox_pids(self) -> list[int]:
        from pysb_core.linux.proctree import descendants

        return [self.pid, *descendants(self.pid)]

    def _pause(self, foreground: int) -> None:
        """Stop pysb with the terminal given back; once continued, continue the sandbox
        -- with the terminal (``fg``, to ``foreground``) or without it (``bg``)."""
        terminal = self.terminal
        if terminal is not None:
            terminal.take_back()
        os.kill(os.getpid(), signal.SIGSTOP)  # SIGTSTP would be discarded in an orphaned group
        if terminal is not None and terminal.holds_foreground():
            terminal.give(foreground)
        for pid in self._sandbox_pids():  # by PID: only processes of the sandbox
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
