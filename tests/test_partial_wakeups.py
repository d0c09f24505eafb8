"""One wake-up per call on each side (issue 30), under subprocess, landlock and bwrap.

Counted, not timed: the kernel's voluntary context switches of every thread, read from
/proc before and after a run of sequential calls. A reader thread in the host that hands
answers to the caller, or worker threads that wake each other to take turns, would show
as about one extra switch per call.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pysb_core import sandboxes
from pysb_core.testing import require_provider
from pysb_core.testing.partial import profile_text, worker_host_pid, write_module

PROVIDERS = ["subprocess", "landlock", "bwrap"]
CALLS = 400

FUNCTIONS = """
from pysb_core import sandbox

@sandbox
def echo(x):
    return x
"""


def _switches(pid: int) -> dict[str, int]:
    """Voluntary context switches of each thread of ``pid`` (a thread that sleeps in a
    blocking call and is woken counts one)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        out[tid] = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return out


def _woken(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {tid: n - before.get(tid, 0) for tid, n in after.items()}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_sequential_call_wakes_one_thread_on_each_side(tmp_path: Path, provider: str):
    if provider != "subprocess":
        require_provider(provider)
    mod = write_module(tmp_path, FUNCTIONS)
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text(provider, tmp_path))
    # Noise (another process taking the CPU, a GIL hand-off) only adds switches, never
    # removes the ones a design makes: the least of three windows is the design's count.
    mine, others, worker_total = [], [], []
    with sandboxes(profile=str(profile), cwd=str(tmp_path)) as box:
        for i in range(50):
            assert mod.echo(i) == i
        worker = worker_host_pid(box.pid)
        me = str(os.getpid())
        for _ in range(3):
            host0, child0 = _switches(os.getpid()), _switches(worker)
            for i in range(CALLS):
                assert mod.echo(i) == i
            host, child = _woken(host0, _switches(os.getpid())), _woken(child0, _switches(worker))
            mine.append(host[me])
            others.append(sum(n for tid, n in host.items() if tid != me))
            worker_total.append(sum(child.values()))
    # the calling thread sleeps in its own read of its answer: once for the answer, and
    # once more when the worker takes the call in (the kernel wakes a reader blocked on a
    # Unix socket when its peer frees send space; a plain ping-pong of two processes shows
    # the same once the peer is slower than the reader) -- at most two per call ...
    assert min(mine) <= CALLS * 2.2 + 20, mine
    # ... and no other thread of the host (the watcher, a reader) wakes for the calls
    assert min(others) <= 20, others
    # the worker: one thread wakes per call, never a second one to take over the reading
    assert CALLS * 0.8 <= min(worker_total) <= CALLS * 1.2 + 20, worker_total
