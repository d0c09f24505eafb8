"""The parent's restricted unpickler for everything that comes back from the sandbox.

Why: the child runs untrusted code, so its pickles are hostile input. A pickle can name
any importable callable (``os.system``) and call it with any arguments; the only door it
has for naming one is ``find_class``. This unpickler keeps that door to an allowlist:

- **data** (default): exact classes of plain data -- datetime, Decimal, UUID, paths,
  ipaddress, Fraction, zoneinfo, collections -- plus what pickle encodes without globals
  (scalars, str, bytes, list, tuple, dict, set, frozenset, bytearray);
- **caller's classes**: whatever the caller passed in ``sandboxes(result_classes=[...])``;
- **exceptions** (only while decoding a raised exception): ``Exception`` subclasses that the
  parent has already imported. They are rebuilt *without running any Python-level
  ``__init__``/``__new__``* (only the C constructors of builtin exceptions), so an exception
  class with side effects in its constructor cannot be abused.

It never imports a module that is not on the fixed data list, and a dotted name is only
accepted when it is on that list (blocks ``pathlib.Path.unlink``-style method gadgets).
A refusal raises :class:`RestrictedResultError` naming the class.
"""

from __future__ import annotations

import importlib
import io
import pickle
import re
import sys
import types
from collections.abc import Iterable
from typing import Any

from pysb_core.errors import RestrictedResultError

# (module, qualified name) of the data classes every caller accepts
DATA_CLASSES: frozenset[tuple[str, str]] = frozenset(
    [
        ("builtins", "complex"),
        ("builtins", "range"),
        ("builtins", "slice"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("fractions", "Fraction"),
        ("uuid", "UUID"),
        ("uuid", "SafeUUID"),
        ("pathlib", "PurePath"),
        ("pathlib", "PurePosixPath"),
        ("pathlib", "PureWindowsPath"),
        ("pathlib", "Path"),
        ("pathlib", "PosixPath"),
        ("pathlib", "WindowsPath"),
        ("ipaddress", "IPv4Address"),
        ("ipaddress", "IPv6Address"),
        ("ipaddress", "IPv4Network"),
        ("ipaddress", "IPv6Network"),
        ("ipaddress", "IPv4Interface"),
        ("ipaddress", "IPv6Interface"),
        ("zoneinfo", "ZoneInfo"),
        ("zoneinfo", "ZoneInfo._unpickle"),
        ("time", "struct_time"),
        ("collections", "OrderedDict"),
        ("collections", "Counter"),
        ("collections", "deque"),
    ]
)

# framework helpers that rebuild our own exceptions
_EXCEPTION_HELPERS: frozenset[tuple[str, str]] = frozenset(
    [("pysb_core.errors", "_rebuild_denied")]
)

_C_FUNCTIONS = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.BuiltinMethodType)


def _resolve_loaded(module: str, name: str) -> Any:
    """Look ``module.name`` up among modules already imported; never import.

    Reads ``__dict__`` entries only, so a module-level ``__getattr__`` (lazy loaders) is
    never triggered by a hostile pickle.
    """
    mod = sys.modules.get(module)
    if mod is None:
        raise LookupError(module)
    obj: Any = mod
    for part in name.split("."):
        obj = vars(obj).get(part)
        if obj is None:
            raise LookupError(name)
    return obj


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def _solid_base(cls: type) -> Any:
    """The builtin (C) class whose constructor may build instances of ``cls``."""
    builtin = [b for b in cls.__mro__ if not b.__flags__ & _HEAPTYPE]
    return max(builtin, key=lambda b: b.__basicsize__)


class _ExceptionFactory:
    """Rebuilds ``cls(*args)`` without running Python-level ``__new__``/``__init__``.

    Only the builtin (C) constructors run, so an exception class with side effects in its
    constructor cannot be driven by a hostile pickle.
    """

    __slots__ = ("cls",)

    def __init__(self, cls: type[BaseException]) -> None:
        self.cls = cls

    def __call__(self, *args: Any) -> BaseException:
        cls = self.cls
        exc = _solid_base(cls).__new__(cls, *args)  # OSError parses errno/filename here
        init = cls.__init__
        if isinstance(init, _C_FUNCTIONS):
            try:
                init(exc, *args)
            except Exception:
                pass
        exc.args = args
        return exc


def _exception_factory(cls: type[BaseException]) -> _ExceptionFactory:
    return _ExceptionFactory(cls)


#: The C-slot attributes of a denial's builtin base that a pickle may set (plain values).
_DENIAL_SLOTS = frozenset({"errno", "strerror", "filename", "filename2", "name", "path", "msg"})


def _rebuild_denied_safely(cls: Any, args: Any, state: Any, extra: Any = None) -> BaseException:
    """Like ``pysb_core.errors._rebuild_denied``, but only for exception classes, and only
    plain values for the slots of the builtin base (``errno``, ``filename``, ``name``...)."""
    if isinstance(cls, _ExceptionFactory):
        cls = cls.cls
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        raise RestrictedResultError(f"refused to rebuild {cls!r} as an exception")
    exc = _solid_base(cls).__new__(cls)
    exc.args = tuple(args)
    if isinstance(state, dict):
        exc.__dict__.update(state)
    if isinstance(extra, dict):
        for name, value in extra.items():
            if name in _DENIAL_SLOTS and (value is None or type(value) in (int, str, bytes)):
                try:
                    setattr(exc, name, value)
                except (AttributeError, TypeError):
                    pass
    return exc


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose only door to globals is an allowlist."""

    def __init__(
        self,
        file: io.BytesIO,
        *,
        allowed: dict[tuple[str, str], Any],
        exceptions: bool,
    ) -> None:
        super().__init__(file)
        self._allowed = allowed
        self._exceptions = exceptions

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        obj = self._allowed.get(key)
        if obj is not None:
            return obj
        if key in DATA_CLASSES:
            mod = sys.modules.get(module) or importlib.import_module(module)
            obj = mod
            for part in name.split("."):
                obj = getattr(obj, part)
            return obj
        if self._exceptions:
            if key in _EXCEPTION_HELPERS:
                return _rebuild_denied_safely
            try:
                obj = _resolve_loaded(module, name)
            except (LookupError, TypeError):
                obj = None
            if isinstance(obj, type) and issubclass(obj, Exception):
                return _exception_factory(obj)
        raise RestrictedResultError(
            f"the sandbox returned an object of class {module}.{name}, which the caller does "
            f"not accept: return plain data, or allow the class with "
            f"sandboxes(result_classes=[{name.rsplit('.', 1)[-1]}])"
        )

    def persistent_load(self, pid: Any) -> Any:  # never used by our child; refuse
        raise RestrictedResultError("persistent ids are refused")


def allowlist(classes: Iterable[Any]) -> dict[tuple[str, str], Any]:
    """Turn ``result_classes`` (classes or functions) into the lookup table of find_class."""
    table: dict[tuple[str, str], Any] = {}
    for obj in classes:
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if not module or not qualname or "<locals>" in qualname:
            raise TypeError(f"result_classes: {obj!r} is not a module-level class or function")
        table[(module, qualname)] = obj
    return table


# Opcodes that reach find_class: GLOBAL, INST, EXT1/2/4, STACK_GLOBAL. A pickle in which
# none of these bytes occurs anywhere cannot name a class or a callable, so it cannot run
# code: the C ``pickle.loads`` may decode it directly (most results of small calls).
_GLOBAL_OPCODES = re.compile(rb"[\x63\x69\x82\x83\x84\x93]")
_FAST_LIMIT = 4096


def loads(
    data: bytes | bytearray, allowed: dict[tuple[str, str], Any], *, exceptions: bool = False
) -> Any:
    """Decode one pickle from the sandbox under the allowlist."""
    try:
        if not exceptions and len(data) <= _FAST_LIMIT and _GLOBAL_OPCODES.search(data) is None:
            return _plain_loads(data)
        return RestrictedUnpickler(io.BytesIO(data), allowed=allowed, exceptions=exceptions).load()
    except RestrictedResultError:
        raise
    except Exception as exc:
        raise RestrictedResultError(f"undecodable value from the sandbox: {exc}") from None


_plain_loads = pickle.loads
