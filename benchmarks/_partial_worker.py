"""One partial-mode measurement run, in its own process (for pysb or for the reference).

``python _partial_worker.py --impl pysb|ref --provider NAME --profile PATH [--quick]``
prints one JSON object on stdout. The orchestrator (``partial.py``) runs it in a fresh
interpreter per provider so that one sandbox's state never leaks into the next, with the
working directory set to a temporary directory holding this file, the function modules
and the profile. Standard library only (plus the implementation under test): it runs
with the reference's interpreter too. A step that fails records its error and the run
goes on: the reference refuses large results, and that refusal is a result.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import _floor
import _procs

MIB = 1 << 20


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


class Impl:
    """How to open a sandbox and where the functions are, for one implementation."""

    def __init__(self, impl: str, provider: str, profile: str, guards: bool = True) -> None:
        #: A sandbox of two worker processes (pysb's ``workers=2``), None for the reference.
        self.two_workers: Callable[[], Any] | None = None
        if impl == "pysb":
            from pysb_core import sandboxes

            self.funcs = importlib.import_module("_funcs")
            # None: pysb's default (the Python guards when pysb-guards is installed).
            flag = None if guards else False
            self.factory: Callable[[], Any] = lambda: sandboxes(
                profile=profile, provider=provider, python_guards=flag
            )
            self.two_workers = lambda: sandboxes(
                profile=profile, provider=provider, python_guards=flag, workers=2
            )
        else:
            from pysandboxes import sandboxes  # type: ignore[import-not-found]

            self.funcs = importlib.import_module("_ref_funcs")
            self.factory = lambda: sandboxes(sandboxes_config=profile, os_sandbox=provider)


def _step(out: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    try:
        out[key] = fn()
    except Exception as exc:  # a refusal or failure is recorded, not fatal
        out[key] = {"error": _error(exc)}


def start_stop(impl: Impl, reps: int) -> dict[str, Any]:
    starts, firsts, stops = [], [], []
    for _ in range(reps):
        box = impl.factory()
        t0 = time.perf_counter()
        box.__enter__()
        t1 = time.perf_counter()
        try:
            impl.funcs.noop(1)
            t2 = time.perf_counter()
        finally:
            t3 = time.perf_counter()
            box.__exit__(None, None, None)
            t4 = time.perf_counter()
        starts.append(t1 - t0)
        firsts.append(t2 - t1)
        stops.append(t4 - t3)
    return {
        "start_s": statistics.median(starts),
        "first_call_s": statistics.median(firsts),
        "stop_s": statistics.median(stops),
        "start_all_s": starts,
        "stop_all_s": stops,
    }


def latency(impl: Impl, calls: int) -> dict[str, float]:
    for i in range(min(100, calls)):
        impl.funcs.noop(i)
    lat = []
    for i in range(calls):
        t = time.perf_counter()
        impl.funcs.noop(i)
        lat.append(time.perf_counter() - t)
    return {
        "calls": calls,
        "min_s": min(lat),
        "p50_s": _percentile(lat, 0.50),
        "p99_s": _percentile(lat, 0.99),
        "max_s": max(lat),
    }


def threads_rate(impl: Impl, threads: int, per: int) -> float:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(per):
                impl.funcs.noop(i)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    t = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    elapsed = time.perf_counter() - t
    if errors:
        raise errors[0]
    return threads * per / elapsed


def tasks_rate(impl: Impl, tasks: int, per: int) -> float:
    async def one() -> None:
        for i in range(per):
            await impl.funcs.anoop(i)

    async def main() -> float:
        await impl.funcs.anoop(0)  # warm the loop's path once
        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(tasks)))
        return tasks * per / (time.perf_counter() - t)

    return asyncio.run(main())


def payload(impl: Impl, nbytes: int, reps: int, direction: str) -> dict[str, float]:
    times = []
    data = bytes(nbytes)
    for _ in range(reps):
        t = time.perf_counter()
        if direction == "argument":
            got = impl.funcs.size(data)
            ok = got == nbytes
        else:
            got = impl.funcs.blob(nbytes)
            ok = len(got) == nbytes
        times.append(time.perf_counter() - t)
        if not ok:
            raise RuntimeError(f"wrong {direction} size came back")
    return {"median_s": statistics.median(times), "min_s": min(times), "reps": reps}


def measure(impl: Impl, quick: bool, heavy: bool) -> dict[str, Any]:
    """Everything the budget names, with bounded repetitions (``heavy``: a slow provider)."""
    out: dict[str, Any] = {}
    if quick:
        start_reps, calls, per_thread, pay_reps = 2, 300, 40, 2
    elif heavy:
        start_reps, calls, per_thread, pay_reps = 3, 1000, 125, 3
    else:
        start_reps, calls, per_thread, pay_reps = 5, 2000, 250, 5
    _step(out, "start_stop", lambda: start_stop(impl, start_reps))
    if "error" in out["start_stop"]:
        return out  # nothing else can work: say why once
    with impl.factory():
        _step(out, "latency", lambda: latency(impl, calls))
        _step(out, "calls_per_s_1_thread", lambda: threads_rate(impl, 1, per_thread * 8))
        _step(out, "calls_per_s_8_threads", lambda: threads_rate(impl, 8, per_thread))
        _step(out, "calls_per_s_8_tasks", lambda: tasks_rate(impl, 8, per_thread))
        for mib in (1, 10):
            for direction in ("argument", "result"):
                nbytes = mib * MIB

                def move(n: int = nbytes, d: str = direction) -> dict[str, float]:
                    return payload(impl, n, pay_reps, d)

                _step(out, f"{direction}_{mib}mib", move)
    if impl.two_workers is not None:
        with impl.two_workers():
            impl.funcs.noop(0)
            _step(out, "calls_per_s_8_threads_2_workers", lambda: threads_rate(impl, 8, per_thread))
    # The floors, measured beside the figures: a pickle ping-pong over a socketpair
    # between two plain processes, and 10 MiB sent as an out-of-band pickle-5 buffer.
    _step(out, "floor", lambda: _floor.measure(calls=calls, reps=pay_reps))
    return out


def idle_rss(impl: Impl) -> dict[str, Any]:
    """Peak RSS of this (host) process and of the largest process below it, idle sandbox."""
    base = _procs.peak_rss_kib()
    with impl.factory():
        impl.funcs.noop(1)
        time.sleep(0.3)
        import os

        child = _procs.largest_descendant(os.getpid())
        parent = _procs.peak_rss_kib()
    return {
        "parent_kib": parent,
        "parent_before_kib": base,
        "child_kib": child[0] if child else None,
        "child_name": child[1] if child else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one partial-mode benchmark run")
    parser.add_argument("--impl", choices=("pysb", "ref"), required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--heavy", action="store_true", help="a slow provider: fewer reps")
    parser.add_argument("--idle-rss", action="store_true")
    parser.add_argument("--no-python-guards", action="store_true", help="pysb only")
    ns = parser.parse_args(argv)
    try:
        impl = Impl(ns.impl, ns.provider, ns.profile, guards=not ns.no_python_guards)
        result = idle_rss(impl) if ns.idle_rss else measure(impl, ns.quick, ns.heavy)
    except Exception as exc:
        traceback.print_exc()
        result = {"error": _error(exc)}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
