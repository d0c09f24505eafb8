"""How the sandboxed interpreter ends once the program has run: as CPython's exit would,
without the interpreter's finalization when nothing is left for it to do
(:mod:`pysb_core.linux.quickexit` says what that means and why it is the same exit).

The list of every object alive (``gc.get_objects``) is what the sensitive-API guard
keeps from the program (it holds the guards' own state), so it is taken here, in
pysb's child code, whose call pysb-guards lets through, and it never leaves this
module's frames: only a yes or no comes out, and while the list exists no code of the
program's can run to look at it -- signals are blocked, the collector paused (a
``__del__``), and no other thread may run (the exit waits for the normal path then).
Everything is bound at import, before the guards are armed.
"""

from __future__ import annotations

import _signal
import _thread
import gc

from pysb_core.linux.quickexit import finish, nothing_left

_get_objects = gc.get_objects
_gc_disable, _gc_enable, _gc_isenabled = gc.disable, gc.enable, gc.isenabled
_thread_count = _thread._count
_sigmask = _signal.pthread_sigmask
_sigpending = _signal.sigpending
_SIG_BLOCK, _SIG_SETMASK = _signal.SIG_BLOCK, _signal.SIG_SETMASK
_ALL_SIGNALS = _signal.valid_signals()
_type = type


def nothing_to_finalize() -> bool:
    """No object alive has a finalizer that could do anything (and no signal came in
    while that was looked at: it is then delivered, and the normal exit follows)."""
    if _thread_count():
        return False  # another thread runs (a daemon): it could see the list
    collecting = _gc_isenabled()
    mask = _sigmask(_SIG_BLOCK, _ALL_SIGNALS)
    _gc_disable()
    try:
        return nothing_left(_get_objects()) and not _sigpending()
    finally:
        _sigmask(_SIG_SETMASK, mask)
        if collecting:
            _gc_enable()


def status_of(exc: SystemExit) -> int | None:
    """The exit status of ``SystemExit`` as CPython takes it, when it is a plain one
    (None, or an int of 0-255); None when the interpreter itself must handle it (a
    message to print, another value to convert)."""
    code = exc.code
    if code is None:
        return 0
    if _type(code) in (int, bool) and 0 <= code <= 255:
        return int(code)
    return None


def end(status: int) -> None:
    """End the sandboxed interpreter with ``status``; returns when the normal exit must
    run (the caller raises ``SystemExit(status)``)."""
    finish(status, nothing_to_finalize)
