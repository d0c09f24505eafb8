"""The audit hook's walk up a frame's chain (is a sealed frame above it?): linear over a
traceback of a deep recursion, and never fooled by what it remembers between walks.

After a long walk the hook remembers the part of that chain that cannot change -- up to
the first frame of a generator or coroutine, whose ``f_back`` is whoever resumes it. These
tests run the hook's factory in this process, unsealed, with real frames: functions built
over a "sealed" builtins dictionary stand for the guards' code (as in test_judge_seal.py).
"""

from __future__ import annotations

import _thread
import builtins
import gc
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pysb_guards import _seal

SEALED = dict(builtins.__dict__)


def _safe_frame() -> Callable[[Any], Any]:
    """A fresh hook's ``safe_frame``: the frame back, or None when a sealed frame is above."""
    return _seal._hook_factory(
        _seal.DOOR_NS, types.FunctionType, types.FrameType, sys._getframe,
        _thread.get_ident, SEALED, [False], set(), None, None, sys.getrefcount,
    )[3]  # fmt: skip


def _sealed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` running as the guards' code does: its frame's builtins are SEALED."""
    return types.FunctionType(fn.__code__, {"__builtins__": SEALED}, fn.__name__)


def _deep_traceback(depth: int) -> types.TracebackType:
    def down(n: int) -> None:
        if n == 0:
            raise LookupError("bottom")
        down(n - 1)

    try:
        down(depth)
    except LookupError as e:
        assert e.__traceback__ is not None
        return e.__traceback__
    raise AssertionError("not raised")


def _at_depth(depth: int, work: Callable[[], Any]) -> Any:
    """``work()`` with ``depth`` more frames below it: a chain long enough to remember."""
    return work() if depth == 0 else _at_depth(depth - 1, work)


def _lines_run_in(code_name: str, work: Callable[[], None]) -> int:
    """How many lines of the function named ``code_name`` ``work`` runs (a line tracer:
    a count of the walk's steps that does not depend on the machine's speed)."""
    count = 0

    def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if frame.f_code.co_name != code_name:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


@pytest.fixture(autouse=True)
def _deep_enough() -> Iterator[None]:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def test_a_deep_traceback_is_walked_in_linear_steps() -> None:
    """Each entry's ``tb_frame`` read walks to the frame the last read remembered, not to
    the end of the chain (before: 65 s for 3.13's test_json, whose RecursionError is
    200,000 frames deep; quadratic here would be ~6 * 10^6 lines)."""
    safe_frame = _safe_frame()
    depth = 2000
    tb = _deep_traceback(depth)
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next

    def read_all() -> None:
        for entry in entries:
            assert safe_frame(entry.tb_frame) is entry.tb_frame

    lines = _lines_run_in("sealed_chain", read_all)
    assert len(entries) > depth
    assert lines < 300 * len(entries), lines


def test_sys_getframe_at_every_level_of_a_recursion_is_linear() -> None:
    safe_frame = _safe_frame()

    def down(n: int) -> None:
        assert safe_frame(sys._getframe()) is not None
        if n:
            down(n - 1)

    lines = _lines_run_in("sealed_chain", lambda: down(2000))
    assert lines < 300 * 2000, lines


def test_a_loggers_calls_at_one_depth_of_a_deep_stack_read_no_code_again() -> None:
    """Sibling walks (``logging``'s ``sys._getframe`` per record, at one depth) come by a
    frame remembered a few frames up: the code of the chain's frames is read once, not
    at every call (each read is an audit event of its own)."""
    reads = 0

    class Reading(set):  # the threads reading a frame's code right now, counted
        def add(self, item: object) -> None:
            nonlocal reads
            reads += 1
            super().add(item)

    safe_frame = _seal._hook_factory(
        _seal.DOOR_NS, types.FunctionType, types.FrameType, sys._getframe,
        _thread.get_ident, SEALED, [False], Reading(), None, None, sys.getrefcount,
    )[3]  # fmt: skip

    def log() -> None:
        assert safe_frame(sys._getframe()) is not None

    def records() -> int:
        log()
        first = reads
        for _ in range(200):
            log()
        return first

    first = _at_depth(300, records)
    assert first > 300  # the first call read the chain's code
    assert reads - first < 200, reads - first


def test_a_sealed_frame_above_is_found_past_what_was_remembered() -> None:
    """A frame called by sealed code, under a chain the hook walked and remembered."""
    safe_frame = _safe_frame()
    tb = _deep_traceback(50)
    while tb.tb_next is not None:
        assert safe_frame(tb.tb_frame) is tb.tb_frame
        tb = tb.tb_next

    def program_code() -> Any:
        return safe_frame(sys._getframe())

    def guard(callback: Callable[[], Any]) -> Any:
        return callback()

    assert safe_frame(sys._getframe()) is not None  # this frame's chain: remembered
    assert _sealed(guard)(program_code) is None
    assert program_code() is not None


def test_a_generator_resumed_by_sealed_code_is_seen_through_what_was_remembered() -> None:
    """The chain a walk remembered passes a generator's frame; sealed code resumes it: a
    frame below the generator now has the sealed frame above it (its f_back changed)."""
    safe_frame = _safe_frame()
    seen: list[Any] = []

    def leaf() -> types.FrameType:
        return sys._getframe()

    def middle() -> types.FrameType:
        return leaf()

    def program_generator() -> Iterator[None]:
        kept = middle()  # finished frames: leaf's f_back is middle's, middle's this one's
        seen.append(safe_frame(kept) is kept)  # the walk remembers leaf -> this generator
        yield
        seen.append(safe_frame(kept))  # resumed by sealed code
        yield
        seen.append(safe_frame(kept) is kept)  # resumed by the program again

    def guard(generator: Iterator[None]) -> None:
        next(generator)

    def drive() -> None:
        generator = program_generator()
        next(generator)
        _sealed(guard)(generator)
        next(generator, None)

    _at_depth(200, drive)  # a long chain: the first walk remembers it
    assert seen == [True, None, True]


def test_the_remembered_frame_is_let_go_at_the_next_read() -> None:
    """The frame a walk remembers is held until the next frame read, which lets it go
    when nothing else holds it: the locals of a dropped traceback are freed then."""
    safe_frame = _safe_frame()

    class Held:
        pass

    def bottom() -> None:
        held = Held()
        refs.append(weakref.ref(held))
        raise LookupError

    refs: list[weakref.ref[Held]] = []
    try:
        _at_depth(200, bottom)  # a long chain: the walk from bottom's frame remembers it
    except LookupError as e:
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        assert safe_frame(tb.tb_frame) is tb.tb_frame  # bottom's: a long walk
        del tb
    gc.collect()
    assert refs[0]() is not None  # held: the walk remembers bottom's frame

    def suspended() -> Iterator[None]:
        yield

    generator = suspended()
    # A read that remembers nothing new (a generator's own frame can change its chain):
    # only the check that nothing else holds the remembered frame lets it go.
    assert safe_frame(generator.gi_frame) is not None
    assert refs[0]() is None
