"""Wait for the sandbox like a shell waits for a command: signals, wall-time, exit status.

The parent stays (it reads the report channel and enforces ``wall-time``) but is
invisible: signals sent to it are forwarded to the sandbox by PID, Ctrl-C from the
terminal reaches the program directly when the sandbox's process group is the terminal's
foreground group (the parent does not forward what the kernel already delivered to that
group -- unless ``proc.pysb_own_session`` says that the parent alone gets such signals:
``pysb run`` puts the sandbox in a group of its own, pysb_core.launch.jobcontrol), the sandbox
stopping stops the parent (``job``), and a death by signal N becomes exit status 128+N.

A request to end (``SIGTERM`` or ``SIGHUP``, or ``SIGINT``/``SIGQUIT`` sent with ``kill``)
is forwarded, and if the sandbox still runs :data:`TERM_GRACE` seconds later -- the program
ignores it, or the sandbox is wedged (a stopped PID 1, a zombie program) -- it is killed,
as ``timeout -k`` would; a second such request kills at once. pysb never outlives a
request to end because of what the sandbox does.
"""

from __future__ import annotations

import _signal as signal  # the C module: `signal` costs ~0.5 ms more at every start
import sys
import time

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

    from pysb_core.launch.jobcontrol import Job

#: Signals forwarded to the sandbox when someone sends them to pysb.
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
    signal.SIGCONT,
)


def quiet_thread() -> None:
    """Block, in a helper thread of pysb (a report reader, the learning watch), the signals
    the main thread forwards to the sandbox: the kernel delivers a process signal to any
    thread that does not block it, and only the main thread's handlers forward."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, {*FORWARDED, signal.SIGCHLD})


_SI_USER = 0  # si_code of a signal sent by kill(); terminal-generated ones are SI_KERNEL
#: Seconds a sandbox has to end after pysb was asked to end, before it is killed.
TERM_GRACE = 5.0
#: Seconds a sandbox that reports its program's start (``proc.pysb_program_started``: a VM)
#: may take to boot before ``wall-time`` counts anyway.
BOOT_ALLOWANCE = 60.0
#: Always requests to end; SIGINT and SIGQUIT only when sent with kill() (a Ctrl-C the
#: program handles, as a REPL does, is not one).
_ENDING = (signal.SIGTERM, signal.SIGHUP)
_ENDING_IF_SENT = (signal.SIGINT, signal.SIGQUIT)


class held_signals:  # used as the function it was: `with held_signals() as pending`
    """While the sandbox starts, remember signals meant for it instead of dying of them.

    Handlers (not a blocked mask, which a child would inherit across exec) record each
    signal; :func:`wait` forwards them once the sandbox runs. SIGINT keeps its meaning
    (KeyboardInterrupt): a Ctrl-C before the program exists cancels the start. (A class,
    not ``contextlib.contextmanager``: ``contextlib`` is not imported on the start path.)
    """

    def __enter__(self) -> list[int]:
        pending: list[int] = []
        held = [s for s in FORWARDED if s not in (signal.SIGINT, signal.SIGWINCH, signal.SIGCONT)]
        self._previous = {
            s: signal.signal(s, lambda signo, _frame: pending.append(signo)) for s in held
        }
        return pending

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


class ProgramStart:
    """When the program started, for a provider whose sandbox boots first (qemu): the
    provider hands the read end of a pipe on which its host process writes one line, the
    start time on this host's monotonic clock, and sets an instance as
    ``proc.pysb_program_started``. :func:`wait` then counts ``wall-time`` from there."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd  # non-blocking
        self._buf = b""
        self.at: float | None = None

    def __call__(self) -> float | None:
        if self.at is None and self._fd is not None:
            import os

            try:
                data = os.read(self._fd, 64)
            except BlockingIOError:
                return None
            except OSError:
                data = b""
            self._buf += data
            if b"\n" in self._buf:
                try:
                    self.at = float(self._buf.split(b"\n", 1)[0])
                except ValueError:
                    self.at = time.monotonic()
                self.close()
            elif not data:
                self.close()  # the host process died before the start: no report will come
        return self.at

    def close(self) -> None:
        import os

        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass


def status_of(returncode: int) -> int:
    """Shell convention: a death by signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def wait(
    proc: subprocess.Popen[bytes],
    *,
    wall_time: float | None = None,
    on_wall_time: Callable[[], None] | None = None,
    pending: list[int] | None = None,
    on_child: Callable[[], None] | None = None,
    job: Job | None = None,
) -> int:
    """Wait for ``proc``, forwarding signals; return its exit status (124 on wall-time).

    ``proc`` is our own child, so signalling it by PID is safe until it is reaped, which
    only this function does. ``on_child`` runs on every SIGCHLD (pysb as subreaper reaps
    the sandbox's adopted orphans there: pysb_core.linux.proctree); ``job`` stops pysb when the
    sandbox stops (job control: pysb_core.launch.jobcontrol).
    """
    watched = {*FORWARDED, signal.SIGCHLD, *([signal.SIGTSTP] if job is not None else [])}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    started = getattr(proc, "pysb_program_started", None)
    tmp_watch = getattr(proc, "pysb_tmp_watch", None)  # limits: tmp (pysb_core.launch.tmpwatch)
    awaiting_start = wall_time is not None and started is not None
    deadline = None
    if wall_time is not None:
        deadline = time.monotonic() + wall_time + (BOOT_ALLOWANCE if awaiting_start else 0.0)
    pending = pending if pending is not None else []
    forwarded = 0
    kill_at: float | None = None  # set by a request to end

    def ending() -> None:
        """A request to end: the sandbox gets TERM_GRACE seconds, a second one none."""
        nonlocal kill_at
        now = time.monotonic()
        kill_at = now if kill_at is not None else now + TERM_GRACE

    try:
        while True:
            # Signals held while the sandbox started; read on every turn, because the
            # handler of one that arrived just before the mask may run only after it.
            while forwarded < len(pending):
                signo = pending[forwarded]
                forwarded += 1
                if proc.poll() is None:
                    proc.send_signal(signo)
                    if signo in _ENDING or signo in _ENDING_IF_SENT:
                        ending()
            if proc.poll() is not None:
                return status_of(proc.returncode)
            if awaiting_start and wall_time is not None and started is not None:
                at = started()
                if at is not None:
                    deadline, awaiting_start = at + wall_time, False
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                proc.kill()
                proc.wait()
                return status_of(proc.returncode)
            timeout = 0.5 if kill_at is None else max(0.0, min(0.5, kill_at - now))
            if awaiting_start:
                timeout = min(timeout, 0.05)  # notice the start soon after it happens
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - now))
            if deadline is not None and now >= deadline:
                if on_wall_time is not None:
                    on_wall_time()
                proc.kill()
                proc.wait()
                return 124
            if tmp_watch is not None:
                if tmp_watch.exceeded():
                    sys.stderr.write(f"pysb: {tmp_watch.message()}\n")
                    proc.kill()
                    proc.wait()
                    return int(tmp_watch.EXIT_STATUS)
                timeout = min(timeout, tmp_watch.INTERVAL)
            info = signal.sigtimedwait(watched, timeout)
            child_changed = info is not None and info.si_signo == signal.SIGCHLD
            if child_changed and on_child is not None:
                on_child()
            if (
                job is not None
                and (info is None or child_changed)
                and proc.poll() is None
                and job.check(child_changed)
            ):
                # pysb was continued with SIGCONT, and has continued the sandbox itself.
                signal.sigtimedwait([signal.SIGCONT], 0)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_signo == signal.SIGTSTP and job is not None:
                if proc.poll() is None:
                    job.suspend()
                    signal.sigtimedwait([signal.SIGCONT], 0)
                continue
            if (
                info.si_signo in (signal.SIGINT, signal.SIGQUIT)
                and info.si_code != _SI_USER
                and not getattr(proc, "pysb_own_session", False)
            ):
                continue  # from the terminal: the program's process group got it already
            if proc.poll() is None:
                # send_signal, not os.kill(proc.pid): a provider whose host process is a
                # wrapper (bwrap) routes the signal to the program inside.
                proc.send_signal(info.si_signo)
                if info.si_signo in _ENDING or (
                    info.si_signo in _ENDING_IF_SENT and info.si_code == _SI_USER
                ):
                    ending()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
