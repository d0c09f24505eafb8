"""A call's answer kept encoded, for a host process that passes it on undecoded.

Why: a process that only relays a sandboxed call's answer to another process (pysb-ray's
Ray workers relay it to the driver) must not decode it and encode it again with a general
pickler -- the receiving side would then decode the sandbox's data with that pickler's
unpickler, which imports any module and calls any constructor a pickle names (issue 26:
"the same class checked through pysb-ray"). The relay gets the answer as the sandbox sent
it, in an envelope (:func:`encode`), and the final receiver decodes it with partial mode's
restricted decoder and bounds (:func:`decode_answer`), exactly as ``@sandbox`` would.

The envelope is ``MAGIC``, one byte saying result (``r``), result with out-of-band
buffers (``o``: the wire layout of :mod:`~pysb_core.remote.buffers`, table, pickle and
buffers) or exception (``e``), then the worker's payload.
The envelope is hostile data too: the receiver cannot know whether the relay or the
sandbox wrote it, so every part is checked and anything else is a ``SandboxProtocolError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pysb_core.errors import SandboxProtocolError
from pysb_core.remote import buffers, transport

MAGIC = b"pysb-answer/1\n"
_RESULT = b"r"
_EXCEPTION = b"e"
_OUT_OF_BAND = b"o"
_HEAD = len(MAGIC) + 1


def encode(kind: int, payload: Any) -> bytes:
    """The envelope of one RESULT, RESULT_OOB or EXCEPTION frame's payload (host side,
    undecoded; an out-of-band payload is laid out again as it was on the wire)."""
    if kind == transport.RESULT:
        return b"".join((MAGIC, _RESULT, payload))
    if kind == transport.EXCEPTION:
        return b"".join((MAGIC, _EXCEPTION, payload))
    if kind == transport.RESULT_OOB:
        table = [buffers.COUNT.pack(len(payload.buffers))]
        table += [buffers.ENTRY.pack(len(buf), code) for code, buf in payload.buffers]
        parts = [MAGIC, _OUT_OF_BAND, *table, payload.pickle]
        return b"".join(parts + [buf for _, buf in payload.buffers])
    raise ValueError(f"frame kind {kind} is not an answer")


def _out_of_band(view: memoryview) -> buffers.OOBPayload:
    """Read an ``o`` payload as the transport reads a RESULT_OOB frame: the buffer table is
    checked (count, types, sizes within the payload) before any buffer is taken."""
    at = 0

    def take(n: int) -> bytearray:
        nonlocal at
        if at + n > len(view):
            raise transport.BadBufferTable("the out-of-band answer is truncated")
        at += n
        return bytearray(view[at - n : at])

    def take_bytes(n: int) -> bytes:
        return bytes(take(n))

    try:
        return transport._oob_layout(len(view), take, take_bytes)
    except transport.BadBufferTable as exc:
        raise SandboxProtocolError(f"the encoded answer breaks pysb's bounds: {exc}") from None


def decode_answer(
    data: bytes | bytearray | memoryview, /, *, result_classes: Iterable[Any] = ()
) -> Any:
    """Decode an answer of :func:`pysb_core.call_encoded`: return the call's value, or raise
    the exception the call raised, as calling the ``@sandbox`` function would have.

    The decoding is partial mode's: the restricted unpickler (plain data, the classes in
    ``result_classes``, exception classes of modules this process has already loaded; it
    never imports), traceback frames carrying the child's lines as text, and every size,
    count and number within its bound. A class that is not accepted raises
    ``RestrictedResultError``; anything malformed or beyond a bound, including the envelope
    itself, raises ``SandboxProtocolError``.
    """
    from pysb_core.remote import unpickler
    from pysb_core.remote.exceptions import rebuild_chain

    if not isinstance(data, bytes | bytearray | memoryview):
        raise SandboxProtocolError(
            f"an encoded answer is bytes, not {type(data).__name__}: it did not come from "
            "pysb_core.call_encoded()"
        )
    view = memoryview(data).cast("B")
    if len(view) < _HEAD or view[: len(MAGIC)] != MAGIC:
        raise SandboxProtocolError(
            "the encoded answer does not start with pysb's envelope: it did not come from "
            "pysb_core.call_encoded() (or from another version of pysb)"
        )
    tag = bytes(view[len(MAGIC) : _HEAD])
    payload = view[_HEAD:]
    if tag in (_RESULT, _OUT_OF_BAND):
        bound = transport.MAX_RESULT
    elif tag == _EXCEPTION:
        bound = transport.MAX_EXCEPTION
    else:
        raise SandboxProtocolError(f"the encoded answer has an unknown kind {tag!r}")
    if len(payload) > bound:
        raise SandboxProtocolError(
            f"the encoded answer holds {len(payload)} bytes, above the bound of {bound} for "
            f"{'an exception' if tag == _EXCEPTION else 'a result'}"
        )
    allowed = unpickler.allowlist(result_classes)
    if tag == _OUT_OF_BAND:
        return unpickler.loads_oob(_out_of_band(payload), allowed)
    body = payload.tobytes()
    if tag == _RESULT:
        return unpickler.loads(body, allowed)
    raise rebuild_chain(body, allowed)
