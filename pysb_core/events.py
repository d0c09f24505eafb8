"""Denials and learned accesses, as they travel from the sandbox to the parent.

Inside the sandbox a :class:`Recorder` writes one JSON object per line to an inherited
"report" file descriptor; the parent reads them, hands each to the ``pysb_event`` hook
(the ``--events`` file is one sink) and keeps the learned ones for ``pysb_learned``.
"""

from __future__ import annotations

import os
import time

from pysb_core._startup.records import Record, field, record

TYPE_CHECKING = False  # no typing import at run time: this module is loaded in the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Literal


@record
class Event(Record):
    """One line of ``--events`` (SPEC §7); ``data`` carries family-specific details."""

    layer: Literal["python", "os"]
    guard: str
    action: Literal["deny", "learn"]
    target: str
    detail: str = ""
    suggested_rule: str = ""
    time: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, line: str | bytes) -> Event:
        import json

        return cls(**json.loads(line))


class Recorder:
    """The child's side of the report channel.

    ``learning`` is true in a learning run: guards then record and let the access proceed.
    Writes are unbuffered single ``os.write`` calls so that a crash loses nothing written.
    The lines are made by :func:`reporter_functions`, the one encoder (the guards' judges use
    a sealed copy of it: ``pysb_guards._seal.private_recorder``).
    """

    __slots__ = ("_deny", "_fd", "_learn", "_seen", "learning")

    def __init__(self, fd: int | None, *, learning: bool) -> None:
        import _json  # C functions only, bound now: nothing to import in the middle of a record

        self._fd = fd
        self.learning = learning
        self._seen: set[tuple[str, str, str]] = set()
        self._deny, self._learn = reporter_functions(
            fd, self._seen, os.write, time.time, os.getpid, _json.encode_basestring_ascii
        )

    def deny(self, guard: str, target: str, detail: str = "", suggested_rule: str = "") -> None:
        self._deny(guard, target, detail, suggested_rule)

    def learn(
        self, guard: str, target: str, detail: str = "", suggested_rule: str = "", **data: Any
    ) -> None:
        self._learn(guard, target, detail, suggested_rule, **data)


def reporter_functions(
    fd: int | None,
    seen: set[tuple[str, str, str]],
    write: Callable[[int, bytes], int],
    now: Callable[[], float],
    getpid: Callable[[], int],
    quote: Callable[[str], str],
) -> tuple[Callable[..., None], Callable[..., None]]:
    """``(deny, learn)``: the recorder's two calls as closures for the guards' judges.

    A judge must never run code the program can replace: :class:`Recorder`'s methods are
    looked up on a class the program reaches through the class graph, and ``os.write`` or
    ``json.dumps`` on modules it can rewrite. The guards re-create this factory with
    private globals (``pysb_guards._seal.sealed``) and pass in C functions bound at install
    (``os.write``, ``time.time``, ``os.getpid``, ``_json.encode_basestring_ascii``); the JSON
    line is built here with nothing else, in the shape :meth:`Event.from_json` reads.
    """

    def encode(value: Any) -> str:
        kind = type(value)
        if kind is str:
            return quote(value)
        if value is None:
            return "null"
        if kind is bool:
            return "true" if value else "false"
        if kind is int:
            return str(value)
        if kind is float:
            return repr(value)
        if kind is dict:
            items = dict.items(value)
            return "{" + ",".join(encode(str.__str__(k)) + ":" + encode(v) for k, v in items) + "}"
        if kind is list or kind is tuple:
            return "[" + ",".join(encode(v) for v in value) + "]"
        # Never a method of the value's own class (its __str__ would run inside a judge).
        if issubclass(kind, str):
            return quote(str.__str__(value))
        if issubclass(kind, int):
            return int.__repr__(value)
        return quote(object.__repr__(value))

    def emit(
        guard: str, action: str, target: str, detail: str, rule: str, data: dict[str, Any]
    ) -> None:
        if fd is None:
            return
        line = (
            '{"layer":"python","guard":' + encode(guard) + ',"action":' + encode(action)
            + ',"target":' + encode(target) + ',"detail":' + encode(detail)
            + ',"suggested_rule":' + encode(rule) + ',"time":' + repr(now())
            + ',"pid":' + str(getpid()) + ',"data":' + encode(data) + "}\n"
        ).encode()  # fmt: skip
        try:
            while line:
                line = line[write(fd, line) :]
        except OSError:
            pass  # the parent is gone; keep the program running

    def deny(guard: str, target: str, detail: str = "", suggested_rule: str = "") -> None:
        emit(guard, "deny", target, detail, suggested_rule, {})

    def learn(
        guard: str, target: str, detail: str = "", suggested_rule: str = "", **data: Any
    ) -> None:
        key = (guard, target, detail)
        if key in seen:  # a loop reading one file a thousand times is one record
            return
        seen.add(key)
        emit(guard, "learn", target, detail, suggested_rule, data)

    return deny, learn


#: The longest report line the parent accepts: an event names a path and a few short
#: strings; a longer line is the program writing into the channel, and is dropped.
MAX_LINE = 64 * 1024
#: What the parent reads from one sandbox's channel at most; the rest is drained unread.
MAX_TOTAL = 32 * 1024 * 1024


class ReportLimits:
    """What :func:`report_lines` dropped, for the warning the parent prints."""

    __slots__ = ("long_lines", "over_total")

    def __init__(self) -> None:
        self.long_lines = 0
        self.over_total = 0  # bytes read past MAX_TOTAL and thrown away

    def messages(self) -> list[str]:
        out = []
        if self.long_lines:
            out.append(
                f"the sandbox's report channel sent {self.long_lines} line(s) longer than "
                f"{MAX_LINE // 1024} KiB: dropped (not pysb's; the program wrote into it)"
            )
        if self.over_total:
            out.append(
                f"the sandbox's report channel sent more than {MAX_TOTAL >> 20} MiB: the "
                f"remaining {self.over_total} bytes were dropped unread (events and learned "
                "accesses after that point are missing)"
            )
        return out


def report_lines(
    fd: int,
    limits: ReportLimits,
    *,
    max_line: int = MAX_LINE,
    max_total: int = MAX_TOTAL,
    read: Any = os.read,
) -> Any:
    """Yield the complete lines read from ``fd`` (without their newline) until EOF, holding
    at most ``max_line`` bytes of a line and handing out at most ``max_total`` bytes of
    lines in all: pysb's own memory stays bounded whatever the program writes into the
    channel (a line of 1.5 GiB without a newline grew it to 3.6 GiB). An over-long line is
    skipped up to its newline; past ``max_total`` the channel is still drained, so that a
    writer never blocks on a full pipe, but nothing is kept."""
    pending = bytearray()
    skipping = False  # inside a line already longer than max_line
    kept = 0
    while True:
        chunk = read(fd, 1 << 16)
        if not chunk:
            break
        if kept >= max_total:
            limits.over_total += len(chunk)
            continue
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not skipping:
                if len(pending) + len(piece) > max_line:
                    skipping = True
                    limits.long_lines += 1
                    pending.clear()
                else:
                    pending += piece
            if end < 0:
                break
            start = end + 1
            if not skipping:
                kept += len(pending) + 1
                if kept > max_total:
                    limits.over_total += len(pending) + 1 + len(chunk) - start
                    pending.clear()
                    break
                yield bytes(pending)
            pending.clear()
            skipping = False
