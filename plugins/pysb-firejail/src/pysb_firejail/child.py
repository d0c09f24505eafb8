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
  exit. A reaper (``reaper``: the host's PID namespace, to check there is another one)
  does it at once: a process of the sandbox, outside the program's tree and session,
  that watches the program through a pidfd and, when it ends (exit, ``os._exit``, a
  fatal signal), kills every other process of the sandbox's PID namespace (``kill(-1)``:
  firejail's PID 1 is spared, as the kernel spares every namespace's init). The program
  can defeat it by killing it first; what it left behind is then still in the sandbox,
  and firejail waits for it, as before. The reaper, which can only end after the
  program, is still in ``/proc`` (alive, or a zombie not yet reaped) when firejail's
  monitor looks for what is left; the monitor then sleeps once more (20 ms) before it
  looks again: every run. The program cannot kill the rest itself at its exit: the API
  guard judges its ``os.kill``, and an unguarded one kept here would be the program's
  to find.
"""

from __future__ import annotations

import os


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


def reaper_supported() -> bool:
    """Whether this kernel and Python give a pidfd (Linux 5.3, Python 3.9) to watch the
    program with; the host asks before it leaves ``--deterministic-shutdown`` out."""
    try:
        fd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError):
        return False
    os.close(fd)
    return True


def pid_namespace() -> int:
    """The inode of this process's PID namespace (the host sends its own to the child)."""
    return os.stat("/proc/self/ns/pid").st_ino


def _start_reaper(host_pid_namespace: int) -> None:
    """Fork the reaper (see the module's docstring) as a grandchild, so that it is not
    the program's child (``os.wait()`` in the program would otherwise meet it) but
    firejail's, once the intermediate process has exited."""
    if pid_namespace() == host_pid_namespace or os.getppid() != 1:
        # kill(-1) is confined to the sandbox only in a PID namespace of its own, whose
        # init (firejail) is the program's parent. Anywhere else it would reach far beyond
        # the sandbox: refuse to start rather than guess.
        raise OSError("firejail gave the program no PID namespace of its own")
    program = os.pidfd_open(os.getpid())
    try:
        middle = os.fork()
        if middle == 0:  # pragma: no cover - runs in the forked processes
            try:
                if os.fork() == 0:
                    _reap_after(program)
            finally:
                os._exit(0)
        os.waitpid(middle, 0)
    finally:
        os.close(program)


def detach(name: str, keep: tuple[int, ...]) -> None:  # pragma: no cover - in a fork
    """Become a bystander of the run: a session of its own (out of the terminal's and the
    program's process groups), every signal blocked, every descriptor but ``keep`` closed
    (the run's pipes end without it), ``name`` in ``ps``. The reaper's first step, and
    that of :mod:`pysb_firejail.lifeline`'s watcher."""
    # First: no garbage collection in this copy of the program. The fork shares the
    # program's heap, and a collection (or building the ``signal`` module's enums, whose
    # allocations start one) writes to every object it walks, copying the heap page by
    # page: 7 ms of CPU per run against 2.4 ms without (docs/performance.md, 2026-12-07).
    import gc

    gc.disable()
    import _signal as signal  # the C module: nothing built in Python

    os.setsid()
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    low = 0
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(name)
    except OSError:
        pass


def _reap_after(program: int) -> None:  # pragma: no cover - runs in the reaper
    """The reaper's life: hold nothing of the program's (its streams, pipes and report
    channel close when the program ends), ignore the signals meant for the program, wait
    for its end, then kill what is left of the sandbox."""
    try:
        detach("pysb-reaper", keep=(program,))  # first: it turns the collector off
        import _signal as signal
        import select

        poller = select.poll()
        poller.register(program, select.POLLIN)
        while not poller.poll():
            pass
        os.kill(-1, signal.SIGKILL)
    finally:
        os._exit(0)


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
    start the reaper if asked (the command then has no ``--deterministic-shutdown``)."""
    if started_fd is not None:
        try:
            os.write(started_fd, b"1")
        finally:
            os.close(started_fd)
    if reaper is not None:
        _start_reaper(reaper)  # first: before the filter, with no thread of the program's yet
    if tty_filter or namespaces:
        from pysb_core.providerkit import SeccompRules, install_seccomp

        if not install_seccomp(SeccompRules(namespaces=not namespaces)) and namespaces:
            raise OSError(f"no namespace seccomp filter for {os.uname().machine}")
    if env is not None:
        for name in [n for n in os.environ if n not in env]:
            os.environ.pop(name, None)
        for name, value in env.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
    if foreground:
        _take_foreground()
