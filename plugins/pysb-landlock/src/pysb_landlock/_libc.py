"""The libc entry points the sandbox set-up calls, resolved once, at import time.

Why at import: the bootstrap imports ``pysb_landlock.child`` before the Python guards are
installed and calls it after. Once installed, the guards judge ``open``/``os.listdir``
(audit events, patched functions) and, once armed, ``ctypes`` symbol lookups. Calls made
through these function pointers raise no audit event and are not patched, so the
framework's own set-up (opening ``/usr/lib`` with ``O_PATH`` to add a rule) is never judged
as if the program had asked for it.

Why not ``ctypes``: the package costs about 1.5 ms of every sandboxed start (it defines a
hundred types and helpers when imported); the kit's C calls (:func:`c_function`) sit on the
C module underneath it. The kernel's structures are bytes laid out here (:func:`fields`,
native order, as the uapi headers declare them) in a writable C copy (:func:`memory`),
passed to a call as the pointer to it and read back with ``bytes()``.
"""

from __future__ import annotations

import sys

from pysb_core.providerkit import CLong, c_errno, c_function

TYPE_CHECKING = False  # imported by every sandboxed interpreter: no typing at run time
if TYPE_CHECKING:
    from typing import Any

syscall = c_function("syscall", CLong)
prctl = c_function("prctl")
capget = c_function("capget")
capset = c_function("capset")
open_ = c_function("open")  # (const char *path, int flags)
close = c_function("close")
chdir = c_function("chdir")
get_errno = c_errno

#: Bytes of a C ``long`` (8, or 4 on 32-bit machines): the unit of :func:`memory`.
_LONG_BYTES = memoryview(CLong()).nbytes


def fields(*values: tuple[int, int]) -> bytes:
    """A structure's bytes: each ``(value, size in bytes)`` in native byte order, in the
    order given, with no padding (give the padding the C layout has as fields of 0)."""
    return b"".join(v.to_bytes(size, sys.byteorder, signed=v < 0) for v, size in values)


def memory(data: bytes) -> Any:
    """A writable C copy of ``data`` (rounded up to whole ``long``s, zero-filled), which a
    C call takes as the pointer to it; ``bytes(copy)[:len(data)]`` reads it back."""
    count = max(1, -(-len(data) // _LONG_BYTES))
    return (CLong * count).from_buffer_copy(data.ljust(count * _LONG_BYTES, b"\0"))
