"""SQLite's own per-connection hook, for the file guard's authorizer (issue 28).

Python's ``sqlite3`` raises no event once a connection is usable: ``sqlite3.connect/handle``
comes before ``Connection.__init__`` marks it initialised (``set_authorizer`` refuses it
there), and a connection built directly, by a factory's ``__init__`` or re-initialised is
in the program's hands as soon as the C code returns. SQLite itself has a hook no Python
code can skip: ``sqlite3_auto_extension`` runs an entry point inside every
``sqlite3_open_v2`` of the library, before the handle reaches anyone. The file guard's
entry point sets its authorizer there (``_f_sqlite_c_entry`` / ``_f_sqlite_c_authorizer``,
sealed), so every connection judges ``ATTACH`` / ``VACUUM INTO`` however it was made.

Made at install (before the guards are armed: the ``dlopen``, ``dlsym`` and the
registration are pysb's own calls), with ``_ctypes`` alone (the ``ctypes`` package costs
more and is the program's to import), only when the policy lets the program import
``sqlite3``: it costs about 1.5 ms (``_ctypes`` and the library loaded). The library is
the one ``_sqlite3`` links: looked up through ``_sqlite3``'s own file, whose dependencies
``dlsym`` searches; Python's later import of ``_sqlite3`` loads that same file again.

Why a module of its own: it is the only native code of the file guard, and the one piece
that depends on how this interpreter's ``_sqlite3`` was built.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: SQLite's result codes the entry point answers with.
SQLITE_OK = 0
SQLITE_ERROR = 1


def _sqlite3_file() -> str | None:
    """The file of the ``_sqlite3`` extension module, found without importing it."""
    import _imp

    for suffix in _imp.extension_suffixes():
        for entry in sys.path:
            if type(entry) is str and entry.endswith("lib-dynload"):
                candidate = os.path.join(entry, "_sqlite3" + suffix)
                if os.path.isfile(candidate):
                    return candidate
    return None


def prepare() -> dict[str, Any] | None:
    """The C pieces: ``make(entry, authorizer)`` turns the two sealed functions into C
    callbacks and registers the entry point with ``sqlite3_auto_extension``; None when
    that cannot be done here (no ``_ctypes``, no ``_sqlite3`` file, no such symbol): the
    guard then keeps connections to what ``sqlite3.connect`` arms itself."""
    path = _sqlite3_file()
    if path is None:
        return None
    try:
        import _ctypes

        handle = _ctypes.dlopen(path, os.RTLD_NOW)
        set_authorizer = _ctypes.dlsym(handle, "sqlite3_set_authorizer")
        auto_extension = _ctypes.dlsym(handle, "sqlite3_auto_extension")
    except (ImportError, OSError):
        return None

    class CInt(_ctypes._SimpleCData):
        _type_ = "i"

    class CPointer(_ctypes._SimpleCData):
        _type_ = "P"

    class CText(_ctypes._SimpleCData):
        _type_ = "z"

    cdecl = _ctypes.FUNCFLAG_CDECL

    class Authorizer(_ctypes.CFuncPtr):
        _argtypes_ = (CPointer, CInt, CText, CPointer, CPointer, CPointer)
        _restype_ = CInt
        _flags_ = cdecl

    class Entry(_ctypes.CFuncPtr):
        _argtypes_ = (CPointer, CPointer, CPointer)
        _restype_ = CInt
        _flags_ = cdecl

    class SetAuthorizer(_ctypes.CFuncPtr):
        _argtypes_ = (CPointer, Authorizer, CPointer)
        _restype_ = CInt
        _flags_ = cdecl

    class AutoExtension(_ctypes.CFuncPtr):
        _argtypes_ = (Entry,)
        _restype_ = CInt
        _flags_ = cdecl

    def make(entry: Any, authorizer: Any) -> dict[str, Any] | None:
        pieces = {
            "set_authorizer": SetAuthorizer(set_authorizer),
            "authorizer": Authorizer(authorizer),
            "entry": Entry(entry),
        }
        if AutoExtension(auto_extension)(pieces["entry"]) != SQLITE_OK:
            return None
        return pieces  # kept alive by the guard's sealed state: SQLite holds their addresses

    return {"make": make}


def type_tools() -> dict[str, Any] | None:
    """``namespace(cls)``, the dictionary itself of a type (``PyObject_GenericGetDict``:
    ``type.__dict__`` is a read-only proxy) and ``modified(cls)`` (``PyType_Modified``),
    C functions of this interpreter called with the GIL held: the file guard writes its
    ``set_authorizer`` into the dictionary of the immutable ``sqlite3.Connection`` type,
    whose attribute caches must then forget the old method. None without ``_ctypes``
    (the guard then refuses ``_sqlite3``)."""
    try:
        import _ctypes

        handle = _ctypes.dlopen(None, os.RTLD_NOW)
        get_dict = _ctypes.dlsym(handle, "PyObject_GenericGetDict")
        modified = _ctypes.dlsym(handle, "PyType_Modified")
    except (ImportError, OSError):
        return None

    class PyObject(_ctypes._SimpleCData):
        _type_ = "O"

    class CPointer(_ctypes._SimpleCData):
        _type_ = "P"

    api = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI

    class GetDict(_ctypes.CFuncPtr):
        _argtypes_ = (PyObject, CPointer)
        _restype_ = PyObject
        _flags_ = api

    class TypeModified(_ctypes.CFuncPtr):
        _argtypes_ = (PyObject,)
        _restype_ = None
        _flags_ = api

    namespace = GetDict(get_dict)
    return {"namespace": lambda cls: namespace(cls, None), "modified": TypeModified(modified)}
