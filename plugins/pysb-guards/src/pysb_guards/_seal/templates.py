"""The code of every door and face: templates compiled with this module, copied per guard.

Also the two namespaces doors and faces run with (:data:`DOOR_NS`, :data:`_FACE_NS`) and
the built-in types the seal needs, taken without importing ``types`` (not otherwise
needed in the sandbox before the program).
"""

from __future__ import annotations

import builtins
import sys

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any


def _unchanged(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A ``prepare`` that changes nothing."""
    return args, kwargs


def _types() -> tuple[type, type, type, type]:
    """FunctionType, CodeType, FrameType and TracebackType without importing ``types``
    (not otherwise needed in the sandbox before the program)."""
    try:
        raise TypeError
    except TypeError as e:
        tb = e.__traceback__
    frame = sys._getframe()
    return type(_unchanged), type(frame.f_code), type(frame), type(tb)


_FunctionType, _CodeType, _FrameType, _TracebackType = _types()
_ModuleType = type(sys)
del _types

#: The globals of every door. No door code reads a global name; the builtins are there for
#: C functions that default to their caller's builtins (``exec`` of a module's code).
#: ``__tracebackhide__``: the convention of pytest (and IPython, pdb++) for a frame a
#: traceback leaves out. A reader that takes every entry of a traceback before reading a
#: frame (pytest builds its list from ``tb_next`` alone) keeps the guards' entries, which
#: the splice on ``tb_frame`` cannot take back; such readers ask this first, and pass
#: over the door, whose code they could not read (docs/compat.md, Tracebacks).
DOOR_NS: dict[str, Any] = {"__builtins__": vars(builtins), "__tracebackhide__": True}

#: The globals of every face (faces read no global name either).
_FACE_NS: dict[str, Any] = {
    "__builtins__": builtins,
    "__name__": "pysb_guards.<face>",
    "__tracebackhide__": True,
}


# Templates. They are never called: their code is copied with each placeholder constant
# replaced (``_door``, ``_face``). Compiled with this module, they cost nothing at sandbox
# start (code compiled from text there did).
#
# Every name they use is a placeholder replaced by the object itself, so the code loads
# them with LOAD_CONST: no global, no closure, no local ever holds the original or the judge.
# A placeholder is written ``("@J" if 1 else 0)``: the compiler drops the test and loads "@J"
# as a constant, and, unlike a call on a bare literal, warns about nothing (in an ``except``
# clause a bare literal draws no warning either).
#
# Doors (``_t_door``, ``_t_door_nopost``, the gates, ``_t_audit_hook``) show as
# `File "<pysb-door (importlib._bootstrap)>"`, faces (``_t_face*``) as
# `File "<pysb guard (importlib._bootstrap)>"` in tracebacks (see FACE_FILE).
#
# A door refuses keyword names that are not exact ``str`` before its judge looks at them: a
# ``str`` subclass whose hash collides with ``"dir_fd"`` would run its ``__eq__`` in
# ``kwargs.get("dir_fd")``.
#
# Each variant (with or without a ``post`` step, a ``prepare`` step, a lone-``str`` shortcut;
# each gate signature) is a template of its own, on purpose: a test on a placeholder
# constant (``if not ("@LONE" if 1 else 0)``) is decided by the compiler, which folds a
# jump on a constant, before the placeholder is replaced -- and a test on a real value
# would cost every guarded call a few bytecodes.
#
# A face runs the signal handlers queued inside the guard (``_seal.signals``) as its last
# step, after its last call: the interpreter runs a Python-level handler only at a check
# (after a C call, at a function's start, on a backward jump), so one whose signal arrived
# in the door -- ``os.kill`` of the process itself delivers before it returns, a timer
# fires during the call -- was queued there and, with the door's own run of the queue
# already past, waited for the next guarded call, which may never come. The test is a
# comparison with an empty list (``!=``: no call, hence no check between it and the
# ``return``; a test on the placeholder alone would be folded away by the compiler).
#
# Gates are doors that answer the common case themselves: ``__import__`` and
# ``import_module`` of a name whose top-level package is in "@FAST" (a set only sealed code
# and gates hold) go straight to the original; every other call goes through "@SLOW", the
# full door and its judge. Only an exact ``str`` takes the short way (a subclass could
# answer ``partition`` with anything), and "@FAST" holds only names the judge allows
# without looking further: the short way never answers differently from the long one.
# A dotted name whose package is in "@FAST" joins it (up to "@LIMIT" entries), sparing
# ``partition`` next time: the verdict depends on the exact name alone, never on
# ``sys.modules``, and a dotted entry can never match a top-level name. A relative
# ``__import__`` goes to "@SLOW" with the importing module's package read out of its
# globals by "@NORM" (plain code: reading a dictionary of the program may run the
# program's code), in a fresh dictionary that the judge and the original both read.


def _t_door(*args, **kwargs):
    if kwargs:
        for k in kwargs:
            if ("@TYPE" if 1 else 0)(k) is not ("@STR" if 1 else 0):
                return ("@R" if 1 else 0)(("@TE" if 1 else 0)("keywords must be strings"), None)
    try:
        v = ("@J" if 1 else 0)(args, kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, None)
    if ("@LEN" if 1 else 0)("@PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    if v is not None:
        if ("@TYPE" if 1 else 0)(v) is not ("@T" if 1 else 0):
            return v
        args, kwargs = v
    try:
        r = ("@O" if 1 else 0)(*args, **kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    return ("@P" if 1 else 0)(r, args, kwargs)


def _t_door_fix(*args, **kwargs):
    if kwargs:
        for k in kwargs:
            if ("@TYPE" if 1 else 0)(k) is not ("@STR" if 1 else 0):
                return ("@R" if 1 else 0)(("@TE" if 1 else 0)("keywords must be strings"), None)
    try:
        v = ("@J" if 1 else 0)(args, kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, None)
    if ("@LEN" if 1 else 0)("@PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    if v is not None:
        if ("@TYPE" if 1 else 0)(v) is not ("@T" if 1 else 0):
            return v
        args, kwargs = v
    try:
        r = ("@O" if 1 else 0)(*args, **kwargs)
    except "@BE" as e:  # noqa: B030
        ("@F" if 1 else 0)(e)
        return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    return ("@P" if 1 else 0)(r, args, kwargs)


def _t_door_nopost(*args, **kwargs):
    if kwargs:
        for k in kwargs:
            if ("@TYPE" if 1 else 0)(k) is not ("@STR" if 1 else 0):
                return ("@R" if 1 else 0)(("@TE" if 1 else 0)("keywords must be strings"), None)
    try:
        v = ("@J" if 1 else 0)(args, kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, None)
    if ("@LEN" if 1 else 0)("@PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    if v is not None:
        if ("@TYPE" if 1 else 0)(v) is not ("@T" if 1 else 0):
            return v
        args, kwargs = v
    try:
        return ("@O" if 1 else 0)(*args, **kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)


def _t_gate___import__(name, globals=None, locals=None, fromlist=(), level=0):
    if level is ("@ZERO" if 1 else 0) and ("@TYPE" if 1 else 0)(name) is ("@STR" if 1 else 0):
        if name not in ("@FAST" if 1 else 0):
            if name.partition(".")[0] not in ("@FAST" if 1 else 0):
                return ("@SLOW" if 1 else 0)(name, globals, locals, fromlist, level)
            if ("@LEN" if 1 else 0)("@FAST" if 1 else 0) < ("@LIMIT" if 1 else 0):
                ("@FAST" if 1 else 0).add(name)
        try:
            return ("@O" if 1 else 0)(name, globals, locals, fromlist, level)
        except "@BE" as e:  # noqa: B030
            return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    if ("@NORM" if 1 else 0) is not None:
        return ("@SLOW" if 1 else 0)(*("@NORM" if 1 else 0)(name, globals, locals, fromlist, level))
    return ("@SLOW" if 1 else 0)(name, globals, locals, fromlist, level)


def _t_gate_import_module(name, package=None):
    if ("@TYPE" if 1 else 0)(name) is ("@STR" if 1 else 0):
        if name not in ("@FAST" if 1 else 0):
            if name.partition(".")[0] not in ("@FAST" if 1 else 0):
                return ("@SLOW" if 1 else 0)(name, package)
            if ("@LEN" if 1 else 0)("@FAST" if 1 else 0) < ("@LIMIT" if 1 else 0):
                ("@FAST" if 1 else 0).add(name)
        try:
            return ("@O" if 1 else 0)(name, package)
        except "@BE" as e:  # noqa: B030
            return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    return ("@SLOW" if 1 else 0)(name, package)


def _t_audit_hook(event, args):
    if event in ("@W" if 1 else 0):
        r = ("@D" if 1 else 0)(event, args)
        if ("@LEN" if 1 else 0)("@PENDING" if 1 else 0):
            ("@RUN" if 1 else 0)()
        if r is not None:
            r = ("@B" if 1 else 0)(r)
            try:
                raise r
            finally:
                r = None  # no cycle exception -> traceback -> this frame -> exception


def _t_face(*args, **kwargs):
    r = ("@DOOR" if 1 else 0)(*args, **kwargs)
    c = ("@TYPE" if 1 else 0)(r)
    if c is ("@REFUSAL" if 1 else 0):
        args = kwargs = None  # the traceback keeps this frame: not the program's arguments
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
            ("@RUN" if 1 else 0)()
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if c is ("@VALUE" if 1 else 0):
        r = ("@VALUE_OF" if 1 else 0)(r)
    if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    return r


def _t_face_prepare(*args, **kwargs):
    args, kwargs = ("@PREPARE" if 1 else 0)(args, kwargs)
    r = ("@DOOR" if 1 else 0)(*args, **kwargs)
    c = ("@TYPE" if 1 else 0)(r)
    if c is ("@REFUSAL" if 1 else 0):
        args = kwargs = None  # the traceback keeps this frame: not the program's arguments
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
            ("@RUN" if 1 else 0)()
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if c is ("@VALUE" if 1 else 0):
        r = ("@VALUE_OF" if 1 else 0)(r)
    if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    return r


def _t_face_lone_str(*args, **kwargs):
    if (
        kwargs
        or ("@LEN" if 1 else 0)(args) != 1
        or ("@TYPE" if 1 else 0)(args[0]) is not ("@STR" if 1 else 0)
    ):
        args, kwargs = ("@PREPARE" if 1 else 0)(args, kwargs)
    r = ("@DOOR" if 1 else 0)(*args, **kwargs)
    c = ("@TYPE" if 1 else 0)(r)
    if c is ("@REFUSAL" if 1 else 0):
        args = kwargs = None  # the traceback keeps this frame: not the program's arguments
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
            ("@RUN" if 1 else 0)()
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if c is ("@VALUE" if 1 else 0):
        r = ("@VALUE_OF" if 1 else 0)(r)
    if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    return r


def _t_face___import__(name, globals=None, locals=None, fromlist=(), level=0):
    r = ("@DOOR" if 1 else 0)(name, globals, locals, fromlist, level)
    if ("@TYPE" if 1 else 0)(r) is ("@REFUSAL" if 1 else 0):
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
            ("@RUN" if 1 else 0)()
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    return r


def _t_face_import_module(name, package=None):
    r = ("@DOOR" if 1 else 0)(name, package)
    if ("@TYPE" if 1 else 0)(r) is ("@REFUSAL" if 1 else 0):
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
            ("@RUN" if 1 else 0)()
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if ("@PENDING" if 1 else 0) != ("@NONE_PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    return r


#: ``from __future__ import annotations`` (this module's): ``exec``, ``eval`` and ``compile``
#: of a string inherit the future flags of the frame calling them, which for a guarded
#: call is a door. The templates have no annotations: they drop the flag, or code the
#: program (``dataclasses``' generated ``__init__``) compiles would get string annotations.
_FUTURE_ANNOTATIONS = 0x1000000


def _renamed(code: Any, filename: str, name: str | None = None) -> Any:
    """``code`` shown as coming from ``filename`` (and called ``name``), without this
    module's future flags."""
    flags = code.co_flags & ~_FUTURE_ANNOTATIONS
    if name is None:
        return code.replace(co_filename=filename, co_flags=flags)
    return code.replace(co_filename=filename, co_name=name, co_qualname=name, co_flags=flags)


#: The code file names of faces and doors. Each holds ``importlib`` and ``_bootstrap``: the
#: mark by which CPython's ``warnings`` (``Python/_warnings.c``'s ``is_internal_frame``,
#: ``warnings.py``'s ``_is_internal_filename``, 3.11 to 3.13) passes over the import system's
#: own frames when it counts a warning's ``stacklevel``. A warning raised under a guarded
#: call (a module's body run by the import system through the guarded ``exec``, the
#: ``__import__`` gate; code run by a guarded call) is then attributed to the program's
#: line, as without the guards, and never to a face or door.
FACE_FILE = "<pysb guard (importlib._bootstrap)>"
DOOR_FILE = "<pysb-door (importlib._bootstrap)>"

_TEMPLATES = {
    name[3:]: _renamed(fn.__code__, FACE_FILE, "face")
    if name.startswith("_t_face")
    else _renamed(fn.__code__, DOOR_FILE)
    for name, fn in list(globals().items())
    if name.startswith("_t_")
}
_DEFAULTS = {
    name[3:]: fn.__defaults__
    for name, fn in list(globals().items())
    if name.startswith("_t_") and fn.__defaults__
}


#: What each gate's original is: ``__import__`` itself; for ``import_module``, the standard
#: ``importlib.import_module`` (not the ``_gcd_import`` it calls, a frame fewer: a warning's
#: ``stacklevel`` counts that frame, as without the guards).
GATES = ("__import__", "import_module")

#: How many names a gate's set may hold (top-level names plus the dotted names it adds).
GATE_LIMIT = 4096
