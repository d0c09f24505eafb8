"""Large payloads out of band (issue 30): bytes, bytearray and memoryview values cross as
raw buffers beside the pickle, under subprocess, landlock and bwrap, and come back as
exactly what was sent; a worker that forges the buffer table is refused.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pysb_core import SandboxProtocolError, sandboxes
from pysb_core.remote import buffers
from pysb_core.testing import require_provider
from pysb_core.testing.partial import profile_text, write_module

PROVIDERS = ["subprocess", "landlock", "bwrap"]
BIG = buffers.MIN_SIZE * 3 + 7  # out of band (a small one stays in band)

FUNCTIONS = """
import _pickle, contextvars, gc, os
from pysb_core import sandbox

@sandbox
def echo(value):
    return value

@sandbox
def describe(value):
    '''What arrived in the worker: types, read-only flags, a checksum of the bytes.'''
    def one(v):
        if isinstance(v, memoryview):
            return ("memoryview", v.readonly, v.format, bytes(v)[:16], len(v))
        return (type(v).__name__, None, None, bytes(v)[:16], len(v))
    return [one(v) for v in value]

@sandbox
def pattern(n):
    return bytes(range(256)) * (n // 256)

@sandbox
def forge(table, pickled, tail):
    '''Send our own RESULT_OOB frame for this call, as hostile code in the worker can.'''
    writer = next(o for o in gc.get_objects() if type(o).__name__ == "FrameWriter")
    ctx = contextvars.copy_context()
    cid = next(v for k, v in ctx.items() if k.name == "pysb_call")
    writer.send(17, cid, table + pickled + tail)
    return "sent"
"""


@pytest.fixture(params=PROVIDERS)
def mod(request, tmp_path: Path):
    if request.param != "subprocess":
        require_provider(request.param)
    module = write_module(tmp_path, FUNCTIONS)
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text(request.param, tmp_path))
    with sandboxes(profile=str(profile), cwd=str(tmp_path)) as box:
        module.box = box
        yield module


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, memoryview):
        return a.readonly == b.readonly and a.tobytes() == b.tobytes()
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_buffers_round_trip_exactly(mod):
    data = bytes(range(256)) * (BIG // 256) + b"tail"
    values = [
        data,
        bytearray(data),
        memoryview(data),  # read-only
        memoryview(bytearray(data)),  # writable
        memoryview(b"small view"),  # a memoryview crosses at any size
        b"small bytes",  # in band
        {"nested": [data, (bytearray(b"x" * BIG), memoryview(b"v"))], "n": 3},
        [data, data],  # the same object twice
    ]
    for value in values:
        back = mod.echo(value)
        assert _same(back, value), type(value)
    assert mod.pattern(10 << 20) == bytes(range(256)) * ((10 << 20) // 256)


def test_arguments_arrive_in_the_worker_as_sent(mod):
    data = b"\x00\xff" * BIG
    got = mod.describe([data, bytearray(data), memoryview(data), memoryview(bytearray(data))])
    assert got == [
        ("bytes", None, None, data[:16], len(data)),
        ("bytearray", None, None, data[:16], len(data)),
        ("memoryview", True, "B", data[:16], len(data)),
        ("memoryview", False, "B", data[:16], len(data)),
    ]


def _table(*entries: tuple[int, int], count: int | None = None) -> bytes:
    out = struct.pack("<I", len(entries) if count is None else count)
    return out + b"".join(struct.pack("<QB", size, code) for size, code in entries)


@pytest.mark.parametrize(
    "table, pickled, tail, why",
    [
        (_table(count=buffers.MAX_BUFFERS + 1), b"", b"", "buffers in one frame"),
        (_table((1 << 62, 0)), b"N.", b"", "announced in a frame"),
        (_table((4, 9)), b"N.", b"abcd", "buffer type 9"),
        (b"\x01", b"", b"", "no buffer table"),
    ],
)
def test_a_forged_buffer_table_is_a_protocol_error(mod, table, pickled, tail, why):
    before = mod.box.pid  # the host PID of the worker's launcher
    with pytest.raises(SandboxProtocolError, match="breaking the protocol") as info:
        mod.forge(table, pickled, tail)
    assert why in str(info.value)
    assert mod.echo(1) == 1
    assert mod.box.pid != before  # the worker was killed and restarted; the host serves on


@pytest.mark.parametrize(
    "pickled",
    [
        b"\x80\x05K\x05Q.",  # buffer 5 of the 1 the frame carries
        b"\x80\x05\x8c\x010\x94Q.",  # a persistent id that is not an int
        b"\x80\x05P0\n.",  # the text form of a persistent id
    ],
)
def test_a_reference_to_a_buffer_the_frame_lacks_is_refused(mod, pickled):
    with pytest.raises(SandboxProtocolError, match="buffer"):
        mod.forge(_table((4, 0)), pickled, b"abcd")
    assert mod.echo(b"still serving") == b"still serving"
