"""The parent's restricted unpickler for everything that comes back from the sandbox.

Why: the child runs untrusted code, so its pickles are hostile input. A pickle can name
any importable callable (``os.system``) and call it with any arguments; the only door it
has for naming one is ``find_class``. This unpickler keeps that door to an allowlist:

- **data** (default): exact classes of plain data -- datetime, Decimal, UUID, paths,
  ipaddress, Fraction, collections -- plus what pickle encodes without globals
  (scalars, str, bytes, list, tuple, dict, set, frozenset, bytearray);
- **caller's classes**: whatever the caller passed in ``sandboxes(result_classes=[...])``;
- **exceptions** (only while decoding a raised exception): ``Exception`` subclasses that the
  parent has already imported. They are rebuilt *without running any Python-level
  ``__init__``/``__new__``* (only the C constructors of builtin exceptions), so an exception
  class with side effects in its constructor cannot be abused.

Decoding never imports (issue 26 #1): a class is found only in a module the parent has
already loaded (``sys.modules``, read through ``vars`` so that no module ``__getattr__``
runs), or among the caller's own classes. A child that plants ``ipaddress.py`` in a
writable exposure on the parent's path and returns an ``IPv4Address`` to a parent that
never imported ``ipaddress`` gets a refusal, not an import. No reconstructor loads code or
data by a name from the child: ``zoneinfo.ZoneInfo`` is not on the list (rebuilding one
reads time-zone data, and imports the ``tzdata`` package, by the child's key), and
``bytearray(str, encoding)`` is refused for any encoding but latin-1 (a codec is looked up,
and imported, by name).

Bounds (issue 26 #3): before any byte reaches the C unpickler, :func:`scan` walks the
opcodes once and refuses what would make the host allocate or compute far more than the
message -- a memo index above :data:`MAX_MEMO` (the C unpickler sizes its memo table by the
index), a length that runs past the end, a decimal number longer than Python's own
4300-digit limit, an estimated decoded size above :data:`MAX_DECODED`. The constructors on
the list never receive a lazy iterable (``set(range(10**12))``, ``deque(ip_network("::/0"))``)
and ``Fraction`` never an exponent that would build a huge integer. A violation raises
:class:`~pysb_core.errors.SandboxProtocolError`; a class the caller did not allow raises
:class:`RestrictedResultError` naming it.

Why one module: the opcode scan, the allowlist and the reconstructors are one defence against
hostile pickles: the scan's bounds are only sound for the constructors the list admits, and a
change to one needs a check of the others. Keeping them in one module keeps that review in one
place.
"""

from __future__ import annotations

import io
import pickle
import re
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from pysb_core.errors import RestrictedResultError, SandboxProtocolError

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
        ("time", "struct_time"),
        ("collections", "OrderedDict"),
        ("collections", "Counter"),
        ("collections", "deque"),
    ]
)

#: The largest memo index a pickle may name (PUT, LONG_BINPUT): the C unpickler grows its
#: memo table to twice the index at once. pysb's child pickles with protocol 5, whose
#: MEMOIZE numbers entries one by one, so an honest pickle never comes near it.
MAX_MEMO = 1 << 20
#: The estimated size of the objects one pickle may decode into (see :func:`scan`).
MAX_DECODED = 1 << 30
#: Decimal numbers in text opcodes (INT, LONG, PUT, GET): Python's own int-from-text limit.
MAX_DIGITS = 4300
#: The largest integers Fraction is built from (gcd of larger ones costs seconds of CPU).
MAX_FRACTION_BITS = 1 << 16


# ------------------------------------------------------------------------ the opcode scan

# How each opcode's argument is laid out (from pickletools' table, so that it follows the
# interpreter's pickle version): a code >= 0 is the size of the opcode with its fixed
# argument (skipped in one step: the common case); the codes below 0 need a look.
_UNKNOWN, _LINE, _LINE2, _LEN1, _LEN4, _LEN4S, _LEN8 = -1, -2, -3, -4, -5, -6, -7
_TEXT1, _TEXT4, _TEXT4S, _TEXT8, _DIGITS, _PUT, _LONG_BINPUT = range(-8, -15, -1)
_GLOBAL0, _STOP, _EXT, _HEAVY = -15, -16, -17, -18
_EXT_SIZE = {0x82: 2, 0x83: 3, 0x84: 5}
#: Opcodes that name a class or a callable (they reach find_class).
_GLOBAL_CODES = frozenset(b"ci\x82\x83\x84\x93")
#: Opcodes whose object may be larger than :data:`_PER_BYTE` (an empty set: 216 bytes).
_HEAVY_CODES = frozenset(b"\x8f\x91Rb\x81\x92o")
#: Estimated bytes of objects per byte of opcodes (an empty dict, one byte, takes 64).
_PER_BYTE = 64
_PER_HEAVY = 256
_CHECK_EVERY = 1 << 16


def _layout() -> list[int]:
    import pickletools

    arg = [_UNKNOWN] * 256
    special = {
        "PUT": _PUT,
        "LONG_BINPUT": _LONG_BINPUT,
        "INT": _DIGITS,
        "LONG": _DIGITS,
        "GET": _DIGITS,
        "STOP": _STOP,
    }
    text = {"BINSTRING", "SHORT_BINSTRING", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"}
    lengths = {
        pickletools.TAKEN_FROM_ARGUMENT1: (_LEN1, _TEXT1),
        pickletools.TAKEN_FROM_ARGUMENT4: (_LEN4S, _TEXT4S),
        pickletools.TAKEN_FROM_ARGUMENT4U: (_LEN4, _TEXT4),
        pickletools.TAKEN_FROM_ARGUMENT8U: (_LEN8, _TEXT8),
    }
    for op in pickletools.opcodes:
        code = ord(op.code)
        a = op.arg
        if op.name in special:
            arg[code] = special[op.name]
        elif code in _EXT_SIZE:
            arg[code] = _EXT
        elif code in _HEAVY_CODES:
            arg[code] = _HEAVY
        elif a is None:
            arg[code] = _GLOBAL0 if code in _GLOBAL_CODES else 1
        elif a.n >= 0:
            arg[code] = 1 + a.n
        elif a.n == pickletools.UP_TO_NEWLINE:
            arg[code] = _LINE2 if a.name == "stringnl_noescape_pair" else _LINE
        else:
            arg[code] = lengths[a.n][1] if op.name in text else lengths[a.n][0]
    return arg


_ARG = _layout()
_from_bytes = int.from_bytes


def _violation(what: str) -> SandboxProtocolError:
    return SandboxProtocolError(f"the sandbox sent a pickle that breaks pysb's bounds: {what}")


def scan(data: bytes | bytearray) -> bool:
    """Walk the opcodes of one pickle without building anything; True if it names globals.

    Refuses (:class:`SandboxProtocolError`) a memo index above :data:`MAX_MEMO`, a length
    past the end, a decimal number above :data:`MAX_DIGITS` digits, an opcode pickle does
    not have, and a pickle whose objects would take more than :data:`MAX_DECODED` bytes by
    a conservative estimate: 64 bytes per byte of opcodes (what an empty dict costs), 256
    per opcode that can build more (an empty set, a constructor call), text at four bytes
    a character and bytes at one. Costs one pass over the opcodes, never more.
    """
    arg = _ARG
    n = len(data)
    i = 0
    payload = 0  # bytes of strings and bytes, counted apart from the opcodes
    extra = 0  # what strings and heavy opcodes add to the estimate
    named = False
    limit = 0
    while i < n:
        if i >= limit:  # now and then (not per opcode): stop as soon as the estimate is over
            if _PER_BYTE * (i - payload) + payload + extra > MAX_DECODED:
                break
            limit = i + _CHECK_EVERY
        op = data[i]
        a = arg[op]
        if a > 0:
            i += a
            continue
        i += 1
        if a in (_LEN1, _TEXT1):
            if i >= n:
                break
            size = data[i]
            i += 1
        elif a in (_LEN4, _TEXT4, _LEN4S, _TEXT4S):
            size = _from_bytes(data[i : i + 4], "little", signed=a in (_LEN4S, _TEXT4S))
            i += 4
            if size < 0:
                raise _violation(f"a negative length at byte {i - 4}")
        elif a in (_LEN8, _TEXT8):
            size = _from_bytes(data[i : i + 8], "little")
            i += 8
        elif a == _HEAVY:
            extra += _PER_HEAVY
            continue
        elif a == _LONG_BINPUT:
            index = _from_bytes(data[i : i + 4], "little")
            i += 4
            if index > MAX_MEMO:
                raise _violation(f"memo index {index} (the bound is {MAX_MEMO})")
            continue
        elif a in (_DIGITS, _PUT):
            end = data.find(b"\n", i, i + MAX_DIGITS + 3)
            if end < 0:
                raise _violation(f"a decimal number of more than {MAX_DIGITS} digits")
            if a == _PUT:
                try:
                    index = int(data[i:end])
                except ValueError:
                    index = -1
                if not 0 <= index <= MAX_MEMO:
                    raise _violation(f"memo index {data[i:end]!r} (the bound is {MAX_MEMO})")
            i = end + 1
            continue
        elif a in (_LINE, _LINE2):
            for _ in range(1 if a == _LINE else 2):
                end = data.find(b"\n", i)
                if end < 0:
                    raise _violation("a text argument without its end of line")
                payload += end - i
                extra += 4 * (end - i)
                i = end + 1
            named = named or op in _GLOBAL_CODES
            continue
        elif a == _GLOBAL0:
            named = True
            continue
        elif a == _EXT:
            i += _EXT_SIZE[op] - 1
            named = True
            continue
        elif a == _STOP:
            if _PER_BYTE * (i - payload) + payload + extra > MAX_DECODED:
                break
            return named
        else:
            raise _violation(f"opcode {op:#04x}, which pickle does not have")
        if size > n - i:
            raise _violation(f"a length of {size} bytes runs past the end ({n - i} left)")
        i += size
        payload += size
        if a <= _TEXT1:
            extra += 3 * size
    if _PER_BYTE * (i - payload) + payload + extra > MAX_DECODED:
        raise _violation(
            f"its objects would take more than {MAX_DECODED >> 20} MiB (estimated from "
            f"its {n} bytes)"
        )
    raise _violation("it ends before its STOP opcode")


# ------------------------------------------------------------- constructors on the data list


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


def _lazy(value: Any) -> bool:
    """An allowlisted object whose iteration is not bounded by the message: ``range`` and
    the ``ipaddress`` networks (``ip_network("::/0")`` has 2**128 addresses)."""
    kind = type(value)
    return kind is range or (kind.__module__ == "ipaddress" and "Network" in kind.__name__)


def _screened(cls: Any) -> Callable[..., Any]:
    """``cls(*args)`` for a constructor that iterates its argument: never a lazy iterable."""

    def build(*args: Any) -> Any:
        for value in args:
            if _lazy(value):
                raise _violation(f"{cls.__qualname__}() of a {type(value).__name__}")
        return cls(*args)

    build.__qualname__ = build.__name__ = cls.__qualname__
    return build


def _bytearray(*args: Any) -> bytearray:
    """``bytearray(bytes)`` or protocol 2's ``bytearray(str, "latin-1")``; never
    ``bytearray(n)`` (n zero bytes) or another codec (looked up, and imported, by name)."""
    if len(args) == 1 and type(args[0]) in (bytes, bytearray):
        return bytearray(args[0])
    if len(args) == 2 and type(args[0]) is str and args[1] in ("latin-1", "latin1"):
        return bytearray(args[0], "latin-1")
    raise _violation("bytearray() of anything but bytes")


_FRACTION_TEXT = re.compile(r"\s*[-+]?(?:\d+(?:_\d+)*)?(?:\.\d*)?(?:/\d+)?\s*\Z")


def _fraction(*args: Any) -> Any:
    """``Fraction(numerator, denominator)`` of bounded ints, or of a text without an
    exponent (``Fraction("1e999999999")`` would build a billion-digit integer)."""
    from fractions import Fraction  # loaded: find_class returned this only then

    for value in args:
        if type(value) is int:
            if value.bit_length() > MAX_FRACTION_BITS:
                raise _violation(f"Fraction() of a {value.bit_length()}-bit integer")
        elif type(value) is str:
            if len(value) > MAX_DIGITS or not _FRACTION_TEXT.match(value):
                raise _violation("Fraction() of a text with an exponent or too many digits")
        else:
            raise _violation(f"Fraction() of a {type(value).__name__}")
    return Fraction(*args)


#: Data classes that are rebuilt through a checking function instead of the class itself.
_CHECKED: dict[tuple[str, str], Callable[[Any], Callable[..., Any]]] = {
    ("builtins", "set"): _screened,
    ("builtins", "frozenset"): _screened,
    ("builtins", "bytearray"): lambda cls: _bytearray,
    ("collections", "deque"): _screened,
    ("collections", "Counter"): _screened,
    ("collections", "OrderedDict"): _screened,
    ("time", "struct_time"): _screened,
    ("fractions", "Fraction"): lambda cls: _fraction,
}
_checked_cache: dict[tuple[str, str], Any] = {}


def _data_class(key: tuple[str, str]) -> Any:
    """The constructor of data class ``key`` if its module is loaded, else None."""
    try:
        obj = _resolve_loaded(*key)
    except (LookupError, TypeError):
        return None
    wrap = _CHECKED.get(key)
    if wrap is None:
        return obj
    found = _checked_cache.get(key)
    if found is None or found[0] is not obj:
        found = (obj, wrap(obj))
        _checked_cache[key] = found
    return found[1]


# ---------------------------------------------------------------------------- exceptions


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def _solid_base(cls: type) -> Any:
    """The builtin (C) class whose constructor may build instances of ``cls``."""
    builtin = [b for b in cls.__mro__ if not b.__flags__ & _HEAPTYPE]
    return max(builtin, key=lambda b: b.__basicsize__)


class _ExceptionFactory:
    """Rebuilds ``cls(*args)`` without running Python-level ``__new__``/``__init__``.

    Only the builtin (C) constructors run, so an exception class with side effects in its
    constructor cannot be driven by a hostile pickle; and never with a lazy iterable
    (``SyntaxError(msg, range(10**12))`` would make a tuple of it).
    """

    __slots__ = ("cls",)

    def __init__(self, cls: type[BaseException]) -> None:
        self.cls = cls

    def __call__(self, *args: Any) -> BaseException:
        cls = self.cls
        for value in args:
            if _lazy(value):
                raise _violation(f"{cls.__qualname__}() of a {type(value).__name__}")
        exc = _solid_base(cls).__new__(cls, *args)  # OSError parses errno/filename here
        init = cls.__init__
        if isinstance(init, _C_FUNCTIONS):
            try:
                init(exc, *args)
            except Exception:
                pass
        exc.args = args
        return exc


_C_FUNCTIONS = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.BuiltinMethodType)


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
    if type(args) is not tuple:
        raise _violation(f"a denial's arguments as a {type(args).__name__}")
    exc = _solid_base(cls).__new__(cls)
    exc.args = args
    if type(state) is dict:
        exc.__dict__.update(state)
    if type(extra) is dict:
        for name, value in extra.items():
            if name in _DENIAL_SLOTS and (value is None or type(value) in (int, str, bytes)):
                try:
                    setattr(exc, name, value)
                except (AttributeError, TypeError):
                    pass
    return exc


# framework helpers that rebuild our own exceptions
_EXCEPTION_HELPERS: frozenset[tuple[str, str]] = frozenset(
    [("pysb_core.errors", "_rebuild_denied")]
)


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose only door to globals is an allowlist."""

    def __init__(
        self,
        file: io.BytesIO,
        *,
        allowed: dict[tuple[str, str], Any],
        exceptions: bool,
        buffers: list[Any] | None = None,
    ) -> None:
        super().__init__(file)
        self._allowed = allowed
        self._exceptions = exceptions
        self._buffers = buffers

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        if key in DATA_CLASSES:
            obj = _data_class(key)
            if obj is not None:
                return obj
            raise RestrictedResultError(
                f"the sandbox returned an object of class {module}.{name}, but this process "
                f"has not imported {module}: pysb never imports while decoding what the "
                f"sandbox sends (a module there could be one the sandbox wrote); import "
                f"{module} before the call"
            )
        obj = self._allowed.get(key)
        if obj is not None:
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

    def persistent_load(self, pid: Any) -> Any:
        """An out-of-band buffer of this frame, by its index (pysb_core.remote.buffers);
        nothing else: a persistent id outside an out-of-band frame is refused."""
        objs = self._buffers
        if objs is None:
            raise RestrictedResultError("persistent ids are refused")
        if type(pid) is not int or not 0 <= pid < len(objs):
            raise _violation(
                f"a reference to buffer {pid!r:.40} of the {len(objs)} its frame carries"
            )
        return objs[pid]


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


def loads(
    data: bytes | bytearray, allowed: dict[tuple[str, str], Any], *, exceptions: bool = False
) -> Any:
    """Decode one pickle from the sandbox under the allowlist and the bounds.

    A pickle that names no global cannot run code: after the scan (or without one, see
    :data:`_UNSAFE_BYTES`) the C ``pickle.loads`` decodes it directly (most results).
    Others go through :class:`RestrictedUnpickler`.
    """
    if not exceptions and len(data) <= _FAST_LIMIT and _UNSAFE_BYTES.search(data) is None:
        named = False  # no global, no memo index, no length the C unpickler allocates first
    else:
        named = scan(data)
    try:
        if not named and not exceptions:
            return _plain_loads(data)
        return RestrictedUnpickler(io.BytesIO(data), allowed=allowed, exceptions=exceptions).load()
    except (RestrictedResultError, SandboxProtocolError):
        raise
    except RecursionError:
        raise _violation("it nests deeper than this interpreter's recursion limit") from None
    except Exception as exc:
        raise RestrictedResultError(f"undecodable value from the sandbox: {exc}") from None


def loads_oob(payload: Any, allowed: dict[tuple[str, str], Any]) -> Any:
    """Decode a result sent with out-of-band buffers (an ``OOBPayload`` whose buffer table
    the transport has checked): the same scan and allowlist as :func:`loads`, and the
    buffers as the only persistent ids."""
    from pysb_core.remote.buffers import materialize

    data = payload.pickle
    scan(data)
    objs = materialize(payload.buffers)
    try:
        return RestrictedUnpickler(
            io.BytesIO(data), allowed=allowed, exceptions=False, buffers=objs
        ).load()
    except (RestrictedResultError, SandboxProtocolError):
        raise
    except RecursionError:
        raise _violation("it nests deeper than this interpreter's recursion limit") from None
    except Exception as exc:
        raise RestrictedResultError(f"undecodable value from the sandbox: {exc}") from None


_plain_loads = pickle.loads
#: A pickle this short in which none of these bytes occurs anywhere -- the opcodes that name
#: globals, the memo stores that take an index (PUT, LONG_BINPUT) and the bytes opcodes
#: whose buffer the C unpickler allocates before reading it -- makes at most a few
#: thousand small objects: it needs no scan (most results of small calls).
_UNSAFE_BYTES = re.compile(rb"[ci\x82\x83\x84\x93prB\x8e\x96]")
_FAST_LIMIT = 4096
