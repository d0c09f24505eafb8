"""Nothing is left behind: after ``ray.shutdown()`` and the cluster's shutdown, no process
that this test's cluster started (Ray's services, its workers, the sandboxes they kept
warm, their providers' helpers) is still running."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pysb_ray
import pytest

from pysb_core.linux.proctree import descendants

ray = pytest.importorskip("ray", reason="Ray is not installed (PYSB_REQUIRE_RAY=1: a failure)")
pytestmark = pytest.mark.slow


def start_time(pid: int) -> str | None:
    """The process's start time (field 22 of its stat), to tell it from a reused PID."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def test_no_process_is_left_behind_after_shutdown(
    tools: ModuleType, cluster_factory: Callable[..., Any]
) -> None:
    before = set(descendants(os.getpid()))
    started: dict[int, str | None] = {}

    def note_processes() -> None:
        """Every process of the cluster now (Ray may end idle workers at any time: the
        snapshots are taken right after each call, while its sandbox surely runs)."""
        for pid in descendants(os.getpid()):
            if pid not in before and pid not in started:
                started[pid] = start_time(pid)

    cluster = cluster_factory(2, {})
    try:
        with pysb_ray.SandboxPool(1, profile=tools.PROFILE, provider="landlock", num_cpus=0.5):
            pass  # a pool shut down before the end
        sandboxes = set()
        for node in (0, 1):
            fn = tools.sandbox_pid.options(resources={f"node{node}": 0.01})
            sandboxes.add(ray.get(fn.remote()))
            note_processes()
        pool = pysb_ray.SandboxPool(1, profile=tools.PROFILE, provider="landlock", num_cpus=0.5)
        pool.submit(tools.sandbox_pid)
        sandboxes.add(pool.get_next())  # left running: ray.shutdown() must end it too
        note_processes()
        assert sandboxes <= set(started), "the sandboxes descend from the cluster's processes"
    finally:
        ray.shutdown()
        cluster.shutdown()
    deadline = time.monotonic() + 30
    while True:
        alive = {pid for pid, t in started.items() if t is not None and start_time(pid) == t}
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not alive, {pid: _cmdline(pid) for pid in alive}


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"
