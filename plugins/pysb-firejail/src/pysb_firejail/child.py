"""Runs inside the sandboxed interpreter (a ``ChildSetup``); imports nothing but stdlib.

Two things firejail does that a plain ``python`` start would not:

- it edits the environment: it always sets ``container``, ``SHELL``, ``PROMPT_COMMAND``,
  ``FIREJAIL_QUIET``, a few Qt/KDE variables, and ``PATH`` when there is none, overriding
  values the profile chose. ``--rmenv`` cannot undo them (they are added after it), so the
  environment is put back here to exactly the profile's, before the program can read it
  or pass it on (``os.environ`` edits call ``setenv``/``unsetenv``: native code and child
  processes agree);
- it keeps the program in the caller's session, where ``ioctl(TIOCSTI)`` could type into
  the user's shell: pysb's own seccomp filter (:mod:`pysb_core.linux.seccomp`: terminal
  injection, ptrace, vsock and other socket families, TCP Fast Open, io_uring) is loaded
  here (``tty_filter``), together with the refusal of new namespaces (``namespaces``) that
  firejail's ``--restrict-namespaces`` would otherwise add at the cost of two helper
  processes;
- it keeps the program in the terminal's foreground process group together with firejail
  itself, and firejail answers a Ctrl-C by shutting the sandbox down. When a standard
  stream is a terminal, the program moves into a process group of its own and makes it
  the terminal's foreground group, so that Ctrl-C reaches the program alone (as
  ``KeyboardInterrupt``), as it would under plain ``python``;
- it waits, once the program has ended, for every process the program left behind (a
  double-forked daemon keeps the sandbox, and ``pysb run``, alive). firejail's
  ``--deterministic-shutdown`` kills them instead, but sleeps a fixed 100 ms at every
  exit. pysb's reaper (``reaper``: the host's PID namespace, to check there is another
  one) does it at once. The process firejail started forks: the child goes on as the
  program, the parent stays behind as its parent and the subreaper of everything the
  program starts (``PR_SET_CHILD_SUBREAPER``), waits for the program (exit,
  ``os._exit``, a fatal signal, SIGKILL), then kills every other process of the
  sandbox's PID namespace (``kill(-1)``: firejail's PID 1 is spared, as the kernel spares
  every namespace's init), reaps them all and exits with the program's status, as
  firejail reports it (``128 + N`` for a signal). It ends last, so firejail's monitor
  never finds it in ``/proc`` (the design before 2026-12-07, a reaper beside the program,
  could only end after it; measured, it was always gone in time: docs/performance.md).
  The reaper holds none of the program's descriptors, blocks every signal,
  is not dumpable (the program cannot read or write its memory through ``/proc``), runs
  under the same seccomp filter, and is no process of the program's: ``os.wait()`` in
  the program meets only its own children. The program can defeat it by killing it
  first; what it left behind is then still in the sandbox, and firejail waits for it,
  as before. The program cannot kill the rest itself at its exit: the API guard judges
  its ``os.kill``, and an unguarded one kept here would be the program's to find.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # runs in the sandboxed interpreter: no typing at run time
if TYPE_CHECKING:
    from typing import Any


def _take_foreground() -> None:
    for fd in (0, 1, 2):
        try:
            if not os.isatty(fd):
                continue
            if os.tcgetpgrp(fd) != os.getpgrp():
                return  # not in the foreground (started with &): leave job control alone
        except OSError:
            continue
        import signal  # only with a terminal: its import builds enums (~0.5 ms)

        previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.setpgid(0, 0)
            os.tcsetpgrp(fd, os.getpgrp())
        except OSError:
            pass
        finally:
            signal.signal(signal.SIGTTOU, previous)
        return


def pid_namespace() -> int:
    """The inode of this process's PID namespace (the host sends its own to the child)."""
    return os.stat("/proc/self/ns/pid").st_ino


_PR_SET_DUMPABLE = 4
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36


_PRCTL: list[Any] = []  # [prctl, CLong, c_errno] once bound


def bind_prctl() -> None:
    """Look ``prctl`` up before a fork (the reaper's, the lifeline watcher's), so that
    the forked process imports nothing: no import lock another thread of the parent may
    have held at the fork, and in the reaper no import through the installed guard."""
    if not _PRCTL:
        from pysb_core.providerkit import CLong, c_errno, c_function

        _PRCTL[:] = [c_function("prctl", CLong), CLong, c_errno]


def _prctl(option: int, value: int | bytes) -> None:
    """``prctl(option, value)``: a number, or a string's address (``PR_SET_NAME``)."""
    bind_prctl()
    prctl, long_, errno_of = _PRCTL
    zero = long_(0)
    argument = long_(value) if isinstance(value, int) else value
    if prctl(long_(option), argument, zero, zero, zero) != 0:
        raise OSError(errno_of(), f"prctl({option}) failed")


def _start_reaper(host_pid_namespace: int) -> None:
    """Fork: return in the child, which goes on as the program; the parent becomes the
    reaper (see the module's docstring) and never returns."""
    if pid_namespace() == host_pid_namespace or os.getppid() != 1:
        # kill(-1) is confined to the sandbox only in a PID namespace of its own, whose
        # init (firejail) is this process's parent. Anywhere else it would reach far
        # beyond the sandbox: refuse to start rather than guess.
        raise OSError("firejail gave the program no PID namespace of its own")
    # Before the fork: an orphan of the program's is the reaper's from its first moment.
    # The fork's child, the program, is no subreaper (the flag is not inherited).
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    program = os.fork()
    if program != 0:  # pragma: no cover - runs in the reaper
        _reap_after(program)


def detach(
    name: str, keep: tuple[int, ...], *, session: bool = True
) -> None:  # pragma: no cover - in a fork
    """Become a bystander of the run: every signal blocked, every descriptor but ``keep``
    closed (the run's pipes end without it), ``name`` in ``ps``, and with ``session`` a
    session of its own (out of the terminal's and the program's process groups). The
    reaper's first step (in the program's session: the host finds the program as the
    reaper's child in it, ``WrapperProcess``), and that of :mod:`pysb_firejail.lifeline`'s
    watcher."""
    # First: no garbage collection in this copy of the program. The fork shares the
    # program's heap, and a collection (or building the ``signal`` module's enums, whose
    # allocations start one) writes to every object it walks, copying the heap page by
    # page: 7 ms of CPU per run against 2.4 ms without (docs/performance.md, 2026-12-07).
    import gc

    gc.disable()
    import _signal as signal  # the C module: nothing built in Python

    if session:
        os.setsid()
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    low = 0
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    # The name by prctl, not by writing /proc/self/comm: in the reaper the file guard
    # (installed before the child set-ups run) would judge that open, and refuse it.
    try:
        _prctl(_PR_SET_NAME, name.encode()[:15])
    except OSError:
        pass  # a name is for people reading ps: never worth the watcher's or reaper's life


def _reap_after(program: int) -> None:  # pragma: no cover - runs in the reaper
    """The reaper's life: hold nothing of the program's (its streams, pipes and report
    channel close when the program ends), ignore the signals meant for the program, wait
    for its end, kill and reap what is left of the sandbox, and exit as the program did."""
    status = 1
    try:
        try:
            detach("pysb-reaper", keep=(), session=False)  # first: the collector off
            _prctl(_PR_SET_DUMPABLE, 0)  # the program is the same user: no /proc/PID/mem
        except OSError:
            pass  # still the program's parent: waiting for it is what must not fail
        import _signal as signal

        while True:
            try:
                pid, raw = os.waitpid(program, 0)
            except InterruptedError:
                continue
            if pid == program:
                break
        status = exit_status(raw)
        os.kill(-1, signal.SIGKILL)
        while True:
            try:
                os.wait()
            except InterruptedError:
                continue
            except ChildProcessError:
                break
    finally:
        os._exit(status)


def exit_status(raw: int) -> int:
    """The status firejail reports for a process that ended with wait status ``raw``: its
    exit status, or ``128 + N`` when signal N killed it."""
    if os.WIFSIGNALED(raw):
        return 128 + os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw)


def setup(
    env: dict[str, str] | None = None,
    foreground: bool = False,
    tty_filter: bool = False,
    namespaces: bool = False,
    started_fd: int | None = None,
    reaper: int | None = None,
) -> None:
    """Say that firejail's set-up is done (a byte on ``started_fd``, which the host reads
    to tell firejail's own failure from the program's exit 1); make ``os.environ``
    exactly ``env``; load pysb's seccomp filter (:mod:`pysb_core.linux.seccomp`), with the
    namespace refusals if asked (the command then has no ``--restrict-namespaces``:
    failing to load them fails the start), take the terminal's foreground if asked, and
    fork the reaper if asked (the command then has no ``--deterministic-shutdown``)."""
    if started_fd is not None:
        try:
            os.write(started_fd, b"1")
        finally:
            os.close(started_fd)
    if tty_filter or namespaces:
        from pysb_core.providerkit import SeccompRules, install_seccomp

        if not install_seccomp(SeccompRules(namespaces=not namespaces)) and namespaces:
            raise OSError(f"no namespace seccomp filter for {os.uname().machine}")
    if reaper is not None:
        # After the filter (the reaper is as confined as the program), before the
        # environment and the terminal (the program's own), with no thread yet.
        _start_reaper(reaper)
    if env is not None:
        for name in [n for n in os.environ if n not in env]:
            os.environ.pop(name, None)
        for name, value in env.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
    if foreground:
        _take_foreground()
