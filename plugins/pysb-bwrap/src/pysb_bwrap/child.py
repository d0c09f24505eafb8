"""Runs inside the sandboxed interpreter (a ``ChildSetup``); imports nothing but stdlib.

Two things bwrap 0.8 does that a plain ``python`` start would not:

- it always sets ``PWD`` (to the ``--chdir`` directory), a variable the profile did not
  grant; it is removed again here, before the program can read it or pass it on;
- in an interactive run bwrap shares the terminal's foreground process group with the
  program (no ``--new-session``, so that job control works). Ctrl-C goes to the whole
  group and bwrap does not forward signals: it would die and take the program with it. So
  the provider starts bwrap with SIGINT ignored, and the program, which inherits that
  disposition through ``exec``, gets CPython's handler back here.
"""

from __future__ import annotations

import _signal as signal  # not ``signal``: its enum import costs ~3 ms at every start
import os


def setup(unset: list[str] | None = None, restore_sigint: bool = False) -> None:
    """Undo bwrap's additions: remove ``unset`` variables, restore SIGINT if asked."""
    for name in unset or ():
        os.environ.pop(name, None)  # also unsetenv(): native code and children agree
    if restore_sigint and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
