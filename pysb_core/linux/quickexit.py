"""End a process as the interpreter's own exit would, without tearing the interpreter down.

Finalizing an interpreter (every module torn down, every object collected) costs about a
quarter of ``python -c pass``, and a ``pysb run`` pays it twice: in pysb and in the
sandboxed interpreter. What a normal exit does that anyone can observe, in CPython's
order (``Py_FinalizeEx``):

1. it waits for the threads that are not daemons (``threading._shutdown``);
2. it runs the ``atexit`` callbacks;
3. it flushes ``sys.stdout`` and ``sys.stderr`` (when that fails, the status becomes 120
   and the error is printed);
4. it finalizes the objects still alive: ``__del__`` methods, the buffers of files never
   closed, the ``finally`` blocks of suspended generators, weak reference callbacks;
5. it exits with the status.

:func:`finish` does 1 to 3, then makes sure that 4 has nothing to do -- no object alive
has a finalizer that could do anything (:func:`nothing_left`) -- and calls ``os._exit``.
When something is left for 4, a flush fails, a thread still runs, or ``-i`` asks for the
prompt after the program, it returns, and the caller exits normally: 1 and 2 then find
nothing more to do, 3 and 4 run as they would have. A program sees the same exit either
way, only sooner.

Everything is bound when the module is imported: the sandboxed interpreter imports it
before the Python guards are armed and ends through it after the program ran, when
``os._exit`` is a call the guards judge. Nothing here runs code of the program's while it
looks at the objects: each is judged through the descriptors of the interpreter's own
types, never through attributes of its own (:mod:`pysb_core.child.ending` adds what the
sandbox needs besides: no handler or ``__del__`` of the program's runs meanwhile).
"""

from __future__ import annotations

import atexit
import gc
import io
import itertools
import os
import sys
from _weakref import ref as _ref

TYPE_CHECKING = False  # imported by every sandboxed interpreter: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_exit = os._exit
_environ_get = os.environ.get
_run_exitfuncs = atexit._run_exitfuncs
_compress = itertools.compress
_get_objects = gc.get_objects
_ref_call = _ref.__call__
_ref_callback = _ref.__callback__.__get__  # type: ignore[attr-defined]
_type_mro = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__
_type = type

#: The io module's own classes: their finalizer only flushes and closes, nothing when closed.
_FILES = frozenset(
    {
        io.FileIO,
        io.BufferedReader,
        io.BufferedWriter,
        io.BufferedRandom,
        io.BufferedRWPair,
        io.TextIOWrapper,
        io.BytesIO,
        io.StringIO,
    }
)


# ``types``' names without the module (~0.2 ms of every start), as ``types`` makes them.
def _generator() -> Iterator[None]:
    yield


async def _coroutine() -> None:
    pass


_GENERATOR = _type(_generator())
_made = _coroutine()
_COROUTINE = _type(_made)
_made.close()  # never awaited: closed, so that no warning says so
del _made
_gen_suspended = _GENERATOR.gi_suspended.__get__  # type: ignore[attr-defined]
_coro_suspended = _COROUTINE.cr_suspended.__get__  # type: ignore[attr-defined]
_FUNCTION, _BUILTIN = _type(_generator), _type(len)
_function_module = _FUNCTION.__dict__["__module__"].__get__
_builtin_self = _BUILTIN.__self__.__get__  # type: ignore[attr-defined]
_builtin_name = _BUILTIN.__dict__["__name__"].__get__

#: Weak reference callbacks of the standard library's weak containers: they only remove
#: an entry from their container, which dies with the process anyway.
_QUIET_CALLBACK_MODULES = frozenset({"weakref", "_weakrefset"})


class _Kinds(dict):
    """type -> whether its objects can have a finalizer, filled as types are met (about a
    hundred in a small program: the objects are sorted by it in C)."""

    def __missing__(self, cls: type) -> bool:
        found = self[cls] = _can_finalize(cls)
        return found


def _can_finalize(cls: type) -> bool:
    """A ``__del__`` in the class or a base (Python's own, or the slot of C code's
    ``tp_finalize``), or a weak reference (its callback); read from the type's own
    dictionaries, so no metaclass of the program's is asked."""
    mro = _type_mro(cls)
    return _ref in mro or any("__del__" in _type_dict(base) for base in mro)


def _quiet_callback(callback: object) -> bool:
    kind = _type(callback)
    if kind is _FUNCTION:
        return _function_module(callback) in _QUIET_CALLBACK_MODULES
    # (A live weakref.finalize is left: atexit already ran those it runs, and the module
    # that defines it is not imported here, the sandbox's start-up does not need it.)
    # _abc's registries (the isinstance caches of every ABC): a built-in ``_destroy``
    # bound to a weak reference to the set it removes an entry from
    return (
        kind is _BUILTIN
        and _type(_builtin_self(callback)) is _ref
        and _builtin_name(callback) == "_destroy"
    )


def _file_closed(obj: object) -> bool:
    """``obj.closed`` as the file's finalizer reads it, from the file at the bottom of the
    stack (a text wrapper's buffer, a buffer's raw file): only the io module's own C
    attributes are read, never those of a buffer the program wrote. True for memory files
    (their finalizer frees memory, nothing else)."""
    kind = _type(obj)
    if kind is io.TextIOWrapper:
        obj = obj.buffer  # type: ignore[attr-defined]
        kind = _type(obj)
    if kind in (io.BufferedReader, io.BufferedWriter, io.BufferedRandom):
        obj = obj.raw  # type: ignore[attr-defined]
        kind = _type(obj)
    if kind is io.FileIO:
        return obj.closed  # type: ignore[attr-defined]
    return kind in (io.BytesIO, io.StringIO)


def _left(obj: object, streams: frozenset[int]) -> bool:
    """Whether finalizing ``obj`` (of a type that can have a finalizer) could do
    something a program sees."""
    kind = _type(obj)
    if kind in _FILES:
        return id(obj) not in streams and not _file_closed(obj)
    if kind is _GENERATOR:
        return _gen_suspended(obj)  # its finally blocks; none before it started
    if kind is _COROUTINE:
        return _coro_suspended(obj)
    if _ref in _type_mro(kind):
        callback = _ref_callback(obj)
        return callback is not None and _ref_call(obj) is not None and not _quiet_callback(callback)
    return True  # a __del__ of its own, or an object of C code with a finalizer


def _streams() -> frozenset[int]:
    """The ids of the standard streams and of the buffers and raw files below them: the
    exit flushes them (:func:`finish` did); their descriptors close with the process."""
    ids: set[int] = set()
    for name in ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__"):
        stream = getattr(sys, name, None)
        while _type(stream) in _FILES and id(stream) not in ids:
            ids.add(id(stream))
            stream = getattr(stream, "buffer", None) or getattr(stream, "raw", None)
    return frozenset(ids)


def nothing_left(objects: list[object]) -> bool:
    """No object of ``objects`` (``gc.get_objects()``) has a finalizer that could write,
    print or run code. The objects of types that can have one are picked out in C
    (``itertools.compress`` over their types): the cost is about that of the listing,
    not of a Python loop over ~10,000 objects."""
    kinds = _Kinds()
    suspects = _compress(objects, map(kinds.__getitem__, map(_type, objects)))
    streams = _streams()
    return not any(_left(obj, streams) for obj in suspects)


def _flushed() -> bool:
    """``sys.stdout`` and ``sys.stderr`` flushed, as the exit flushes them (a closed or
    missing stream is skipped); False when a flush failed (the normal exit then reports
    it, with status 120)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except BaseException:
            return False
    return True


def nothing_to_finalize() -> bool:
    """:func:`nothing_left` of every object the collector tracks (pysb's own process; the
    sandboxed interpreter has its own caller: :mod:`pysb_core.child.ending`)."""
    return nothing_left(_get_objects())


def finish(status: int, check: Callable[[], bool] = nothing_to_finalize) -> None:
    """End the process with ``status`` as a normal exit would, but sooner; returns only
    when the normal exit must run (the caller then raises ``SystemExit(status)``).

    ``check``: whether nothing is left to finalize (:func:`nothing_to_finalize`; the
    sandboxed interpreter passes its own, which also makes sure that no code of the
    program's runs meanwhile).
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # type: ignore[attr-defined]
    _run_exitfuncs()
    if sys.flags.inspect or _environ_get("PYTHONINSPECT"):
        return  # -i: the prompt follows the program
    if _type(status) is not int or not 0 <= status <= 255:
        return  # the interpreter's own conversion of another status
    if not _flushed() or not check():
        return
    _exit(status)
