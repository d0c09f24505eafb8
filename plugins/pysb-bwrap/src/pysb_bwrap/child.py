"""Runs inside the sandboxed interpreter (a ``ChildSetup``); imports nothing but stdlib.

Two things bwrap 0.8 does that a plain ``python`` start would not:

- it always sets ``PWD`` (to the ``--chdir`` directory), a variable the profile did not
  grant; it is removed again here, before the program can read it or pass it on;
- in a run on the terminal (the prompt, or a program in the terminal's foreground)
  bwrap shares the terminal's foreground process group with the program (no
  ``--new-session``, so that job control works). Ctrl-C and Ctrl-\\ go to the whole
  group and bwrap does not forward signals: it would die and take the program with it. So
  the provider starts bwrap with SIGINT and SIGQUIT ignored, and the program, which
  inherits those dispositions through ``exec``, gets CPython's back here.
"""

from __future__ import annotations

import _signal as signal  # not ``signal``: its enum import costs ~3 ms at every start
import os


def setup(unset: list[str] | None = None, restore_sigint: bool = False) -> None:
    """Undo bwrap's additions: remove ``unset`` variables, restore SIGINT and SIGQUIT if
    asked."""
    for name in unset or ():
        os.environ.pop(name, None)  # also unsetenv(): native code and children agree
    if restore_sigint:
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
            signal.signal(signal.SIGQUIT, signal.SIG_DFL)
