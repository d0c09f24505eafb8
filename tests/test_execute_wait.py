"""pysb_core.launch.execute.wait with real child processes: where wall-time starts counting (the
providers' side, and requests to end, are in tests/security/test_run_end.py)."""

from __future__ import annotations

import os
import subprocess
import time

from pysb_core.launch.execute import ProgramStart, wait


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "20"])


def test_wall_time_counts_from_the_reported_program_start() -> None:
    """A sandbox that boots first reports when its program started; the limit counts from
    that moment (here one second after the launch), not from the launch."""
    proc = _sleeper()
    r, w = os.pipe2(os.O_NONBLOCK)
    proc.pysb_program_started = ProgramStart(r)  # type: ignore[attr-defined]
    launched = time.monotonic()
    os.write(w, f"{launched + 1.0!r}\n".encode())
    os.close(w)
    status = wait(proc, wall_time=0.5)
    elapsed = time.monotonic() - launched
    assert status == 124
    assert 1.4 <= elapsed < 3.0, elapsed


def test_wall_time_without_a_start_report_counts_from_the_launch() -> None:
    proc = _sleeper()
    launched = time.monotonic()
    assert wait(proc, wall_time=0.5) == 124
    assert time.monotonic() - launched < 1.5


def test_a_start_that_never_comes_closes_the_pipe_and_keeps_waiting() -> None:
    """The supervisor died before the start: EOF, no start time, the run's status stands."""
    proc = subprocess.Popen(["sh", "-c", "exit 3"])
    r, w = os.pipe2(os.O_NONBLOCK)
    os.close(w)
    start = ProgramStart(r)
    proc.pysb_program_started = start  # type: ignore[attr-defined]
    assert wait(proc, wall_time=5) == 3
    assert start() is None
