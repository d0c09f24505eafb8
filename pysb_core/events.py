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
        """The event one report line holds; ``ValueError`` when it is not one.

        The line was written by sandboxed code (the channel is an inherited descriptor the
        program can write into), so its shape is checked before any hook sees it: every
        field of its own type, strings within :data:`MAX_FIELD` characters, ``data`` a
        mapping of short names to plain JSON values (what each family's ``pysb_learned``
        then checks further)."""
        import json

        if isinstance(line, (bytes, bytearray)):
            # UTF-8 only: json.loads would guess UTF-16/32 from the bytes and import that
            # codec -- an import chosen by the sandbox (UnicodeDecodeError is a ValueError).
            line = bytes(line).decode("utf-8")
        obj = json.loads(line)
        if type(obj) is not dict:
            raise ValueError("an event is a JSON object")
        for name, value in obj.items():
            problem = _field_problem(name, value)
            if problem:
                raise ValueError(f"event field {name!r}: {problem}")
        return cls(**obj)


#: The longest string field of an event (a path is at most PATH_MAX bytes; its JSON text
#: keeps one character per byte, a non-UTF-8 byte as one lone surrogate).
MAX_FIELD = 8192
_WORDS = {"layer": ("python", "os"), "action": ("deny", "learn")}
_STRINGS = ("guard", "target", "detail", "suggested_rule")


def _field_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the event field ``name`` (None: it can)."""
    if name in _WORDS:
        return None if value in _WORDS[name] and type(value) is str else "unknown value"
    if name in _STRINGS:
        if type(value) is not str:
            return "not a string"
        return None if len(value) <= MAX_FIELD else "too long"
    if name == "time":
        return None if type(value) in (int, float) else "not a number"
    if name == "pid":
        return None if type(value) is int and 0 <= value < 1 << 31 else "not a process id"
    if name == "data":
        if type(value) is not dict:
            return "not a mapping"
        for key, item in value.items():
            if len(key) > 64:
                return "a name longer than 64 characters"
            if not _plain(item, 3):
                return f"{key!r} is not plain data"
        return None
    return None  # an unknown field: the record's own constructor refuses it


def _plain(value: Any, depth: int) -> bool:
    """JSON scalars, and lists/mappings of them ``depth`` deep, strings bounded."""
    kind = type(value)
    if value is None or kind in (bool, int, float):
        return True
    if kind is str:
        return len(value) <= MAX_FIELD
    if depth <= 0:
        return False
    if kind is list:
        return all(_plain(v, depth - 1) for v in value)
    if kind is dict:
        return all(len(k) <= 64 and _plain(v, depth - 1) for k, v in value.items())
    return False


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

    __slots__ = ("long_lines", "malformed", "over_total")

    def __init__(self) -> None:
        self.long_lines = 0
        self.over_total = 0  # bytes read past MAX_TOTAL and thrown away
        self.malformed = 0  # lines that are not an event (Event.from_json refused them)

    def messages(self) -> list[str]:
        out = []
        if self.malformed:
            out.append(
                f"the sandbox's report channel sent {self.malformed} line(s) that are not "
                "pysb events: dropped (not pysb's; the program wrote into it)"
            )
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
