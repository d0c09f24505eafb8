"""pysb_core.events.report_lines: the parent's bounded reader of the report channel, fed in
chunks of every size (under real programs: tests/security/test_report_channel.py)."""

from __future__ import annotations

import pytest

from pysb_core.events import ReportLimits, report_lines


def _read_all(data: bytes, chunk: int, **bounds: int) -> tuple[list[bytes], ReportLimits]:
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)]

    def read(_fd: int, _size: int) -> bytes:
        return pieces.pop(0) if pieces else b""

    limits = ReportLimits()
    return list(report_lines(0, limits, read=read, **bounds)), limits


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 4096])
def test_lines_are_split_whatever_the_chunks(chunk: int) -> None:
    lines, limits = _read_all(b"a\nbb\n\nccc\ntail-without-newline", chunk)
    assert lines == [b"a", b"bb", b"", b"ccc"]  # an unfinished last line is not an event
    assert limits.messages() == []


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_a_long_line_is_skipped_to_its_newline(chunk: int) -> None:
    data = b"ok\n" + b"x" * 50 + b"\nafter\n" + b"y" * 11 + b"\nexactly-10\n"
    lines, limits = _read_all(data, chunk, max_line=10)
    assert lines == [b"ok", b"after", b"exactly-10"]
    assert limits.long_lines == 2 and "2 line(s) longer than" in limits.messages()[0]


@pytest.mark.parametrize("chunk", [1, 4, 100])
def test_the_total_is_bounded_and_the_rest_drained(chunk: int) -> None:
    data = b"".join(b"%03d\n" % i for i in range(100))  # 400 bytes
    lines, limits = _read_all(data, chunk, max_total=40)
    assert lines == [b"%03d" % i for i in range(10)]
    assert limits.over_total == 360
    assert "the remaining 360 bytes were dropped" in limits.messages()[0]
