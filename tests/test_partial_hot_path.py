"""The host's side of a trivial ``@sandbox`` call runs few Python functions (issue 30 #2).

Counted, not timed: ``sys.setprofile`` sees every Python-level function the calling thread
enters during one call. Each one costs a frame and its bytecode, and on a loaded machine
the cold caches after the wait for the answer multiply that: the p50 of a trivial call sat
at ~2.5x the pickle ping-pong floor with 24 of them (Condition's ``__enter__``/``__exit__``
twice, the buffer check once per level of ``(ref, args, kwargs)``, the role hand-off
checks, the reference and client look-ups).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

from pysb_core import sandboxes
from pysb_core.testing import require_provider
from pysb_core.testing.partial import profile_text, worker_host_pid, write_module

FUNCTIONS = """
from pysb_core import sandbox

@sandbox
def echo(x):
    return x

@sandbox(retry_on_crash=True)
def again(x):
    return x
"""

#: Python functions the calling thread may enter for one call (13 today): the wrapper, the
#: sandbox test, the client's call, the call's encoding (three, with the buffer check of
#: the arguments), its submission and frame writer, the leader's read (three) and the
#: answer's decoding (two).
MAX_FUNCTIONS = 14


def _functions_of_one_call(call: object) -> collections.Counter[str]:
    seen: collections.Counter[str] = collections.Counter()

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and frame.f_code.co_filename != __file__:
            seen[f"{frame.f_code.co_filename}:{frame.f_code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        call()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("provider", ["subprocess", "landlock"])
def test_a_trivial_call_runs_few_python_functions_in_the_host(tmp_path: Path, provider: str):
    if provider != "subprocess":
        require_provider(provider)
    mod = write_module(tmp_path, FUNCTIONS)
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text(provider, tmp_path))
    with sandboxes(profile=str(profile), cwd=str(tmp_path)):
        for i in range(20):
            assert mod.echo(i) == i
        counts = [_functions_of_one_call(lambda: mod.echo(7)) for _ in range(5)]
    # the least of five: a rare path (the started pipe's drain every 256 answers) only adds
    fewest = min(counts, key=lambda c: sum(c.values()))
    assert 0 < sum(fewest.values()) <= MAX_FUNCTIONS, dict(fewest)


def _io_counts(pid: int) -> tuple[int, int]:
    """The read and write system calls ``pid`` (all its threads) has made so far."""
    fields = dict(
        line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines() if line
    )
    return int(fields["syscr"]), int(fields["syscw"])


def _worker_io(tmp_path: Path, provider: str, name: str, calls: int) -> tuple[int, int]:
    """The worker's reads and writes (``/proc/PID/io``) over ``calls`` warm calls of
    ``name``."""
    if provider != "subprocess":
        require_provider(provider)
    mod = write_module(tmp_path, FUNCTIONS)
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text(provider, tmp_path))
    fn = getattr(mod, name)
    with sandboxes(profile=str(profile), cwd=str(tmp_path)) as box:
        for i in range(20):
            assert fn(i) == i
        worker = worker_host_pid(box.pid)
        reads0, writes0 = _io_counts(worker)
        for i in range(calls):
            assert fn(i) == i
        reads, writes = _io_counts(worker)
    return reads - reads0, writes - writes0


@pytest.mark.parametrize("provider", ["subprocess", "landlock", "bwrap"])
def test_the_worker_takes_a_call_with_one_read(tmp_path: Path, provider: str):
    """A call costs the worker one read (the host pads each frame to a block, so the read
    of a block takes it whole) and two writes (the started mark, then the answer): before,
    a header read and a payload read."""
    calls = 300
    reads, writes = _worker_io(tmp_path, provider, "echo", calls)
    assert reads <= calls + 5, (reads, calls)
    assert writes <= 2 * calls + 5, (writes, calls)


@pytest.mark.parametrize("provider", ["subprocess", "landlock"])
def test_a_call_safe_to_repeat_costs_the_worker_no_started_mark(tmp_path: Path, provider: str):
    """``retry_on_crash`` calls are sent again after a crash whether they started or not,
    so the worker writes no started mark for them: one write per call (the answer), not
    two. (tests/test_partial_crash.py: such a call still runs again after a crash, and a
    call without it still fails.)"""
    calls = 300
    reads, writes = _worker_io(tmp_path, provider, "again", calls)
    assert reads <= calls + 5, (reads, calls)
    assert writes <= calls + 5, (writes, calls)
