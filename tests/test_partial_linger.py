"""The caller's lingering read (issue 30 item 2, 2026-12-07): a lone caller polls for its
answer without sleeping for a moment before it blocks, so that a worker on another CPU
answers a caller that is still running (no cross-CPU wake-up, which costs ~20 µs on a VM
whose idle CPUs halt). Real pipes and a real writer thread; the figures are in
docs/performance.md ("Partial mode", 2026-12-07)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from pysb_core.remote import transport


@pytest.fixture
def answer_pipe():
    _, (answer_r, answer_w) = pipes = transport.call_pipes()
    yield answer_r, answer_w
    for pipe in pipes:
        for fd in pipe:
            try:
                os.close(fd)
            except OSError:
                pass


def _later(delay: float, fn) -> threading.Thread:  # type: ignore[no-untyped-def]
    def run() -> None:
        time.sleep(delay)
        fn()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_lingering_read_takes_a_frame_that_comes_meanwhile(answer_pipe):
    answer_r, answer_w = answer_pipe
    reader = transport.FrameReader(answer_r, transport.child_limits())
    reader.linger = 5.0  # long enough for the writer thread on any machine
    writer = transport.FrameWriter(answer_w)
    # late enough that the reader is polling by then, even on a loaded machine
    thread = _later(0.2, lambda: writer.send(transport.RESULT, 3, b"answer"))
    assert reader.read() == (transport.RESULT, 3, b"answer")
    thread.join()
    assert reader._skip == 0  # found within the window: the next reads linger too


def test_a_window_without_a_frame_makes_the_next_reads_block(answer_pipe, monkeypatch):
    """Nothing within the window (a call that computes, or a worker waiting for the
    caller's own CPU): the next LINGER_SKIP reads block at once (a run of long calls
    costs one window in LINGER_SKIP + 1, not one each), then the reader lingers again.
    (LINGER_APART is widened: a read descheduled on a loaded machine must not count as a
    wake-up across CPUs here.)"""
    monkeypatch.setattr(transport, "LINGER_APART", 30.0)
    answer_r, answer_w = answer_pipe
    reader = transport.FrameReader(answer_r, transport.child_limits())
    reader.linger = 0.001
    writer = transport.FrameWriter(answer_w)
    thread = _later(0.05, lambda: writer.send(transport.RESULT, 1, b"late"))
    assert reader.read() == (transport.RESULT, 1, b"late")
    thread.join()
    assert reader._skip == transport.LINGER_SKIP
    for i in range(transport.LINGER_SKIP):
        writer.send(transport.RESULT, 10 + i, b"x")
        assert reader.read() == (transport.RESULT, 10 + i, b"x")
        assert reader._skip == transport.LINGER_SKIP - 1 - i


def test_a_frame_there_without_lingering_makes_the_next_reads_block(answer_pipe, monkeypatch):
    """The answer is there before the caller polled or right after it gave its CPU away
    once: the worker ran on the caller's CPU, lingering buys nothing. The next
    LINGER_TOGETHER reads block at once, each timed; the first that waited longer than
    LINGER_APART (a wake-up across CPUs: the sides are apart again) ends that."""
    monkeypatch.setattr(transport, "LINGER_LATE", 30.0)  # a thread's delay is not a call's
    answer_r, answer_w = answer_pipe
    reader = transport.FrameReader(answer_r, transport.child_limits())
    reader.linger = 0.5
    writer = transport.FrameWriter(answer_w)
    writer.send(transport.RESULT, 1, b"there")
    assert reader.read() == (transport.RESULT, 1, b"there")
    assert reader._skip == transport.LINGER_TOGETHER
    thread = _later(0.05, lambda: writer.send(transport.RESULT, 2, b"from afar"))
    assert reader.read() == (transport.RESULT, 2, b"from afar")  # blocked 50 ms: apart
    thread.join()
    assert reader._skip == 0


def test_a_blocking_read_of_a_call_that_computes_keeps_blocking(answer_pipe):
    """A blocked read that waited longer than LINGER_LATE was a call that computes, not a
    wake-up across CPUs: the reads go on blocking."""
    answer_r, answer_w = answer_pipe
    reader = transport.FrameReader(answer_r, transport.child_limits())
    reader.linger = 0.5
    reader._skip = transport.LINGER_SKIP
    writer = transport.FrameWriter(answer_w)
    thread = _later(0.05, lambda: writer.send(transport.RESULT, 3, b"computed"))
    assert reader.read() == (transport.RESULT, 3, b"computed")
    thread.join()
    assert reader._skip == transport.LINGER_SKIP - 1


def test_the_end_of_stream_ends_a_lingering_read_at_once(answer_pipe):
    answer_r, answer_w = answer_pipe
    reader = transport.FrameReader(answer_r, transport.child_limits())
    reader.linger = 3600.0  # only the hang-up can end the poll
    os.close(answer_w)
    started = time.monotonic()
    with pytest.raises(transport.ChannelClosed, match="end of stream"):
        reader.read()
    assert time.monotonic() - started < 5


def test_a_read_with_a_deadline_lingers_then_waits_for_its_deadline(answer_pipe):
    answer_r, answer_w = answer_pipe
    reader = transport.FrameReader(answer_r, transport.child_limits())
    reader.linger = 0.001
    started = time.monotonic()
    assert not reader.ready(0.2)  # nothing comes: the deadline, not the window, ends it
    assert time.monotonic() - started >= 0.19
    writer = transport.FrameWriter(answer_w)
    thread = _later(0.2, lambda: writer.send(transport.RESULT, 4, b"in time"))
    reader._skip = 0
    reader.linger = 5.0
    assert reader.ready(30.0)
    assert reader.read() == (transport.RESULT, 4, b"in time")
    thread.join()
    # found while polling (the sides apart): the read after it found the bytes at once,
    # which is not a sign that the sides share a CPU -- the next read lingers again
    assert reader._skip == 0


def _linger_of_a_client(setup: str, pipes: bool) -> float:
    """A real Client's window, built in a fresh interpreter after ``setup`` (no worker is
    started: the window is chosen when the client is made)."""
    code = (
        f"{setup}\n"
        "import types\n"
        "from pysb_core.remote.client import Client\n"
        f"print(Client(types.SimpleNamespace(partial_pipes={pipes}))._linger)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def test_a_caller_on_one_cpu_never_lingers():
    """On a single CPU a polling caller would only keep the worker from running."""
    one_cpu = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})"
    assert _linger_of_a_client(one_cpu, pipes=True) == 0.0
    if len(os.sched_getaffinity(0)) > 1:
        assert _linger_of_a_client("", pipes=True) > 0


def test_a_caller_over_a_vm_socket_never_lingers():
    """qemu's forwarded socket answers in ~300 µs, far above the window."""
    assert _linger_of_a_client("", pipes=False) == 0.0
