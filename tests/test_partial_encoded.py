"""``call_encoded`` / ``decode_answer``: a call's answer relayed undecoded (pysb-ray's Ray
workers), decoded by the receiver under partial mode's restricted decoder and bounds."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import pytest

from pysb_core import (
    FileDeniedError,
    RestrictedResultError,
    SandboxError,
    SandboxProtocolError,
    call_encoded,
    decode_answer,
    sandboxes,
)
from pysb_core.remote import answer, transport
from pysb_core.testing import require_provider
from pysb_core.testing.partial import profile_text, write_module

FUNCTIONS = """
import os
from pysb_core import sandbox

class Point:
    def __init__(self, x):
        self.x = x

@sandbox
def double(x):
    print("doubling", x)
    return x * 2

@sandbox
def point(x):
    return Point(x)

@sandbox
def read(path):
    with open(path) as f:
        return f.read()

@sandbox
def fail(message):
    raise KeyError(message)

@sandbox
def blob(n):
    return [b"x" * n, bytearray(b"y" * n), memoryview(b"z" * 10)]

@sandbox
async def adouble(x):
    return 2 * x
"""


@pytest.fixture
def mod(tmp_path: Path):
    return write_module(tmp_path, FUNCTIONS, prefix="encmod")


@pytest.mark.parametrize("provider", ["subprocess", "landlock"])
def test_the_answer_is_relayed_as_bytes_and_decoded_as_a_call_would(
    provider: str, mod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_provider(provider)
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text(provider, tmp_path, tmp_path))
    secret = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    secret.write_text("not exposed")
    try:
        with sandboxes(profile=str(profile), provider=provider, cwd=str(tmp_path)):
            raw = call_encoded(mod.double, 21)
            assert type(raw) is bytes and raw.startswith(answer.MAGIC)
            assert decode_answer(raw) == 42
            assert "doubling 21" in capsys.readouterr().out  # output still streams through
            with pytest.raises(KeyError, match="missing") as info:
                decode_answer(call_encoded(mod.fail, "missing"))
            frames = [str(f.path) for f in info.traceback]
            assert any(name.startswith("<sandbox: ") for name in frames), frames
            with pytest.raises(FileDeniedError):
                decode_answer(call_encoded(mod.read, str(secret)))
            # large buffers travel out of band, and stay so in the envelope
            raw = call_encoded(mod.blob, 1 << 17)
            assert raw[len(answer.MAGIC) : len(answer.MAGIC) + 1] == b"o"
            big, mutable, view = decode_answer(raw)
            assert big == b"x" * (1 << 17) and type(big) is bytes
            assert mutable == bytearray(b"y" * (1 << 17)) and type(mutable) is bytearray
            assert type(view) is memoryview and view.readonly and bytes(view) == b"z" * 10
            # the receiver's own allowlist applies, not the relay's
            point = call_encoded(mod.point, 3)
            with pytest.raises(RestrictedResultError, match="Point"):
                decode_answer(point)
            assert decode_answer(point, result_classes=[mod.Point]).x == 3
            with pytest.raises(TypeError, match="not a synchronous @sandbox function"):
                call_encoded(mod.adouble, 1)
            with pytest.raises(TypeError, match="not a synchronous @sandbox function"):
                call_encoded(len, [])
    finally:
        secret.unlink()


def test_calling_without_a_sandbox_says_how_to_start_one(mod) -> None:
    with pytest.raises(SandboxError, match=r"with pysb_core\.sandboxes\(\)"):
        call_encoded(mod.double, 1)


class _System:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return os.system, ("echo ran",)


@pytest.mark.parametrize(
    ("data", "expected", "says"),
    [
        ("not bytes", SandboxProtocolError, "not str"),
        (b"", SandboxProtocolError, "envelope"),
        (b"pickle-without-envelope", SandboxProtocolError, "envelope"),
        (answer.MAGIC, SandboxProtocolError, "envelope"),
        (answer.MAGIC + b"x" + pickle.dumps(1), SandboxProtocolError, "unknown kind"),
        (answer.MAGIC + b"r", RestrictedResultError, "undecodable"),  # a truncated pickle
        (
            answer.MAGIC + b"r" + b"\x80\x02cplantedmod\nX\n)\x81.",
            RestrictedResultError,
            "plantedmod",
        ),
        (answer.MAGIC + b"r" + pickle.dumps(_System()), RestrictedResultError, "system"),
        # LONG_BINPUT at memo index 2^31 - 1: the C unpickler would size its memo by it
        (answer.MAGIC + b"r" + b"\x80\x04Nr\xff\xff\xff\x7f.", SandboxProtocolError, "memo"),
        # out of band: 2^31 buffers, a buffer larger than the payload, a truncated table
        (answer.MAGIC + b"o" + b"\xff\xff\xff\x7f", SandboxProtocolError, "buffers in one frame"),
        (
            answer.MAGIC + b"o" + b"\x01\x00\x00\x00" + b"\xff" * 8 + b"\x00" + pickle.dumps(1),
            SandboxProtocolError,
            "announced in a frame",
        ),
        (answer.MAGIC + b"o" + b"\x01\x00", SandboxProtocolError, "bounds"),
        (answer.MAGIC + b"e" + b"not a pickle", SandboxProtocolError, "breaks pysb.s bounds"),
        (
            answer.encode(
                transport.EXCEPTION,
                pickle.dumps(
                    [
                        {
                            "module": "builtins",
                            "qualname": "ValueError",
                            "message": "x",
                            "frames": [("/etc/shadow", 2**31, "f", "x")],
                        }
                    ]
                ),
            ),
            SandboxProtocolError,
            "line number 2147483648",
        ),
    ],
)
def test_a_hostile_envelope_or_payload_is_refused_without_importing(
    data: object, expected: type[Exception], says: str
) -> None:
    before = set(sys.modules)
    with pytest.raises(expected, match=says):
        decode_answer(data)  # type: ignore[arg-type]
    assert "plantedmod" not in set(sys.modules) - before


def test_an_answer_above_its_kinds_bound_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transport, "MAX_RESULT", 16)
    with pytest.raises(SandboxProtocolError, match="above the bound of 16"):
        decode_answer(answer.encode(transport.RESULT, pickle.dumps("x" * 64)))
    assert decode_answer(answer.encode(transport.RESULT, pickle.dumps("x"))) == "x"


def test_encoded_calls_go_through_a_pool_of_workers(mod, tmp_path: Path) -> None:
    """``sandboxes(workers=N)``: the encoded call takes the pool's path like any call."""
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text("subprocess", tmp_path, tmp_path))
    with sandboxes(profile=str(profile), provider="subprocess", cwd=str(tmp_path), workers=2):
        answers = [decode_answer(call_encoded(mod.double, i)) for i in range(6)]
    assert answers == [2 * i for i in range(6)]
