"""What the learning watch costs: a program that executes many short commands, learned with
and without the watch (pysb_core.launch.execwatch), and run as plain Python (docs/learning.md).

    python benchmarks/learning_watch.py [--runs 3] [--count 100]

Prints one line per shape: the median wall time of the program's own loop (measured inside
it, so pysb's start-up is left out) and the number of notifications the watch answered.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """\
import subprocess, sys, time
count = int(sys.argv[1])
t = time.perf_counter()
for _ in range(count):
    subprocess.run(["/bin/true"], check=True)
a = time.perf_counter() - t
t = time.perf_counter()
for _ in range(count):
    subprocess.run(["sh", "-c", "ls -1 . > /dev/null; cat prog.py > /dev/null"], check=True)
b = time.perf_counter() - t
print(f"{a:.4f} {b:.4f}")
"""

#: Run pysb's CLI with the watch off (prepare() says "no table"), for the comparison.
NO_WATCH = (
    "import sys; import pysb_core.launch.execwatch.supervisor as s; s.prepare = lambda plan: None; "
    "from pysb_core.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _once(argv: list[str], cwd: Path) -> tuple[float, float]:
    for name in (".pysb.yaml", ".pysb.yaml.learned.yaml"):
        (cwd / name).unlink(missing_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    a, b = out.stdout.split()[-2:]
    return float(a), float(b)


def measure(runs: int, count: int) -> dict[str, tuple[float, float]]:
    """shape -> (median seconds of `count` /bin/true, of `count` sh -c 'ls; cat')."""
    with tempfile.TemporaryDirectory(prefix="pysb-watch-bench-") as d:
        cwd = Path(d)
        (cwd / "prog.py").write_text(PROGRAM)
        shapes = {
            "plain python": [sys.executable, "prog.py", str(count)],
            "learning, no watch": [sys.executable, "-c", NO_WATCH, "run", "--learn",
                                   "prog.py", str(count)],
            "learning, watch": [sys.executable, "-m", "pysb_core", "run", "--learn",
                                "prog.py", str(count)],
        }  # fmt: skip
        out: dict[str, tuple[float, float]] = {}
        for shape, argv in shapes.items():
            samples = [_once(argv, cwd) for _ in range(runs)]
            out[shape] = (
                statistics.median(s[0] for s in samples),
                statistics.median(s[1] for s in samples),
            )
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=100)
    args = parser.parse_args(argv)
    result = measure(args.runs, args.count)
    print(f"{os.uname().release}, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")
    for shape, (a, b) in result.items():
        per_a, per_b = a / args.count * 1000, b / args.count * 1000
        print(f"{shape:20} /bin/true {per_a:6.2f} ms   sh -c 'ls; cat' {per_b:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
