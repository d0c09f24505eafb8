"""Runs inside the sandboxed interpreter (a ``ChildSetup``); imports nothing but stdlib.

Two things firejail does that a plain ``python`` start would not:

- it edits the environment: it always sets ``container``, ``SHELL``, ``PROMPT_COMMAND``,
  ``FIREJAIL_QUIET``, a few Qt/KDE variables, and ``PATH`` when there is none, overriding
  values the profile chose. ``--rmenv`` cannot undo them (they are added after it), so the
  environment is put back here to exactly the profile's, before the program can read it
  or pass it on (``os.environ`` edits call ``setenv``/``unsetenv``: native code and child
  processes agree);
- it keeps the program in the caller's session, where ``ioctl(TIOCSTI)`` could type into
  the user's shell: pysb's own seccomp filter (:mod:`pysb_core.seccomp`: terminal
  injection, ptrace, vsock and other socket families, TCP Fast Open, io_uring) is loaded
  here (``tty_filter``), together with the refusal of new namespaces (``namespaces``) that
  firejail's ``--restrict-namespaces`` would otherwise add at the cost of two helper
  processes;
- it keeps the program in the terminal's foreground process group together with firejail
  itself, and firejail answers a Ctrl-C by shutting the sandbox down. When a standard
  stream is a terminal, the program moves into a process group of its own and makes it
  the terminal's foreground group, so that Ctrl-C reaches the program alone (as
  ``KeyboardInterrupt``), as it would under plain ``python``.
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


def setup(
    env: dict[str, str] | None = None,
    foreground: bool = False,
    tty_filter: bool = False,
    namespaces: bool = False,
    started_fd: int | None = None,
) -> None:
    """Say that firejail's set-up is done (a byte on ``started_fd``, which the host reads
    to tell firejail's own failure from the program's exit 1); make ``os.environ``
    exactly ``env``; load pysb's seccomp filter (:mod:`pysb_core.seccomp`), with the
    namespace refusals if asked (the command then has no ``--restrict-namespaces``:
    failing to load them fails the start), and take the terminal's foreground if asked."""
    if started_fd is not None:
        try:
            os.write(started_fd, b"1")
        finally:
            os.close(started_fd)
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
