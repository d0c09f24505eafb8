"""Partial-mode benchmark: ``python benchmarks/partial_quick.py [--provider NAME] [--json]``.

Measures what the performance budget names: ``with sandboxes()`` start and stop, a
trivial call's p50/p99, calls per second from 1 and 8 threads, and a 10 MiB argument and
a 10 MiB result, each beside its floor measured in the same run (``_floor.py``: a pickle
ping-pong between two processes over a socketpair, and 10 MiB sent as an out-of-band
pickle-5 buffer). ``--workers N`` starts ``sandboxes(workers=N)``. The sandboxed functions
are defined in a module written to a temporary directory (they must be importable by the
worker); the profile enables nothing but the chosen provider and permissive rules (the
Python guards are on when installed, as in a real run, unless ``--no-python-guards``).
"""

from __future__ import annotations

import argparse
import json
import statistics
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

@sandbox
def size(blob):
    return len(blob)

@sandbox
def blob(n):
    return bytes(n)

@sandbox
def spin(n):
    # a call that computes in the worker (what more worker processes speed up)
    total = 0
    for i in range(n):
        total += i
    return total
"""


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def measure(
    provider: str = "subprocess",
    calls: int = 5000,
    python_guards: bool | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    import _floor

    from pysb_core import sandboxes
    from pysb_core.testing.partial import profile_text, write_module

    with tempfile.TemporaryDirectory(prefix="pysb-bench-") as tmp:
        root = Path(tmp)
        mod = write_module(root, MODULE, prefix="pysb_bench")
        profile = root / ".pysb.yaml"
        profile.write_text(profile_text(provider, root))
        kwargs: dict[str, Any] = {
            "profile": str(profile),
            "python_guards": python_guards,
            "cwd": tmp,
        }
        if workers is not None:
            kwargs["workers"] = workers

        starts, stops = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            box = sandboxes(**kwargs)
            box.__enter__()
            t1 = time.perf_counter()
            mod.noop()
            t2 = time.perf_counter()
            box.__exit__(None, None, None)
            starts.append(t1 - t0)
            stops.append(time.perf_counter() - t2)

        result: dict[str, Any] = {
            "provider": provider,
            "workers": workers or 1,
            "start_ms": statistics.median(starts) * 1e3,
            "stop_ms": statistics.median(stops) * 1e3,
        }
        with sandboxes(**kwargs):
            for _ in range(200):
                mod.noop()
            lat = []
            for _ in range(calls):
                t = time.perf_counter()
                mod.noop()
                lat.append(time.perf_counter() - t)
            result["call_p50_us"] = _percentile(lat, 0.50) * 1e6
            result["call_p99_us"] = _percentile(lat, 0.99) * 1e6

            for threads in (1, 8):
                per = max(1, calls // threads)

                def work(n: int = per) -> None:
                    for _ in range(n):
                        mod.noop()

                pool = [threading.Thread(target=work) for _ in range(threads)]
                t = time.perf_counter()
                for th in pool:
                    th.start()
                for th in pool:
                    th.join()
                result[f"calls_per_s_{threads}_threads"] = per * threads / (time.perf_counter() - t)

            per = max(1, calls // 40)

            def spin_work(n: int = per) -> None:
                for _ in range(n):
                    mod.spin(20000)

            pool = [threading.Thread(target=spin_work) for _ in range(8)]
            t = time.perf_counter()
            for th in pool:
                th.start()
            for th in pool:
                th.join()
            result["spin_calls_per_s_8_threads"] = per * 8 / (time.perf_counter() - t)

            big = bytes(10 << 20)
            args, results = [], []
            for _ in range(5):
                t = time.perf_counter()
                mod.size(big)
                args.append(time.perf_counter() - t)
                t = time.perf_counter()
                mod.blob(10 << 20)
                results.append(time.perf_counter() - t)
            result["arg_10mib_ms"] = statistics.median(args) * 1e3
            result["result_10mib_ms"] = statistics.median(results) * 1e3
        floor = _floor.measure(calls=min(calls, 2000))
        result["floor_ping_pong_p50_us"] = floor["ping_pong_p50_s"] * 1e6
        result["floor_oob_10mib_ms"] = floor["oob_10mib_s"] * 1e3
    return result


#: ARCHITECTURE.md's budget, tightened for the call and the payloads by issue 30.
TARGETS = {
    "start_ms": ("<=", 150),
    "stop_ms": ("<=", 50),
    "call_p50_us": ("<=", 30),
    "call_p99_us": ("<=", 500),
    "calls_per_s_8_threads": (">=", 20000),
    "arg_10mib_ms": ("<=", 10),
    "result_10mib_ms": ("<=", 10),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="subprocess")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument(
        "--no-python-guards", dest="python_guards", action="store_false", default=None
    )
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args(argv)
    result = measure(ns.provider, ns.calls, ns.python_guards, ns.workers)
    if ns.json:
        print(json.dumps(result))
        return 0
    for key, value in result.items():
        target = TARGETS.get(key)
        note = ""
        if target is not None:
            op, limit = target
            ok = value <= limit if op == "<=" else value >= limit
            note = f"  (target {op} {limit}: {'ok' if ok else 'MISSED'})"
        shown = f"{value:,.1f}" if isinstance(value, float) else value
        print(f"{key:24} {shown}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
