"""A few libc functions called without importing the ``ctypes`` package.

The child set-ups (the session keyring, the terminal filter) and firejail's host-side
steps (``unshare``, ``mount``) each need one or two C calls. ``import ctypes`` costs
about 1.2 ms: the package defines some hundred types and helpers at import. The C module
underneath it, ``_ctypes``, costs about 0.2 ms, and the few pieces these calls need (an
``int``, a ``long``, a pointer, a byte buffer, a function of the running process) are
defined here on top of it, exactly as ``ctypes`` itself defines them. Should ``_ctypes``
not offer them (another interpreter), the ``ctypes`` package is used instead: the same
calls, the usual price.

Arguments: Python ``int`` passes as a C ``int``, ``bytes`` as ``char *``, ``None`` as
``NULL``; wrap what needs another type in :class:`Long` or :class:`Pointer`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # loaded in the sandboxed child: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _ctypes

    class Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "i"

    class Long(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "l"

    class Pointer(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "P"

    class _Char(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "c"

    class _Process:
        """What a function pointer is looked up in: ``dlopen(NULL)``'s handle."""

        def __init__(self) -> None:
            self._handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]

    _PROCESS: Any = _Process()
    _FLAGS = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    get_errno: Callable[[], int] = _ctypes.get_errno
    _addressof = _ctypes.addressof
    _Array = _ctypes.Array
    _FuncBase: Any = _ctypes.CFuncPtr

    def _buffer_type(size: int) -> Any:
        return type("_Buffer", (_Array,), {"_type_": _Char, "_length_": size})

except (ImportError, AttributeError):  # pragma: no cover - not CPython's _ctypes
    import ctypes

    Int = ctypes.c_int  # type: ignore[misc,assignment]
    Long = ctypes.c_long  # type: ignore[misc,assignment]
    Pointer = ctypes.c_void_p  # type: ignore[misc,assignment]
    _PROCESS = ctypes.CDLL(None, use_errno=True)
    _FLAGS = ctypes._FUNCFLAG_CDECL | ctypes._FUNCFLAG_USE_ERRNO  # type: ignore[attr-defined]
    get_errno = ctypes.get_errno
    _addressof = ctypes.addressof
    _FuncBase = ctypes._CFuncPtr  # type: ignore[attr-defined]

    def _buffer_type(size: int) -> Any:
        return ctypes.c_char * size


def function(name: str, restype: type = Int) -> Callable[..., Any]:
    """The C function ``name`` of the running process (libc's, for these); ``errno`` after
    a call is :func:`get_errno`'s."""
    cls = type("_Function", (_FuncBase,), {"_flags_": _FLAGS, "_restype_": restype})
    return cls((name, _PROCESS))  # type: ignore[no-any-return]


def buffer(data: bytes) -> tuple[object, int]:
    """A C copy of ``data`` and its address; the address is valid while the first item
    is referenced."""
    buf = _buffer_type(len(data)).from_buffer_copy(data)
    return buf, _addressof(buf)
