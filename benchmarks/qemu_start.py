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

Usage: ``.venv/bin/python benchmarks/qemu_start.py [-n 5] [--no-python-guards]
[--pysb A --pysb B] [--snapshot-ab]`` (two pysbs, e.g. two worktrees' venvs: an
interleaved A/B; ``--snapshot-ab``: each one booting and from its snapshot, interleaved).
A run restored from a snapshot has three phases of its own in place of QEMU's init, the
kernel's boot, the modules and the ports.
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
    ("snapshot: QEMU loads it, digest checked", "qemu spawned", "snapshot digest checked"),
    ("snapshot: entropy, clock, run archive", "snapshot digest checked", "snapshot restored"),
    ("snapshot: restored -> /init goes on", "snapshot restored", "g:kernel booted"),
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
        # A restored guest's clock counts from the snapshot's boot: no clock 0 this run.
        if "snapshot restored" not in events:
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


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:7.0f} ({min(values) * 1000:5.0f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="runs (median; default 5)")
    ap.add_argument(
        "--pysb",
        action="append",
        help="a pysb to time (default: this venv's); give two for an interleaved A/B",
    )
    ap.add_argument("--no-python-guards", action="store_true")
    ap.add_argument(
        "--snapshot-ab",
        action="store_true",
        help="each pysb twice: booting (PYSB_QEMU_SNAPSHOT=0), then from the snapshot",
    )
    args = ap.parse_args()
    pysbs = args.pysb or [str(Path(sys.executable).with_name("pysb"))]
    with tempfile.TemporaryDirectory(prefix="pysb-qemu-start-") as tmp:
        return measure(args, pysbs, Path(tmp))


def measure(args: argparse.Namespace, pysbs: list[str], work: Path) -> int:
    profile = work / "start.pysb.yaml"
    profile.write_text(f"version: 1\nimports: [json]\nfiles:\n  expose-ro: [{work}]\n")
    flags = ["--no-python-guards"] if args.no_python_guards else []
    argvs = [
        [p, "run", "--profile", str(profile), "--provider", "qemu", *flags, "-c", "pass"]
        for p in pysbs
    ]
    env = {**os.environ, "PYSB_QEMU_DEBUG": "1", "PWD": str(work)}
    envs = [env] * len(argvs)
    if args.snapshot_ab:
        argvs = [a for a in argvs for _ in (0, 1)]
        envs = [{**env, "PYSB_QEMU_SNAPSHOT": v} for _ in pysbs for v in ("0", "1")]
        pysbs = [f"{p} {what}" for p in pysbs for what in ("(boot)", "(snapshot)")]
    for argv, e in zip(argvs, envs, strict=True):
        one_run(argv, e)  # warm-up: the guest assets' cache and snapshot, the page cache
    runs: list[list[dict[str, float]]] = [[] for _ in argvs]
    walls: list[list[float]] = [[] for _ in argvs]
    cpus: list[list[float]] = [[] for _ in argvs]
    floor, floor_cpu = [], []
    load = os.getloadavg()
    for _ in range(args.n):
        w, c = timed([sys.executable, "-c", "pass"])
        floor.append(w)
        floor_cpu.append(c)
        for k, argv in enumerate(argvs):
            events, wall, cpu = one_run(argv, envs[k])
            runs[k].append(events)
            walls[k].append(wall)
            cpus[k].append(cpu)
    print(
        f"qemu start, {args.n} runs each, median (min) in ms, load average "
        f"{load[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for k, p in enumerate(pysbs):
        print(f"  [{k}] {p}")
    print(f"{'phase':45}" + "".join(f" {'[' + str(k) + ']':>15}" for k in range(len(pysbs))))
    for name, a, b in PHASES:
        cells = []
        for k in range(len(argvs)):
            spans = [r[b] - r[a] for r in runs[k] if a in r and b in r]
            cells.append(ms(spans) if spans else "(no event)")
        print(f"{name:45}" + "".join(f" {c:>15}" for c in cells))
    print(f"{'total wall':45}" + "".join(f" {ms(w):>15}" for w in walls))
    print(
        f"{'total CPU (user+sys, pysb and children)':45}" + "".join(f" {ms(c):>15}" for c in cpus)
    )
    print(
        f"{'python -c pass (floor, same run)':45} "
        f"{statistics.median(floor) * 1000:7.1f}, CPU {statistics.median(floor_cpu) * 1000:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
