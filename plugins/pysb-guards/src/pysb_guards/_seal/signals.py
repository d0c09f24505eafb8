"""Signals: a handler of the program never runs, nor receives a frame, inside the guards.

Python calls a signal handler between any two bytecodes, with the interrupted frame: it
could be a judge's, whose globals hold the guard's state. ``signal.signal`` wraps the
program's handler (:func:`guard_signal_handlers`); one that arrives while sealed code runs
is queued and run by the next door once its judge returned (:func:`_run_pending`).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# _run_pending's own globals (see core._seal_core): placeholders here, for readers and
# linters only.
PENDING: Any = None
BUSY: Any = None
HOOK_BUSY: Any = None
GETFRAME: Any = None
GET_IDENT: Any = None
MAIN: Any = None


#: Signal handlers of the program that arrived while a guard's sealed code ran: Python
#: calls a handler between two bytecodes of whatever runs, and the handler's own frame
#: would have the judge's below it (``f_back`` is not audited). The wrapper that
#: ``signal.signal`` installs puts them here instead; every door runs them as soon as its
#: judge returned, and the audit hook as soon as its handlers did, when no sealed frame is
#: below any more (:func:`_run_pending`). What the list holds is only ever called from
#: there: a program that reaches it (through this module) can only queue its own calls.
_PENDING_SIGNALS: list[tuple[Any, int]] = []


def _run_pending():
    """Run the queued handlers, in the main thread, when no sealed frame is below the
    caller (the hook refuses ``sys._getframe`` of a frame with one on its chain to all but
    sealed code): else the outer door runs them. Globals: a few names, no builtins.

    Never while the audit hook dispatches an event in this thread (``HOOK_BUSY``): the
    dispatcher lets its own nested events through, so from a hook called inside it (its
    look at who asks for a frame, when a judge's frame walk asked) the test below would
    pass with the judge still on the stack."""
    if GET_IDENT() != MAIN or BUSY or MAIN in HOOK_BUSY:
        return  # BUSY: the audit event of its own sys._getframe, or a handler's calls
    BUSY.append(True)
    try:
        try:
            GETFRAME(1)
        except PermissionError:
            return
        while PENDING:
            handler, signum = PENDING.pop(0)
            handler(signum, None)
    finally:
        BUSY.pop()


def guard_signal_handlers(safe_frame: Callable[[Any], Any], guard: Callable[..., Any]) -> None:
    """A handler the program installs receives ``None`` instead of a frame of the guards.

    Python calls a signal handler between any two bytecodes, with the interrupted frame:
    it could be a judge's, whose globals hold the guard's state. ``signal.signal`` wraps
    the program's handler; ``signal.getsignal`` still answers the program's own.
    ``safe_frame`` is the audit hook's test, ``guard`` the seal's face builder.
    """
    import _signal

    original_signal = _signal.signal
    original_getsignal = _signal.getsignal
    wrappers: dict[int, tuple[Any, Any]] = {}

    def unwrap(handler: Any) -> Any:
        entry = wrappers.get(id(handler))
        return entry[1] if entry is not None and entry[0] is handler else handler

    def signal(signalnum: Any, handler: Any, /) -> Any:
        if callable(handler):
            user = handler

            def wrapper(signum: int, frame: Any) -> Any:
                shown = safe_frame(frame)
                if shown is None and frame is not None:
                    # A guard's sealed code was interrupted: the handler runs once it
                    # returned (see _PENDING_SIGNALS), not with the judge below it.
                    _PENDING_SIGNALS.append((user, signum))
                    return None
                return user(signum, shown)

            previous = original_signal(signalnum, wrapper)
            wrappers[id(wrapper)] = (wrapper, user)
        else:
            previous = original_signal(signalnum, handler)
        return unwrap(previous)

    def getsignal(signalnum: Any, /) -> Any:
        return unwrap(original_getsignal(signalnum))

    for made, original in ((signal, original_signal), (getsignal, original_getsignal)):
        # the faces take these names: CPython's (its C functions are _signal's)
        made.__doc__, made.__module__ = original.__doc__, original.__module__
        made.__name__ = made.__qualname__ = original.__name__
    faces = {
        "signal": guard(signal, None),
        "getsignal": guard(getsignal, None),
    }
    modules = [_signal, sys.modules.get("signal")]
    for module in modules:
        if module is None:
            continue
        for name, face in faces.items():
            if getattr(module, name, None) in (original_signal, original_getsignal):
                setattr(module, name, face)
    from pysb_guards._patch import defer_sweep

    defer_sweep({original_signal: faces["signal"], original_getsignal: faces["getsignal"]})
