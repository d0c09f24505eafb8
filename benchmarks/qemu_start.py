"""Where one ``pysb run --provider qemu -c pass`` spends its time (issue 30, item 4).

Runs the start N times with ``PYSB_QEMU_DEBUG=1``, interleaved with plain ``python -c
pass`` (the floor, measured in the same run because the load moves), and prints the
median of each phase. The phases come from two clocks:

- the host's ``pysb-host: T: EVENT`` lines (CLOCK_MONOTONIC, written by pysb-qemu's
  supervisor: the provider's launch, the archive built, the supervisor and QEMU started,
  the status received, QEMU stopped), and this script's own spawn and exit times;
- the guest's ``pysb-guest: U s: STAGE`` lines (the guest's uptime, from its /init).
  The guest's clock zero on the host is estimated as the smallest (arrival - U) over
  its lines: a line can arrive late, never early.

Usage: ``.venv/bin/python benchmarks/qemu_start.py [-n 5] [--no-python-guards]``.
Not a test: it prints figures, it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HOST = re.compile(r"pysb-host: ([0-9.]+): (.+)")
GUEST = re.compile(r"pysb-guest: ([0-9.]+) s: (.+)")

#: (phase, from event, to event): host events, guest stages ("g:" prefix), spawn/exit.
PHASES = [
    ("pysb CLI start + plan", "spawn", "launch"),
    ("guest archive (assets, layout, cpio)", "launch", "guest archive built"),
    ("supervisor start", "guest archive built", "supervisor started"),
    ("qemu spawn", "supervisor started", "qemu spawned"),
    ("qemu init + kernel load (to guest clock 0)", "qemu spawned", "g:0"),
    ("kernel boot (to /init's mounts)", "g:0", "g:kernel booted"),
    ("/init: tmpfs", "g:kernel booted", "g:init started"),
    ("/init: modules", "g:init started", "g:modules loaded"),
    ("/init: virtio ports", "g:modules loaded", "g:ports found"),
    ("/init: 9p shares, masks", "g:ports found", "g:shares mounted"),
    ("/init: relays, cgroup, net", "g:shares mounted", "g:program starts"),
    ("guest python + bootstrap + guards", "g:program starts", "g:bootstrap done"),
    ("program + interpreter exit", "g:bootstrap done", "g:program exited"),
    ("guest sync, markers, status", "g:program exited", "status received"),
    ("outputs drained", "status received", "outputs ended"),
    ("qemu stop", "outputs ended", "qemu stopped"),
    ("supervisor + pysb exit", "qemu stopped", "exit"),
]


def one_run(argv: list[str], env: dict[str, str]) -> tuple[dict[str, float], float, float]:
    """Events (host monotonic seconds) of one debug start, its wall time and CPU time."""
    events: dict[str, float] = {}
    guest: list[tuple[float, str, float]] = []  # (uptime, stage, arrival)
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=env["PWD"]
    )
    events["spawn"] = start

    def read() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            now = time.monotonic()
            line = raw.decode(errors="replace").strip()
            if m := HOST.search(line):
                events.setdefault(m.group(2), float(m.group(1)))
            elif m := GUEST.search(line):
                guest.append((float(m.group(1)), m.group(2), now))

    reader = threading.Thread(target=read)
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    events["exit"] = time.monotonic()
    reader.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"qemu_start: {argv} failed with status {status}")
    zero = min(arrival - up for up, _, arrival in guest) if guest else None
    if zero is not None:
        events["g:0"] = zero
        for up, stage, _ in guest:
            key = "g:" + re.sub(r" \(\d+\)$", "", stage)
            events.setdefault(key, zero + up)
    return events, events["exit"] - start, usage.ru_utime + usage.ru_stime


def timed(argv: list[str]) -> tuple[float, float]:
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.monotonic() - start, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="runs (median; default 5)")
    ap.add_argument("--pysb", default=str(Path(sys.executable).with_name("pysb")))
    ap.add_argument("--no-python-guards", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pysb-qemu-start-"))
    profile = work / "start.pysb.yaml"
    profile.write_text(f"version: 1\nimports: [json]\nfiles:\n  expose-ro: [{work}]\n")
    argv = [args.pysb, "run", "--profile", str(profile), "--provider", "qemu"]
    if args.no_python_guards:
        argv.append("--no-python-guards")
    argv += ["-c", "pass"]
    env = {**os.environ, "PYSB_QEMU_DEBUG": "1", "PWD": str(work)}
    one_run(argv, env)  # warm-up: the guest assets' cache, the page cache
    runs, walls, cpus, floor, floor_cpu = [], [], [], [], []
    load = os.getloadavg()
    for _ in range(args.n):
        w, c = timed([sys.executable, "-c", "pass"])
        floor.append(w)
        floor_cpu.append(c)
        events, wall, cpu = one_run(argv, env)
        runs.append(events)
        walls.append(wall)
        cpus.append(cpu)
    print(
        f"qemu start, {args.n} runs (median), load average {load[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"{'phase':45} {'median':>9} {'min':>9}")
    for name, a, b in PHASES:
        spans = [r[b] - r[a] for r in runs if a in r and b in r]
        if spans:
            print(
                f"{name:45} {statistics.median(spans) * 1000:7.0f} ms {min(spans) * 1000:7.0f} ms"
            )
        else:
            print(f"{name:45} {'(no event)':>9}")
    print(
        f"{'total wall':45} {statistics.median(walls) * 1000:7.0f} ms {min(walls) * 1000:7.0f} ms"
    )
    print(
        f"{'total CPU (user+sys, pysb and children)':45} "
        f"{statistics.median(cpus) * 1000:7.0f} ms {min(cpus) * 1000:7.0f} ms"
    )
    print(
        f"{'python -c pass (floor, same run)':45} "
        f"{statistics.median(floor) * 1000:7.1f} ms, "
        f"CPU {statistics.median(floor_cpu) * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
