"""Large ``bytes``/``bytearray``/``memoryview`` values out of band (issue 30: payloads at
memory speed).

Why: in-band, a 10 MiB ``bytes`` is copied into the pickle, read into the frame, then
copied again by the unpickler. Out of band, the pickle holds a persistent id (a small int)
per large buffer, and the buffers follow the pickle in the same frame, written straight
from the caller's object with ``writev`` and read straight into their own ``bytearray``.
A ``memoryview`` (which plain pickle refuses) travels this way at any size.

Frame payload of the ``*_OOB`` kinds (transport)::

    <count: u32> count x (<size: u64> <type: u8>) <pickle> <buffer 0> <buffer 1> ...

Types: 0 ``bytes``, 1 ``bytearray``, 2 writable ``memoryview``, 3 read-only
``memoryview`` (both one-dimensional, format ``B``: a C-contiguous view of another shape
arrives cast to bytes). The reader checks the table before it allocates a buffer: at most
:data:`MAX_BUFFERS` entries, known types, sizes that fit in the frame (whose own size is
bounded per kind); a violation is :class:`BufferLayoutError`. The C pickler is used
directly (``_pickle``): ``pickle`` costs the sandbox 5-20 ms of imports.
"""

from __future__ import annotations

import _pickle
import io
import struct

TYPE_CHECKING = False  # typing is not imported inside the sandbox (start-up budget)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

#: A ``bytes`` or ``bytearray`` at least this large travels as a raw buffer.
MIN_SIZE = 64 << 10
#: Buffers one frame may carry (an honest sender pickles the rest in band).
MAX_BUFFERS = 1024
BYTES, BYTEARRAY, VIEW, VIEW_RO = 0, 1, 2, 3
COUNT = struct.Struct("<I")
ENTRY = struct.Struct("<QB")

#: A pickle at least this long is made again with its buffers out of band.
IN_BAND_LIMIT = 1 << 20

_dumps = _pickle.dumps
_BUFFER_TYPES = (bytes, bytearray, memoryview)


class BufferLayoutError(Exception):
    """A frame's buffer table breaks the layout or its bounds (a protocol violation)."""


class _Pickler(_pickle.Pickler):
    """Pickles large buffers (and every memoryview) as persistent ids."""

    def __init__(self, file: Any, out: list[tuple[int, memoryview]]) -> None:
        super().__init__(file, protocol=5)
        self._out = out
        self._seen: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is bytes:
            code = BYTES
        elif kind is bytearray:
            code = BYTEARRAY
        elif kind is memoryview:
            code = VIEW_RO if obj.readonly else VIEW
        else:
            return None
        if code <= BYTEARRAY and len(obj) < MIN_SIZE:
            return None
        known = self._seen.get(id(obj))
        if known is not None:
            return known
        if len(self._out) >= MAX_BUFFERS:
            return None
        view = memoryview(obj)
        if code >= VIEW:
            if not view.c_contiguous:
                return None  # pickle's own refusal follows
            if view.ndim != 1 or view.format != "B":
                view = view.cast("B")
        self._out.append((code, view))
        self._seen[id(obj)] = index = len(self._out) - 1
        return index


def shallow_buffer(obj: Any) -> bool:
    """Whether ``obj`` is, or directly holds, a buffer worth sending out of band (checked
    first so that a large payload is not pickled in band once for nothing)."""
    kind = type(obj)
    if kind in _BUFFER_TYPES:
        return kind is memoryview or len(obj) >= MIN_SIZE
    if kind is tuple or kind is list:
        items = obj[:64]
    elif kind is dict:
        items = list(obj.values())[:64]
    else:
        return False
    for item in items:
        if type(item) in _BUFFER_TYPES and (type(item) is memoryview or len(item) >= MIN_SIZE):
            return True
        nested = type(item) is tuple or type(item) is dict  # (ref, args, kwargs) of a call
        if nested and shallow_buffer(item):
            return True
    return False


def call_dumps(
    request: tuple[Any, Any, Any], in_band_limit: int = IN_BAND_LIMIT
) -> tuple[bytes, list[tuple[int, memoryview]]]:
    """:func:`dumps` of a call's ``(ref, args, kwargs)``: the same result, with the buffer
    check skipped for empty arguments (the host's hot path: a trivial call)."""
    _, args, kwargs = request
    if (args and shallow_buffer(args)) or (kwargs and shallow_buffer(kwargs)):
        return dumps_oob(request)
    try:
        data = _dumps(request, protocol=5)
    except TypeError:
        return dumps_oob(request)
    if len(data) < in_band_limit:
        return data, []
    return dumps_oob(request)


def dumps(
    obj: Any, in_band_limit: int = IN_BAND_LIMIT
) -> tuple[bytes, list[tuple[int, memoryview]]]:
    """Pickle ``obj``; large buffers come back apart (an empty list: an in-band pickle).

    A pickle that turns out larger than ``in_band_limit`` is made again with its buffers
    out of band, and so is one that plain pickle refuses (a memoryview inside)."""
    if not shallow_buffer(obj):
        try:
            data = _dumps(obj, protocol=5)
        except TypeError:
            data = None
        if data is not None and len(data) < in_band_limit:
            return data, []
    return dumps_oob(obj)


def dumps_oob(obj: Any) -> tuple[bytes, list[tuple[int, memoryview]]]:
    out: list[tuple[int, memoryview]] = []
    file = io.BytesIO()
    _Pickler(file, out).dump(obj)
    return file.getvalue(), out


def frame_parts(data: bytes, out: list[tuple[int, memoryview]]) -> list[Any]:
    """The parts of an ``*_OOB`` frame's payload, written with one ``writev``."""
    table = bytearray(COUNT.pack(len(out)))
    for code, view in out:
        table += ENTRY.pack(view.nbytes, code)
    return [bytes(table), data, *(view for _, view in out)]


def parse_table(size: int, head: bytes | bytearray) -> list[tuple[int, int]]:
    """Check a buffer table (``head`` holds its ``count`` entries) against the frame's
    ``size``; return ``[(size, type), ...]``. Raises :class:`BufferLayoutError`."""
    entries = []
    total = 0
    for offset in range(0, len(head), ENTRY.size):
        length, code = ENTRY.unpack_from(head, offset)
        if code > VIEW_RO:
            raise BufferLayoutError(f"buffer type {code} (known: 0-{VIEW_RO})")
        total += length
        entries.append((length, code))
    room = size - COUNT.size - len(head)
    if total > room:
        raise BufferLayoutError(
            f"buffers of {total} bytes announced in a frame with room for {room}"
        )
    return entries


def check_count(size: int, count: int) -> int:
    """Bytes of the table of ``count`` entries; raises when it is above the bounds."""
    if count > MAX_BUFFERS:
        raise BufferLayoutError(f"{count} buffers in one frame (the bound is {MAX_BUFFERS})")
    need = count * ENTRY.size
    if COUNT.size + need > size:
        raise BufferLayoutError(f"a table of {count} buffers in a frame of {size} bytes")
    return need


def materialize(buffers: list[tuple[int, bytearray]]) -> list[Any]:
    """The objects the persistent ids stand for, each of its original type."""
    objs: list[Any] = []
    for code, buf in buffers:
        if code == BYTES:
            objs.append(buf if type(buf) is bytes else bytes(buf))
        elif code == BYTEARRAY:
            objs.append(buf)
        elif code == VIEW:
            objs.append(memoryview(buf))
        else:
            objs.append(memoryview(buf).toreadonly())
    return objs


class OOBPayload:
    """The payload of an ``*_OOB`` frame as read: the pickle, and each buffer apart."""

    __slots__ = ("buffers", "pickle")

    def __init__(self, data: bytes | bytearray, buffers: list[tuple[int, bytearray]]) -> None:
        self.pickle = data
        self.buffers = buffers

    def __len__(self) -> int:
        return len(self.pickle) + sum(len(b) for _, b in self.buffers)
