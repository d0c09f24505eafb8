"""Where a trivial ``@sandbox`` call's time goes, per side: ``python benchmarks/partial_sides.py``.

Prints one JSON line: the call's p50 and mean, the CPU time per call of the calling thread
and of the worker process (every thread; ``/proc/PID/task/*/schedstat``, in ns), and their
context switches per call -- beside the same figures for ``_floor.py``'s pickle ping-pong
measured in the same run. ``--cpus H,W`` pins the calling thread to CPU H and the worker's
threads to CPU W after the start: ``0,1`` forces the two sides apart (each wake-up crosses
CPUs), ``0,0`` together. Why: on a VM whose idle CPUs halt, where the scheduler places the
two sides decides more of a call's time than either side's work (docs/performance.md,
"Partial mode", 2026-12-07), and it flips with the machine's load; pinning measures each
case apart. ``--linger US`` overrides the caller's lingering window (0: off).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MODULE = """
from pysb_core import sandbox

@sandbox
def noop():
    return None
"""


def _tasks(pid: int) -> tuple[int, int, int]:
    """CPU ns, voluntary and involuntary switches of every thread of ``pid``."""
    cpu = vol = invol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            cpu += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    invol += int(line.split()[1])
        except OSError:
            pass  # the thread ended meanwhile
    return cpu, vol, invol


def _thread_cpu() -> int:
    tid = threading.get_native_id()
    return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])


def _pin(pid: int, cpu: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except OSError:
            pass


def _run(call: Any, calls: int, worker: int) -> dict[str, float]:
    lat = []
    h0, w0 = _thread_cpu(), _tasks(worker)
    start = time.perf_counter()
    for _ in range(calls):
        t = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - start
    h1, w1 = _thread_cpu(), _tasks(worker)
    lat.sort()
    return {
        "p50_us": lat[len(lat) // 2] * 1e6,
        "p99_us": lat[len(lat) * 99 // 100] * 1e6,
        "mean_us": wall / calls * 1e6,
        "caller_cpu_us": (h1 - h0) / calls / 1e3,
        "worker_cpu_us": (w1[0] - w0[0]) / calls / 1e3,
        "worker_switches": (w1[1] - w0[1] + w1[2] - w0[2]) / calls,
    }


def floor(calls: int, cpus: tuple[int, int] | None) -> dict[str, float]:
    """_floor.py's ping-pong, with the same accounting (and the same pinning)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import _floor

    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        a.close()
        _floor._echo(b)
    b.close()
    try:
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[0]})
            _pin(pid, cpus[1])

        def one() -> None:
            a.sendall(b"p")
            _floor._send_msg(a, pickle.dumps(((), (1,), {}), protocol=5))
            pickle.loads(_floor._recv_msg(a))

        for _ in range(500):
            one()
        return _run(one, calls, pid)
    finally:
        a.close()
        os.waitpid(pid, 0)  # our own forked child
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def measure(
    provider: str, calls: int, cpus: tuple[int, int] | None, linger: float | None
) -> dict[str, Any]:
    from pysb_core import sandboxes
    from pysb_core.remote import api
    from pysb_core.testing.partial import profile_text, worker_host_pid, write_module

    with tempfile.TemporaryDirectory(prefix="pysb-sides-") as tmp:
        root = Path(tmp)
        mod = write_module(root, MODULE, prefix="pysb_sides")
        profile = root / ".pysb.yaml"
        profile.write_text(profile_text(provider, root))
        with sandboxes(profile=str(profile), cwd=tmp):
            client: Any = api._client
            worker = worker_host_pid(client.pid)
            if linger is not None:
                client._linger = linger * 1e-6
            if cpus is not None:
                os.sched_setaffinity(0, {cpus[0]})
                _pin(worker, cpus[1])
            for _ in range(500):
                mod.noop()
            result: dict[str, Any] = {"provider": provider, "cpus": cpus}
            result.update(_run(mod.noop, calls, worker))
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    result.update({f"floor_{k}": v for k, v in floor(calls, cpus).items()})
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="subprocess")
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--cpus", default=None, help="H,W: pin the caller to H, the worker to W")
    parser.add_argument("--linger", type=float, default=None, help="µs (0: off)")
    ns = parser.parse_args(argv)
    cpus = tuple(int(c) for c in ns.cpus.split(",")) if ns.cpus else None
    result = measure(ns.provider, ns.calls, cpus, ns.linger)  # type: ignore[arg-type]
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
