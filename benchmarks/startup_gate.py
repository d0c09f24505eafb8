"""The per-commit start-up figure: ``pysb run -c pass`` ÷ ``python -c pass``, with a bound.

``benchmarks/startup_gate.py [--rounds N] [--bound X] [--providers a,b]``

CI runs it after the tests (``.ci/run``), so that every commit prints how its start-up
compares with the interpreter's own, under subprocess and landlock (and, in a second call,
bwrap, unshare and firejail with ``--bound 12``), and how many modules
pysb and the sandboxed interpreter import. It fails (exit 1) when a provider's ratio is
above ``--bound`` in wall time *and* in CPU time: the bound is generous (9x; the figure
is ~4x in wall time and ~5-5.5x in CPU time today, the goal 3x) so that only a large
regression fails, not a loaded machine (load moves wall time much more than CPU time).
Exit 2: something could not run.

The commands are interleaved round by round (python, then each provider), after warm-up
runs that fill the profile and probe caches; each ratio is the median over the rounds of
the run's time ÷ the ``python -c pass`` just before it. About 20 s with the defaults.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import clean_env, median
from profiles import startup


def _timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system, of the process and what it waited for) seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(
        argv,
        cwd=cwd,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=True,
        timeout=120,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _modules(argv: list[str], cwd: Path) -> int:
    """How many modules ``-X importtime`` reports for ``argv`` (its stderr)."""
    proc = subprocess.run(
        argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, check=True, timeout=120
    )
    return sum(1 for line in proc.stderr.splitlines() if line.startswith("import time:")) - 1


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/startup_gate.py")
    parser.add_argument("--rounds", type=int, default=12, help="timed rounds (default 12)")
    parser.add_argument("--bound", type=float, default=9.0, help="the ratio that fails")
    parser.add_argument("--providers", default="subprocess,landlock")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    ns = parse(argv)
    python = sys.executable
    pysb = shutil.which("pysb", path=str(Path(python).parent)) or shutil.which("pysb")
    if pysb is None:
        print("startup gate: no pysb command next to this interpreter", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="pysb-gate-")).resolve()
    try:
        profile, _ = startup(workdir)
        base = [python, "-c", "pass"]
        runs = {
            name: [pysb, "run", "--profile", str(profile), "--provider", name, "-c", "pass"]
            for name in ns.providers.split(",")
        }
        try:
            for argv in (base, *runs.values()):  # warm-up: caches filled, failures seen
                _timed(argv, workdir)
                _timed(argv, workdir)
        except subprocess.CalledProcessError as exc:
            err = exc.stderr.decode(errors="replace").strip().splitlines()
            print(f"startup gate: {exc.cmd} failed: {err[-1] if err else exc}", file=sys.stderr)
            return 2
        ratios: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in runs}
        floor: list[float] = []
        for _ in range(ns.rounds):
            for name, argv in runs.items():
                wall0, cpu0 = _timed(base, workdir)
                wall, cpu = _timed(argv, workdir)
                floor.append(wall0)
                ratios[name][0].append(wall / wall0)
                ratios[name][1].append(cpu / cpu0 if cpu0 else float("inf"))
        counts = {"python": _modules([python, "-X", "importtime", "-c", "pass"], workdir)}
        first = next(iter(runs.values()))
        counts["pysb"] = _modules([python, "-X", "importtime", *first], workdir)
        for name, argv in runs.items():
            child = [*argv[:-2], "-X", "importtime", *argv[-2:]]
            counts[f"sandboxed interpreter ({name})"] = _modules(child, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"startup gate: python -c pass {median(floor) * 1e3:.1f} ms; load {load}")
    failed = []
    for name, (wall, cpu) in ratios.items():
        w, c = median(wall), median(cpu)
        over = w > ns.bound and c > ns.bound
        verdict = f"ABOVE the bound of {ns.bound:g}x" if over else f"within {ns.bound:g}x"
        print(
            f"startup gate: pysb run -c pass ÷ python -c pass, {name}: "
            f"{w:.2f}x wall, {c:.2f}x CPU ({verdict})"
        )
        if over:
            failed.append(name)
    print("startup gate: modules imported: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
